"""The UI's pages as HTML. Every value from the read model, the log or the request goes through
`render` or `escape` (kadence/ops/ui/html.py); only markup written here is `raw`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from kadence.ops.ui.execution import Bar, PendingActivity, ResetPoint, Timeline
from kadence.ops.ui.html import Html, escape, join, raw, render
from kadence.ops.ui.queries import ScheduleRow
from kadence.visibility import PendingWorkflowTask, WorkflowExecution

TIMELINE_BARS = 300
RESET_POINTS_SHOWN = 200  # the newest workflow task ends a reset form offers by event id
# A reset's point by kind (the CLI's --type names), and what it may leave out (its --reapply-exclude).
RESET_TYPES = {"LastWorkflowTask": "Last completed workflow task", "FirstWorkflowTask": "First completed workflow task"}
REAPPLY_EXCLUDES = {"Signal": "signals", "Update": "updates"}
STATUSES = ("Running", "Completed", "Failed", "Canceled", "Terminated", "ContinuedAsNew", "TimedOut")


@dataclass(frozen=True)
class Viewer:
    """What the person looking may do, and the form token their POSTs must carry."""

    csrf: str
    can_act: bool
    why_not: str  # when they cannot act: read-only, or sign in with the token
    can_sign_in: bool


def layout(title: str, body: Html, viewer: Viewer, section: str = "") -> Html:
    nav = join(
        render('<a href="{href}" class="{cls}">{label}</a>', href=href, label=label, cls="current" if key == section else "")
        for key, href, label in (("workflows", "/workflows", "Workflows"), ("schedules", "/schedules", "Schedules"),
                                 ("task-queues", "/task-queues", "Task queues"), ("dlq", "/dlq", "Dead letters"),
                                 ("audit", "/audit", "Audit"))
    )
    mode = escape("actions enabled") if viewer.can_act else escape(viewer.why_not)
    sign_in = (
        render('<form method="post" action="/login" class="inline"><input type="hidden" name="csrf" value="{csrf}">'
               '<input type="password" name="token" placeholder="token" aria-label="token">'
               '<button type="submit">Sign in</button></form>', csrf=viewer.csrf)
        if viewer.can_sign_in and not viewer.can_act else raw("")
    )
    return render(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title} · Kadence</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="stylesheet" href="/static/style.css"><script src="/static/ui.js" defer></script></head>'
        '<body><header><a class="brand" href="/workflows">Kadence</a><nav>{nav}</nav>'
        '<span class="mode" id="mode">{mode}</span>{sign_in}</header><main>{body}</main></body></html>',
        title=title, nav=nav, mode=mode, sign_in=sign_in, body=body,
    )


def badge(status: str) -> Html:
    return render('<span class="badge status-{cls}">{status}</span>', cls=status.lower(), status=status)


def when(value: datetime | int | None) -> str:
    if value is None:
        return ""
    moment = value if isinstance(value, datetime) else datetime.fromtimestamp(value / 1000, UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


def execution_link(workflow_id: str, run_id: str = "", text: str | None = None) -> Html:
    query = {"workflow_id": workflow_id, **({"run_id": run_id} if run_id else {})}
    return render('<a href="/workflow?{q}">{text}</a>', q=urlencode(query), text=text if text is not None else workflow_id)


def schedule_link(schedule_id: str, text: str | None = None) -> Html:
    return render('<a href="/schedule?{q}">{text}</a>', q=urlencode({"schedule_id": schedule_id}),
                  text=text if text is not None else schedule_id)


def pretty(value: Any) -> Html:
    return render('<pre class="json">{text}</pre>', text=json.dumps(value, indent=2, ensure_ascii=False, default=str))


def error_box(message: str) -> Html:
    return render('<p class="error" role="alert">{message}</p>', message=message)


# ---- the list ------------------------------------------------------------------------------------


def workflows_page(viewer: Viewer, query: str, executions: list[WorkflowExecution], counts: dict[str, int],
                   next_cursor: str | None, error: str | None) -> Html:
    total = sum(counts.values())
    count_links = join(
        render('<a class="count" href="/workflows?{q}">{badge} {count}</a>',
               q=urlencode({"query": f"ExecutionStatus = '{status}'"}), badge=badge(status), count=f"{counts.get(status, 0):,}")
        for status in STATUSES if counts.get(status)
    )
    rows = join(
        render('<tr><td>{status}</td><td class="id">{link}</td><td class="id">{run}</td><td>{type}</td><td>{queue}</td>'
               '<td>{start}</td><td>{close}</td><td class="num">{length}</td></tr>',
               status=badge(e.status.value), link=execution_link(e.id, e.run_id), run=e.run_id, type=e.workflow_type,
               queue=e.task_queue, start=when(e.start_time), close=when(e.close_time), length=e.history_length)
        for e in executions
    )
    more = render('<a class="next" id="next-page" href="/workflows?{q}">Next page</a>',
                  q=urlencode({"query": query, "cursor": next_cursor})) if next_cursor else raw("")
    body = render(
        '<h1>Workflows</h1>'
        '<form method="get" action="/workflows" class="search"><input type="search" name="query" id="query" value="{query}" '
        'placeholder="WorkflowType = \'Order\' AND ExecutionStatus = \'Running\'" aria-label="list filter">'
        '<button type="submit">Search</button> <a href="/workflows">clear</a></form>{error}'
        '<p class="counts" id="counts">{total} matching: {count_links}</p>'
        '<table class="list" id="workflows"><thead><tr><th>Status</th><th>Workflow id</th><th>Run id</th><th>Type</th>'
        '<th>Task queue</th><th>Start</th><th>Close</th><th>History</th></tr></thead><tbody>{rows}</tbody></table>'
        '<p class="paging"><a href="/workflows?{first}">First page</a> {more}</p>',
        query=query, error=error_box(error) if error else raw(""), total=f"{total:,}", count_links=count_links, rows=rows,
        first=urlencode({"query": query}), more=more,
    )
    return layout("Workflows", body, viewer, "workflows")


# ---- one execution -------------------------------------------------------------------------------


@dataclass
class ExecutionView:
    execution: WorkflowExecution
    started: dict[str, Any]  # WorkflowExecutionStarted's attributes, payloads readable
    input: Any
    result: Any
    memo: dict[str, Any]  # the run's memo as it is now, readable
    failures: list[dict[str, Any]]  # outermost first, payloads readable
    next_run_id: str | None
    runs: list[tuple[str, str, datetime]]
    children: list[tuple[str, str, str]]
    pending: list[PendingActivity]
    pending_failures: dict[int, list[dict[str, Any]]]
    heartbeats: dict[int, Any]  # scheduled event id -> the latest heartbeat's details, readable
    heartbeat_problem: str | None  # why the heartbeats could not be read
    timeline: Timeline
    events: list[tuple[int, int, str, Any]]  # the table's page: id, time, type, readable attributes
    first_event_ms: int
    total_events: int
    next_events_from: int | None  # the next page's first event id; None on the last
    reset_points: list[ResetPoint] = field(default_factory=list)  # the run's workflow task ends, oldest first
    reset_from: str | None = None  # the run this one was reset from
    reset_as: str | None = None  # the run a reset made of this one


def pending_workflow_task_html(task: PendingWorkflowTask) -> Html:
    """A retried workflow task: its attempt and state, and why the attempt before failed."""
    since = task.started_time if task.started_time is not None else task.scheduled_time
    message = (task.last_failure or {}).get("message", "")
    return render('<span class="badge status-failed">attempt {attempt}</span> {state} since {since}'
                  '<div class="muted">the attempt before failed: {cause}{sep}{message}</div>',
                  attempt=task.attempt, state=task.state.lower(), since=when(since), cause=task.last_cause,
                  sep=": " if message else "", message=message)


def execution_page(viewer: Viewer, view: ExecutionView, notice: Html | None = None) -> Html:
    e = view.execution
    started = view.started
    ids = {"workflow_id": e.id, "run_id": e.run_id}
    summary_rows: list[tuple[str, Any]] = [
        ("Status", badge(e.status.value)), ("Workflow id", e.id), ("Run id", e.run_id), ("Type", e.workflow_type),
        ("Task queue", e.task_queue), ("Start", when(e.start_time)), ("Close", when(e.close_time)),
        ("History length", e.history_length),
    ]
    if e.pending_workflow_task is not None:
        summary_rows.append(("Workflow task", pending_workflow_task_html(e.pending_workflow_task)))
    if started.get("parent_workflow_id"):
        summary_rows.append(("Parent", execution_link(started["parent_workflow_id"], started.get("parent_run_id", ""))))
    if started.get("root_workflow_id") and started["root_workflow_id"] != e.id:
        summary_rows.append(("Root", execution_link(started["root_workflow_id"], started.get("root_run_id", ""))))
    if view.children:
        summary_rows.append(("Children", render("<ul>{items}</ul>", items=join(
            render('<li>{link} <span class="muted">{type}</span></li>', link=execution_link(w, r), type=t)
            for w, r, t in view.children))))
    if started.get("continued_execution_run_id"):
        summary_rows.append(("Continued from", execution_link(e.id, started["continued_execution_run_id"],
                                                              started["continued_execution_run_id"])))
    if view.reset_from:
        summary_rows.append(("Reset from", execution_link(e.id, view.reset_from, view.reset_from)))
    if view.next_run_id:
        summary_rows.append(("Reset as" if view.next_run_id == view.reset_as else "Continued as",
                             execution_link(e.id, view.next_run_id, view.next_run_id)))
    if started.get("first_execution_run_id") and started["first_execution_run_id"] != e.run_id:
        summary_rows.append(("First run of the chain", execution_link(e.id, started["first_execution_run_id"],
                                                                      started["first_execution_run_id"])))
    if started.get("cron_schedule"):
        summary_rows.append(("Cron schedule", started["cron_schedule"]))
    if isinstance(e.search_attributes.get("TemporalScheduledById"), str):
        summary_rows.append(("Started by schedule", schedule_link(e.search_attributes["TemporalScheduledById"])))
    if e.search_attributes:
        summary_rows.append(("Search attributes", pretty(e.search_attributes)))
    if view.memo:
        summary_rows.append(("Memo", pretty(view.memo)))
    if len(view.runs) > 1:
        summary_rows.append(("Runs of this id", render("<ul>{items}</ul>", items=join(
            render('<li>{link} {badge} <span class="muted">{start}</span></li>', link=execution_link(e.id, run_id, run_id),
                   badge=badge(status), start=when(start))
            for run_id, status, start in view.runs))))
    summary = join(render("<tr><th>{k}</th><td>{v}</td></tr>", k=k, v=v) for k, v in summary_rows)
    failure = raw("")
    if view.failures:
        failure = render('<section id="failure"><h2>Failure</h2>{chain}</section>', chain=failure_chain_html(view.failures))
    result = raw("")
    if e.status.value == "Completed":
        result = render('<section id="result"><h2>Result</h2>{value}</section>', value=pretty(view.result))
    body = render(
        '<h1 class="id">{id}</h1>{notice}'
        '<p class="links"><a href="/workflow/history.json?{q}" id="export">Download history (JSON)</a> · '
        '<a href="#timeline">Timeline</a> · <a href="#events">Events</a></p>'
        '<section id="summary"><h2>Summary</h2><table class="summary">{summary}</table></section>'
        '<section id="input"><h2>Input</h2>{input}</section>{result}{failure}{pending}'
        '<section id="timeline"><h2>Timeline</h2>{timeline}</section>{actions}'
        '<section id="events"><h2>Events</h2>{events}</section>',
        id=e.id, notice=notice or raw(""), q=urlencode(ids), summary=summary, input=pretty(view.input), result=result,
        failure=failure, pending=pending_section(view), actions=actions_section(viewer, e, view.reset_points),
        timeline=timeline_html(view.timeline),
        events=events_table(view),
    )
    return layout(e.id, body, viewer, "workflows")


def failure_chain_html(failures: list[dict[str, Any]]) -> Html:
    return join(
        render('<div class="failure"><p><strong>{type}</strong>: {message}{flags}</p>{stack}{details}</div>',
               type=f.get("type") or "Failure", message=f.get("message", ""),
               flags=" (non-retryable)" if f.get("non_retryable") else "",
               stack=render('<pre class="stack">{s}</pre>', s=f["stack_trace"]) if f.get("stack_trace") else raw(""),
               details=pretty(f["details"]) if f.get("details") else raw(""))
        for f in failures
    )


def pending_section(view: ExecutionView) -> Html:
    if not view.pending:
        return raw("")
    rows = join(
        render('<tr><td class="num">{id}</td><td>{type}</td><td>{aid}</td><td>{state}</td><td class="num">{attempt}</td>'
               '<td>{failure}</td><td>{heartbeat}</td></tr>',
               id=a.scheduled_event_id, type=a.activity_type, aid=a.activity_id, state=a.state,
               attempt=f"{a.attempt}" + (f" of {a.maximum_attempts}" if a.maximum_attempts else ""),
               failure=failure_chain_html(view.pending_failures[a.scheduled_event_id]) if a.last_failure else "",
               heartbeat=pretty(view.heartbeats[a.scheduled_event_id]) if a.scheduled_event_id in view.heartbeats else "")
        for a in view.pending
    )
    return render(
        '<section id="pending"><h2>Pending activities</h2>{problem}<table class="list"><thead><tr><th>Scheduled</th><th>Type</th>'
        '<th>Activity id</th><th>State</th><th>Attempt</th><th>Last failure</th><th>Last heartbeat</th></tr></thead>'
        '<tbody>{rows}</tbody></table></section>', rows=rows,
        problem=error_box(view.heartbeat_problem) if view.heartbeat_problem else raw(""))


def actions_section(viewer: Viewer, e: WorkflowExecution, points: list[ResetPoint] | None = None) -> Html:
    if not viewer.can_act:
        return render('<section id="actions"><h2>Actions</h2><p class="muted">{why}</p></section>', why=viewer.why_not)
    hidden = render('<input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="workflow_id" value="{w}">'
                    '<input type="hidden" name="run_id" value="{r}">', csrf=viewer.csrf, w=e.id, r=e.run_id)
    running = e.status.value == "Running"
    forms = [render(
        '<form method="post" action="/workflow/query" id="query-form"><h3>Query</h3>{h}'
        '<label>Name <input name="name" id="query-name" list="query-names" value="__stack_trace" required></label>'
        '<datalist id="query-names"><option value="__stack_trace"></datalist>'
        '<label>Arguments (a JSON array) <input name="args" value="[]"></label><button type="submit">Query</button></form>', h=hidden)]
    if running:
        forms += [
            render('<form method="post" action="/workflow/signal" id="signal-form"><h3>Signal</h3>{h}'
                   '<label>Name <input name="name" id="signal-name" required></label>'
                   '<label>Input (a JSON value) <input name="input" id="signal-input" value="null"></label>'
                   '<button type="submit">Signal…</button></form>', h=hidden),
            render('<form method="post" action="/workflow/cancel" id="cancel-form"><h3>Cancel</h3>{h}'
                   '<p class="muted">The workflow sees the cancellation and may clean up.</p>'
                   '<button type="submit">Cancel…</button></form>', h=hidden),
            render('<form method="post" action="/workflow/terminate" id="terminate-form"><h3>Terminate</h3>{h}'
                   '<label>Reason <input name="reason" id="terminate-reason"></label>'
                   '<button type="submit" class="danger">Terminate…</button></form>', h=hidden),
        ]
    if points:
        forms.append(reset_form(hidden, points, running))
    return render('<section id="actions"><h2>Actions</h2><div class="actions">{forms}</div></section>', forms=join(forms))


def reset_form(hidden: Html, points: list[ResetPoint], running: bool) -> Html:
    """A reset of the run (running, or closed and followed by no other): to its first or last
    completed workflow task, or to a workflow task's end picked by event id (the newest
    RESET_POINTS_SHOWN), with a reason and what not to reapply after the point."""
    completed = [p for p in points if p.event_type == "WorkflowTaskCompleted"]
    by_kind = [(value, f"{label} (event {(completed[-1] if value == 'LastWorkflowTask' else completed[0]).event_id} now)")
               for value, label in RESET_TYPES.items()] if completed else []
    by_event = [(str(p.event_id), f"Event {p.event_id}: {p.event_type}, {when(p.at_ms)}") for p in reversed(points[-RESET_POINTS_SHOWN:])]
    options = join(render('<option value="{v}">{label}</option>', v=v, label=label) for v, label in by_kind + by_event)
    older = render('<p class="muted">{m}</p>', m=f"The newest {RESET_POINTS_SHOWN} of its {len(points)} workflow task ends are "
                   "offered; reset to an older one with kadence workflow reset --event-id.") \
        if len(points) > RESET_POINTS_SHOWN else raw("")
    excludes = join(
        render('<label><input type="checkbox" name="exclude" value="{v}" id="reset-exclude-{id}"> Do not reapply {what}</label>',
               v=value, id=value.lower(), what=what)
        for value, what in REAPPLY_EXCLUDES.items()
    )
    return render(
        '<form method="post" action="/workflow/reset" id="reset-form"><h3>Reset</h3>{h}'
        '<p class="muted">A new run goes on from the end of a workflow task, with the signals and updates received after it; '
        '{fate}</p>'
        '<label>Point <select name="point" id="reset-point">{options}</select></label>{older}'
        '<label>Reason <input name="reason" id="reset-reason" required></label>{excludes}'
        '<button type="submit" class="danger">Reset…</button></form>',
        h=hidden, options=options, older=older, excludes=excludes,
        fate="this run is terminated." if running else "this run stays as it closed (within the history service's reset retention).",
    )


def confirm_page(viewer: Viewer, title: str, question: str, action: str, fields: dict[str, str], back: Html,
                 multi: dict[str, list[str]] | None = None) -> Html:
    """The second step of every action: what will happen, and a button that does it."""
    pairs = [*fields.items(), *((k, v) for k, values in (multi or {}).items() for v in values)]
    hidden = join(render('<input type="hidden" name="{k}" value="{v}">', k=k, v=v) for k, v in pairs)
    body = render(
        '<h1>{title}</h1><p id="question">{question}</p>'
        '<form method="post" action="{action}" id="confirm-form"><input type="hidden" name="csrf" value="{csrf}">'
        '<input type="hidden" name="confirmed" value="yes">{hidden}'
        '<button type="submit" id="confirm" class="danger">Yes, {title_lower}</button> '
        '<span id="go-back">{back}</span></form>',
        title=title, title_lower=title.lower(), question=question, action=action, csrf=viewer.csrf, hidden=hidden, back=back,
    )
    return layout(title, body, viewer)


def outcome_page(viewer: Viewer, title: str, message: str, back: Html, detail: Html | None = None, failed: bool = False) -> Html:
    body = render('<h1>{title}</h1><p id="outcome" class="{cls}" role="status">{message}</p>{detail}<p>{back}</p>',
                  title=title, cls="error" if failed else "ok", message=message, detail=detail or raw(""), back=back)
    return layout(title, body, viewer)


def timeline_html(timeline: Timeline) -> Html:
    """The bars, at most TIMELINE_BARS of them (a run of thousands of activities would draw a page
    no one reads): the rest are counted, and the table has every event."""
    span = max(timeline.end_ms - timeline.start_ms, 1)

    def position(start: int, end: int | None) -> str:
        left = (start - timeline.start_ms) / span * 100
        width = ((end if end is not None else timeline.end_ms) - start) / span * 100
        return f"{left:.3f} {max(width, 0.3):.3f}"

    def row(bar: Bar) -> Html:
        segments = join(
            render('<span class="segment {state}" data-at="{pos}" title="{tip}" data-events="{events}"></span>',
                   state=s.state, pos=position(s.start_ms, s.end_ms), events=" ".join(map(str, s.event_ids)),
                   tip=f"{bar.title}: {s.label} ({when(s.start_ms)} – {when(s.end_ms) if s.end_ms else 'now'})")
            for s in bar.segments
        )
        return render('<div class="bar {kind}"><span class="label" title="{title}">{title}</span>'
                      '<span class="track">{segments}</span></div>', kind=bar.kind.replace(" ", "-"), title=bar.title,
                      segments=segments)

    points = join(
        render('<span class="point" data-at="{left}" title="{tip}" data-events="{id}"></span>',
               left=f"{(p.at_ms - timeline.start_ms) / span * 100:.3f}", tip=f"{p.label} ({when(p.at_ms)})", id=p.event_id)
        for p in timeline.points[:TIMELINE_BARS]
    )
    return render(
        '<div class="timeline"><div class="axis"><span>{start}</span><span>{length}</span><span>{end}</span></div>'
        '<div class="bar events"><span class="label">signals, markers</span><span class="track">{points}</span></div>'
        '{rows}</div>{more}<p class="legend">{legend}</p>',
        start=when(timeline.start_ms), end=when(timeline.end_ms), length=f"{span / 1000:.3f} s", points=points,
        rows=join(row(bar) for bar in timeline.bars[:TIMELINE_BARS]),
        more=render('<p class="muted">{n} more bars are not drawn; the events table has them all.</p>',
                    n=len(timeline.bars) - TIMELINE_BARS) if len(timeline.bars) > TIMELINE_BARS else raw(""),
        legend=join(render('<span class="segment {s}"></span> {s}', s=s)
                    for s in ("scheduled", "running", "completed", "failed", "timed-out", "backoff", "canceled", "pending")),
    )


def events_table(view: ExecutionView) -> Html:
    start = view.first_event_ms
    rows = join(
        render('<tr id="event-{id}" class="{cls}"><td class="num">{id}</td><td>{time}<br><span class="muted">+{offset} s</span></td>'
               '<td>{type}</td><td>{attrs}</td></tr>',
               id=event_id, time=when(at), offset=f"{(at - start) / 1000:.3f}", type=kind, attrs=pretty(attrs),
               cls="failed" if kind.endswith(("Failed", "TimedOut")) else "")
        for event_id, at, kind, attrs in view.events
    )
    paging = raw("")
    if view.events and (view.next_events_from or view.events[0][0] > 1):
        e = view.execution
        link = {"workflow_id": e.id, "run_id": e.run_id}
        paging = render(
            '<p class="paging">Events {first} to {last} of {total}: <a href="/workflow?{q_first}#events">first</a> {next}</p>',
            first=view.events[0][0], last=view.events[-1][0], total=view.total_events, q_first=urlencode(link),
            next=render('<a id="next-events" href="/workflow?{q}#events">next</a>',
                        q=urlencode({**link, "events_from": view.next_events_from})) if view.next_events_from else raw(""))
    return render('{paging}<table class="list events"><thead><tr><th>Id</th><th>Time</th><th>Type</th><th>Details</th></tr></thead>'
                  '<tbody>{rows}</tbody></table>{paging}', rows=rows, paging=paging)


# ---- schedules -----------------------------------------------------------------------------------


CALENDAR_FIELDS = (("second", "second"), ("minute", "minute"), ("hour", "hour"), ("day_of_month", "day of month"),
                   ("month", "month"), ("year", "year"), ("day_of_week", "day of week"))
_WHOLE = {"day_of_month": (1, 31), "month": (1, 12), "day_of_week": (0, 6)}  # a field's every value, shown as *


@dataclass(frozen=True)
class ScheduleView:
    schedule_id: str
    schedule: dict[str, Any]  # the Schedule record, its action's payloads readable
    info: dict[str, Any]  # the ScheduleInfo record
    next_times: list[datetime]  # the recorded next nominal time and the spec's following ones


def duration(ms: int) -> str:
    """A duration, largest unit first: 1d2h, 1h30m, 1m30s, 1.5s, 250ms."""
    if ms <= 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    if ms:
        parts.append(f"{ms / 1000:g}s" if ms >= 1000 else f"{ms}ms")
    return "".join(parts)


def ranges_text(name: str, ranges: list[dict[str, int]]) -> str:
    """A calendar field's ranges as cron writes them: 9, 1-5, 0-59/15, 1,15; * for every value."""
    if not ranges:
        return "*"
    if len(ranges) == 1 and (ranges[0]["start"], ranges[0]["end"]) == _WHOLE.get(name) and ranges[0]["step"] <= 1:
        return "*"
    return ",".join((str(r["start"]) if r["end"] <= r["start"] else f"{r['start']}-{r['end']}")
                    + (f"/{r['step']}" if r["step"] > 1 else "") for r in ranges)


