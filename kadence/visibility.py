"""Reading the Postgres read model: executions by list filter, one execution, its history."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any, cast

from psycopg_pool import AsyncConnectionPool

from kadence._temporal_history import events_from_temporal, is_temporal_history, run_id_of, workflow_id_of
from kadence.api.common.v1 import Payload
from kadence.common import UNSET
from kadence.converter import DataConverter
from kadence.list_filter import ListFilterError, Scope, parse
from kadence.protocol.codec import codec
from kadence.protocol.names import EventType
from kadence.protocol.read_model import memo_from_json
from kadence.protocol.records import NexusOperationScheduled

# What WorkflowExecution.from_row reads, in its order.
EXECUTION_COLUMNS = (
    "workflow_id, run_id, workflow_type, task_queue, status, start_time, close_time, history_length, search_attributes, "
    "pending_workflow_task, memo"
)
EXECUTION_COLUMN_COUNT = EXECUTION_COLUMNS.count(",") + 1


class WorkflowExecutionStatus(str, Enum):
    """As temporalio.client.WorkflowExecutionStatus."""

    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELED = "Canceled"
    TERMINATED = "Terminated"
    CONTINUED_AS_NEW = "ContinuedAsNew"
    TIMED_OUT = "TimedOut"


@dataclass(frozen=True)
class PendingWorkflowTask:
    """A workflow task being retried after it failed or timed out (as Temporal's
    PendingWorkflowTaskInfo, with why the attempt before failed): no event records its attempts
    until one completes, so describe and the UI show them from here."""

    attempt: int
    state: str  # "Scheduled" (waiting out its backoff, or for a worker) or "Started"
    scheduled_time: datetime
    started_time: datetime | None
    last_cause: str  # Temporal's WorkflowTaskFailedCause, or START_TO_CLOSE_TIMEOUT
    last_failure: dict[str, Any] | None  # the Failure the attempt before failed with

    @classmethod
    def from_record(cls, task: dict[str, Any]) -> PendingWorkflowTask:
        started = task["started_time_ms"]
        return cls(task["attempt"], "Started" if started else "Scheduled", _utc_ms(task["scheduled_time_ms"]),
                   _utc_ms(started) if started else None, task["last_cause"], task["last_failure"])

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt, "state": self.state, "scheduled_time": self.scheduled_time.isoformat(),
            "started_time": self.started_time.isoformat() if self.started_time else None, "last_cause": self.last_cause,
            "last_failure": _jsonable(self.last_failure),
        }


def _utc_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


@dataclass(frozen=True)
class WorkflowExecution:
    """One run as the read model knows it (as temporalio.client.WorkflowExecution). `raw_memo` is
    the memo's payloads as stored (through the payload codec); `memo()` decodes them with
    `data_converter`, the client's for the executions a client returns."""

    id: str
    run_id: str
    workflow_type: str
    task_queue: str
    status: WorkflowExecutionStatus
    start_time: datetime
    close_time: datetime | None
    history_length: int
    search_attributes: dict[str, Any]
    pending_workflow_task: PendingWorkflowTask | None = None  # a workflow task retried after a failure or timeout
    raw_memo: Mapping[str, Payload] = field(default_factory=dict)
    data_converter: DataConverter = field(default=DataConverter.default, repr=False, compare=False)

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> WorkflowExecution:
        (workflow_id, run_id, workflow_type, task_queue, status, start_time, close_time, history_length, search_attributes, task,
         memo) = row
        pending = PendingWorkflowTask.from_record(codec("TransientWorkflowTask").decode(task)) if task else None
        raw_memo = {key: Payload.of(payload) for key, payload in memo_from_json(memo).items()}
        return cls(workflow_id, run_id, workflow_type, task_queue, WorkflowExecutionStatus(status), start_time, close_time, history_length,
                   search_attributes, pending, raw_memo)

    async def memo(self) -> dict[str, Any]:
        """The memo's values, decoded without type hints (as temporalio's)."""
        keys = list(self.raw_memo)
        values = await self.data_converter.decode([self.raw_memo[key] for key in keys])
        return dict(zip(keys, values, strict=True))

    async def memo_value(self, key: str, default: Any = UNSET, *, type_hint: type | None = None) -> Any:
        """One memo value, decoded with `type_hint`; `default` when the memo has no `key` (without
        one, KeyError), as temporalio's."""
        payload = self.raw_memo.get(key)
        if payload is None:
            if default is UNSET:
                raise KeyError(f"Memo does not have a value for key {key}")
            return default
        return (await self.data_converter.decode([payload], [type_hint] if type_hint else None))[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow_id": self.id, "run_id": self.run_id, "workflow_type": self.workflow_type, "task_queue": self.task_queue,
            "status": self.status.value, "start_time": self.start_time.isoformat(),
            "close_time": self.close_time.isoformat() if self.close_time else None,
            "history_length": self.history_length, "search_attributes": self.search_attributes,
            "pending_workflow_task": self.pending_workflow_task.to_json() if self.pending_workflow_task else None,
            "memo": _jsonable(dict(self.raw_memo)),
        }


