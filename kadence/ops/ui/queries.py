"""What the UI reads from the read model: a page of executions by keyset (never OFFSET: the page
after a row starts at that row in the index), counts by status, and one run with its events."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from kadence.list_filter import ListFilterError, parse
from kadence.protocol.codec import codec
from kadence.visibility import WorkflowExecution

_COLUMNS = "workflow_id, run_id, workflow_type, task_queue, status, start_time, close_time, history_length, search_attributes"
# The sort key of each column a filter may ORDER BY, and its type. close_time is NULL while a run
# is open; 'infinity' puts open runs where Postgres puts NULLs (last ascending) and keeps row
# comparison total. A cursor holds the key as text, cast back when compared.
_SORT_KEYS = {"close_time": "coalesce(close_time, 'infinity'::timestamptz)"}
_KEY_TYPES = {"start_time": "timestamptz", "close_time": "timestamptz", "history_length": "bigint"}


@dataclass(frozen=True)
class Page:
    executions: list[WorkflowExecution]
    next_cursor: str | None  # None on the last page


@dataclass(frozen=True)
class ExecutionRow:
    execution: WorkflowExecution
    result: dict[str, Any] | None  # the Payload record
    failure: dict[str, Any] | None  # the Failure record
    next_run_id: str | None


async def list_page(pool: AsyncConnectionPool, query: str, cursor: str | None, size: int) -> Page:
    """One page of the executions matching the list filter, in its ORDER BY (newest first by
    default), after `cursor` (the `next_cursor` of the page before). Ties are broken by workflow id
    and run id in the same direction, so (key, workflow_id, run_id) orders every row and the next
    page is `WHERE (key, workflow_id, run_id) < the last row's`: an index range, however deep."""
    sql = parse(query)
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
            f"SELECT {_COLUMNS}, ({key})::text AS sort_key FROM kadence_executions WHERE {where} "
            f"ORDER BY {key} {direction}, workflow_id {direction}, run_id {direction} LIMIT %s",
            [*params, size + 1],
        )).fetchall()
    executions = [WorkflowExecution.from_row(row[:-1]) for row in rows[:size]]
    next_cursor = None
    if len(rows) > size:
        last = rows[size - 1]
        next_cursor = _encode_cursor([last[-1], last[0], last[1]])
    return Page(executions, next_cursor)


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
            f"SELECT {_COLUMNS}, result, failure, next_run_id FROM kadence_executions WHERE {condition} "
            "ORDER BY start_time DESC LIMIT 1", params,
        )).fetchone()
    if row is None:
        return None
    result, failure = row[9], row[10]
    return ExecutionRow(
        WorkflowExecution.from_row(row[:9]),
        codec("Payload").decode(result) if result else None,
        codec("Failure").decode(failure) if failure else None,
        row[11],
    )


async def runs_of(pool: AsyncConnectionPool, workflow_id: str, limit: int = 50) -> list[tuple[str, str, datetime]]:
    """The workflow id's latest runs (run id, status, start time), newest first."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT run_id, status, start_time FROM kadence_executions WHERE workflow_id = %s ORDER BY start_time DESC LIMIT %s",
            (workflow_id, limit),
        )).fetchall()
    return [tuple(row) for row in rows]


def _encode_cursor(values: list[str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode()


def _decode_cursor(cursor: str) -> list[str]:
    try:
        values = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if not (isinstance(values, list) and len(values) == 3 and all(isinstance(v, str) for v in values)):
            raise ValueError(values)
    except ValueError as exc:
        raise ListFilterError(f"the page cursor {cursor[:40]!r} is not one this UI made: go back to the first page") from exc
    return values
