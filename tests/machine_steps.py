"""Helpers of the history state machine's tests: a partition, commands through the live step."""

from __future__ import annotations

from typing import Any

from kadence.protocol.codec import command_codec
from services.history.machine import limits
from services.history.machine.dispatch import decide
from services.history.machine.lifecycle import decide_start
from services.history.machine.transition import Transition
from services.history.partition import PartitionState
from services.history.step import commit

NOW = 1_000_000


START = {
    "workflow_type": "OrderWorkflow", "task_queue": "orders", "input": [], "request_id": "",
    "workflow_task_timeout_ms": 0, "id_reuse_policy": "ALLOW_DUPLICATE", "id_conflict_policy": "FAIL",
    "execution_timeout_ms": 0, "run_timeout_ms": 0, "search_attributes": {},
}


def apply(state: PartitionState, t: Transition, offset: int) -> dict[str, Any]:
    return commit(state, t, 0, offset).batch


def started_workflow() -> tuple[PartitionState, str]:
    state = PartitionState(0)
    batch = apply(state, decide_start(None, "order-1", START, "client", NOW, 0, 0), 0)
    return state, batch["run_id"]


def command(state: PartitionState, kind: str, body: dict[str, Any], offset: int) -> dict[str, Any]:
    return apply(state, decide(state.executions["order-1"], kind, body, "worker", NOW), offset)


ACTIVITY = {
    "activity_type": "charge", "task_queue": "", "input": [], "schedule_to_close_timeout_ms": 0,
    "schedule_to_start_timeout_ms": 0, "start_to_close_timeout_ms": 10_000, "heartbeat_timeout_ms": 0, "retry_policy": None,
}


def schedule_activities(state: PartitionState, run_id: str, count: int = 1, **timeouts: int) -> dict[str, Any]:
    """Complete the first workflow task with `count` ScheduleActivityTask commands (event ids 5, 6, ...)."""
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    return command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("ScheduleActivityTask", {**ACTIVITY, **timeouts, "activity_id": str(i)}) for i in range(count)
    ]}, 2)


def complete_first_workflow_task(state: PartitionState, run_id: str) -> None:
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("CompleteWorkflowExecution", {"result": None}),
    ]}, 2)


BIG = {"metadata": {"encoding": b"binary/plain"}, "data": b"x" * (2 * 1024 * 1024 + 1)}


def decode_outbound(effect: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(target workflow id, command kind, body) of an OutboundCommand effect."""
    command = command_codec().decode(effect["command"])
    kind, body = command["command"]
    return command["workflow_id"], kind, body


CHILD = {
    "workflow_id": "order-1-invoice", "workflow_type": "InvoiceWorkflow", "task_queue": "", "input": [], "execution_timeout_ms": 0,
    "run_timeout_ms": 0, "workflow_task_timeout_ms": 0, "id_reuse_policy": "ALLOW_DUPLICATE", "parent_close_policy": "TERMINATE",
    "search_attributes": {},
}


def start_child(state: PartitionState, run_id: str, **child: Any) -> tuple[str, dict[str, Any]]:
    """Complete the first workflow task with StartChildWorkflowExecution (initiated event 5); the relayed start."""
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    batch = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("StartChildWorkflowExecution", {**CHILD, **child}),
    ]}, 2)
    (effect,) = [e for kind, e in batch["effects"] if kind == "OutboundCommand"]
    target, kind, start = decode_outbound(effect)
    assert (target, kind, start["request_id"], start["initiated_by"]["initiated_event_id"]) == (
        CHILD["workflow_id"], "StartWorkflowExecution", f"{run_id}/5", 5,
    )
    return target, start


LARGE = {"metadata": {"encoding": b"binary/plain"}, "data": b"x" * (limits.MAX_RECORD_VALUE_BYTES // 6)}
