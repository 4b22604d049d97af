"""The UI's HTTP server (aiohttp): pages over the read model and the log, and the actions through
the client. Safety (docs/operations.md, "The web UI"):
- it listens on 127.0.0.1 unless told otherwise;
- actions need the configured token (a signed-in cookie, or `Authorization: Bearer`), or run behind
  the operator's auth proxy, which names the user in a header; read-only mode has none;
- every POST carries the form token of its page, matched against a SameSite=Strict cookie, and a
  cross-site Origin is refused;
- every value is escaped (kadence/ops/ui/html.py), and the pages' Content-Security-Policy allows only
  this server's own script and style files.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import psycopg
from aiohttp import web
from confluent_kafka import KafkaException

from kadence.client import ResetReapplyExcludeType, ResetType, WorkflowHandle
from kadence.exceptions import KadenceError, WorkflowQueryFailedError
from kadence.list_filter import ListFilterError
from kadence.ops.ui import operations, pages, schedules
from kadence.ops.ui.codec_server import CodecServerError
from kadence.ops.ui.execution import children, failure_chain, pending_activities, reset_links, reset_points, timeline
from kadence.ops.ui.heartbeats import latest_heartbeats
from kadence.ops.ui.html import Html, raw, render
from kadence.ops.ui.queries import count_by_status, execution_row, runs_of
from kadence.ops.ui.state import (
    ACTION_TIMEOUT_S,
    AUTH_COOKIE,
    CSRF_KEY,
    SIGN_IN_CODE_TTL_S,
    UI_KEY,
    KafkaTimeout,
    Ui,
    UiSettings,
    from_kafka,
    html_response,
    same_secret,
)
from kadence.protocol.names import EventType
from kadence.protocol.postgres import describe
from kadence.protocol.settings import KafkaSettings, postgres_dsn
from kadence.visibility import WorkflowHistory, executions_page, fetch_events

log = logging.getLogger("kadence.ops.ui")

CSRF_COOKIE = "kadence_ui_csrf"
QUERY_TIMEOUT = timedelta(seconds=15)
_PROBES = frozenset({"/healthz", "/readyz"})  # the kubelet's probes name the pod's IP
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")




@web.middleware
async def security(request: web.Request, handler: Any) -> web.StreamResponse:
    """The Host check, form tokens, the cross-site check on POSTs, and the security headers, on
    every answer (a refusal raised as an HTTPException too)."""
    try:
        response = await _checked(request, handler)
    except web.HTTPException as exc:
        _secure(exc)
        raise
    return _secure(response)


def _secure(response: web.StreamResponse) -> web.StreamResponse:
    response.headers.setdefault("Content-Security-Policy", _CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    response.headers.setdefault("X-Frame-Options", "DENY")
    return response


async def _checked(request: web.Request, handler: Any) -> web.StreamResponse:
    allowed = request.app[UI_KEY].settings.served_hosts()
    if allowed is not None and request.path not in _PROBES and host_name(request.host) not in allowed:
        raise web.HTTPMisdirectedRequest(
            text="refused: this UI does not answer to that host name (a loopback UI answers 127.0.0.1, localhost and [::1]; "
                 "name others in KADENCE_UI_ALLOWED_HOSTS)")
    token = request.cookies.get(CSRF_COOKIE, "")
    fresh = len(token) != 64
    request[CSRF_KEY] = secrets.token_hex(32) if fresh else token
    if request.method == "POST":
        origin = request.headers.get("Origin")
        if origin and not same_site(origin, request):
            raise web.HTTPForbidden(text="refused: a POST from another site (its Origin is not this server's host)")
        form = await request.post()
        sent = str(form.get("csrf", ""))
        if fresh or not same_secret(sent, request[CSRF_KEY]):
            raise web.HTTPForbidden(text="refused: the form's token does not match this browser's (reload the page and try again)")
    response = await handler(request)
    if fresh:
        response.set_cookie(CSRF_COOKIE, request[CSRF_KEY], httponly=True, samesite="Strict", path="/")
    return response


def host_name(host: str) -> str:
    """The name in a Host header, without its port (and an IPv6 address without its brackets)."""
    return (urlsplit(f"//{host}").hostname or "") if host else ""


def same_site(origin: str, request: web.Request) -> bool:
    """Whether `origin` names this server: its host[:port] only, since behind a TLS-terminating
    proxy the browser's Origin says https while this server is reached over http."""
    origin_host = urlsplit(origin).netloc
    return bool(origin_host) and origin_host.lower() == request.host.lower()


