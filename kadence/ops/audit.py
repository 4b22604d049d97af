"""Reading kadence.history back and checking the invariants every history must keep.

The log is folded with the shared fencing rule, so zombie duplicates are counted, not applied.
Read from the start, every run is checked from its first event; read from an offset or a time,
runs that began earlier are checked from where the read found them.

It also finds stuck work: what an open run's events say Kadence owes it and should have done
long ago (a timer past its fire time, a started task past its timeout, an activity past its
schedule-to-start timeout). The timer service owns each of these deadlines; one overdue by more
than `stuck_after_ms` is work that nothing owns any more. Tasks that wait for a worker with no
deadline (a workflow task, which history dispatches again until a worker starts it; an activity
without a schedule-to-start timeout) are listed apart, as waiting: a queue no worker polls is
the user's to fix, not a fault of Kadence.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import hashlib
import importlib
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from confluent_kafka import KafkaException

from kadence.common import workflow_task_backoff_ms
from kadence.exceptions import RetryState
from kadence.ops.code_audit import CodeReplayReport, WorkflowCodeAudit
from kadence.protocol import topics
from kadence.protocol.codec import NewerSchemaVersion, Record, UndecodableRecord, history_batch_codec, task_codec
from kadence.protocol.events import (
    ACTIVITY_RESULTS,
    CLOSE_STATUS,
    INITIATED_BY_ANSWER,
    NEXUS_RESULTS,
    RESET_CAUSE,
    SCHEDULE_EVENTS,
    RunSection,
    run_sections,
)
from kadence.protocol.fence import LogFence
from kadence.protocol.kafka import position, read_to_end, topic_partitions
from kadence.protocol.names import EffectType, EventType
from kadence.protocol.settings import KafkaSettings

RunKey = tuple[str, str]

# Overdue by more than this, pending work is reported as stuck: well past the longest a rebalance or
# a restart delays it, and past the longest wait the log cannot see (the re-dispatch of a workflow
# task, at most every 5 minutes; an activity retry's backoff, 100 s with the default policy).
DEFAULT_STUCK_AFTER_MS = 15 * 60_000


@dataclass(frozen=True)
class Due:
    """Work an open run waits for, and when it is due at the latest."""

    at_ms: int
    what: str
    needs_worker: bool = False  # waits for a worker to take it, with no deadline Kadence keeps
    task: TaskRef | None = None  # the task record dispatched for it


@dataclass(frozen=True)
class TaskRef:
    """Where the history service dispatches a task, and which one it is."""

    topic: str
    scheduled_event_id: int
    attempt: int


@dataclass(frozen=True)
class ActivityTimeouts:
    """Of an activity scheduled and not finished: when its attempts are due (0: no such timeout)."""

    to_start_ms: int  # its schedule-to-start timeout, else its schedule-to-close one
    to_close_ms: int  # an attempt's start-to-close timeout, else the schedule-to-close one
    max_retry_interval_ms: int
    topic: str  # its task queue's topic

    @classmethod
    def of(cls, scheduled: Record) -> ActivityTimeouts:
        schedule_to_close = scheduled.get("schedule_to_close_timeout_ms") or 0
        return cls(scheduled.get("schedule_to_start_timeout_ms") or schedule_to_close,
                   scheduled.get("start_to_close_timeout_ms") or schedule_to_close,
                   (scheduled.get("retry_policy") or {}).get("maximum_interval_ms") or 0,
                   topics.task_queue_topic(scheduled.get("task_queue", ""), "activity"))


@dataclass
class RunAudit:
    """What the checks remember of one run."""

    first_event_id: int
    event_count: int = 0
    events: list[Record] | None = None  # every event, when the caller asked to keep them
    activity_attempts: dict[int, int] = field(default_factory=dict)  # scheduled id -> attempt now due
    finished_activities: dict[int, int] = field(default_factory=dict)  # scheduled id -> final result event id
    fired_timers: set[str] = field(default_factory=set)
    initiated: dict[int, str] = field(default_factory=dict)  # initiated event id -> its type
    answered: dict[tuple[int, bool], int] = field(default_factory=dict)  # (initiated id, final?) -> answer event id
    nexus_operations: dict[int, int] = field(default_factory=dict)  # scheduled id -> its Started event id (0: none yet)
    finished_nexus_operations: dict[int, int] = field(default_factory=dict)  # scheduled id -> final result event id
    pending: dict[str, Due] = field(default_factory=dict)  # what the run waits for now, by what it is
    workflow_task_timeout_ms: int = 0
    first_workflow_task_backoff_ms: int = 0
    activities: dict[int, ActivityTimeouts] = field(default_factory=dict)  # by scheduled id, while not finished
    closed: bool = False
    code_replay: bool = False  # its events are kept until it closes, for the code replay
    started_ms: int = 0  # its WorkflowExecutionStarted's time
    schedule_started: int = 0  # a schedule's actions recorded STARTED
    schedule_processed_until_ms: int = 0  # a schedule's nominal times decided up to here

    @property
    def next_event_id(self) -> int:
        return self.first_event_id + self.event_count


def closed_run_digest(key: RunKey) -> int:
    """What the audit keeps of a closed run whose events it does not keep: 16 bytes of its ids'
    hash, enough to catch a later event for it (any is a violation) at about 100 bytes a run."""
    workflow_id, run_id = key
    return int.from_bytes(hashlib.blake2b(f"{workflow_id}\0{run_id}".encode(), digest_size=16).digest())


@dataclass(frozen=True)
class PendingTimer:
    """A timer the log set and has not dropped: the timer service owes it a firing."""

    workflow_id: str
    run_id: str
    kind: str
    fire_at_ms: int
    partition: int
    set_at_offset: int  # the record that set it


@dataclass
class AuditReport:
    records: int = 0
    zombie_batches: int = 0
    runs: dict[RunKey, RunAudit] = field(default_factory=dict)  # open runs, and closed ones whose events are kept
    closed_runs: set[int] = field(default_factory=set)  # the others: closed_run_digest of each
    closed_run_events: int = 0  # the events of those
    violations: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)  # Kadence's work for open runs, overdue by more than stuck_after_ms
    waiting: list[str] = field(default_factory=list)  # tasks that have waited for a worker longer than that
    pending_timers: dict[str, PendingTimer] = field(default_factory=dict)  # by timer id, as the log leaves them
    missing_timers: list[str] = field(default_factory=list)  # pending per the log, and neither stored nor held
    waiting_tasks: list[tuple[str, str, TaskRef]] = field(default_factory=list)  # (line, run id, task) of each waiting one
    unrouted: list[str] = field(default_factory=list)  # waiting tasks no task queue topic holds
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)  # per partition, the first and last offset read

    def history(self, workflow_id: str, run_id: str) -> list[Record]:
        events = self.runs[(workflow_id, run_id)].events
        if events is None:
            raise ValueError("this audit did not keep events: call audit_history(..., keep_events=True)")
        return events

    def event_types(self, workflow_id: str, run_id: str) -> list[str]:
        return [e["attributes"][0] for e in self.history(workflow_id, run_id)]

    def summary(self) -> dict[str, Any]:
        return {
            "records": self.records, "runs": len(self.runs) + len(self.closed_runs),
            "events": sum(r.event_count for r in self.runs.values()) + self.closed_run_events,
            "zombie_batches_skipped": self.zombie_batches, "violations": self.violations, "stuck": self.stuck,
            "waiting_for_worker": self.waiting, "missing_timers": self.missing_timers, "never_routed": self.unrouted,
        }


def audit_history(
    settings: KafkaSettings, start_offsets: dict[int, int] | None = None, on_record: Callable[[int, int], None] | None = None,
    *, keep_events: bool = True, stuck_after_ms: int | None = DEFAULT_STUCK_AFTER_MS, code: WorkflowCodeAudit | None = None,
) -> AuditReport:
    """Audit kadence.history from `start_offsets` (default: every partition from 0). With
    `keep_events`, the report holds every run's events (for tests and tools); without, the audit's
    memory grows with open runs, and a closed run costs only its closed_run_digest (the nightly
    audit). Open runs' work overdue by more
    than `stuck_after_ms` when the read ends is reported as stuck (None: not looked for);
    `on_record(partition, offset)` hears of each record read. With
    `code`, each run is also replayed against the workflow code once it closes (or, still open,
    when the read ends): `code.report` says which diverge."""
    # kadence.history is never deleted: offset 0 is every run's start.
    from_start = start_offsets is None or all(offset == 0 for offset in start_offsets.values())
    offsets = start_offsets if start_offsets is not None else {p: 0 for p in range(settings.partitions)}
    report = AuditReport()
    fence = LogFence(strict=from_start)
    codec = history_batch_codec()
    for msg in read_to_end(settings, topics.HISTORY, offsets):
        report.records += 1
        partition, offset = position(msg)
        report.offsets[partition] = (report.offsets.get(partition, (offset, 0))[0], offset)
        if on_record is not None:
            on_record(partition, offset)
        where = f"partition {partition} offset {offset}"
        try:
            batch = codec.decode(msg.value(), msg.headers())
        except NewerSchemaVersion:
            raise
        except UndecodableRecord as exc:
            report.violations.append(f"{where}: undecodable history record: {exc}")
            continue
        if not fence.admit(partition, batch):
            if (expected := fence.gap_before(partition, batch)) is not None:
                report.violations.append(
                    f"{where} workflow_id={batch['workflow_id']} run_id={batch['run_id']}: a batch for source offset "
                    f"{batch['source_offset']} starts at event {batch['first_event_id']}, but the log's run is at event "
                    f"{expected}: its writer's state holds events the log lacks, and the run's later batches are skipped"
                )
            else:
                report.zombie_batches += 1
            continue
        for section in run_sections(batch):
            _track_timers(report.pending_timers, batch["workflow_id"], section, partition, offset)
            if not section.events:
                continue
            key = (batch["workflow_id"], section.run_id)
            run = report.runs.get(key)
            if run is None and report.closed_runs and closed_run_digest(key) in report.closed_runs:
                report.violations += [f"{where} workflow_id={key[0]} run_id={key[1]} event_id={event['event_id']}: "
                                      f"{event['attributes'][0]} after the run closed" for event in section.events]
                report.closed_run_events += len(section.events)
                continue
            if run is None:
                run = report.runs[key] = RunAudit(first_event_id=section.first_event_id, events=[] if keep_events else None)
                if code is not None:
                    _choose_for_code_replay(run, section.events[0], code)
            for event in section.events:
                problem = _check_event(run, event, from_start)
                if problem:
                    report.violations.append(f"{where} workflow_id={key[0]} run_id={key[1]} event_id={event['event_id']}: {problem}")
                run.event_count += 1
                if run.events is not None:
                    run.events.append(event)
            if run.closed and run.code_replay:
                code.replay(*key, run.events)  # type: ignore[union-attr, arg-type]
                run.code_replay = False
            if run.closed and not keep_events:
                del report.runs[key]
                report.closed_runs.add(closed_run_digest(key))
                report.closed_run_events += run.event_count
        _track_transient_task(report.runs.get((batch["workflow_id"], batch["run_id"])), batch.get("workflow_task"))
    for key, run in report.runs.items():
        if run.code_replay:  # still open: replayed as far as it went
            code.replay(*key, run.events)  # type: ignore[union-attr, arg-type]
    if stuck_after_ms is not None:
        due_before_ms = int(time.time() * 1000) - stuck_after_ms
        for (workflow_id, run_id), run in report.runs.items():
            for due in run.pending.values() if not run.closed else ():
                if due.at_ms < due_before_ms:
                    line = f"workflow_id={workflow_id} run_id={run_id}: {due.what} was due {_utc(due.at_ms)}"
                    (report.waiting if due.needs_worker else report.stuck).append(line)
                    if due.needs_worker and due.task is not None:
                        report.waiting_tasks.append((line, run_id, due.task))
    return report


def _track_timers(pending: dict[str, PendingTimer], workflow_id: str, section: RunSection, partition: int, offset: int) -> None:
    for effect_type, effect in section.effects:
        if effect_type == EffectType.Timer:
            pending[effect["timer_id"]] = PendingTimer(
                workflow_id, section.run_id, effect["kind"], effect["fire_at_ms"], partition, offset)
        elif effect_type == EffectType.DropTimer:
            pending.pop(effect["timer_id"], None)


def check_routing(report: AuditReport, settings: KafkaSettings) -> None:
    """Look for each waiting task in its task queue topic: one there was routed and waits for a
    worker (a queue nobody polls); one that is not was never routed (report.unrouted), which
    history's re-dispatch every few minutes should have made impossible."""
    wanted: dict[str, set[tuple[str, int, int]]] = collections.defaultdict(set)
    for _, run_id, task in report.waiting_tasks:
        wanted[task.topic].add((run_id, task.scheduled_event_id, task.attempt))
    routed: set[tuple[str, str, int, int]] = set()
    tasks = task_codec()
    for topic, looked_for in wanted.items():
        try:
            partitions = topic_partitions(settings, topic)
        except KafkaException:  # no such topic: nothing was ever routed to the queue
            continue
        for msg in read_to_end(settings, topic, {p: 0 for p in range(partitions)}):
            try:
                record = tasks.decode(msg.value(), msg.headers())
            except (UndecodableRecord, NewerSchemaVersion):
                continue
            body = record["task"][1]
            key = (record["run_id"], body.get("scheduled_event_id", 0), body.get("attempt", 0))
            if key in looked_for:
                routed.add((topic, *key))
    report.unrouted = [f"{line}, and no record in {task.topic} carries it: never routed"
                       for line, run_id, task in report.waiting_tasks
                       if (task.topic, run_id, task.scheduled_event_id, task.attempt) not in routed]


