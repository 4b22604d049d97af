"""The failure chains temporalio raises at the client for a workflow that fails because its child
did: the child's activity failed (non-retryable ApplicationError), timed out (start-to-close),
was cancelled, or the child was terminated. Shared by the recorder (run with temporalio against
Temporal's dev server) and tests/test_failure_chains.py (run with kadence against its stack):
the workflows below use only calls both SDKs name alike, so `sdk` is either package: kadence
where it is installed, else temporalio.

`describe_chain` walks an error's cause chain into JSON-able dicts, field by field; values that
differ per run (run ids, worker identities) become "<set>" or "" so two runs compare.
"""

from __future__ import annotations

import asyncio
import enum
from datetime import timedelta
from typing import Any

SCENARIOS = ("activity_failed", "activity_timed_out", "activity_cancelled", "child_terminated")

# Per error class: the attributes temporalio's exceptions expose, in its order.
FIELDS = {
    "ApplicationError": ("type", "non_retryable", "details", "next_retry_delay", "category"),
    "TimeoutError": ("type", "last_heartbeat_details"),
    "CancelledError": ("details",),
    "TerminatedError": ("details",),
    "ServerError": ("non_retryable",),
    "ActivityError": ("scheduled_event_id", "started_event_id", "identity", "activity_type", "activity_id", "retry_state"),
    "ChildWorkflowError": ("namespace", "workflow_id", "run_id", "workflow_type", "initiated_event_id", "started_event_id",
                           "retry_state"),
}
VARYING = {"run_id", "identity"}  # set, but not the same from run to run


def _value(name: str, value: Any) -> Any:
    if name in VARYING:
        return "<set>" if value else ""
    if isinstance(value, enum.Enum):  # by name: temporalio's are IntEnums, Kadence's TimeoutType and RetryState str enums
        return value.name
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (list, tuple)):
        return list(value)
    return value


def describe_chain(error: BaseException | None) -> list[dict[str, Any]]:
    """The error and its causes, outermost first: class, message, the class's fields, and which
    failure info its recorded `failure` holds."""
    chain = []
    while error is not None:
        kind = type(error).__name__
        entry: dict[str, Any] = {"class": kind, "message": getattr(error, "message", str(error))}
        for name in FIELDS.get(kind, ()):
            entry[name] = _value(name, getattr(error, name))
        failure = getattr(error, "failure", None)
        entry["failure_info"] = failure.WhichOneof("failure_info") if failure is not None else None
        chain.append(entry)
        error = error.__cause__
    return chain


try:  # Kadence's tests import this module; the recorder runs it where only temporalio is installed
    import kadence as sdk
    import kadence.activity
    import kadence.client
    import kadence.common
    import kadence.exceptions
    import kadence.workflow  # noqa: F401 (sdk.workflow)
except ImportError:
    import temporalio as sdk  # type: ignore[no-redef]
    import temporalio.activity
    import temporalio.client
    import temporalio.common
    import temporalio.exceptions
    import temporalio.workflow  # noqa: F401 (sdk.workflow)

activity, workflow = sdk.activity, sdk.workflow


@activity.defn
async def failing_activity() -> str:
    raise sdk.exceptions.ApplicationError("card declined", "order-7", 12, type="PaymentDeclined", non_retryable=True)


@activity.defn
async def slow_activity() -> str:
    await asyncio.sleep(10)
    return "too late"


@activity.defn
async def heartbeating_activity() -> str:
    while True:
        activity.heartbeat("progress")
        await asyncio.sleep(0.2)


ACTIVITIES = [failing_activity, slow_activity, heartbeating_activity]


@workflow.defn
class ChildWorkflow:
    def __init__(self) -> None:
        self.never = False

    @workflow.run
    async def run(self, scenario: str) -> str:
        once = sdk.common.RetryPolicy(maximum_attempts=1)
        if scenario == "activity_failed":
            return await workflow.execute_activity(failing_activity, start_to_close_timeout=timedelta(seconds=10), activity_id="charge")
        if scenario == "activity_timed_out":
            return await workflow.execute_activity(
                slow_activity, start_to_close_timeout=timedelta(seconds=1), retry_policy=once, activity_id="charge")
        if scenario == "activity_cancelled":
            handle = workflow.start_activity(
                heartbeating_activity, start_to_close_timeout=timedelta(seconds=30), heartbeat_timeout=timedelta(seconds=2),
                retry_policy=once, activity_id="charge", cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED)
            await workflow.sleep(1)
            handle.cancel()
            return await handle
        await workflow.wait_condition(lambda: self.never)  # child_terminated: until the client terminates it
        return "never"


@workflow.defn
class ChainWorkflow:
    @workflow.run
    async def run(self, scenario: str) -> str:
        return await workflow.execute_child_workflow(ChildWorkflow.run, scenario, id=f"{workflow.info().workflow_id}-child")


async def run_scenario(client: Any, task_queue: str, scenario: str, workflow_id: str) -> list[dict[str, Any]]:
    """Run one scenario's chain (a worker for `task_queue` must run ChainWorkflow, ChildWorkflow and
    the activities) and describe what the client raised."""
    handle = await client.start_workflow(ChainWorkflow.run, scenario, id=workflow_id, task_queue=task_queue)
    if scenario == "child_terminated":
        child = client.get_workflow_handle(f"{workflow_id}-child")
        for _ in range(100):  # until the child runs
            try:
                await child.describe()
                break
            except Exception:
                await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        await child.terminate(reason="stopped by the operator")
    try:
        await handle.result()
    except sdk.client.WorkflowFailureError as err:
        return describe_chain(err.cause)
    raise AssertionError(f"{scenario}: the workflow completed")