# ---- pages ---------------------------------------------------------------------------------------


async def workflows(request: web.Request) -> web.Response:
    ui = request.app[UI_KEY]
    query = request.query.get("query", "").strip()
    cursor = request.query.get("cursor") or None
    error, executions, counts, next_cursor = None, [], {}, None
    try:
        page = await executions_page(ui.pool, query, cursor, ui.settings.page_size)
        executions, next_cursor = page.executions, page.next_cursor
        counts = await count_by_status(ui.pool, query)
    except ListFilterError as exc:
        error = f"the filter does not parse: {exc}"
    except psycopg.errors.DataError as exc:
        error = f"the filter's value does not fit its search attribute: {describe(exc)}"
    status = 400 if error else 200
    return html_response(pages.workflows_page(ui.viewer(request), query, executions, counts, next_cursor, error), status)


async def build_view(ui: Ui, workflow_id: str, run_id: str | None, events_from: int = 1) -> pages.ExecutionView | None:
    """The run's page, with the table's events from `events_from` on (a page of them): a long
    history is paged, while the summary, pending activities and timeline come from all of it."""
    row = await execution_row(ui.pool, workflow_id, run_id)
    if row is None:
        return None
    execution = row.execution
    events = await fetch_events(ui.pool, workflow_id, execution.run_id)
    pending = pending_activities(events) if execution.status.value == "Running" else []
    started_attempts = {a.scheduled_event_id: (a.attempt, a.last_started_ms) for a in pending
                        if a.state == "STARTED" and a.last_started_ms is not None}
    heartbeat_problem = None
    try:
        heartbeats = await from_kafka(ui, latest_heartbeats, ui.kafka, workflow_id, execution.run_id, started_attempts)
    except (KafkaException, KafkaTimeout) as exc:  # the rest of the page comes from Postgres: show it, saying what is missing
        heartbeats, heartbeat_problem = {}, f"the last heartbeats are not shown: the Kafka broker does not answer ({exc})"
    table = [e for e in events if e["event_id"] >= events_from][:ui.settings.events_page]
    # One pass of the reader (one codec round trip) over everything shown.
    shown = await ui.reader.readable({
        "started": events[0]["attributes"][1] if events else {}, "events": [e["attributes"][1] for e in table],
        "result": row.result, "failures": failure_chain(row.failure),
        "pending_failures": {str(a.scheduled_event_id): failure_chain(a.last_failure) for a in pending},
        "heartbeats": {str(k): v for k, v in heartbeats.items()}, "memo": dict(execution.raw_memo),
    })
    started = shown["started"] if events and events[0]["attributes"][0] == EventType.WorkflowExecutionStarted else {}
    for failure in shown["failures"]:
        failure.pop("cause", None)  # each cause is shown on its own
    reset_from, reset_as = reset_links(events, execution.run_id)
    return pages.ExecutionView(
        execution=execution, started=started, input=started.get("input", []), result=shown["result"],
        memo=shown["memo"], failures=shown["failures"], next_run_id=row.next_run_id, runs=await runs_of(ui.pool, workflow_id),
        children=children(events), pending=pending,
        pending_failures={int(k): [{**f, "cause": None} for f in v] for k, v in shown["pending_failures"].items()},
        heartbeats={int(k): v for k, v in shown["heartbeats"].items()}, heartbeat_problem=heartbeat_problem,
        timeline=timeline(events, int(time.time() * 1000)),
        events=[(e["event_id"], e["event_time_ms"], e["attributes"][0], attrs) for e, attrs in zip(table, shown["events"], strict=True)],
        first_event_ms=events[0]["event_time_ms"] if events else 0, total_events=len(events),
        next_events_from=table[-1]["event_id"] + 1 if table and table[-1]["event_id"] < events[-1]["event_id"] else None,
        # A closed run can be reset while no other run of its id followed it (history refuses one past its retention).
        reset_points=reset_points(events) if execution.status.value == "Running" or not row.next_run_id else [],
        reset_from=reset_from, reset_as=reset_as,
    )