@dataclass(frozen=True)
class WorkflowHistory:
    """A run's events, as recorded (as temporalio.client.WorkflowHistory)."""

    workflow_id: str
    run_id: str
    events: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        """JSON-able: each event as {event_id, event_time_ms, event_type, attributes}, bytes in base64."""
        return {"workflow_id": self.workflow_id, "run_id": self.run_id, "events": [
            {"event_id": e["event_id"], "event_time_ms": e["event_time_ms"], "event_type": e["attributes"][0],
             "attributes": _jsonable(e["attributes"][1])}
            for e in self.events
        ]}


    @classmethod
    def from_json(cls, workflow_id: str | Mapping[str, Any], history: str | Mapping[str, Any] | None = None) -> WorkflowHistory:
        """The history from `to_json()` (as `kadence workflow show --output json` prints it), given
        alone or after a workflow id; or, as temporalio's `WorkflowHistory.from_json(workflow_id,
        history)`, Temporal's JSON history of that workflow (a dict or its JSON text; alone when its
        start records the workflow id, as current servers write), its events read as Kadence's
        (kadence._temporal_history; TemporalHistoryError if they cannot be)."""
        exported = workflow_id if history is None else history
        if isinstance(exported, str):
            exported = json.loads(exported)
        if not isinstance(exported, Mapping):
            raise ValueError("from_json takes a history (an object, or its JSON text), alone or after a workflow id")
        workflow = workflow_id if history is not None and isinstance(workflow_id, str) else None
        if is_temporal_history(exported):
            workflow = workflow or workflow_id_of(exported)
            if not workflow:
                raise ValueError("this Temporal JSON history does not record its workflow id: call from_json(workflow_id, history)")
            return cls(workflow, run_id_of(exported), events_from_temporal(exported))
        events = [
            {"event_id": e["event_id"], "event_time_ms": e["event_time_ms"],
             "attributes": (e["event_type"], _from_jsonable(e["attributes"]))}
            for e in exported["events"]
        ]
        return cls(workflow or exported["workflow_id"], exported["run_id"], events)


def _from_jsonable(value: Any) -> Any:
    """Undo _jsonable: payloads (the only records with bytes) get their bytes back."""
    if isinstance(value, dict):
        if value.keys() == {"metadata", "data"} and isinstance(value["data"], str):
            return {"metadata": {k: base64.b64decode(v) for k, v in value["metadata"].items()}, "data": base64.b64decode(value["data"])}
        return {k: _from_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_jsonable(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# The sort key of each column a filter may ORDER BY, and its type. close_time is NULL while a run
# is open; 'infinity' puts open runs where Postgres puts NULLs (last ascending) and keeps row
# comparison total. A cursor holds the key as text, cast back when compared.
_SORT_KEYS = {"close_time": "coalesce(close_time, 'infinity'::timestamptz)"}
_KEY_TYPES = {"start_time": "timestamptz", "close_time": "timestamptz", "history_length": "bigint"}


@dataclass(frozen=True)
class ExecutionsPage:
    executions: list[WorkflowExecution]
    next_cursor: str | None  # None on the last page


async def executions_page(
    pool: AsyncConnectionPool, query: str, cursor: str | None, size: int, *, scope: Scope = Scope.WORKFLOWS,
) -> ExecutionsPage:
    """One page of the executions matching the list filter, in its ORDER BY (newest first by
    default), after `cursor` (the `next_cursor` of the page before). Ties are broken by workflow id
    and run id in the same direction, so (key, workflow_id, run_id) orders every row and the next
    page is `WHERE (key, workflow_id, run_id) < the last row's`: an index range however deep, never
    an OFFSET that scans every row before the page. With `scope`, the standalone activities' or
    Nexus operations' runs instead of workflows' (decisions 0007 and 0008)."""
    sql = parse(query, scope=scope)
    column, direction = sql.order_by.split()
    key = _SORT_KEYS.get(column, column)
    where, params = sql.where, list(sql.params)
    if cursor:
        after = _decode_cursor(cursor)
        cast = _KEY_TYPES.get(column, "text")
        where = f"({where}) AND ({key}, workflow_id, run_id) {'<' if direction == 'DESC' else '>'} (%s::{cast}, %s, %s)"
        params += after
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            f"SELECT {EXECUTION_COLUMNS}, ({key})::text AS sort_key FROM kadence_executions WHERE {where} "
            f"ORDER BY {key} {direction}, workflow_id {direction}, run_id {direction} LIMIT %s",
            [*params, size + 1],
        )).fetchall()
    executions = [WorkflowExecution.from_row(row[:-1]) for row in rows[:size]]
    next_cursor = None
    if len(rows) > size:
        last = rows[size - 1]
        next_cursor = _encode_cursor([last[-1], last[0], last[1]])
    return ExecutionsPage(executions, next_cursor)


