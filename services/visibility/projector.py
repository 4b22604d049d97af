"""The read model: one row per execution, the event archive, and a notification on close."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import psycopg

from kadence.protocol.codec import codec
from kadence.protocol.events import CLOSE_STATUS, failure_record
from kadence.protocol.projection import LogRecord
from kadence.protocol.read_model import CLOSED_CHANNEL, OUTCOME_CHANNEL, VISIBILITY_DDL



def _close_failure(kind: str, attrs: dict[str, Any]) -> dict[str, Any]:
    """Why a run closed without a result: its failure, or the cancellation or termination as one."""
    if kind == "WorkflowExecutionCanceled":
        return failure_record("Workflow cancelled", "CancelledError", "kadence-visibility", attrs["details"])
    if kind == "WorkflowExecutionTimedOut":
        return {**failure_record("Workflow timed out", "TimeoutError", "kadence-visibility"), "timeout_type": "START_TO_CLOSE"}
    if kind == "WorkflowExecutionTerminated":
        return failure_record(attrs["reason"] or "Workflow terminated", "TerminatedError", "kadence-visibility", attrs["details"])
    return attrs["failure"]


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


class VisibilityProjector:
    name = "visibility"
    ddl = VISIBILITY_DDL

    def __init__(self) -> None:
        self.events = codec("HistoryEvent")
        self.payloads = codec("Payload")
        self.failures = codec("Failure")

    async def apply(self, conn: psycopg.AsyncConnection, records: list[LogRecord]) -> None:
        started: list[tuple[Any, ...]] = []
        lengths: dict[tuple[str, str], int] = {}
        closed: list[tuple[Any, ...]] = []
        archive: list[tuple[Any, ...]] = []
        outcomes: list[tuple[Any, ...]] = []
        for record in records:
            batch = record.batch
            key = (batch["workflow_id"], batch["run_id"])
            outcomes += [(request_id, *key, True, None, None) for request_id in batch["request_ids"]]
            if batch["rejection"] is not None:
                rejection = batch["rejection"]
                outcomes.append((rejection["request_id"], *key, False, rejection["cause"], rejection["reason"]))
            for event in batch["events"]:
                kind, attrs = event["attributes"]
                archive.append((*key, event["event_id"], kind, _time(event["event_time_ms"]), self.events.encode(event)))
                lengths[key] = event["event_id"]
                if kind == "WorkflowExecutionStarted":
                    started.append((*key, attrs["workflow_type"], attrs["task_queue"], _time(event["event_time_ms"])))
                elif kind in CLOSE_STATUS:
                    result = self.payloads.encode(attrs["result"]) if attrs.get("result") else None
                    failure = self.failures.encode(_close_failure(kind, attrs)) if kind != "WorkflowExecutionCompleted" else None
                    closed.append((CLOSE_STATUS[kind], _time(event["event_time_ms"]), result, failure, *key))
        async with conn.cursor() as cur:
            if started:
                await cur.executemany(
                    "INSERT INTO kadence_executions (workflow_id, run_id, workflow_type, task_queue, status, start_time, history_length) "
                    "VALUES (%s, %s, %s, %s, 'Running', %s, 1) ON CONFLICT DO NOTHING",
                    started,
                )
            if archive:
                await cur.executemany(
                    "INSERT INTO kadence_events (workflow_id, run_id, event_id, event_type, event_time, event) "
                    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    archive,
                )
            if lengths:
                await cur.executemany(
                    "UPDATE kadence_executions SET history_length = GREATEST(history_length, %s) WHERE workflow_id = %s AND run_id = %s",
                    [(length, *key) for key, length in lengths.items()],
                )
            if outcomes:
                await cur.executemany(
                    "INSERT INTO kadence_command_outcomes (request_id, workflow_id, run_id, accepted, cause, reason) "
                    "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    outcomes,
                )
                await cur.executemany("SELECT pg_notify(%s, %s)", [(OUTCOME_CHANNEL, row[0]) for row in outcomes])
            if closed:
                await cur.executemany(
                    "UPDATE kadence_executions SET status = %s, close_time = %s, result = %s, failure = %s "
                    "WHERE workflow_id = %s AND run_id = %s",
                    closed,
                )
                await cur.executemany(
                    "SELECT pg_notify(%s, %s)",
                    [(CLOSED_CHANNEL, json.dumps({"workflow_id": row[4], "run_id": row[5]})) for row in closed],
                )

    def on_commit(self) -> None:
        pass

    def on_assign(self, partitions: set[int]) -> None:
        pass

    def on_revoke(self, partitions: set[int]) -> None:
        pass