async def execution(request: web.Request) -> web.Response:
    ui = request.app[UI_KEY]
    workflow_id = request.query.get("workflow_id", "")
    run_id = request.query.get("run_id") or None
    try:
        events_from = max(1, int(request.query.get("events_from", "1")))
    except ValueError:
        raise web.HTTPBadRequest(text="events_from is an event id (a number)") from None
    view = await build_view(ui, workflow_id, run_id, events_from)
    if view is None:
        return html_response(pages.not_found_page(ui.viewer(request), _not_found(workflow_id, run_id)), 404)
    return html_response(pages.execution_page(ui.viewer(request), view))


async def history_json(request: web.Request) -> web.Response:
    ui = request.app[UI_KEY]
    workflow_id = request.query.get("workflow_id", "")
    row = await execution_row(ui.pool, workflow_id, request.query.get("run_id") or None)
    if row is None:
        raise web.HTTPNotFound(text=_not_found(workflow_id, request.query.get("run_id")))
    events = await fetch_events(ui.pool, workflow_id, row.execution.run_id)
    exported = WorkflowHistory(workflow_id, row.execution.run_id, events).to_json()
    filename = f"{row.execution.run_id}.json"  # a run id is a uuid: safe in a header
    return web.Response(text=json.dumps(exported), content_type="application/json",
                        headers={"Content-Disposition": f'attachment; filename="{filename}"'})


def _not_found(workflow_id: str, run_id: str | None) -> str:
    return f"the read model holds no workflow {workflow_id!r}" + (f" run {run_id!r}" if run_id else "")


# ---- actions -------------------------------------------------------------------------------------


async def _acting(request: web.Request) -> tuple[Ui, Any, str, str, str]:
    """The UI, the form, the workflow and run ids, and who acts; 403 if this request may not act."""
    ui = request.app[UI_KEY]
    actor = ui.actor(request)
    if actor is None:
        raise web.HTTPForbidden(text=f"refused: {ui.viewer(request).why_not}")
    form = await request.post()
    return ui, form, str(form.get("workflow_id", "")), str(form.get("run_id", "")), actor


def _back(workflow_id: str, run_id: str) -> Html:
    return pages.execution_link(workflow_id, run_id, f"back to {workflow_id}")


async def signal(request: web.Request) -> web.Response:
    ui, form, workflow_id, run_id, actor = await _acting(request)
    name, text = str(form.get("name", "")), str(form.get("input", "null")).strip() or "null"
    viewer = ui.viewer(request)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return html_response(pages.outcome_page(viewer, "Signal not sent", f"the input is not JSON: {exc}", _back(workflow_id, run_id),
                                                failed=True), 400)
    if form.get("confirmed") != "yes":
        return html_response(pages.confirm_page(
            viewer, "Signal", f"Send signal {name!r} with input {json.dumps(value)} to workflow {workflow_id} run {run_id}?",
            "/workflow/signal", {"workflow_id": workflow_id, "run_id": run_id, "name": name, "input": text}, _back(workflow_id, run_id)))
    return await _act(ui, viewer, "signal", workflow_id, run_id, actor,
                      lambda handle: handle.signal(name, value), f"Signal {name!r} is in the history of {workflow_id}.")


async def cancel(request: web.Request) -> web.Response:
    ui, form, workflow_id, run_id, actor = await _acting(request)
    viewer = ui.viewer(request)
    if form.get("confirmed") != "yes":
        return html_response(pages.confirm_page(
            viewer, "Cancel", f"Request cancellation of workflow {workflow_id} run {run_id}? The workflow sees it and may clean up.",
            "/workflow/cancel", {"workflow_id": workflow_id, "run_id": run_id}, _back(workflow_id, run_id)))
    return await _act(ui, viewer, "cancel", workflow_id, run_id, actor, lambda handle: handle.cancel(),
                      f"Cancellation of {workflow_id} is requested: it is in the history; the workflow decides how it ends.")