def _encode_cursor(values: list[str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode()


def _decode_cursor(cursor: str) -> list[str]:
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if not (isinstance(values, list) and len(values) == 3 and all(isinstance(v, str) for v in values)):
            raise ValueError(values)
    except ValueError as exc:
        raise ListFilterError(f"the page cursor {cursor[:40]!r} is not one Kadence made: start again from the first page") from exc
    return values


async def list_executions(
    pool: AsyncConnectionPool, query: str, limit: int | None, page_size: int, *, scope: Scope = Scope.WORKFLOWS,
) -> AsyncIterator[WorkflowExecution]:
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be None (every execution) or at least 0, not {limit}")
    cursor, returned = None, 0
    while limit is None or returned < limit:
        page = await executions_page(pool, query, cursor, page_size if limit is None else min(page_size, limit - returned),
                                     scope=scope)
        for execution in page.executions:
            yield execution
        returned += len(page.executions)
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


async def count_executions(pool: AsyncConnectionPool, query: str, *, scope: Scope = Scope.WORKFLOWS) -> int:
    sql = parse(query, scope=scope)
    async with pool.connection() as conn:
        row = await (await conn.execute(f"SELECT count(*) FROM kadence_executions WHERE {sql.where}", sql.params)).fetchone()
    return row[0] if row else 0


async def find_execution(pool: AsyncConnectionPool, workflow_id: str, run_id: str | None) -> WorkflowExecution | None:
    """The run, or the workflow id's latest run without `run_id`."""
    condition, params = ("workflow_id = %s AND run_id = %s", [workflow_id, run_id]) if run_id else ("workflow_id = %s", [workflow_id])
    async with pool.connection() as conn:
        row = await (await conn.execute(
            f"SELECT {EXECUTION_COLUMNS} FROM kadence_executions WHERE {condition} ORDER BY start_time DESC LIMIT 1", params,
        )).fetchone()
    return None if row is None else WorkflowExecution.from_row(row)


async def fetch_event_ranges(
    pool: AsyncConnectionPool, ranges: list[tuple[str, str, int, int]],
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """For each (workflow_id, run_id, after, before), the run's events with after < event_id < before
    that the read model holds so far, in order: one query for them all."""
    events = codec("HistoryEvent")
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT e.workflow_id, e.run_id, e.event FROM kadence_events e "
            "JOIN unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[]) AS w(workflow_id, run_id, after, before) "
            "ON e.workflow_id = w.workflow_id AND e.run_id = w.run_id AND e.event_id > w.after AND e.event_id < w.before "
            "ORDER BY e.workflow_id, e.run_id, e.event_id",
            [list(column) for column in zip(*ranges, strict=True)],
        )).fetchall()
    for workflow_id, run_id, event in rows:
        found.setdefault((workflow_id, run_id), []).append(events.decode(event))
    return found


async def nexus_operations_scheduled(
    pool: AsyncConnectionPool, runs: Sequence[WorkflowExecution],
) -> dict[tuple[str, str], NexusOperationScheduled]:
    """Each standalone Nexus operation's NexusOperationScheduled, by (workflow id, run id): its
    run's second event, which its start recorded (decision 0008), with the endpoint, service and operation."""
    if not runs:
        return {}
    found = await fetch_event_ranges(pool, [(run.id, run.run_id, 1, 3) for run in runs])
    return {key: cast(NexusOperationScheduled, events[0]["attributes"][1]) for key, events in found.items()}


async def fetch_events(pool: AsyncConnectionPool, workflow_id: str, run_id: str) -> list[dict[str, Any]]:
    events = codec("HistoryEvent")
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT event FROM kadence_events WHERE workflow_id = %s AND run_id = %s ORDER BY event_id", (workflow_id, run_id),
        )).fetchall()
    return [events.decode(row[0]) for row in rows]


async def activity_cancel_requested(
    pool: AsyncConnectionPool, workflow_id: str, run_id: str, *, scheduled_event_id: int = 0, activity_id: str = "",
) -> bool:
    """Whether the run asked to cancel the activity (by its scheduled event id, or the latest one
    scheduled under `activity_id`): what an async activity handle's heartbeat tells its caller."""
    events = codec("HistoryEvent")
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT event FROM kadence_events WHERE workflow_id = %s AND run_id = %s "
            "AND event_type IN ('ActivityTaskScheduled', 'ActivityTaskCancelRequested') ORDER BY event_id",
            (workflow_id, run_id),
        )).fetchall()
    cancelled: set[int] = set()
    for row in rows:
        event = events.decode(row[0])
        kind, attrs = event["attributes"]
        if kind == EventType.ActivityTaskScheduled and activity_id and attrs["activity_id"] == activity_id:
            scheduled_event_id = event["event_id"]
        elif kind == EventType.ActivityTaskCancelRequested:
            cancelled.add(attrs["scheduled_event_id"])
    return scheduled_event_id in cancelled
