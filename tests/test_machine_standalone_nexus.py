"""The history machine's standalone Nexus operations, with no broker: a run keyed
`kadence-nexus:<operation id>` whose start schedules its one operation, and whose operation's end
closes it (docs/decisions/0008-nexus.md; standalone activities are built alike, decision 0007)."""

from __future__ import annotations

from typing import Any

import pytest

from kadence.protocol.nexus_token import workflow_run_token
from services.history.machine.dispatch import decide
from services.history.machine.lifecycle import decide_start
from services.history.machine.transition import Rejected
from services.history.partition import PartitionState
from tests.machine_steps import NOW, START, apply, decode_outbound

KEY = "kadence-nexus:greet-1"
PAYLOAD = {"metadata": {"encoding": b"json/plain"}, "data": b'"hi"'}
OPERATION = {"endpoint": "greeter", "service": "Greeter", "schedule_to_close_timeout_ms": 30_000, "nexus_header": {},
             "task_queue": "handlers"}
NEXUS_START = {**START, "workflow_type": "greet", "task_queue": "greeter", "input": [PAYLOAD], "nexus_operation": OPERATION}
FAILURE = {"message": "no such name", "type": "", "source": "", "stack_trace": "", "non_retryable": True, "timeout_type": None,
           "details": [], "activity_failure_info": None, "cause": None}


def started(**operation: Any) -> tuple[PartitionState, dict[str, Any]]:
    state = PartitionState(0)
    start = {**NEXUS_START, "nexus_operation": {**OPERATION, **operation}}
    return state, apply(state, decide_start(None, KEY, start, "client", NOW, 0, 0), 0)


def send(state: PartitionState, kind: str, body: dict[str, Any], offset: int, at_ms: int = NOW) -> dict[str, Any]:
    return apply(state, decide(state.executions[KEY], kind, body, "worker", at_ms), offset)


def kinds(batch: dict[str, Any]) -> list[str]:
    return [event["attributes"][0] for event in batch["events"]]


def last(batch: dict[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = batch["events"][-1]["attributes"][1]
    return attrs


def test_the_start_schedules_the_operation_through_its_endpoint_and_no_workflow_task() -> None:
    state, batch = started()
    assert kinds(batch) == ["WorkflowExecutionStarted", "NexusOperationScheduled"]
    scheduled = last(batch)
    assert (scheduled["endpoint"], scheduled["service"], scheduled["operation"], scheduled["input"]) == ("greeter", "Greeter", "greet",
                                                                                                       PAYLOAD)
    assert scheduled["task_queue"] == "handlers" and scheduled["request_id"] == f"nexus/{KEY}/{batch['run_id']}/2"
    (task,) = [effect for kind, effect in batch["effects"] if kind == "NexusTask"]
    assert (task["task_queue"], task["scheduled_event_id"], task["attempt"]) == ("handlers", 2, 1)
    assert not [effect for kind, effect in batch["effects"] if kind == "WorkflowTask"]
    assert {effect["kind"] for kind, effect in batch["effects"] if kind == "Timer"} == {"NEXUS_ATTEMPT", "NEXUS_SCHEDULE_TO_CLOSE"}


def test_an_endpoint_not_registered_refuses_the_start_with_the_fix() -> None:
    with pytest.raises(Rejected, match="kadence nexus endpoint create --name greeter"):
        started(task_queue="")


def test_a_sync_answer_closes_the_run_with_its_result() -> None:
    state, batch = started()
    answered = send(state, "RespondNexusTaskCompleted", {"run_id": batch["run_id"], "scheduled_event_id": 2, "attempt": 1,
                                                         "result": PAYLOAD}, 1)
    assert kinds(answered) == ["NexusOperationCompleted", "WorkflowExecutionCompleted"]
    assert last(answered)["result"] == PAYLOAD
    assert {"NEXUS_ATTEMPT", "NEXUS_SCHEDULE_TO_CLOSE"} <= {
        effect["timer_id"].split("/")[1] for kind, effect in answered["effects"] if kind == "DropTimer"}


def test_a_started_operation_goes_on_until_its_handler_workflow_closes() -> None:
    state, batch = started()
    run_id, token = batch["run_id"], workflow_run_token("greeting-1")
    answered = send(state, "RespondNexusTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "attempt": 1,
                                                         "operation_token": token}, 1)
    assert kinds(answered) == ["NexusOperationStarted"]
    closed = send(state, "RecordNexusOperationClosed", {"run_id": run_id, "scheduled_event_id": 2, "operation_token": token,
                                                        "status": "Failed", "failure": FAILURE}, 2)
    assert kinds(closed) == ["NexusOperationFailed", "WorkflowExecutionFailed"]
    assert last(closed)["failure"]["message"] == "no such name"


def test_a_cancel_request_cancels_an_operation_not_started_at_once() -> None:
    state, batch = started()
    canceled = send(state, "RequestCancelWorkflowExecution", {"run_id": "", "reason": "not needed", "request_id": ""}, 1)
    assert kinds(canceled) == ["WorkflowExecutionCancelRequested", "NexusOperationCancelRequested", "NexusOperationCanceled",
                               "WorkflowExecutionCanceled"]


def test_a_cancel_request_asks_a_started_operations_handler_workflow_to_cancel() -> None:
    state, batch = started()
    token = workflow_run_token("greeting-1")
    send(state, "RespondNexusTaskCompleted", {"run_id": batch["run_id"], "scheduled_event_id": 2, "attempt": 1,
                                              "operation_token": token}, 1)
    asked = send(state, "RequestCancelWorkflowExecution", {"run_id": "", "reason": "not needed", "request_id": ""}, 2)
    assert kinds(asked) == ["WorkflowExecutionCancelRequested", "NexusOperationCancelRequested"]
    (cancel,) = [decode_outbound(effect) for kind, effect in asked["effects"] if kind == "OutboundCommand"]
    assert cancel[:2] == ("greeting-1", "RequestCancelWorkflowExecution")


def test_the_schedule_to_close_timeout_closes_the_run_timed_out() -> None:
    state, batch = started()
    timer = {"run_id": batch["run_id"], "timer_id": f"{batch['run_id']}/NEXUS_SCHEDULE_TO_CLOSE/2/1", "kind": "NEXUS_SCHEDULE_TO_CLOSE",
             "scheduled_event_id": 2, "attempt": 1}
    timed_out = send(state, "TimeoutFired", timer, 1, NOW + 30_000)
    assert kinds(timed_out) == ["NexusOperationTimedOut", "WorkflowExecutionTimedOut"]
    assert last(timed_out)["retry_state"] == "TIMEOUT" and last(timed_out)["failure"]["timeout_type"] == "SCHEDULE_TO_CLOSE"


def test_what_does_not_fit_a_standalone_operation_is_refused_with_the_reason() -> None:
    state, batch = started()
    with pytest.raises(Rejected, match="does not apply to a standalone Nexus operation"):
        send(state, "SignalWorkflowExecution", {"run_id": "", "signal_name": "poke", "input": [], "request_id": ""}, 1)
    with pytest.raises(Rejected, match="reserved for standalone Nexus operations"):
        decide_start(None, "kadence-nexus:other", START, "client", NOW, 0, 1)
    with pytest.raises(Rejected, match="starts under the key kadence-nexus:<id>"):
        decide_start(None, "order-1", NEXUS_START, "client", NOW, 0, 1)
    with pytest.raises(Rejected, match="task_queue names its endpoint"):
        decide_start(None, "kadence-nexus:other", {**NEXUS_START, "task_queue": "handlers"}, "client", NOW, 0, 1)