async def terminate(request: web.Request) -> web.Response:
    ui, form, workflow_id, run_id, actor = await _acting(request)
    reason = str(form.get("reason", ""))
    viewer = ui.viewer(request)
    if form.get("confirmed") != "yes":
        return html_response(pages.confirm_page(
            viewer, "Terminate", f"Terminate workflow {workflow_id} run {run_id} now, with reason {reason!r}? "
            "No workflow code runs; its pending activities and timers are dropped.",
            "/workflow/terminate", {"workflow_id": workflow_id, "run_id": run_id, "reason": reason}, _back(workflow_id, run_id)))
    return await _act(ui, viewer, "terminate", workflow_id, run_id, actor,
                      lambda handle: handle.terminate(reason=f"{reason} (by {actor} from the web UI)".strip()),
                      f"Workflow {workflow_id} is terminated.")


_RESET_TYPES = {"FirstWorkflowTask": ResetType.FIRST_WORKFLOW_TASK, "LastWorkflowTask": ResetType.LAST_WORKFLOW_TASK}
_REAPPLY_EXCLUDES = {"Signal": ResetReapplyExcludeType.SIGNAL, "Update": ResetReapplyExcludeType.UPDATE}


async def reset(request: web.Request) -> web.Response:
    """A reset of the run (docs/decisions/0005-reset.md) through the client's handle.reset; once
    done, the new run's page."""
    ui, form, workflow_id, run_id, actor = await _acting(request)
    viewer = ui.viewer(request)
    point, reason = str(form.get("point", "")), str(form.get("reason", "")).strip()
    excludes = sorted({str(e) for e in form.getall("exclude", [])})
    reset_type, event_id = _RESET_TYPES.get(point), int(point) if point.isascii() and point.isdecimal() and len(point) < 16 else 0
    if (reset_type is None and event_id < 1) or set(excludes) - _REAPPLY_EXCLUDES.keys():
        return html_response(pages.outcome_page(
            viewer, "Reset not sent", f"the point is {' or '.join(_RESET_TYPES)} or the event id of a workflow task's end, not "
            f"{point[:40]!r}; what is not reapplied is {' or '.join(_REAPPLY_EXCLUDES)}", _back(workflow_id, run_id), failed=True), 400)
    to = f"its {pages.RESET_TYPES[point].lower()}" if reset_type else f"the end of the workflow task of event {event_id}"
    not_reapplied = f", not reapplying {' or '.join(pages.REAPPLY_EXCLUDES[e] for e in excludes)}" if excludes else ""
    if form.get("confirmed") != "yes":
        return html_response(pages.confirm_page(
            viewer, "Reset", f"Reset workflow {workflow_id} run {run_id} to {to}, with reason {reason!r}{not_reapplied}? A new run "
            "goes on from there with the signals and updates received after it; this run is terminated.",
            "/workflow/reset", {"workflow_id": workflow_id, "run_id": run_id, "point": point, "reason": reason},
            _back(workflow_id, run_id), multi={"exclude": excludes}))
    recorded = f"{reason} (by {actor} from the web UI)" if reason else f"reset by {actor} from the web UI"

    def call(handle: WorkflowHandle) -> Any:
        return handle.reset(event_id=event_id if reset_type is None else 0, reset_type=reset_type, reason=recorded,
                            reapply_exclude_types=[_REAPPLY_EXCLUDES[e] for e in excludes])

    return await _act(ui, viewer, "reset", workflow_id, run_id, actor, call, "", logged={"point": point, "exclude": ",".join(excludes)},
                      then=lambda new_run: "/workflow?" + urlencode({"workflow_id": workflow_id, "run_id": new_run.result_run_id}))


