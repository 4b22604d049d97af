"""Child workflows and the requests a run sends other workflows (services/history/machine/child.py), and their answers."""

from __future__ import annotations

from typing import Any

import pytest

from services.history.machine import child
from services.history.machine.dispatch import decide
from services.history.machine.effects import rejection_answer
from services.history.machine.lifecycle import decide_start
from services.history.machine.transition import Rejected
from services.history.partition import PartitionState
from services.history.step import commit
from tests.machine_steps import (
    CHILD,
    NOW,
    command,
    decode_outbound,
    start_child,
    started_workflow,
)


def test_a_child_start_relayed_twice_starts_one_run_even_after_it_closed() -> None:
    parent, run_id = started_workflow()
    child_id, start = start_child(parent, run_id)
    children = PartitionState(1)
    first = commit(children, decide_start(None, child_id, start, "kadence-history", NOW, 1, 40), 1, 40).batch
    (answer,) = [decode_outbound(e) for kind, e in first["effects"] if kind == "OutboundCommand"]
    assert answer[:2] == ("order-1", "RecordChildExecutionStarted")
    child = children.executions[child_id]
    commit(children, decide(child, "TerminateWorkflowExecution", {"run_id": "", "reason": "", "details": []}, "op", NOW), 1, 41)
    again = decide_start(child, child_id, start, "kadence-history", NOW, 1, 42)
    assert again.events == [] and again.execution.run_id == first["run_id"]


def test_a_child_close_implies_its_start_and_a_second_report_is_stale() -> None:
    parent, run_id = started_workflow()
    start_child(parent, run_id)
    closed = {"run_id": run_id, "initiated_event_id": 5, "child_run_id": "c1", "status": "Completed",
              "result": None, "failure": None, "details": [], "retry_state": "RETRY_POLICY_NOT_SET"}
    batch = command(parent, "RecordChildExecutionClosed", closed, 3)
    assert [e["attributes"][0] for e in batch["events"]] == [
        "ChildWorkflowExecutionStarted", "ChildWorkflowExecutionCompleted", "WorkflowTaskScheduled",
    ]
    with pytest.raises(Rejected, match="no pending child"):
        decide(parent.executions["order-1"], "RecordChildExecutionClosed", closed, "kadence-history", NOW)


def test_a_parent_closing_first_applies_its_parent_close_policy() -> None:
    for policy, expected in (("TERMINATE", ["TerminateWorkflowExecution"]), ("REQUEST_CANCEL", ["RequestCancelWorkflowExecution"]),
                             ("ABANDON", [])):
        parent, run_id = started_workflow()
        start_child(parent, run_id, parent_close_policy=policy)
        batch = command(parent, "TerminateWorkflowExecution", {"run_id": "", "reason": "done", "details": []}, 3)
        sent = [decode_outbound(e) for kind, e in batch["effects"] if kind == "OutboundCommand"]
        assert [(target, kind) for target, kind, _ in sent] == [(CHILD["workflow_id"], kind) for kind in expected]


def test_a_rejected_command_from_a_workflow_is_answered_with_the_cause() -> None:
    sender = {"workflow_id": "sender", "run_id": "s1", "initiated_event_id": 7}
    effect = rejection_answer("order-2", {"initiated_by": sender}, Rejected("workflow execution not found", "WORKFLOW_NOT_FOUND"))
    assert effect is not None
    answer = {"run_id": "s1", "initiated_event_id": 7, "cause": "WORKFLOW_NOT_FOUND"}
    assert decode_outbound(effect[1])[1:] == ("RecordExternalRequestOutcome", answer)
    assert rejection_answer("order-2", {"initiated_by": None}, Rejected("no")) is None


@pytest.mark.parametrize(("limit", "commands", "cause"), [
    ("MAX_PENDING_CHILDREN", [("StartChildWorkflowExecution", {**CHILD, "workflow_id": f"child-{i}"}) for i in range(2)],
     "PENDING_CHILD_WORKFLOWS_LIMIT_EXCEEDED"),
    ("MAX_PENDING_EXTERNAL_REQUESTS", [("SignalExternalWorkflowExecution", {
        "workflow_id": "other", "run_id": "", "signal_name": "s", "input": [], "child_workflow_only": False}) for _ in range(2)],
     "PENDING_SIGNALS_LIMIT_EXCEEDED"),
    ("MAX_PENDING_CHILDREN", [("StartChildWorkflowExecution", {**CHILD, "workflow_type": ""})], "BAD_START_CHILD_EXECUTION_ATTRIBUTES"),
])
def test_child_and_external_request_limits_fail_the_workflow_task(
    monkeypatch: pytest.MonkeyPatch, limit: str, commands: list[Any], cause: str,
) -> None:
    monkeypatch.setattr(child, limit, 1)
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    batch = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": commands}, 2)
    kind, attrs = batch["events"][0]["attributes"]
    assert (kind, attrs["cause"]) == ("WorkflowTaskFailed", cause)
    assert [k for k, _ in batch["effects"] if k == "OutboundCommand"] == []