def check_timer_store(report: AuditReport, dsn: str, memory_horizon_ms: int) -> None:
    """Compare the timers the log leaves pending with the timer service's store and positions
    (report.missing_timers)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        positions: dict[int, int] = dict(conn.execute(
            "SELECT partition, next_offset FROM kadence_consumer_offsets WHERE consumer = 'timer'").fetchall())
        stored = {row[0] for row in conn.execute(
            "SELECT timer_id FROM kadence_timers WHERE timer_id = ANY(%s)", (list(report.pending_timers),)).fetchall()}
    report.missing_timers = missing_timers(report, stored, positions, int(time.time() * 1000), memory_horizon_ms)


def missing_timers(report: AuditReport, stored_ids: set[str], positions: dict[int, int], now_ms: int, memory_horizon_ms: int) -> list[str]:
    """Timers the log says are pending that the timer service neither stores nor can hold: set by a
    record it has applied (before its stored position), due after its memory horizon (so never held
    in memory only, and not fired yet), and not in kadence_timers. Timers due sooner are covered by
    the stuck check once overdue."""
    return [
        f"workflow_id={t.workflow_id} run_id={t.run_id}: {t.kind} timer {timer_id} due {_utc(t.fire_at_ms)} is not in the "
        f"timer service's store (set at partition {t.partition} offset {t.set_at_offset})"
        for timer_id, t in report.pending_timers.items()
        if t.set_at_offset < positions.get(t.partition, 0) and t.fire_at_ms > now_ms + memory_horizon_ms and timer_id not in stored_ids
    ]


# What the code replay counts a run under whose start the read did not see (read from an offset or a time).
BEGUN_BEFORE_THE_READ = "(begun before the read)"


def _choose_for_code_replay(run: RunAudit, first: Record, code: WorkflowCodeAudit) -> None:
    if first["attributes"][0] != EventType.WorkflowExecutionStarted:
        code.skip(BEGUN_BEFORE_THE_READ)
        return
    workflow_type = first["attributes"][1]["workflow_type"]
    if not code.wants(workflow_type):
        code.skip(workflow_type)
        return
    run.code_replay = True
    if run.events is None:
        run.events = []


def audit_history_in_processes(
    settings: KafkaSettings, start_offsets: dict[int, int] | None, processes: int, *, stuck_after_ms: int | None,
    worker_modules: Sequence[str] = (), workflow_types: Sequence[str] = (),
) -> tuple[AuditReport, CodeReplayReport | None]:
    """The audit of `audit_history` (events not kept), its partitions shared among `processes`
    processes: a run lives on one partition, so each part is audited whole and the reports add up.
    With `worker_modules`, each process replays its runs against that workflow code too."""
    offsets = start_offsets if start_offsets is not None else {p: 0 for p in range(settings.partitions)}
    ordered = sorted(offsets.items())
    parts = [dict(ordered[i::processes]) for i in range(processes) if ordered[i::processes]]
    context = multiprocessing.get_context("spawn")  # no fork of a process running librdkafka's threads
    with concurrent.futures.ProcessPoolExecutor(len(parts), mp_context=context) as pool:
        results = list(pool.map(_audit_part, [(settings, part, stuck_after_ms, tuple(worker_modules), tuple(workflow_types))
                                              for part in parts]))
    report = AuditReport()
    code = CodeReplayReport() if worker_modules else None
    for part, replayed in results:
        report.records += part.records
        report.zombie_batches += part.zombie_batches
        report.runs.update(part.runs)
        report.closed_runs |= part.closed_runs
        report.closed_run_events += part.closed_run_events
        report.violations += part.violations
        report.stuck += part.stuck
        report.waiting += part.waiting
        report.waiting_tasks += part.waiting_tasks
        report.pending_timers.update(part.pending_timers)
        report.offsets.update(part.offsets)
        if code is not None and replayed is not None:
            code.add(replayed)
    return report, code


_Part = tuple[KafkaSettings, dict[int, int], int | None, tuple[str, ...], tuple[str, ...]]


def _audit_part(job: _Part) -> tuple[AuditReport, CodeReplayReport | None]:
    """One process's share: its partitions audited, and replayed against the code."""
    settings, offsets, stuck_after_ms, worker_modules, workflow_types = job
    code = None
    if worker_modules:
        from kadence.testing import workflows_in

        workflows = [w for name in worker_modules for w in workflows_in(importlib.import_module(name))]
        code = WorkflowCodeAudit(workflows, workflow_types=workflow_types)
    report = audit_history(settings, offsets, keep_events=False, stuck_after_ms=stuck_after_ms, code=code)
    if code is not None:
        code.close()
    return report, code.report if code is not None else None


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _check_event(run: RunAudit, event: Record, from_start: bool) -> str | None:
    kind, attrs = event["attributes"]
    if event["event_id"] != run.next_event_id:
        return f"event id {event['event_id']} where {run.next_event_id} was due"
    if run.closed:
        return f"{kind} after the run closed"
    if from_start and run.event_count == 0 and kind not in (EventType.WorkflowExecutionStarted, EventType.ScheduleCreated):
        return f"history starts with {kind}"
    run.closed = kind in CLOSE_STATUS or kind == EventType.ScheduleDeleted
    if kind in SCHEDULE_EVENTS:
        return _check_schedule_event(run, kind, attrs)
    _track_pending(run, event, kind, attrs)
    if kind == EventType.ActivityTaskScheduled:
        run.activity_attempts[event["event_id"]] = 1
    elif kind == EventType.ActivityTaskStarted:
        due = run.activity_attempts.get(attrs["scheduled_event_id"])
        if due is not None and attrs["attempt"] != due:
            return f"attempt {attrs['attempt']} of activity {attrs['scheduled_event_id']} started where attempt {due} was due"
    elif kind in ACTIVITY_RESULTS:
        return _check_activity_result(run, event, kind, attrs)
    elif kind in NEXUS_EVENTS:
        return _check_nexus_event(run, event, kind, attrs)
    elif kind in INITIATED_BY_ANSWER.values():
        run.initiated[event["event_id"]] = kind
    elif kind in INITIATED_BY_ANSWER:
        return _check_answer(run, event, kind, attrs)
    elif kind == EventType.TimerFired:
        if attrs["timer_id"] in run.fired_timers:
            return f"timer {attrs['timer_id']} fired twice"
        run.fired_timers.add(attrs["timer_id"])
    return None