def calendar_text(calendar: dict[str, Any]) -> str:
    """One ScheduleCalendarSpec: each field's values (day of week 0 is Sunday), and its comment."""
    fields = ", ".join(f"{label} {ranges_text(name, calendar[name])}" for name, label in CALENDAR_FIELDS)
    return f"{fields} ({calendar['comment']})" if calendar.get("comment") else fields


def _items(values: list[Any]) -> Html:
    if not values:
        return render('<span class="muted">{none}</span>', none="none")
    return render("<ul>{items}</ul>", items=join(render("<li>{v}</li>", v=v) for v in values))


def _table(table_id: str, rows: list[tuple[str, Any]]) -> Html:
    return render('<table class="summary" id="{id}">{rows}</table>', id=table_id,
                  rows=join(render("<tr><th>{k}</th><td>{v}</td></tr>", k=k, v=v) for k, v in rows))


def _list_filter_string(value: str) -> str:
    """`value` as a string of the list filter (kadence/list_filter.py): quoted, backslashes and quotes escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def paused_badge(paused: bool) -> Html:
    return badge("Paused" if paused else "Running")


def schedules_page(viewer: Viewer, prefix: str, rows: list[ScheduleRow], total: int, next_after: str | None,
                   error: str | None) -> Html:
    def last_action(info: dict[str, Any]) -> Html:
        if not info["recent_actions"]:
            return raw("")
        last = info["recent_actions"][-1]
        return render('{link} {badge}', link=execution_link(last["workflow_id"], last["run_id"], when(last["nominal_ms"])),
                      badge=badge(last["status"]) if last["status"] else raw(""))

    shown = join(
        render('<tr><td>{status}</td><td class="id">{link}</td><td>{type}</td><td>{next}</td><td class="num">{count}</td>'
               '<td>{last}</td></tr>',
               status=paused_badge(r.schedule["state"]["paused"]), link=schedule_link(r.schedule_id),
               type=r.schedule["action"]["workflow_type"], next=when(r.info["next_nominal_ms"] or None),
               count=f"{r.info['action_count']:,}", last=last_action(r.info))
        for r in rows
    )
    more = render('<a class="next" id="next-page" href="/schedules?{q}">Next page</a>',
                  q=urlencode({"prefix": prefix, "after": next_after})) if next_after else raw("")
    body = render(
        '<h1>Schedules</h1>'
        '<form method="get" action="/schedules" class="search"><input type="search" name="prefix" id="prefix" value="{prefix}" '
        'placeholder="schedule id starts with" aria-label="schedule id starts with">'
        '<button type="submit">Search</button> <a href="/schedules">clear</a></form>{error}'
        '<p class="counts" id="counts">{total} schedules</p>'
        '<table class="list" id="schedules"><thead><tr><th>Status</th><th>Schedule id</th><th>Workflow type</th>'
        '<th>Next action</th><th>Actions taken</th><th>Last action</th></tr></thead><tbody>{rows}</tbody></table>'
        '<p class="paging"><a href="/schedules?{first}">First page</a> {more}</p>',
        prefix=prefix, error=error_box(error) if error else raw(""), total=f"{total:,}", rows=shown,
        first=urlencode({"prefix": prefix}), more=more,
    )
    return layout("Schedules", body, viewer, "schedules")


def schedule_page(viewer: Viewer, view: ScheduleView) -> Html:
    spec, action, policy, state = (view.schedule[k] for k in ("spec", "action", "policy", "state"))
    info = view.info
    started = urlencode({"query": f"TemporalScheduledById = {_list_filter_string(view.schedule_id)}"})
    state_rows: list[tuple[str, Any]] = [
        ("Status", paused_badge(state["paused"])), ("Note", state["note"]),
        ("Remaining actions", state["remaining_actions"] if state["limited_actions"] else "unlimited"),
        ("Actions taken", f"{info['action_count']:,}"), ("Skipped (overlap policy)", f"{info['overlap_skipped']:,}"),
        ("Missed (catch-up window)", f"{info['missed_catchup_window']:,}"), ("Buffered starts", len(info["buffered"])),
        ("Created", when(info["created_ms"])), ("Last updated", when(info["updated_ms"])),
        ("Workflows it started", render('<a id="started-workflows" href="/workflows?{q}">{t}</a>', q=started,
                                        t="the workflows list, filtered by TemporalScheduledById")),
    ]
    spec_rows: list[tuple[str, Any]] = [
        ("Intervals", _items([f"every {duration(i['every_ms'])}" + (f", offset {duration(i['offset_ms'])}" if i["offset_ms"] else "")
                              for i in spec["intervals"]])),
        ("Calendars", _items([calendar_text(c) for c in spec["calendars"]])),
        ("Cron strings", _items([render("<code>{c}</code>", c=c) for c in spec["cron_expressions"]])),
        ("Skip", _items([calendar_text(c) for c in spec["skip"]])),
        ("Time zone", spec["time_zone_name"] or "UTC"),
        ("Start", when(spec["start_at_ms"]) if spec["start_at_ms"] else "none"),
        ("End", when(spec["end_at_ms"]) if spec["end_at_ms"] else "none"),
        ("Jitter", duration(spec["jitter_ms"]) if spec["jitter_ms"] else "none"),
    ]
    action_rows: list[tuple[str, Any]] = [
        ("Workflow type", action["workflow_type"]),
        ("Workflow id", render('{id} <span class="muted">{how}</span>', id=action["workflow_id"],
                               how="(each run's id is this, a dash and its nominal time, RFC 3339)")),
        ("Task queue", action["task_queue"]), ("Input", pretty(action["input"])),
        *((label, duration(action[key])) for key, label in (
            ("execution_timeout_ms", "Execution timeout"), ("run_timeout_ms", "Run timeout"),
            ("workflow_task_timeout_ms", "Workflow task timeout")) if action[key]),
        *((label, pretty(action[key])) for key, label in (
            ("memo", "Memo"), ("search_attributes", "Search attributes"), ("header", "Header")) if action[key]),
    ]
    policy_rows: list[tuple[str, Any]] = [
        ("Overlap", "SKIP" if policy["overlap"] == "UNSPECIFIED" else policy["overlap"]),
        ("Catch-up window", duration(policy["catchup_window_ms"])),
        ("Pause on failure", "yes" if policy["pause_on_failure"] else "no"),
    ]
    recent = join(
        render('<tr><td>{nominal}</td><td>{taken}</td><td class="id">{link}</td><td>{status}</td></tr>',
               nominal=when(a["nominal_ms"]), taken=when(a["fired_ms"]), link=execution_link(a["workflow_id"], a["run_id"]),
               status=badge(a["status"]) if a["status"] else raw(""))
        for a in reversed(info["recent_actions"])
    ) or render('<tr><td colspan="4" class="muted">{m}</td></tr>', m="none yet")
    running = join(
        render('<tr><td class="id">{link}</td><td class="id">{run}</td><td>{nominal}</td><td>{taken}</td></tr>',
               link=execution_link(r["workflow_id"], r["run_id"]), run=r["run_id"] or "(its start is not heard yet)",
               nominal=when(r["nominal_ms"]), taken=when(r["fired_ms"]))
        for r in info["running"]
    ) or render('<tr><td colspan="4" class="muted">{m}</td></tr>', m="none")
    if view.next_times:
        jitter = info["timer_fire_ms"] - info["next_nominal_ms"] if info["timer_fire_ms"] else 0
        upcoming = render('<ol id="next-times">{items}</ol>{jitter}',
                          items=join(render("<li>{t}</li>", t=when(t)) for t in view.next_times),
                          jitter=render('<p class="muted">{m}</p>', m=f"The next is taken at {when(info['timer_fire_ms'])}, "
                                        f"its jitter ({duration(jitter)}) after it.") if jitter > 0 else raw(""))
    else:
        upcoming = render('<p class="muted" id="next-times">{m}</p>', m="none: the schedule is paused" if state["paused"] else
                          "none: no actions remain" if state["limited_actions"] and state["remaining_actions"] <= 0 else
                          "none: the spec names no later time")
    body = render(
        '<h1 class="id">{id}</h1><p class="muted">Schedule</p>'
        '<section id="state"><h2>State</h2>{state}</section>'
        '<section id="spec"><h2>Spec</h2>{spec}</section>'
        '<section id="action"><h2>Action</h2>{action}</section>'
        '<section id="policies"><h2>Policies</h2>{policies}</section>{actions}'
        '<section id="recent"><h2>Recent actions</h2><table class="list" id="recent-actions"><thead><tr><th>Nominal time</th>'
        '<th>Taken</th><th>Workflow id</th><th>Status</th></tr></thead><tbody>{recent}</tbody></table></section>'
        '<section id="running"><h2>Running</h2><table class="list" id="running-runs"><thead><tr><th>Workflow id</th><th>Run id</th>'
        '<th>Nominal time</th><th>Taken</th></tr></thead><tbody>{running}</tbody></table></section>'
        '<section id="next"><h2>Next action times</h2>{upcoming}</section>',
        id=view.schedule_id, state=_table("state-table", state_rows), spec=_table("spec-table", spec_rows),
        action=_table("action-table", action_rows), policies=_table("policy-table", policy_rows),
        actions=schedule_actions_section(viewer, view.schedule_id, state["paused"]), recent=recent, running=running,
        upcoming=upcoming,
    )
    return layout(f"Schedule {view.schedule_id}", body, viewer, "schedules")


def schedule_actions_section(viewer: Viewer, schedule_id: str, paused: bool) -> Html:
    if not viewer.can_act:
        return render('<section id="actions"><h2>Actions</h2><p class="muted">{why}</p></section>', why=viewer.why_not)
    hidden = render('<input type="hidden" name="csrf" value="{csrf}"><input type="hidden" name="schedule_id" value="{s}">',
                    csrf=viewer.csrf, s=schedule_id)
    toggle = (
        render('<form method="post" action="/schedule/unpause" id="unpause-form"><h3>Unpause</h3>{h}'
               '<label>Note <input name="note" id="unpause-note"></label><button type="submit">Unpause…</button></form>', h=hidden)
        if paused else
        render('<form method="post" action="/schedule/pause" id="pause-form"><h3>Pause</h3>{h}'
               '<p class="muted">It takes no actions until unpaused; the runs it started go on.</p>'
               '<label>Note <input name="note" id="pause-note"></label><button type="submit">Pause…</button></form>', h=hidden)
    )
    forms = [
        toggle,
        render('<form method="post" action="/schedule/trigger" id="trigger-form"><h3>Trigger</h3>{h}'
               '<p class="muted">Take an action now, under the overlap policy.</p><button type="submit">Trigger…</button></form>',
               h=hidden),
        render('<form method="post" action="/schedule/delete" id="delete-form"><h3>Delete</h3>{h}'
               '<p class="muted">It takes no more actions; the runs it started go on.</p>'
               '<button type="submit" class="danger">Delete…</button></form>', h=hidden),
    ]
    return render('<section id="actions"><h2>Actions</h2><div class="actions">{forms}</div></section>', forms=join(forms))


def not_found_page(viewer: Viewer, message: str) -> Html:
    return layout("Not found", render('<h1>Not found</h1>{m}', m=error_box(message)), viewer)
