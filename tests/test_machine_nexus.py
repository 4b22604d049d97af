"""The history machine's Nexus operations (services/history/machine/nexus.py), with no broker: what
scheduling one records and dispatches, its attempts' answers and deadlines, the handler workflow's
close reported to the caller, cancellation and the schedule-to-close timeout
(docs/decisions/0008-nexus.md)."""

from __future__ import annotations

from typing import Any

import pytest

from kadence.protocol.nexus_token import token_workflow_id, workflow_run_token
from services.history.machine.dispatch import decide
from services.history.machine.lifecycle import decide_start
from services.history.machine.nexus import REQUEST_TIMEOUT_MS
from services.history.machine.transition import Rejected
from services.history.partition import PartitionState
from tests.machine_steps import NOW, START, apply, command, decode_outbound, started_workflow

PAYLOAD = {"metadata": {"encoding": b"json/plain"}, "data": b'"hi"'}
OPERATION = {"endpoint": "greeter", "service": "Greeter", "operation": "greet", "input": PAYLOAD, "task_queue": "handlers"}
FAILURE = {"message": "busy", "type": "", "source": "", "stack_trace": "", "non_retryable": False, "timeout_type": None,
           "details": [], "activity_failure_info": None, "cause": None}


def schedule(state: PartitionState, run_id: str, **operation: Any) -> dict[str, Any]:
    """Complete the first workflow task with ScheduleNexusOperation (its event: 5)."""
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    return command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("ScheduleNexusOperation", {**OPERATION, **operation}),
    ]}, 2)


def kinds(batch: dict[str, Any]) -> list[str]:
    return [event["attributes"][0] for event in batch["events"]]


def fire(state: PartitionState, run_id: str, kind: str, attempt: int, at_ms: int, offset: int) -> dict[str, Any]:
    timer = {"run_id": run_id, "timer_id": f"{run_id}/{kind}/5/{attempt}", "kind": kind, "scheduled_event_id": 5, "attempt": attempt}
    return apply(state, decide(state.executions["order-1"], "TimeoutFired", timer, "timer", at_ms), offset)


def test_scheduling_records_the_endpoints_queue_and_dispatches_the_first_attempt() -> None:
    state, run_id = started_workflow()
    batch = schedule(state, run_id, schedule_to_close_timeout_ms=60_000)
    (scheduled,) = [attrs for kind, attrs in (e["attributes"] for e in batch["events"]) if kind == "NexusOperationScheduled"]
    assert scheduled["task_queue"] == "handlers"
    assert scheduled["request_id"] == f"nexus/order-1/{run_id}/5"
    (task,) = [effect for kind, effect in batch["effects"] if kind == "NexusTask"]
    assert (task["task_queue"], task["attempt"], task["service"], task["operation"]) == ("handlers", 1, "Greeter", "greet")
    assert task["request_deadline_ms"] == NOW + REQUEST_TIMEOUT_MS
    timers = {effect["kind"] for kind, effect in batch["effects"] if kind == "Timer"}
    assert {"NEXUS_ATTEMPT", "NEXUS_SCHEDULE_TO_CLOSE"} <= timers


def test_an_endpoint_not_registered_fails_the_workflow_task() -> None:
    state, run_id = started_workflow()
    batch = schedule(state, run_id, task_queue="")
    (failed,) = [attrs for kind, attrs in (e["attributes"] for e in batch["events"]) if kind == "WorkflowTaskFailed"]
    assert failed["cause"] == "BAD_SCHEDULE_NEXUS_OPERATION_ATTRIBUTES"
    assert "kadence nexus endpoint create --name greeter" in failed["failure"]["message"]


def test_a_sync_answer_completes_the_operation_and_a_late_one_is_refused() -> None:
    state, run_id = started_workflow()
    schedule(state, run_id)
    answer = {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "result": PAYLOAD}
    assert kinds(command(state, "RespondNexusTaskCompleted", answer, 3)) == ["NexusOperationCompleted", "WorkflowTaskScheduled"]
    with pytest.raises(Rejected):
        decide(state.executions["order-1"], "RespondNexusTaskCompleted", answer, "worker", NOW)


