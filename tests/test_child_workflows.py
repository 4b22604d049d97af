"""Workflows acting on other workflows: children, parent close policies, external signals and
cancel requests, and markers (patches), through the real broker, Postgres and services."""

from __future__ import annotations

import uuid

import pytest

from kadence import workflow
from kadence.client import Client
from kadence.common import ChildWorkflowCancellationType
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import CancelledError, ChildWorkflowError, TerminatedError, WorkflowFailureError
from kadence.ops.audit import AuditReport
from kadence.worker import Worker
from tests.conftest import audit_of, wait_for_event
from tests.workflows import (
    ALL_ACTIVITIES,
    ALL_WORKFLOWS,
    ApprovalWorkflow,
    AwaitChildWorkflow,
    CancelChildWorkflow,
    CancellableWorkflow,
    ExternalRequestsWorkflow,
    FamilyWorkflow,
    LeavingParentWorkflow,
    PatchedWorkflow,
)


def audited(stack: LocalStack, *workflow_ids: str) -> AuditReport:
    """The audit of the partitions these workflows' runs live on, which must find nothing wrong;
    the session stack's whole log is audited once more at its end (conftest's stack fixture)."""
    report = audit_of(stack, *workflow_ids)
    assert report.violations == []
    return report


def runs_of(report: AuditReport, workflow_id: str) -> list[list[dict]]:
    return [run.events for (wid, _), run in report.runs.items() if wid == workflow_id]


async def test_children_complete_continue_fail_take_signals_and_time_out(stack: LocalStack, client: Client, task_queue: str) -> None:
    prefix = f"family-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(FamilyWorkflow.run, prefix, id=prefix, task_queue=task_queue)
        assert await handle.result() == [
            "hello", "liftoff", "ActivityError: Declined: payment declined for card", "WORKFLOW_ALREADY_EXISTS",
            "order approved by the parent with notes []", "TimeoutError",
        ]

    report = audited(stack, prefix, f"{prefix}-countdown", f"{prefix}-echo")
    family = [kind for kind in report.event_types(prefix, handle.result_run_id) if "Child" in kind or "External" in kind]
    child = ["StartChildWorkflowExecutionInitiated", "ChildWorkflowExecutionStarted"]
    assert family == [
        *child, "ChildWorkflowExecutionCompleted",
        *child, "ChildWorkflowExecutionCompleted",  # after two continue-as-new runs
        *child, "ChildWorkflowExecutionFailed",
        *child,
        "StartChildWorkflowExecutionInitiated", "StartChildWorkflowExecutionFailed",
        "SignalExternalWorkflowExecutionInitiated", "ExternalWorkflowExecutionSignaled", "ChildWorkflowExecutionCompleted",
        *child, "ChildWorkflowExecutionTimedOut",
    ]
    # Each child run knows its parent; the countdown's three runs all do.
    countdown = runs_of(report, f"{prefix}-countdown")
    assert len(countdown) == 3
    for events in [*countdown, *runs_of(report, f"{prefix}-echo")]:
        kind, started = events[0]["attributes"]
        assert (kind, started["parent_workflow_id"], started["parent_run_id"]) == ("WorkflowExecutionStarted", prefix, handle.result_run_id)