def _check_schedule_event(run: RunAudit, kind: str, attrs: Record) -> str | None:
    """A schedule's invariants, in constant memory however long it lives: the nominal times it has
    decided only move forward, every action it counts is one recorded STARTED, and no nominal time
    has two runs running. (Each event carries the state its whole transition leaves, and the
    transition's ScheduleActionsTaken comes last: the count is compared there.)"""
    info = attrs["info"]
    if info["processed_until_ms"] < run.schedule_processed_until_ms:
        return f"the schedule's decided times went back from {run.schedule_processed_until_ms} to {info['processed_until_ms']}"
    run.schedule_processed_until_ms = info["processed_until_ms"]
    if kind == EventType.ScheduleActionsTaken:
        run.schedule_started += sum(1 for action in attrs["actions"] if action["fate"] == "STARTED")
    seen_from_creation = run.first_event_id == 1
    if kind == EventType.ScheduleActionsTaken and seen_from_creation and info["action_count"] != run.schedule_started:
        return f"the schedule counts {info['action_count']} actions, its events record {run.schedule_started} started"
    running = [(r["nominal_ms"], r["workflow_id"]) for r in info["running"]]
    if len(running) != len(set(running)):
        return "the schedule holds one nominal time's run twice"
    return None


def _track_pending(run: RunAudit, event: Record, kind: str, attrs: Record) -> None:
    """Keep `run.pending` to what the run waits for now, each with when it is due at the latest."""
    at, event_id = event["event_time_ms"], event["event_id"]
    if kind == EventType.WorkflowExecutionStarted:
        run.started_ms = at
        run.workflow_task_timeout_ms = attrs.get("workflow_task_timeout_ms") or 0
        run.first_workflow_task_backoff_ms = attrs.get("first_workflow_task_backoff_ms") or 0
        if attrs.get("workflow_run_timeout_ms"):
            run.pending["run"] = Due(at + attrs["workflow_run_timeout_ms"], "the run's timeout")
    elif kind == EventType.WorkflowTaskScheduled:
        backoff, run.first_workflow_task_backoff_ms = run.first_workflow_task_backoff_ms, 0  # a start delay, first task only
        task = TaskRef(topics.task_queue_topic(attrs["task_queue"], "workflow"), event_id, attrs["attempt"])
        run.pending["workflow_task"] = Due(at + backoff, f"the start of workflow task {event_id}", needs_worker=True, task=task)
    elif kind == EventType.WorkflowTaskStarted:
        due = at + run.workflow_task_timeout_ms
        run.pending["workflow_task"] = Due(due, f"the completion of workflow task {attrs['scheduled_event_id']} or its timeout")
    elif kind in (EventType.WorkflowTaskCompleted, EventType.WorkflowTaskFailed, EventType.WorkflowTaskTimedOut):
        run.pending.pop("workflow_task", None)
        if attrs.get("cause") == RESET_CAUSE:
            # What a reset's copied past left pending is set going again at the reset: its deadlines
            # keep their times (a past one fires at once), its tasks are dispatched anew. Each due
            # moves by the time from the run's start to the reset, so none is reported before the
            # reset could meet it.
            shift = at - run.started_ms
            run.pending = {what: dataclasses.replace(due, at_ms=due.at_ms + shift) for what, due in run.pending.items()}
    elif kind == EventType.TimerStarted:
        run.pending[f"timer {event_id}"] = Due(at + attrs["start_to_fire_timeout_ms"], f"the firing of timer {attrs['timer_id']!r}")
    elif kind in (EventType.TimerFired, EventType.TimerCanceled):
        run.pending.pop(f"timer {attrs['started_event_id']}", None)
    elif kind == EventType.ActivityTaskScheduled:
        run.activities[event_id] = timeouts = ActivityTimeouts.of(attrs)
        task = TaskRef(timeouts.topic, event_id, 1)
        run.pending[f"activity {event_id}"] = Due(at + timeouts.to_start_ms, f"the start of activity {event_id}",
                                                  needs_worker=not timeouts.to_start_ms, task=task)
    elif kind == EventType.ActivityTaskStarted and attrs["scheduled_event_id"] in run.activities:
        scheduled_id = attrs["scheduled_event_id"]
        run.pending[f"activity {scheduled_id}"] = Due(
            at + run.activities[scheduled_id].to_close_ms, f"the result of attempt {attrs['attempt']} of activity {scheduled_id}")
    elif kind in ACTIVITY_RESULTS and attrs["scheduled_event_id"] in run.activities:
        scheduled_id = attrs["scheduled_event_id"]
        if attrs.get("retry_state") == RetryState.IN_PROGRESS:  # the next attempt, after its backoff
            timeouts = run.activities[scheduled_id]
            due = at + timeouts.max_retry_interval_ms + timeouts.to_start_ms
            task = TaskRef(timeouts.topic, scheduled_id, run.activity_attempts.get(scheduled_id, 1) + 1)
            run.pending[f"activity {scheduled_id}"] = Due(due, f"the start of the next attempt of activity {scheduled_id}",
                                                          needs_worker=not timeouts.to_start_ms, task=task)
        else:
            del run.activities[scheduled_id]
            run.pending.pop(f"activity {scheduled_id}", None)


