"""Signals and updates a run receives (services/history/machine/messages.py)."""

from __future__ import annotations

import pytest

from services.history.machine.dispatch import decide
from services.history.machine.transition import Rejected
from tests.machine_steps import (
    NOW,
    command,
    decode_outbound,
    started_workflow,
)


def test_signals_are_buffered_during_a_workflow_task_and_rejected_once_closed() -> None:
    state, run_id = started_workflow()
    ex = state.executions["order-1"]
    signal = {"run_id": "", "signal_name": "approve", "input": [], "request_id": ""}
    buffered = command(state, "SignalWorkflowExecution", signal, 1)  # the first workflow task is in flight
    assert buffered["events"] == [] and [e["attributes"][0] for e in buffered["buffered"]] == ["WorkflowExecutionSignaled"]
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 2)
    closing = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("CompleteWorkflowExecution", {"result": None}),
    ]}, 3)
    # The workflow never saw the signal, so it may not close yet: the task fails and a new one carries the signal.
    assert [e["attributes"][0] for e in closing["events"]] == ["WorkflowTaskFailed", "WorkflowExecutionSignaled", "WorkflowTaskScheduled"]
    assert closing["events"][0]["attributes"][1]["cause"] == "UNHANDLED_COMMAND"
    wt = ex.workflow_task.scheduled_event_id
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": wt}, 4)
    command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": wt, "commands": [
        ("CompleteWorkflowExecution", {"result": None}),
    ]}, 5)
    assert ex.status == "Completed"
    with pytest.raises(Rejected, match="Completed"):
        decide(ex, "SignalWorkflowExecution", signal, "client", NOW)


def test_a_signal_sent_again_with_its_request_id_applies_once_and_answers_its_sender() -> None:
    state, run_id = started_workflow()
    sender = {"workflow_id": "sender", "run_id": "s1", "initiated_event_id": 7}
    signal = {"run_id": "", "signal_name": "approve", "input": [], "request_id": "s1/7", "initiated_by": sender}
    first = command(state, "SignalWorkflowExecution", signal, 1)
    assert [e["attributes"][0] for e in first["buffered"]] == ["WorkflowExecutionSignaled"]  # the first task is pending
    (answer,) = [decode_outbound(e) for kind, e in first["effects"] if kind == "OutboundCommand"]
    assert answer == ("sender", "RecordExternalRequestOutcome", {"run_id": "s1", "initiated_event_id": 7, "cause": ""})
    again = command(state, "SignalWorkflowExecution", signal, 2)
    assert again["events"] == again["buffered"] == again["effects"] == []