async def test_the_parent_close_policy_terminates_abandons_or_cancels_a_running_child(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    base = f"leaving-{uuid.uuid4()}"
    children = {"TERMINATE": ApprovalWorkflow, "ABANDON": ApprovalWorkflow, "REQUEST_CANCEL": CancellableWorkflow}
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        for policy, child_workflow in children.items():
            parent = await client.start_workflow(
                LeavingParentWorkflow.run, args=[child_workflow.__name__, f"{base}-{policy}", policy],
                id=f"{base}-parent-{policy}", task_queue=task_queue,
            )
            assert await parent.result() == "left"

        with pytest.raises(WorkflowFailureError) as terminated:
            await client.get_workflow_handle(f"{base}-TERMINATE").result()
        assert isinstance(terminated.value.cause, TerminatedError) and "parent close policy TERMINATE" in terminated.value.cause.message
        with pytest.raises(WorkflowFailureError) as cancelled:
            await client.get_workflow_handle(f"{base}-REQUEST_CANCEL").result()
        assert isinstance(cancelled.value.cause, CancelledError)
        abandoned = client.get_workflow_handle(f"{base}-ABANDON")
        await abandoned.signal(ApprovalWorkflow.approve, "someone")
        assert await abandoned.result() == "left behind approved by someone with notes []"
    audited(stack, *(f"{base}-{who}" for policy in children for who in (policy, f"parent-{policy}")))


async def test_a_parent_hears_its_child_was_terminated(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"await-child-{uuid.uuid4()}"
    child_id = f"{workflow_id}-child"

    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        parent = await client.start_workflow(AwaitChildWorkflow.run, child_id, id=workflow_id, task_queue=task_queue)
        await wait_for_event(stack, child_id, "WorkflowExecutionStarted", timeout=30)
        await client.get_workflow_handle(child_id).terminate(reason="operator says no")
        assert await parent.result() == "TerminatedError: Terminated"  # temporalio core's message
    kinds = audited(stack, workflow_id, child_id).event_types(workflow_id, parent.result_run_id)
    assert kinds[-5:] == [
        "ChildWorkflowExecutionTerminated", "WorkflowTaskScheduled", "WorkflowTaskStarted", "WorkflowTaskCompleted",
        "WorkflowExecutionCompleted",
    ]


async def test_a_parent_cancels_its_child_and_hears_it_ended_canceled(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"cancel-child-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        handle = await client.start_workflow(CancelChildWorkflow.run, f"{workflow_id}-child", id=workflow_id, task_queue=task_queue)
        assert await handle.result() == "CancelledError"

    report = audited(stack, workflow_id, f"{workflow_id}-child")
    kinds = report.event_types(workflow_id, handle.result_run_id)
    assert "RequestCancelExternalWorkflowExecutionInitiated" in kinds and "ChildWorkflowExecutionCanceled" in kinds
    (child,) = runs_of(report, f"{workflow_id}-child")
    requested = [attrs for kind, attrs in (e["attributes"] for e in child) if kind == "WorkflowExecutionCancelRequested"]
    assert requested[0]["external_workflow_id"] == workflow_id
    assert child[-1]["attributes"][0] == "WorkflowExecutionCanceled"


async def test_a_workflow_signals_and_cancels_other_workflows(stack: LocalStack, client: Client, task_queue: str) -> None:
    base = f"external-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        approval = await client.start_workflow(ApprovalWorkflow.run, "order-7", id=f"{base}-approval", task_queue=task_queue)
        cancellable = await client.start_workflow(CancellableWorkflow.run, "order-8", id=f"{base}-cancellable", task_queue=task_queue)
        sender = await client.start_workflow(
            ExternalRequestsWorkflow.run, args=[approval.id, cancellable.id], id=base, task_queue=task_queue,
        )
        assert await sender.result() == ["signalled", "cancel requested", "EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND"]
        assert await approval.result() == "order-7 approved by a neighbour with notes []"
        with pytest.raises(WorkflowFailureError) as cancelled:
            await cancellable.result()
        assert isinstance(cancelled.value.cause, CancelledError)

    report = audited(stack, base, approval.id, cancellable.id)
    approval_events = [e["attributes"] for e in report.history(approval.id, approval.result_run_id)]
    signaled = [attrs for kind, attrs in approval_events if kind == "WorkflowExecutionSignaled"]
    assert [(s["external_workflow_id"], s["external_run_id"]) for s in signaled] == [(base, sender.result_run_id)]
    assert [kind for kind in report.event_types(base, sender.result_run_id) if "External" in kind] == [
        "SignalExternalWorkflowExecutionInitiated", "ExternalWorkflowExecutionSignaled",
        "RequestCancelExternalWorkflowExecutionInitiated", "ExternalWorkflowExecutionCancelRequested",
        "SignalExternalWorkflowExecutionInitiated", "SignalExternalWorkflowExecutionFailed",
    ]


async def test_a_patch_is_recorded_as_a_marker_and_replays_the_same_way(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"patched-{uuid.uuid4()}"
    # No cache: every workflow task replays the history, markers included.
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES, max_cached_workflows=0):
        handle = await client.start_workflow(PatchedWorkflow.run, id=workflow_id, task_queue=task_queue)
        assert await handle.result() == "v2, then v2"

    kinds = audited(stack, workflow_id).event_types(workflow_id, handle.result_run_id)
    assert kinds.count("MarkerRecorded") == 1
    assert "WorkflowTaskFailed" not in kinds


@workflow.defn
class CancelChildByTypeWorkflow:
    """Cancels its child with the given cancellation type and reports what its await raised; the
    child outlives it (ABANDON parent close policy), so a cancellation not waited for runs its course."""

    @workflow.run
    async def run(self, child_id: str, cancellation_type: int) -> list[str]:
        child = await workflow.start_child_workflow(
            CancellableWorkflow.run, "child", id=child_id, cancellation_type=workflow.ChildWorkflowCancellationType(cancellation_type),
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
        )
        await workflow.sleep(0.05)
        child.cancel()
        try:
            await child
        except ChildWorkflowError as err:
            return [type(err.cause).__name__]
        return ["not cancelled"]


@pytest.mark.parametrize("cancellation_type", [
    ChildWorkflowCancellationType.ABANDON, ChildWorkflowCancellationType.TRY_CANCEL,
    ChildWorkflowCancellationType.WAIT_CANCELLATION_REQUESTED,
])
async def test_a_childs_cancellation_type_says_what_its_parent_waits_for(
    stack: LocalStack, client: Client, task_queue: str, cancellation_type: ChildWorkflowCancellationType,
) -> None:
    """As temporalio's: each raises ChildWorkflowError caused by CancelledError at once, after asking
    the child (TRY_CANCEL) or once the child's history recorded the request (WAIT_CANCELLATION_REQUESTED),
    or without asking (ABANDON: the child runs on). WAIT_CANCELLATION_COMPLETED, the default, is
    test_a_parent_cancels_its_child_and_hears_it_ended_canceled."""
    workflow_id = f"cancel-child-{cancellation_type.name.lower()}-{uuid.uuid4()}"
    child_id = f"{workflow_id}-child"
    async with Worker(client, task_queue=task_queue, workflows=[*ALL_WORKFLOWS, CancelChildByTypeWorkflow], activities=ALL_ACTIVITIES):
        parent = await client.start_workflow(CancelChildByTypeWorkflow.run, args=[child_id, cancellation_type.value],
                                             id=workflow_id, task_queue=task_queue)
        assert await parent.result() == ["CancelledError"]
        child = client.get_workflow_handle(child_id)
        if cancellation_type is ChildWorkflowCancellationType.ABANDON:
            assert (await child.describe()).status.name == "RUNNING"
            await child.terminate(reason="the test is over")
        else:
            with pytest.raises(WorkflowFailureError) as ended:
                await child.result()
            assert isinstance(ended.value.cause, CancelledError)
    kinds = audited(stack, workflow_id, child_id).event_types(workflow_id, parent.result_run_id)
    asked = "RequestCancelExternalWorkflowExecutionInitiated" in kinds
    assert asked == (cancellation_type is not ChildWorkflowCancellationType.ABANDON)
    if cancellation_type is ChildWorkflowCancellationType.WAIT_CANCELLATION_REQUESTED:
        assert kinds.index("ExternalWorkflowExecutionCancelRequested") < kinds.index("WorkflowExecutionCompleted")
