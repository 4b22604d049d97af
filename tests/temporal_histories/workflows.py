"""The workflows whose Temporal JSON histories tests/temporal_histories/*.json hold, written as for
temporalio (only the imports differ)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from kadence import workflow
from kadence.common import RetryPolicy
from kadence.exceptions import ActivityError, ApplicationError, ChildWorkflowError
from tests.workflows import always_fail, echo

ONCE = RetryPolicy(maximum_attempts=1)


@workflow.defn
class ActivityOutcomesWorkflow:
    """An activity that completes, one that fails for good and one that times out; its first
    workflow task failed once and timed out once before one completed."""

    @workflow.run
    async def run(self, name: str) -> str:
        greeting = await workflow.execute_activity(echo, f"hello {name}", start_to_close_timeout=timedelta(seconds=10))
        try:
            await workflow.execute_activity(always_fail, name, start_to_close_timeout=timedelta(seconds=10),
                                            retry_policy=RetryPolicy(maximum_attempts=2))
            failed = "charged"
        except ActivityError as err:
            assert isinstance(err.cause, ApplicationError)
            failed = f"{err.cause.type}: {err.cause.message}"
        try:
            await workflow.execute_activity(echo, "slow", start_to_close_timeout=timedelta(seconds=1), retry_policy=ONCE)
            timed_out = "in time"
        except ActivityError as err:
            timed_out = f"{type(err.cause).__name__} ({err.retry_state.value if err.retry_state else ''})"
        return f"{greeting}; {failed}; {timed_out}"


@workflow.defn
class GreetingSignalsWorkflow:
    """Signals, an upsert of search attributes, a timer that fires and one canceled when the
    condition it bounds comes true."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.done = False

    @workflow.signal
    def add_name(self, name: str) -> None:
        self.names.append(name)

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.run
    async def run(self) -> str:
        workflow.upsert_search_attributes({"CustomKeywordField": ["greeting"]})
        await workflow.wait_condition(lambda: bool(self.names))
        await workflow.sleep(1)
        try:
            await workflow.wait_condition(lambda: self.done, timeout=60)
        except asyncio.TimeoutError:
            return "timed out"
        return ", ".join(self.names)


@workflow.defn
class CancellableOrderWorkflow:
    """Cancelled while its activity runs: the activity is asked to cancel (its await raises
    ActivityError caused by CancelledError), a cleanup activity runs, and the cancellation stands
    (the run, asked to cancel, ends canceled with that error)."""

    @workflow.run
    async def run(self, order: str) -> str:
        try:
            await workflow.execute_activity(echo, order, start_to_close_timeout=timedelta(hours=1), heartbeat_timeout=timedelta(seconds=10))
        except ActivityError:
            await workflow.execute_activity(echo, f"cleanup {order}", start_to_close_timeout=timedelta(seconds=10))
            raise
        return "not cancelled"


@workflow.defn
class PatchedGreetingWorkflow:
    """A patch, a deprecated patch, and two local activities (the second fails)."""

    @workflow.run
    async def run(self, name: str) -> str:
        if workflow.patched("local-greeting"):
            greeting = await workflow.execute_local_activity(echo, f"hi {name}", start_to_close_timeout=timedelta(seconds=5))
        else:
            greeting = f"hello {name}"
        workflow.deprecate_patch("old-fix")
        try:
            await workflow.execute_local_activity(always_fail, name, start_to_close_timeout=timedelta(seconds=5), retry_policy=ONCE)
            charged = "charged"
        except ActivityError as err:
            assert isinstance(err.cause, ApplicationError)
            charged = f"{err.cause.type}: {err.cause.message}"
        return f"{greeting}; {charged}"


@workflow.defn
class GreetingChildWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        if not name:
            raise ApplicationError("no name to greet", type="EmptyName", non_retryable=True)
        return f"hello {name}"


@workflow.defn
class GreetingParentWorkflow:
    """A child that completes, one that fails, and a signal to another workflow."""

    @workflow.run
    async def run(self, name: str) -> str:
        own_id = workflow.info().workflow_id
        greeting = await workflow.execute_child_workflow(GreetingChildWorkflow.run, name, id=f"{own_id}-child-1")
        try:
            await workflow.execute_child_workflow(GreetingChildWorkflow.run, "", id=f"{own_id}-child-2")
            failed = "greeted nobody"
        except ChildWorkflowError as err:
            assert isinstance(err.cause, ApplicationError)
            failed = f"{err.cause.type}: {err.cause.message}"
        await workflow.get_external_workflow_handle("greetings-log").signal("record", greeting)
        return f"{greeting}; {failed}"


@workflow.defn
class UpdatableCartWorkflow:
    """Updates Temporal accepted: one whose handler runs an activity, one whose handler fails, and
    the checkout that ends the run."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.checked_out = False

    @workflow.update
    async def add_item(self, item: str) -> int:
        if not item:
            raise ApplicationError("an item needs a name", type="EmptyItem")
        self.items.append(await workflow.execute_activity(echo, item, start_to_close_timeout=timedelta(seconds=10)))
        return len(self.items)

    @workflow.update
    def checkout(self) -> list[str]:
        self.checked_out = True
        return self.items

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: self.checked_out)
        return self.items


@workflow.defn
class CountdownToZeroWorkflow:
    @workflow.run
    async def run(self, count: int) -> str:
        if count > 0:
            workflow.continue_as_new(count - 1)
        return "done"


@workflow.defn
class RejectingWorkflow:
    @workflow.run
    async def run(self, order: str) -> str:
        raise ApplicationError(f"order {order} rejected", type="Rejected", non_retryable=True)


TEMPORAL_WORKFLOWS = [
    ActivityOutcomesWorkflow, GreetingSignalsWorkflow, CancellableOrderWorkflow, PatchedGreetingWorkflow, GreetingChildWorkflow,
    GreetingParentWorkflow, UpdatableCartWorkflow, CountdownToZeroWorkflow, RejectingWorkflow,
]
