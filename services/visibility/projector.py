"""The read model: one row per execution, the event archive, and a notification on close."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import psycopg
from psycopg.types.json import Jsonb

from kadence.protocol.batch_jobs import BATCH_JOBS_DDL
from kadence.protocol.codec import codec
from kadence.protocol.events import CLOSE_STATUS, SCHEDULE_EVENTS, RunSection, close_failure, is_memo_removal, refused, run_sections
from kadence.protocol.names import SCHEDULE_KEY_PREFIX, EventType
from kadence.protocol.read_model import (
    CLOSED_CHANNEL,
    OUTCOME_CHANNEL,
    VISIBILITY_DDL,
    CommandOutcome,
    fast_forward_request_id,
    memo_json,
    update_accepted_request_id,
    update_request_id,
)
from kadence.protocol.records import HistoryEvent, Payload
from services.projection import LogRecord, Projection


def _search_attributes(payloads: dict[str, Payload]) -> Jsonb:
    """Search attributes as JSON for the read model: JSON payloads as their value."""
    values = {}
    for name, payload in payloads.items():
        if payload["metadata"].get("encoding") == b"json/plain":
            values[name] = json.loads(payload["data"])
    return Jsonb(values)


def _text(value: str | None) -> str | None:
    """A string as a text column holds it: a NUL (which the history service refuses in names, but a
    failure message may hold) as U+FFFD."""
    return value.replace("\x00", "\ufffd") if value else value


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


@dataclass
class _Rows:
    """What one transaction writes."""

    started: list[tuple[Any, ...]] = field(default_factory=list)
    lengths: dict[tuple[str, str], int] = field(default_factory=dict)
    closed: list[tuple[Any, ...]] = field(default_factory=list)
    archive: list[tuple[Any, ...]] = field(default_factory=list)
    outcomes: list[tuple[Any, ...]] = field(default_factory=list)
    upserts: list[tuple[Any, ...]] = field(default_factory=list)
    memo_upserts: list[tuple[Any, ...]] = field(default_factory=list)  # (values set, keys removed, *key)
    pending_tasks: dict[tuple[str, str], bytes | None] = field(default_factory=dict)  # the last of each run's batches
    schedules: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # each schedule's row, as its last event leaves it


class VisibilityProjector(Projection):
    """Everything it folds is in Postgres: the Projection's own positions and hooks serve it."""

    name = "visibility"
    ddl = [*VISIBILITY_DDL, *BATCH_JOBS_DDL]  # the batch jobs' tables too: the CLI writes them, the services own them

    def __init__(self, *, notify: bool = True) -> None:
        """`notify`: announce closed runs and outcomes to waiting clients and workers (not when the
        read-model audit folds the log into a scratch schema)."""
        self.notify = notify
        self.events = codec("HistoryEvent")
        self.payloads = codec("Payload")
        self.failures = codec("Failure")
        self.transient_tasks = codec("TransientWorkflowTask")

    async def apply(self, conn: psycopg.AsyncConnection, records: list[LogRecord]) -> None:
        rows = _Rows()
        for record in records:
            self._answers(record.batch, rows)
            for section in run_sections(record.batch):
                self._fold(record.batch["workflow_id"], section, rows)
            if record.batch.get("workflow_task") is not None:  # after its events: they may end the attempt before
                key = (record.batch["workflow_id"], record.batch["run_id"])
                rows.pending_tasks[key] = self.transient_tasks.encode(record.batch["workflow_task"])
        async with conn.cursor() as cur:
            if rows.started:
                await cur.executemany(
                    "INSERT INTO kadence_executions "
                    "(workflow_id, run_id, workflow_type, task_queue, status, start_time, history_length, search_attributes, memo) "
                    "VALUES (%s, %s, %s, %s, 'Running', %s, 1, %s, %s) ON CONFLICT DO NOTHING",
                    rows.started,
                )
            if rows.upserts:  # in history order: a later upsert of a name wins
                await cur.executemany(
                    "UPDATE kadence_executions SET search_attributes = search_attributes || %s WHERE workflow_id = %s AND run_id = %s",
                    rows.upserts,
                )
            if rows.memo_upserts:  # in history order, as search attributes
                await cur.executemany(
                    "UPDATE kadence_executions SET memo = (memo || %s) - %s::text[] WHERE workflow_id = %s AND run_id = %s",
                    rows.memo_upserts,
                )
            if rows.archive:
                await cur.executemany(
                    "INSERT INTO kadence_events (workflow_id, run_id, event_id, event_type, event_time, event) "
                    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    rows.archive,
                )
            if rows.pending_tasks:
                await cur.executemany(
                    "UPDATE kadence_executions SET pending_workflow_task = %s WHERE workflow_id = %s AND run_id = %s",
                    [(task, *key) for key, task in rows.pending_tasks.items()],
                )
            if rows.schedules:  # a replay of older events leaves a newer row as it is
                await cur.executemany(
                    "INSERT INTO kadence_schedules (schedule_id, run_id, status, workflow_type, paused, next_action_time, "
                    "created_time, updated_time, event_id, state) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (schedule_id) DO UPDATE SET run_id = EXCLUDED.run_id, status = EXCLUDED.status, "
                    "workflow_type = EXCLUDED.workflow_type, paused = EXCLUDED.paused, next_action_time = EXCLUDED.next_action_time, "
                    "created_time = EXCLUDED.created_time, updated_time = EXCLUDED.updated_time, event_id = EXCLUDED.event_id, "
                    "state = EXCLUDED.state "
                    "WHERE kadence_schedules.run_id <> EXCLUDED.run_id OR kadence_schedules.event_id < EXCLUDED.event_id",
                    list(rows.schedules.values()),
                )
            if rows.lengths:
                await cur.executemany(
                    "UPDATE kadence_executions SET history_length = GREATEST(history_length, %s) WHERE workflow_id = %s AND run_id = %s",
                    [(length, *key) for key, length in rows.lengths.items()],
                )
            notifications = await _write_outcomes(cur, rows.outcomes)
            if rows.closed:
                await cur.executemany(
                    "UPDATE kadence_executions SET status = %s, close_time = %s, result = %s, failure = %s, next_run_id = %s, "
                    "pending_workflow_task = NULL WHERE workflow_id = %s AND run_id = %s",
                    rows.closed,
                )
            notifications += [(CLOSED_CHANNEL, json.dumps({"workflow_id": row[5], "run_id": row[6]})) for row in rows.closed]
            if self.notify:
                await _notify(cur, notifications)

    async def salvage(self, conn: psycopg.AsyncConnection, record: LogRecord) -> None:
        """A record the read model cannot hold still answers the requests it carries: a client or
        worker waits for them."""
        rows = _Rows()
        self._answers(record.batch, rows)
        async with conn.cursor() as cur:
            notifications = await _write_outcomes(cur, rows.outcomes)
            if self.notify:
                await _notify(cur, notifications)

    @staticmethod
    def _answers(batch: dict[str, Any], rows: _Rows) -> None:
        key = (batch["workflow_id"], batch["run_id"])
        # An accepted request answers with the run it leaves current (a start that terminated
        # the running run answers with the new one).
        current = (batch["workflow_id"], run_sections(batch)[-1].run_id)
        rows.outcomes += [(request_id, *current, True, None, None, None, None) for request_id in batch["request_ids"]]
        rows.outcomes += [(rejection["request_id"], *key, False, rejection["cause"], rejection["reason"], None, None)
                          for rejection in refused(batch)]

    def _fold(self, workflow_id: str, section: RunSection, rows: "_Rows") -> None:
        if section.events and section.events[0]["attributes"][0] in SCHEDULE_EVENTS:  # by its events, not its key
            self._fold_schedule(workflow_id, section, rows)
            return
        key = (workflow_id, section.run_id)
        for event in cast(list[HistoryEvent], section.events):  # decoded HistoryEvent records
            kind = event["attributes"][0]
            rows.archive.append((*key, event["event_id"], kind, _time(event["event_time_ms"]), self.events.encode(event)))
            rows.lengths[key] = event["event_id"]
            # Matched by the literal names the records' union tags its branches with: mypy narrows
            # each branch's attributes to its TypedDict by them.
            match event["attributes"]:
                case ("WorkflowTaskScheduled", scheduled) if scheduled.get("attempt", 1) > 1:  # a retried task's attempt completed
                    rows.pending_tasks[key] = None
                case ("WorkflowExecutionStarted", started):
                    # A reset's new run starts when the reset was decided (as Temporal's), not when
                    # the event it copied was written: its section's last event is the reset's.
                    reset = bool(started.get("original_execution_run_id"))
                    started_ms = section.events[-1]["event_time_ms"] if reset else event["event_time_ms"]
                    rows.started.append((*key, started["workflow_type"], started["task_queue"], _time(started_ms),
                                         _search_attributes(started.get("search_attributes", {})),
                                         Jsonb(memo_json(started.get("memo", {})))))
                case ("UpsertWorkflowSearchAttributes", upsert):
                    rows.upserts.append((_search_attributes(upsert["search_attributes"]), *key))
                case ("WorkflowPropertiesModified", modified):
                    upserted = modified["upserted_memo"]
                    removed = [name for name, payload in upserted.items() if is_memo_removal(payload)]
                    kept = {name: payload for name, payload in upserted.items() if name not in removed}
                    rows.memo_upserts.append((Jsonb(memo_json(kept)), removed, *key))
                case ("WorkflowExecutionUpdateAccepted", accepted):  # start_update(wait_for_stage=ACCEPTED) waits for this
                    rows.outcomes.append((update_accepted_request_id(key[0], accepted["update_id"]), *key, True, None, None, None, None))
                case ("WorkflowExecutionUpdateCompleted", completed):  # the caller of execute_update waits for this
                    result = self.payloads.encode(payload) if (payload := completed.get("result")) else None
                    failure = self.failures.encode(reason) if (reason := completed.get("failure")) else None
                    rows.outcomes.append((update_request_id(key[0], completed["update_id"]), *key, True, None, None, result, failure))
                case ("WorkflowExecutionTimeSkipped", skipped) if skipped.get("bound_reached") and skipped.get("request_id"):
                    rows.outcomes.append((fast_forward_request_id(skipped["request_id"]), *key, True, None, None, None, None))
                case ("WorkflowExecutionUpdateRejected", rejected):
                    rows.outcomes.append((update_request_id(key[0], rejected["update_id"]), *key, False, "UPDATE_REJECTED",
                                          rejected["failure"]["message"], None, self.failures.encode(rejected["failure"])))
                case (closing, closed) if closing in CLOSE_STATUS:
                    attrs: Mapping[str, Any] = closed  # the close events' fields, which the union of every event's lacks
                    result = self.payloads.encode(attrs["result"]) if attrs.get("result") else None
                    failure = self.failures.encode(close_failure(kind, attrs)) if kind != EventType.WorkflowExecutionCompleted else None
                    rows.closed.append((CLOSE_STATUS[kind], _time(event["event_time_ms"]), result, failure,
                                        attrs.get("new_execution_run_id"), *key))


    def _fold_schedule(self, key: str, section: RunSection, rows: "_Rows") -> None:
        """A schedule keeps one row, its last event's: no per-event rows (the log keeps them)."""
        last = cast(HistoryEvent, section.events[-1])
        attrs: Mapping[str, Any] = last["attributes"][1]
        schedule, info = attrs["schedule"], attrs["info"]
        for event in cast(list[HistoryEvent], section.events):  # a fast-forward's sender waits for the jump that reached its bound
            match event["attributes"]:
                case ("ScheduleTimeSkipped", skipped) if skipped.get("bound_reached") and skipped.get("request_id"):
                    reached = fast_forward_request_id(skipped["request_id"])
                    rows.outcomes.append((reached, key, section.run_id, True, None, None, None, None))
        status = "Deleted" if last["attributes"][0] == EventType.ScheduleDeleted else "Running"
        next_action = _time(info["timer_fire_ms"]) if info["timer_fire_ms"] else None
        rows.schedules[key] = (
            key.removeprefix(SCHEDULE_KEY_PREFIX), section.run_id, status, schedule["action"]["workflow_type"],
            schedule["state"]["paused"], next_action, _time(info["created_ms"]), _time(info["updated_ms"]), last["event_id"],
            self.events.encode(last),
        )