def test_a_retryable_failure_and_a_missed_deadline_each_end_an_attempt() -> None:
    state, run_id = started_workflow()
    schedule(state, run_id)
    failed = command(state, "RespondNexusTaskFailed", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "failure": FAILURE,
                                                       "retryable": True}, 3)
    assert kinds(failed) == ["NexusOperationAttemptFailed"]
    retry = next(effect for kind, effect in failed["effects"] if kind == "Timer" and effect["kind"] == "NEXUS_RETRY")
    assert retry["attempt"] == 2
    dispatched = fire(state, run_id, "NEXUS_RETRY", 2, retry["fire_at_ms"], 4)
    assert [effect["attempt"] for kind, effect in dispatched["effects"] if kind == "NexusTask"] == [2]
    timed_out = fire(state, run_id, "NEXUS_ATTEMPT", 2, retry["fire_at_ms"] + REQUEST_TIMEOUT_MS, 5)
    assert kinds(timed_out) == ["NexusOperationAttemptFailed"]
    assert state.executions["order-1"].nexus_operations[5].attempt == 3
    with pytest.raises(Rejected, match="attempt=2"):  # the attempt that missed its deadline answers too late
        decide(state.executions["order-1"], "RespondNexusTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 2},
               "worker", NOW)


def test_a_non_retryable_failure_fails_the_operation() -> None:
    state, run_id = started_workflow()
    schedule(state, run_id)
    batch = command(state, "RespondNexusTaskFailed", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "failure": FAILURE}, 3)
    assert kinds(batch) == ["NexusOperationFailed", "WorkflowTaskScheduled"]


def test_the_handler_workflows_close_completes_the_operation_even_before_its_start_is_heard() -> None:
    state, run_id = started_workflow()
    schedule(state, run_id)
    token = workflow_run_token("greeting-1")
    closed = {"run_id": run_id, "scheduled_event_id": 5, "operation_token": token, "status": "Completed", "result": PAYLOAD}
    assert kinds(command(state, "RecordNexusOperationClosed", closed, 3)) == [
        "NexusOperationStarted", "NexusOperationCompleted", "WorkflowTaskScheduled",
    ]
    with pytest.raises(Rejected):  # the start's answer, later: the operation is over
        decide(state.executions["order-1"], "RespondNexusTaskCompleted",
               {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "operation_token": token}, "worker", NOW)


def test_a_handler_workflow_reports_its_close_to_the_caller() -> None:
    state = PartitionState(0)
    caller = {"workflow_id": "caller", "run_id": "r1", "scheduled_event_id": 5, "operation_token": workflow_run_token("order-1")}
    run_id = apply(state, decide_start(None, "order-1", {**START, "nexus_caller": caller}, "handler", NOW, 0, 0), 0)["run_id"]
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    batch = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("CompleteWorkflowExecution", {"result": PAYLOAD}),
    ]}, 2)
    (report,) = [decode_outbound(effect) for kind, effect in batch["effects"] if kind == "OutboundCommand"]
    target, kind, body = report
    assert (target, kind, body["status"], body["scheduled_event_id"]) == ("caller", "RecordNexusOperationClosed", "Completed", 5)
    assert body["result"] == PAYLOAD and token_workflow_id(body["operation_token"]) == "order-1"


def test_canceling_a_started_operation_asks_its_handler_workflow_to_cancel() -> None:
    state, run_id = started_workflow()
    schedule(state, run_id)
    token = workflow_run_token("greeting-1")
    command(state, "RespondNexusTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "operation_token": token}, 3)
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 7}, 4)
    batch = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 7, "commands": [
        ("RequestCancelNexusOperation", {"scheduled_event_id": 5}),
    ]}, 5)
    assert kinds(batch) == ["WorkflowTaskCompleted", "NexusOperationCancelRequested"]
    (cancel,) = [decode_outbound(effect) for kind, effect in batch["effects"] if kind == "OutboundCommand"]
    assert cancel[:2] == ("greeting-1", "RequestCancelWorkflowExecution")


def test_canceling_an_operation_not_started_cancels_it_at_once_and_wakes_the_workflow() -> None:
    state, run_id = started_workflow()
    schedule(state, run_id)
    command(state, "SignalWorkflowExecution", {"run_id": "", "signal_name": "cancel", "input": [], "request_id": ""}, 3)
    task = state.executions["order-1"].workflow_task
    assert task is not None
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": task.scheduled_event_id}, 4)
    batch = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": task.scheduled_event_id,
                                                           "commands": [("RequestCancelNexusOperation", {"scheduled_event_id": 5})]}, 5)
    assert kinds(batch) == ["WorkflowTaskCompleted", "NexusOperationCancelRequested", "NexusOperationCanceled", "WorkflowTaskScheduled"]
    assert not [effect for kind, effect in batch["effects"] if kind == "OutboundCommand"]


def test_the_schedule_to_close_timeout_times_the_operation_out() -> None:
    state, run_id = started_workflow()
    schedule(state, run_id, schedule_to_close_timeout_ms=30_000)
    batch = fire(state, run_id, "NEXUS_SCHEDULE_TO_CLOSE", 1, NOW + 30_000, 3)
    assert kinds(batch) == ["NexusOperationTimedOut", "WorkflowTaskScheduled"]
    assert 5 not in state.executions["order-1"].nexus_operations