async def _act(ui: Ui, viewer: pages.Viewer, action: str, workflow_id: str, run_id: str, actor: str, call: Any,
               done: str, *, logged: dict[str, str] | None = None, then: Callable[[Any], str] | None = None) -> web.Response:
    """The action `call(handle)` on the run, logged (with `logged`'s fields), answered with an
    outcome page saying `done`, or a redirect to `then(what the call returned)`."""
    assert ui.client is not None
    handle = ui.client.get_workflow_handle(workflow_id, run_id=run_id or None)
    fields = "".join(f" {name}={value!r}" for name, value in (logged or {}).items())
    log.info("event=ui_action action=%s workflow_id=%r run_id=%r%s actor=%r", action, workflow_id, run_id, fields, actor)
    try:
        returned = await asyncio.wait_for(call(handle), ACTION_TIMEOUT_S)
        # The answer came on kadence.replies; the pages read the read model: the link back shows the change.
        await ui.client._read_model_caught_up(workflow_id)
    except (KadenceError, TimeoutError) as exc:
        message = str(exc) or f"no answer from the history service within {ACTION_TIMEOUT_S:g} s: is it running?"
        return html_response(pages.outcome_page(viewer, f"{action.capitalize()} refused", f"{action} refused: {message}",
                                                _back(workflow_id, run_id), failed=True), 409)
    except CodecServerError as exc:  # the input could not be encoded: nothing was sent
        return html_response(pages.outcome_page(viewer, f"{action.capitalize()} not sent", f"{action} not sent: {exc}",
                                                _back(workflow_id, run_id), failed=True), 502)
    if then is not None:
        raise web.HTTPSeeOther(then(returned))
    return html_response(pages.outcome_page(viewer, f"{action.capitalize()} done", done, _back(workflow_id, run_id)))


async def query(request: web.Request) -> web.Response:
    ui, form, workflow_id, run_id, actor = await _acting(request)
    name, text = str(form.get("name", "")), str(form.get("args", "[]")).strip() or "[]"
    viewer = ui.viewer(request)
    try:
        args = json.loads(text)
        if not isinstance(args, list):
            raise ValueError("give the arguments as a JSON array: [] for none")
    except ValueError as exc:
        return html_response(pages.outcome_page(viewer, "Query not sent", f"the arguments are not a JSON array: {exc}",
                                                _back(workflow_id, run_id), failed=True), 400)
    assert ui.client is not None
    log.info("event=ui_action action=query workflow_id=%r run_id=%r query=%r actor=%r", workflow_id, run_id, name, actor)
    handle = ui.client.get_workflow_handle(workflow_id, run_id=run_id or None)
    try:
        answer = await handle.query(name, args=args, timeout=QUERY_TIMEOUT)
    except WorkflowQueryFailedError as exc:
        return html_response(pages.outcome_page(viewer, "Query failed", f"query {name!r} failed: {exc}", _back(workflow_id, run_id),
                                                failed=True), 409)
    except KadenceError as exc:
        return html_response(pages.outcome_page(viewer, "Query not answered", f"query {name!r}: {exc}", _back(workflow_id, run_id),
                                                failed=True), 409)
    except CodecServerError as exc:  # its arguments could not be encoded, or its answer decoded
        return html_response(pages.outcome_page(viewer, "Query not answered", f"query {name!r}: {exc}", _back(workflow_id, run_id),
                                                failed=True), 502)
    shown = render('<pre class="answer" id="answer">{text}</pre>',
                   text=answer if isinstance(answer, str) else json.dumps(answer, indent=2, default=str))
    return html_response(pages.outcome_page(viewer, "Query answered", f"{workflow_id} answered query {name!r}:",
                                            _back(workflow_id, run_id), shown))