def _track_transient_task(run: RunAudit | None, task: Record | None) -> None:
    """A retried workflow task writes no events until an attempt completes: its state in the batch
    says what the run waits for (an attempt's start after its backoff, or its completion)."""
    if run is None or task is None:
        return
    scheduled_id, attempt = task["scheduled_event_id"], task["attempt"]
    if task["started_time_ms"]:
        run.pending["workflow_task"] = Due(task["started_time_ms"] + run.workflow_task_timeout_ms,
                                           f"the completion of attempt {attempt} of workflow task {scheduled_id} or its timeout")
    else:
        run.pending["workflow_task"] = Due(task["scheduled_time_ms"] + workflow_task_backoff_ms(attempt),
                                           f"the start of attempt {attempt} of workflow task {scheduled_id}", needs_worker=True)


def _check_activity_result(run: RunAudit, event: Record, kind: str, attrs: Record) -> str | None:
    scheduled_id = attrs["scheduled_event_id"]
    if scheduled_id in run.finished_activities:
        return f"second final result for activity {scheduled_id} (first at event {run.finished_activities[scheduled_id]})"
    if scheduled_id not in run.activity_attempts and scheduled_id >= run.first_event_id:
        return f"{kind} for scheduled_event_id {scheduled_id}, which is not an ActivityTaskScheduled event"
    if attrs.get("retry_state") == RetryState.IN_PROGRESS:
        run.activity_attempts[scheduled_id] = run.activity_attempts.get(scheduled_id, 1) + 1
    else:
        run.finished_activities[scheduled_id] = event["event_id"]
    return None


