"""The operators' pages: task queues (kadence/ops/task_queues.py), the dead-letter queue with replay
(kadence/protocol/dead_letters.py) and the last audit's result (kadence/ops/audit_report.py)."""

from __future__ import annotations

import contextlib
import itertools
import logging
from typing import get_args
from urllib.parse import urlencode

from aiohttp import web
from confluent_kafka.admin import AdminClient

from kadence.ops.audit_report import last_audit
from kadence.ops.task_queues import POLLER_WINDOW_S, RATE_WINDOW_S, describe_task_queue
from kadence.ops.ui import pages
from kadence.ops.ui.html import Html, join, raw, render
from kadence.ops.ui.state import UI_KEY, KafkaTimeout, from_kafka, html_response
from kadence.protocol import topics
from kadence.protocol.dead_letters import DeadLetter, read_dead_letters, replay
from kadence.protocol.kafka import base_config
from kadence.protocol.settings import KafkaSettings

log = logging.getLogger("kadence.ops.ui")

DLQ_PAGE = 200  # dead letters shown per page


def routes() -> list[web.RouteDef]:
    return [
        web.get("/task-queues", task_queues),
        web.get("/task-queue", task_queue),
        web.get("/dlq", dlq),
        web.post("/dlq/replay", dlq_replay),
        web.get("/audit", audit),
    ]


def task_queue_names(settings: KafkaSettings) -> list[str]:
    """Every queue some worker or workflow has used: the queues of the kadence.tq.* topics."""
    names = AdminClient(base_config(settings)).list_topics(timeout=30).topics
    found = set()
    for name in names:
        for kind in get_args(topics.TaskKind):
            prefix, suffix = topics.task_queue_topic("", kind).split("..")
            if name.startswith(prefix + ".") and name.endswith("." + suffix):
                found.add(name[len(prefix) + 1:-len(suffix) - 1])
    return sorted(found)


async def task_queues(request: web.Request) -> web.Response:
    ui = request.app[UI_KEY]
    names = await from_kafka(ui, task_queue_names, ui.kafka)
    items = join(render('<li><a href="/task-queue?{q}">{name}</a></li>', q=urlencode({"name": n}), name=n) for n in names)
    body = render('<h1>Task queues</h1><ul class="queues" id="queues">{items}</ul>{none}', items=items,
                  none=raw("") if names else render("<p>{m}</p>", m="No task queue has a topic yet."))
    return html_response(pages.layout("Task queues", body, ui.viewer(request), "task-queues"))


async def task_queue(request: web.Request) -> web.Response:
    ui = request.app[UI_KEY]
    name = request.query.get("name", "")
    described = await from_kafka(ui, describe_task_queue, ui.kafka, name)
    kinds = join(
        render('<tr><td>{kind}</td><td>{topic}</td><td class="num">{partitions}</td><td class="num">{backlog}</td>'
               '<td class="num">{rate}</td></tr>', kind=k.kind, topic=k.topic, partitions=k.partitions, backlog=k.backlog,
               rate=f"{k.dispatch_rate_per_s:g}")
        for k in described.kinds
    )
    pollers = join(
        render('<tr><td>{identity}</td><td>{kind}</td><td>{partitions}</td><td>{seen} s ago</td></tr>', identity=p.identity,
               kind=p.kind, partitions=", ".join(map(str, p.partitions)), seen=f"{p.last_seen_s_ago:g}")
        for p in described.pollers
    )
    body = render(
        '<h1>Task queue <span class="id">{name}</span></h1>{missing}'
        '<h2>Backlog and dispatch rate</h2><table class="list" id="kinds"><thead><tr><th>Kind</th><th>Topic</th><th>Partitions</th>'
        '<th>Backlog</th><th>Dispatched/s (last {window} s)</th></tr></thead><tbody>{kinds}</tbody></table>'
        '<h2>Pollers heard from in the last {poll_window} s</h2><table class="list" id="pollers"><thead><tr><th>Identity</th>'
        '<th>Kind</th><th>Partitions</th><th>Last seen</th></tr></thead><tbody>{pollers}</tbody></table>'
        '<p class="muted">{note}</p>',
        name=name, kinds=kinds, pollers=pollers, window=RATE_WINDOW_S, poll_window=POLLER_WINDOW_S,
        missing=pages.error_box(f"task queue {name!r} has no topics: no worker or workflow has used it yet")
        if not described.kinds else raw(""),
        note="Backlog: tasks routed to the queue that its workers have not taken yet (the end of each partition less the "
             "workers' committed offset). No pollers: no worker serves the queue.",
    )
    return html_response(pages.layout(f"Task queue {name}", body, ui.viewer(request), "task-queues"))


