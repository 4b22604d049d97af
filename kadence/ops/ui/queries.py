"""What the UI reads from the read model beside the list (kadence.visibility.executions_page):
counts by status, one run with its result, failure and runs, and the schedules (kadence_schedules)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from kadence.list_filter import parse
from kadence.protocol.codec import codec
from kadence.visibility import EXECUTION_COLUMN_COUNT, EXECUTION_COLUMNS, WorkflowExecution


@dataclass(frozen=True)
class ExecutionRow:
    execution: WorkflowExecution
    result: dict[str, Any] | None  # the Payload record
    failure: dict[str, Any] | None  # the Failure record
    next_run_id: str | None


async def count_by_status(pool: AsyncConnectionPool, query: str) -> dict[str, int]:
    sql = parse(query)
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            f"SELECT status, count(*) FROM kadence_executions WHERE {sql.where} GROUP BY status ORDER BY status", sql.params,
        )).fetchall()
    return {status: count for status, count in rows}


async def execution_row(pool: AsyncConnectionPool, workflow_id: str, run_id: str | None) -> ExecutionRow | None:
    """The run (the workflow id's latest without `run_id`) with its result, failure and next run."""
    condition, params = ("workflow_id = %s AND run_id = %s", [workflow_id, run_id]) if run_id else ("workflow_id = %s", [workflow_id])
    async with pool.connection() as conn:
        row = await (await conn.execute(
            f"SELECT {EXECUTION_COLUMNS}, result, failure, next_run_id FROM kadence_executions WHERE {condition} "
            # A reset run starts when its base did (its started event is copied): the run not followed by another goes first.
            "ORDER BY start_time DESC, next_run_id IS NULL DESC LIMIT 1", params,
        )).fetchone()
    if row is None:
        return None
    result, failure, next_run_id = row[EXECUTION_COLUMN_COUNT:]
    return ExecutionRow(
        WorkflowExecution.from_row(row[:EXECUTION_COLUMN_COUNT]),
        codec("Payload").decode(result) if result else None,
        codec("Failure").decode(failure) if failure else None,
        next_run_id,
    )


async def runs_of(pool: AsyncConnectionPool, workflow_id: str, limit: int = 50) -> list[tuple[str, str, datetime]]:
    """The workflow id's latest runs (run id, status, start time), newest first."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT run_id, status, start_time FROM kadence_executions WHERE workflow_id = %s "
            "ORDER BY start_time DESC, next_run_id IS NULL DESC LIMIT %s",
            (workflow_id, limit),
        )).fetchall()
    return [tuple(row) for row in rows]


@dataclass(frozen=True)
class ScheduleRow:
    """A schedule as kadence_schedules holds it: its last event's definition and info."""

    schedule_id: str
    status: str  # Running, or Deleted
    schedule: dict[str, Any]  # the Schedule record
    info: dict[str, Any]  # the ScheduleInfo record


def _schedule_row(schedule_id: str, status: str, state: bytes) -> ScheduleRow:
    attrs = codec("HistoryEvent").decode(state)["attributes"][1]
    return ScheduleRow(schedule_id, status, attrs["schedule"], attrs["info"])


async def schedules_page(pool: AsyncConnectionPool, prefix: str, after: str | None,
                         limit: int) -> tuple[list[ScheduleRow], str | None, int]:
    """The schedules whose id starts with `prefix`, by id, from the one after `after` (a keyset: a
    page deep in the list costs what the first does); the next page's `after`, and how many match."""
    match = "status = 'Running' AND starts_with(schedule_id, %s)"
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            f"SELECT schedule_id, status, state FROM kadence_schedules WHERE {match} AND schedule_id > %s ORDER BY schedule_id LIMIT %s",
            (prefix, after or "", limit + 1),
        )).fetchall()
        counted = await (await conn.execute(f"SELECT count(*) FROM kadence_schedules WHERE {match}", (prefix,))).fetchone()
    shown = [_schedule_row(*row) for row in rows[:limit]]
    return shown, shown[-1].schedule_id if len(rows) > limit else None, counted[0] if counted else 0


async def schedule_row(pool: AsyncConnectionPool, schedule_id: str) -> ScheduleRow | None:
    async with pool.connection() as conn:
        row = await (await conn.execute(
            "SELECT schedule_id, status, state FROM kadence_schedules WHERE schedule_id = %s", (schedule_id,),
        )).fetchone()
    return _schedule_row(*row) if row else None