# The events of a Nexus operation after its NexusOperationScheduled.
NEXUS_EVENTS = {*NEXUS_RESULTS, EventType.NexusOperationScheduled, EventType.NexusOperationStarted,
                EventType.NexusOperationAttemptFailed, EventType.NexusOperationCancelRequested}


def _check_nexus_event(run: RunAudit, event: Record, kind: str, attrs: Record) -> str | None:
    """A Nexus operation's events name a NexusOperationScheduled of the run; it starts at most once
    and ends once."""
    if kind == EventType.NexusOperationScheduled:
        run.nexus_operations[event["event_id"]] = 0
        return None
    scheduled_id = attrs["scheduled_event_id"]
    if scheduled_id in run.finished_nexus_operations:
        return f"{kind} for Nexus operation {scheduled_id}, which ended at event {run.finished_nexus_operations[scheduled_id]}"
    if scheduled_id not in run.nexus_operations:
        if scheduled_id >= run.first_event_id:
            return f"{kind} for scheduled_event_id {scheduled_id}, which is not a NexusOperationScheduled event"
        run.nexus_operations[scheduled_id] = 0  # scheduled before this audit's first event
    if kind == EventType.NexusOperationStarted:
        if run.nexus_operations[scheduled_id]:
            return f"second NexusOperationStarted for Nexus operation {scheduled_id} (first at event {run.nexus_operations[scheduled_id]})"
        run.nexus_operations[scheduled_id] = event["event_id"]
    elif kind in NEXUS_RESULTS:
        run.finished_nexus_operations[scheduled_id] = event["event_id"]
    return None


def _check_answer(run: RunAudit, event: Record, kind: str, attrs: Record) -> str | None:
    initiated_id = attrs["initiated_event_id"]
    expected = INITIATED_BY_ANSWER[kind]
    if run.initiated.get(initiated_id) != expected and initiated_id >= run.first_event_id:
        return f"{kind} for initiated_event_id {initiated_id}, which is not a {expected} event"
    answer = (initiated_id, kind != EventType.ChildWorkflowExecutionStarted)
    if answer in run.answered:
        return f"second answer {kind} to initiated event {initiated_id} (first at event {run.answered[answer]})"
    run.answered[answer] = event["event_id"]
    return None