async def _write_outcomes(cur: psycopg.AsyncCursor[Any], outcomes: list[tuple[Any, ...]]) -> list[tuple[str, str]]:
    """Store the outcomes; the notifications that announce them (channel, payload)."""
    if not outcomes:
        return []
    stored = [(*(_text(value) for value in row[:3]), row[3], _text(row[4]), _text(row[5]), *row[6:]) for row in outcomes]
    await cur.executemany(
        "INSERT INTO kadence_command_outcomes (request_id, workflow_id, run_id, accepted, cause, reason, result, failure) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        stored,
    )
    # The outcome rides in the notification, so a waiting client or worker needs no query.
    return [(OUTCOME_CHANNEL, CommandOutcome(request_id, run_id, accepted, cause, reason).notification())
            for request_id, _, run_id, accepted, cause, reason, _, _ in stored]


async def _notify(cur: psycopg.AsyncCursor[Any], notifications: list[tuple[str, str]]) -> None:
    """Every notification of a transaction in one statement (each still its own NOTIFY, as the
    listeners read them), delivered when the transaction commits."""
    if notifications:
        channels, payloads = zip(*notifications, strict=True)
        await cur.execute("SELECT pg_notify(channel, payload) FROM unnest(%s::text[], %s::text[]) AS n(channel, payload)",
                          (list(channels), list(payloads)))