async def dlq(request: web.Request) -> web.Response:
    ui = request.app[UI_KEY]
    from_offset = _offset(request.query.get("from", "0"))
    letters = await from_kafka(ui, _dead_letters_page, ui.kafka, from_offset)
    viewer = ui.viewer(request)
    return html_response(pages.layout("Dead letters", dlq_body(viewer, letters, from_offset), viewer, "dlq"))


def _dead_letters_page(settings: KafkaSettings, from_offset: int) -> list[DeadLetter]:
    """A page and one more (whether there is a next page): the read stops there, not at the topic's end."""
    with contextlib.closing(read_dead_letters(settings, from_offset)) as letters:
        return list(itertools.islice(letters, DLQ_PAGE + 1))


def _chosen_letters(settings: KafkaSettings, wanted: list[int]) -> list[DeadLetter]:
    """The dead letters at the `wanted` offsets (sorted): the read stops after the last of them."""
    with contextlib.closing(read_dead_letters(settings, wanted[0])) as letters:
        return [letter for letter in itertools.takewhile(lambda letter: letter.offset <= wanted[-1], letters)
                if letter.offset in wanted]


def dlq_body(viewer: pages.Viewer, letters: list[DeadLetter], from_offset: int) -> Html:
    shown = letters[:DLQ_PAGE]
    rows = join(
        render('<tr><td>{check}</td><td class="num">{offset}</td><td>{source}</td><td class="id">{key}</td><td class="num">{size}</td>'
               '<td class="error-text">{error}</td></tr>',
               check=render('<input type="checkbox" name="offset" value="{o}" aria-label="replay {o}">', o=letter.offset)
               if viewer.can_act and letter.source_topic and letter.source_topic != topics.HISTORY else raw(""),
               offset=letter.offset, source=letter.summary()["source"], key=letter.summary()["key"] or "",
               size=letter.summary()["bytes"], error=letter.error)
        for letter in shown
    )
    more = render('<a href="/dlq?{q}" id="next-page">Next page</a>', q=urlencode({"from": letters[-1].offset})) \
        if len(letters) > DLQ_PAGE else raw("")
    replay_button = render('<input type="hidden" name="csrf" value="{csrf}"><button type="submit">Replay the chosen records…</button>',
                           csrf=viewer.csrf) if viewer.can_act else render('<p class="muted">{m}</p>', m=viewer.why_not)
    return render(
        '<h1>Dead letters</h1><p class="muted">{about}</p>'
        '<form method="post" action="/dlq/replay"><table class="list" id="dead-letters"><thead><tr><th></th><th>Offset</th>'
        '<th>Source</th><th>Key</th><th>Bytes</th><th>Why</th></tr></thead><tbody>{rows}</tbody></table>{button}</form>'
        '<p class="paging"><a href="/dlq">First page</a> {more}</p>{none}',
        about="Records no service could apply (kadence.dlq), with the reason. Replay produces a record again, unchanged, to the "
              "topic and partition it came from, once the cause is fixed; records of kadence.history are not replayed "
              "(rebuild the reader's projection instead: docs/operations.md, \"Records in the DLQ\").",
        rows=rows, button=replay_button, more=more,
        none=render("<p>{m}</p>", m=f"kadence.dlq holds no records from offset {from_offset}.") if not shown else raw(""),
    )


