"""The schedules' pages, as Temporal's Web UI has them: the list and one schedule (its spec, action,
policies, state, recent and running actions, next times), read from kadence_schedules; and its
actions, pause, unpause, trigger and delete, through the client's ScheduleHandle as the workflows'
actions go through its WorkflowHandle (the same sign-in, form token and read-only mode:
kadence/ops/ui/server.py). docs/decisions/0004-schedules-in-the-history-service.md."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
from aiohttp import web

from kadence.client._schedule_types import next_action_times
from kadence.exceptions import KadenceError
from kadence.ops.ui import pages
from kadence.ops.ui.html import Html, raw
from kadence.ops.ui.queries import ScheduleRow, schedule_row, schedules_page
from kadence.ops.ui.state import ACTION_TIMEOUT_S, UI_KEY, Ui, html_response
from kadence.protocol.names import SCHEDULE_KEY_PREFIX

log = logging.getLogger("kadence.ops.ui")

PAYLOAD_FIELDS = ("input", "memo", "search_attributes", "header")  # the action's payloads, shown decoded


def routes() -> list[web.RouteDef]:
    return [
        web.get("/schedules", schedules),
        web.get("/schedule", schedule),
        web.post("/schedule/pause", pause),
        web.post("/schedule/unpause", unpause),
        web.post("/schedule/trigger", trigger),
        web.post("/schedule/delete", delete),
    ]


async def schedules(request: web.Request) -> web.Response:
    ui = request.app[UI_KEY]
    prefix = request.query.get("prefix", "").strip()
    after = request.query.get("after") or None
    rows: list[ScheduleRow] = []
    error, next_after, total = None, None, 0
    try:
        rows, next_after, total = await schedules_page(ui.pool, prefix, after, ui.settings.page_size)
    except psycopg.errors.UndefinedTable:
        error = "the read model has no kadence_schedules table yet: the visibility service of a release with schedules creates it"
    return html_response(pages.schedules_page(ui.viewer(request), prefix, rows, total, next_after, error), 503 if error else 200)


async def schedule(request: web.Request) -> web.Response:
    ui = request.app[UI_KEY]
    schedule_id = request.query.get("schedule_id", "")
    try:
        row = await schedule_row(ui.pool, schedule_id)
    except psycopg.errors.UndefinedTable:
        row = None
    if row is None or row.status != "Running":
        message = f"schedule {schedule_id!r} was deleted" if row else f"the read model holds no schedule {schedule_id!r}"
        return html_response(pages.not_found_page(ui.viewer(request), message), 404)
    action = row.schedule["action"]
    # The payloads as the run page shows them: decoded (through the codec server, when the UI has one), or shown encoded.
    readable = await ui.reader.readable({name: action[name] for name in PAYLOAD_FIELDS})
    view = pages.ScheduleView(schedule_id, {**row.schedule, "action": {**action, **readable}}, row.info,
                              next_action_times(row.schedule, row.info))
    return html_response(pages.schedule_page(ui.viewer(request), view))


# ---- actions -------------------------------------------------------------------------------------


async def _acting(request: web.Request) -> tuple[Ui, Any, str, str]:
    """The UI, the form, the schedule id, and who acts; 403 if this request may not act."""
    ui = request.app[UI_KEY]
    actor = ui.actor(request)
    if actor is None:
        raise web.HTTPForbidden(text=f"refused: {ui.viewer(request).why_not}")
    form = await request.post()
    return ui, form, str(form.get("schedule_id", "")), actor


def _back(schedule_id: str) -> Html:
    return pages.schedule_link(schedule_id, f"back to schedule {schedule_id}")


def _noted(note: str, done: str, actor: str) -> str:
    return f"{note} (by {actor} from the web UI)" if note else f"{done} by {actor} from the web UI"


async def pause(request: web.Request) -> web.Response:
    return await _pause_or_unpause(request, pausing=True)


async def unpause(request: web.Request) -> web.Response:
    return await _pause_or_unpause(request, pausing=False)


async def _pause_or_unpause(request: web.Request, *, pausing: bool) -> web.Response:
    ui, form, schedule_id, actor = await _acting(request)
    note = str(form.get("note", "")).strip()
    viewer = ui.viewer(request)
    verb, done = ("pause", "Paused") if pausing else ("unpause", "Unpaused")
    if form.get("confirmed") != "yes":
        effect = ("It takes no actions until it is unpaused; the runs it started go on." if pausing
                  else "It takes its actions again from its next time (times it passed while paused are not taken).")
        return html_response(pages.confirm_page(
            viewer, verb.capitalize(), f"{verb.capitalize()} schedule {schedule_id}" + (f" with note {note!r}" if note else "")
            + f"? {effect}", f"/schedule/{verb}", {"schedule_id": schedule_id, "note": note}, _back(schedule_id)))
    noted = _noted(note, done, actor)
    return await _act(ui, viewer, verb, schedule_id, actor,
                      lambda handle: handle.pause(note=noted) if pausing else handle.unpause(note=noted),
                      f"Schedule {schedule_id} is {done.lower()}.")


async def trigger(request: web.Request) -> web.Response:
    ui, form, schedule_id, actor = await _acting(request)
    viewer = ui.viewer(request)
    if form.get("confirmed") != "yes":
        return html_response(pages.confirm_page(
            viewer, "Trigger", f"Take an action of schedule {schedule_id} now, under its overlap policy?",
            "/schedule/trigger", {"schedule_id": schedule_id}, _back(schedule_id)))
    return await _act(ui, viewer, "trigger", schedule_id, actor, lambda handle: handle.trigger(),
                      f"Schedule {schedule_id} is triggered: it is in its history, and its action is taken under its overlap policy.")


async def delete(request: web.Request) -> web.Response:
    ui, form, schedule_id, actor = await _acting(request)
    viewer = ui.viewer(request)
    if form.get("confirmed") != "yes":
        return html_response(pages.confirm_page(
            viewer, "Delete", f"Delete schedule {schedule_id}? It takes no more actions; the runs it started go on.",
            "/schedule/delete", {"schedule_id": schedule_id}, _back(schedule_id)))
    return await _act(ui, viewer, "delete", schedule_id, actor, lambda handle: handle.delete(), f"Schedule {schedule_id} is deleted.",
                      raw('<a href="/schedules">back to the schedules</a>'))


async def _act(ui: Ui, viewer: pages.Viewer, action: str, schedule_id: str, actor: str, call: Any, done: str,
               back: Html | None = None) -> web.Response:
    assert ui.client is not None
    handle = ui.client.get_schedule_handle(schedule_id)
    back = back or _back(schedule_id)
    log.info("event=ui_action action=schedule_%s schedule_id=%r actor=%r", action, schedule_id, actor)
    try:
        await asyncio.wait_for(call(handle), ACTION_TIMEOUT_S)
        # The answer came on kadence.replies; the pages read the read model: the link back shows the change.
        await ui.client._read_model_caught_up(f"{SCHEDULE_KEY_PREFIX}{schedule_id}")
    except (KadenceError, TimeoutError) as exc:
        message = str(exc) or f"no answer from the history service within {ACTION_TIMEOUT_S:g} s: is it running?"
        return html_response(pages.outcome_page(viewer, f"{action.capitalize()} refused", f"{action} refused: {message}", back,
                                                failed=True), 409)
    return html_response(pages.outcome_page(viewer, f"{action.capitalize()} done", done, back))