async def login(request: web.Request) -> web.Response:
    """POST: the token from the sign-in form; GET ?code=: the one-time link `kadence ui` prints."""
    ui = request.app[UI_KEY]
    if ui.settings.token is None:
        raise web.HTTPForbidden(text="refused: this UI has no token to sign in with")
    if request.method == "GET":
        if not ui.redeem_sign_in_code(request.query.get("code", "")):
            return html_response(pages.outcome_page(
                ui.viewer(request), "Sign-in link spent",
                f"this sign-in link was used or is older than {SIGN_IN_CODE_TTL_S:g} s (it works once): sign in with the UI's token",
                raw('<a href="/workflows">workflows</a>'), failed=True), 403)
    elif not same_secret(str((await request.post()).get("token", "")), ui.settings.token):
        raise web.HTTPForbidden(text="refused: that is not the UI's token")
    response = web.HTTPSeeOther("/workflows")
    response.set_cookie(AUTH_COOKIE, ui.session_value(), httponly=True, samesite="Strict", path="/")
    raise response


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def readyz(request: web.Request) -> web.Response:
    try:
        async with request.app[UI_KEY].pool.connection() as conn:
            await conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        return web.Response(status=503, text=f"Postgres unreachable: {describe(exc)}")
    return web.Response(text="ready")


@web.middleware
async def unavailable(request: web.Request, handler: Any) -> web.StreamResponse:
    """Postgres or the broker away: a page saying so (the next request tries again), not a stack trace."""
    try:
        return await handler(request)
    except psycopg.OperationalError as exc:
        viewer = request.app[UI_KEY].viewer(request)
        return html_response(pages.outcome_page(viewer, "Read model unavailable", f"Postgres does not answer: {describe(exc)}",
                                                raw('<a href="">try again</a>'), failed=True), 503)
    except KafkaException as exc:
        viewer = request.app[UI_KEY].viewer(request)
        return html_response(pages.outcome_page(viewer, "Kafka unavailable", f"the Kafka broker does not answer: {exc}",
                                                raw('<a href="">try again</a>'), failed=True), 503)
    except KafkaTimeout as exc:
        viewer = request.app[UI_KEY].viewer(request)
        return html_response(pages.outcome_page(viewer, "Kafka unavailable", str(exc), raw('<a href="">try again</a>'), failed=True), 504)


def make_app(ui: Ui) -> web.Application:
    app = web.Application(middlewares=[security, unavailable])
    app[UI_KEY] = ui
    static = Path(str(resources.files("kadence.ops.ui") / "static"))
    app.add_routes([
        web.get("/", root),
        web.get("/workflows", workflows),
        web.get("/workflow", execution),
        web.get("/workflow/history.json", history_json),
        web.post("/workflow/signal", signal),
        web.post("/workflow/query", query),
        web.post("/workflow/cancel", cancel),
        web.post("/workflow/terminate", terminate),
        web.post("/workflow/reset", reset),
        web.get("/login", login),
        web.post("/login", login),
        web.get("/healthz", healthz),
        web.get("/readyz", readyz),
        web.static("/static", static),
        *operations.routes(),
        *schedules.routes(),
    ])

    async def lifecycle(app: web.Application) -> Any:
        await ui.start()
        yield
        await ui.close()

    app.cleanup_ctx.append(lifecycle)
    return app


async def root(request: web.Request) -> web.Response:
    raise web.HTTPFound("/workflows")


def sign_in_link(settings: UiSettings, code: str | None) -> str:
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    base = f"http://{host}:{settings.port}"
    return f"{base}/login?{urlencode({'code': code})}" if code else f"{base}/workflows"


def run(settings: UiSettings, announce: Any = None) -> None:
    """Serve until interrupted, with the broker and Postgres from the KADENCE_* settings; `announce`
    gets the link to open (a one-time sign-in link when there is a token)."""
    ui = Ui(settings, KafkaSettings.from_env(), postgres_dsn())
    if announce is not None:
        announce(sign_in_link(settings, ui.issue_sign_in_code() if settings.token and not settings.read_only else None))
    log.info("event=ui_listening host=%s port=%d read_only=%s auth=%s started=%s", settings.host, settings.port, settings.read_only,
             "proxy" if settings.auth_proxy_header else ("token" if settings.token else "none"), datetime.now(UTC).isoformat())
    web.run_app(make_app(ui), host=settings.host, port=settings.port, print=None, access_log=None)