async def dlq_replay(request: web.Request) -> web.Response:
    ui = request.app[UI_KEY]
    viewer = ui.viewer(request)
    actor = ui.actor(request)
    if actor is None:
        raise web.HTTPForbidden(text=f"refused: {viewer.why_not}")
    form = await request.post()
    wanted = sorted({_offset(str(o)) for o in form.getall("offset", [])})
    back = render('<a href="/dlq">{t}</a>', t="back to the dead letters")
    if not wanted:
        return html_response(pages.outcome_page(viewer, "Nothing replayed", "choose the records to replay first", back, failed=True), 400)
    if form.get("confirmed") != "yes":
        return html_response(pages.confirm_page(
            viewer, "Replay", f"Produce dead letters {', '.join(map(str, wanted))} again to the topics they came from?",
            "/dlq/replay", {}, back, multi={"offset": [str(o) for o in wanted]}))
    chosen = await from_kafka(ui, _chosen_letters, ui.kafka, wanted)
    missing = set(wanted) - {letter.offset for letter in chosen}
    if missing:
        return html_response(pages.outcome_page(viewer, "Nothing replayed", f"kadence.dlq has no records at offsets {sorted(missing)}",
                                                back, failed=True), 404)
    log.info("event=ui_action action=dlq_replay offsets=%s actor=%r", ",".join(map(str, wanted)), actor)
    try:
        await from_kafka(ui, replay, ui.kafka, chosen)
    except (ValueError, RuntimeError) as exc:
        return html_response(pages.outcome_page(viewer, "Replay refused", str(exc), back, failed=True), 409)
    except KafkaTimeout as exc:
        return html_response(pages.outcome_page(viewer, "Replay unconfirmed", f"{exc}: the records may still be replayed; "
                                                "look at their topics before replaying them again", back, failed=True), 504)
    done = "; ".join(f"{letter.offset} to {letter.source_topic}/{letter.source_partition}" for letter in chosen)
    return html_response(pages.outcome_page(viewer, "Replayed", f"replayed {done}", back))


def _offset(text: str) -> int:
    try:
        return max(0, int(text))
    except ValueError:
        raise web.HTTPBadRequest(text=f"an offset is a number, not {text[:40]!r}") from None


async def audit(request: web.Request) -> web.Response:
    ui = request.app[UI_KEY]
    report = await last_audit(ui.pool)
    viewer = ui.viewer(request)
    if report is None:
        body = render('<h1>Audit</h1><p id="audit-none">{m}</p>',
                      m="No audit has recorded a result yet: `kadence audit replay` records its result in Postgres when "
                        "KADENCE_POSTGRES_DSN is set (the nightly CronJob sets it).")
        return html_response(pages.layout("Audit", body, viewer, "audit"))
    findings = [(label, report.get(key) or []) for key, label in (
        ("violations", "Violations"), ("stuck", "Stuck"), ("missing_timers", "Timers missing"), ("never_routed", "Never routed"),
        ("divergences", "Divergences"), ("waiting_for_worker", "Waiting for a worker"))]
    failed = any(items for label, items in findings if label != "Waiting for a worker")
    sections = join(
        render('<h2>{label} ({count})</h2><ul class="findings">{items}</ul>', label=label, count=len(items),
               items=join(render("<li>{f}</li>", f=str(item)) for item in items[:500]))
        for label, items in findings if items
    )
    body = render(
        '<h1>Audit</h1><p id="audit-verdict" class="{cls}">{verdict}</p>'
        '<table class="summary"><tr><th>Finished</th><td>{at}</td></tr><tr><th>Records read</th><td>{records}</td></tr>'
        '<tr><th>Runs</th><td>{runs}</td></tr><tr><th>Events</th><td>{events}</td></tr>'
        '<tr><th>Zombie batches skipped</th><td>{zombies}</td></tr></table>{sections}{full}',
        cls="error" if failed else "ok", verdict="The last audit found problems." if failed else "The last audit found nothing wrong.",
        at=report.get("generated_at", ""), records=report.get("records", ""), runs=report.get("runs", ""),
        events=report.get("events", ""), zombies=report.get("zombie_batches_skipped", ""), sections=sections,
        full=render("<details><summary>The whole report</summary>{r}</details>", r=pages.pretty(report)),
    )
    return html_response(pages.layout("Audit", body, viewer, "audit"))
