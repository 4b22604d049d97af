"""Workflows and activities the tests run, in-process and in worker subprocesses."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from datetime import timedelta
from pathlib import Path

from kadence import activity, workflow
from kadence.common import ParentClosePolicy, RetryPolicy
from kadence.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    TimeoutError,
    WorkflowAlreadyStartedError,
)

FAST_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=100), maximum_attempts=3)


@activity.defn
async def echo(value: str) -> str:
    return value


@activity.defn
def fail_until_third_attempt(value: str) -> str:
    attempt = activity.info().attempt
    if attempt < 3:
        raise ApplicationError(f"attempt {attempt} failed", type="Flaky")
    return f"{value} on attempt {attempt}"


@activity.defn
async def always_fail(value: str) -> str:
    raise ApplicationError(f"payment declined for {value}", type="Declined")


@activity.defn
async def hang_on_first_attempt(marker: str) -> str:
    """Attempt 1 writes `marker` then hangs (its worker gets killed); later attempts succeed."""
    if activity.info().attempt == 1:
        Path(marker).write_text("started")
        await asyncio.sleep(3600)
    return f"done on attempt {activity.info().attempt}"


@activity.defn
async def slow_echo(value: str) -> str:
    await asyncio.sleep(0.2)
    return value


@workflow.defn
class EchoWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        return await workflow.execute_activity(echo, value, start_to_close_timeout=timedelta(seconds=10))


@workflow.defn
class FlakyWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        return await workflow.execute_activity(
            fail_until_third_attempt, value, start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST_RETRY,
        )


@workflow.defn
class DeclinedWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        return await workflow.execute_activity(
            always_fail, value, start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST_RETRY,
        )


@workflow.defn
class HangingActivityWorkflow:
    @workflow.run
    async def run(self, marker: str) -> str:
        return await workflow.execute_activity(
            hang_on_first_attempt, marker, start_to_close_timeout=timedelta(seconds=3), retry_policy=FAST_RETRY,
        )


@workflow.defn
class TwoStepWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        first = await workflow.execute_activity(slow_echo, value, start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST_RETRY)
        second = await workflow.execute_activity(
            slow_echo, first + "!", start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST_RETRY,
        )
        return second


@workflow.defn
class SleepyWorkflow:
    """Sleeps `seconds` while a long sleep is pending, then cancels the long one."""

    @workflow.run
    async def run(self, seconds: float) -> str:
        long_sleep = asyncio.ensure_future(workflow.sleep(timedelta(hours=1)))
        before = workflow.now()
        await workflow.sleep(seconds)
        long_sleep.cancel()
        try:
            await long_sleep
        except asyncio.CancelledError:
            pass
        return f"slept {(workflow.now() - before).total_seconds():.1f}"


@workflow.defn
class StallOnceWorkflow:
    """The first worker to run it stalls inside the workflow task (its worker then gets killed)."""

    @workflow.run
    async def run(self, marker: str) -> str:
        if not Path(marker).exists():  # deliberately outside the workflow API: only the first run stalls
            Path(marker).write_text("stalled")
            time.sleep(3600)
        return "recovered"


# Workflow ids whose BuggyUntilFixedWorkflow is "fixed": what a deploy of fixed code does, within one process.
FIXED: set[str] = set()


@workflow.defn
class BuggyUntilFixedWorkflow:
    """Fails its workflow task (a bug in the workflow code) until the test marks it fixed."""

    @workflow.run
    async def run(self) -> str:
        if workflow.info().workflow_id not in FIXED:  # deliberately outside the workflow API: the "deploy" of the fix
            raise RuntimeError("a bug the next deploy fixes")
        return "fixed"


@workflow.defn
class ApprovalWorkflow:
    """Waits for an approval signal; collects notes signalled before it."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.approver: str | None = None

    @workflow.signal
    def add_note(self, note: str) -> None:
        self.notes.append(note)

    @workflow.signal(name="approve")
    async def approve(self, approver: str) -> None:
        self.approver = approver

    @workflow.query
    def notes_so_far(self, separator: str = ", ") -> str:
        return separator.join(self.notes)

    @workflow.query(name="approved_by")
    def approver_name(self) -> str | None:
        return self.approver

    @workflow.run
    async def run(self, order_id: str) -> str:
        await workflow.wait_condition(lambda: self.approver is not None)
        return f"{order_id} approved by {self.approver} with notes {self.notes}"


@workflow.defn
class CancellableWorkflow:
    """Sleeps an hour; when cancelled, runs a cleanup activity and then lets the cancellation stand."""

    @workflow.run
    async def run(self, value: str) -> str:
        try:
            await workflow.sleep(timedelta(hours=1))
        except asyncio.CancelledError:
            await workflow.execute_activity(echo, f"cleanup {value}", start_to_close_timeout=timedelta(seconds=10))
            raise
        return "not cancelled"


@workflow.defn
class UnservedActivityWorkflow:
    """Schedules an activity on a queue no worker polls; reports how it timed out."""

    @workflow.run
    async def run(self, seconds: float, bound: str = "schedule_to_close") -> str:
        timeouts = {"schedule_to_close_timeout": timedelta(seconds=seconds)}
        if bound == "schedule_to_start":
            timeouts = {"schedule_to_start_timeout": timedelta(seconds=seconds), "start_to_close_timeout": timedelta(seconds=60)}
        try:
            await workflow.execute_activity(echo, "never", task_queue="nobody-polls-this", **timeouts)
        except ActivityError as error:
            assert isinstance(error.cause, TimeoutError) and error.cause.type is not None
            return f"{error.cause.type.value} {error.retry_state.value if error.retry_state else ''}"
        return "served"


@activity.defn
async def fail_first_attempt(value: str) -> str:
    if activity.info().attempt == 1:
        raise ApplicationError("first attempts fail", type="Flaky")
    return value.upper()


@workflow.defn
class MixedWorkflow:
    """A timer, an activity that needs a retry, and a signal to wait for."""

    def __init__(self) -> None:
        self.received: str | None = None

    @workflow.signal
    def deliver(self, value: str) -> None:
        self.received = value

    @workflow.run
    async def run(self, value: str) -> str:
        await workflow.sleep(0.2)
        charged = await workflow.execute_activity(
            fail_first_attempt, value, start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST_RETRY,
        )
        await workflow.wait_condition(lambda: self.received is not None)
        return f"{charged}+{self.received}"


@workflow.defn
class SignalOrTimerWorkflow:
    """An activity, then a signal or a short durable timer, whichever comes first, then an activity."""

    def __init__(self) -> None:
        self.received: str | None = None

    @workflow.signal
    def proceed(self, value: str) -> None:
        self.received = value

    @workflow.run
    async def run(self, value: str, timer_seconds: float) -> str:
        first = await workflow.execute_activity(echo, value, start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST_RETRY)
        try:
            await workflow.wait_condition(lambda: self.received is not None, timeout=timer_seconds)
            woken_by = f"signal {self.received}"
        except asyncio.TimeoutError:
            woken_by = "timer"
        second = await workflow.execute_activity(
            echo, f"{first} after {woken_by}", start_to_close_timeout=timedelta(seconds=10), retry_policy=FAST_RETRY,
        )
        return second


@activity.defn
async def count_with_heartbeats(target: int) -> str:
    """Counts to `target`, heartbeating each step; attempt 1 goes quiet at 3 and times out."""
    info = activity.info()
    start = info.heartbeat_details[0] if info.heartbeat_details else 0
    for step in range(start + 1, target + 1):
        activity.heartbeat(step)
        if info.attempt == 1 and step == 3:
            await asyncio.sleep(3600)
        await asyncio.sleep(0.01)
    return f"attempt {info.attempt} resumed from {start}"


@activity.defn
async def huge_result(megabytes: float) -> str:
    return "x" * int(megabytes * 1024 * 1024)


@workflow.defn
class HugeResultWorkflow:
    @workflow.run
    async def run(self, megabytes: float) -> str:
        try:
            await workflow.execute_activity(huge_result, megabytes, start_to_close_timeout=timedelta(seconds=30))
        except ActivityError as error:
            assert isinstance(error.cause, ApplicationError)
            return f"{error.cause.type}: non_retryable={error.cause.non_retryable}"
        return "accepted"


@activity.defn
async def wait_for_cancellation(marker: str) -> str:
    Path(f"{marker}.started").touch()
    try:
        while True:
            activity.heartbeat()
            await asyncio.sleep(0.05)
    except asyncio.CancelledError:
        Path(marker).write_text("cancelled")
        raise


@workflow.defn
class CancelActivityWorkflow:
    """Starts an activity, cancels it when told to (the test tells it once the activity runs), and
    waits a moment before finishing. The cancelled activity's await raises ActivityError caused by
    CancelledError, as temporalio's."""

    def __init__(self) -> None:
        self.cancelling = False

    @workflow.signal
    def cancel_activity(self) -> None:
        self.cancelling = True

    @workflow.run
    async def run(self, marker: str) -> str:
        task = workflow.start_activity(
            wait_for_cancellation, marker, start_to_close_timeout=timedelta(seconds=60), heartbeat_timeout=timedelta(seconds=5),
        )
        await workflow.wait_condition(lambda: self.cancelling)
        task.cancel()
        try:
            await task
        except ActivityError as err:
            if not isinstance(err.cause, CancelledError):
                raise
            await workflow.sleep(1)
            return "activity cancelled"
        return "not cancelled"


@workflow.defn
class IndexedWorkflow:
    """Marks its progress in search attributes."""

    @workflow.run
    async def run(self, status: str) -> str:
        workflow.upsert_search_attributes({"OrderStatus": "paid", "Amount": 12.5})
        await workflow.sleep(0.05)
        workflow.upsert_search_attributes({"OrderStatus": status})
        return status


@workflow.defn
class CountdownWorkflow:
    """Continues as new until the count reaches zero."""

    @workflow.run
    async def run(self, count: int) -> str:
        if count > 0:
            await workflow.sleep(0.01)
            workflow.continue_as_new(count - 1)
        return "liftoff"


@workflow.defn
class HeartbeatWorkflow:
    @workflow.run
    async def run(self, target: int) -> str:
        return await workflow.execute_activity(
            count_with_heartbeats, target, start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=1), retry_policy=FAST_RETRY,
        )


@workflow.defn
class FamilyWorkflow:
    """Runs children one after another: one completes, one continues as new, one fails, one is
    signalled (after a second start with its id is refused), one times out."""

    @workflow.run
    async def run(self, prefix: str) -> list[str]:
        results = [await workflow.execute_child_workflow(EchoWorkflow.run, "hello", id=f"{prefix}-echo")]
        results.append(await workflow.execute_child_workflow(CountdownWorkflow.run, 2, id=f"{prefix}-countdown"))
        try:
            await workflow.execute_child_workflow(DeclinedWorkflow.run, "card", id=f"{prefix}-declined")
        except ChildWorkflowError as err:
            assert isinstance(err.cause, ActivityError)
            results.append(f"{type(err.cause).__name__}: {err.cause.cause}")
        approval = await workflow.start_child_workflow(ApprovalWorkflow.run, "order", id=f"{prefix}-approval")
        try:
            await workflow.start_child_workflow(ApprovalWorkflow.run, "again", id=f"{prefix}-approval")
        except WorkflowAlreadyStartedError as err:
            results.append(err.cause)
        await approval.signal(ApprovalWorkflow.approve, "the parent")
        results.append(await approval)
        try:
            await workflow.execute_child_workflow(
                ApprovalWorkflow.run, "slow", id=f"{prefix}-timeout", execution_timeout=timedelta(milliseconds=500),
            )
        except ChildWorkflowError as err:
            results.append(type(err.cause).__name__)
        return results


@activity.defn
async def touch(path: str) -> str:
    """Records each time it runs as a line of `path`."""
    with open(path, "a") as file:
        file.write("ran\n")
    return "touched"


@workflow.defn
class ElsewhereWorkflow:
    """Runs `touch` on another task queue, optionally bounded by a schedule-to-start timeout."""

    @workflow.run
    async def run(self, task_queue: str, path: str, schedule_to_start_s: float = 0) -> str:
        try:
            return await workflow.execute_activity(
                touch, path, task_queue=task_queue, start_to_close_timeout=timedelta(seconds=10),
                schedule_to_start_timeout=timedelta(seconds=schedule_to_start_s) if schedule_to_start_s else None,
            )
        except ActivityError as error:
            return f"{type(error.cause).__name__}"


@workflow.defn
class RetiredPatchWorkflow:
    """A patch whose old path is gone: deprecate_patch() records its marker, and replays either way."""

    @workflow.run
    async def run(self) -> str:
        workflow.deprecate_patch("greeting-v2")
        await workflow.sleep(0.05)
        return "v2 only"


@workflow.defn
class PipelineWorkflow:
    """asyncio's Queue, Lock and Event in workflow code: a producer and two consumers hand items
    over through a queue; a lock keeps the tally whole; an event says the producer is done."""

    @workflow.run
    async def run(self, items: list[str]) -> list[str]:
        queue: asyncio.Queue[str] = asyncio.Queue()
        lock, produced = asyncio.Lock(), asyncio.Event()
        tally: list[str] = []

        async def produce() -> None:
            for item in items:
                await queue.put(await workflow.execute_activity(echo, item, start_to_close_timeout=timedelta(seconds=10)))
            produced.set()

        async def consume(name: str) -> None:
            while not (produced.is_set() and queue.empty()):
                try:
                    item = await asyncio.wait_for(queue.get(), timeout=0.2)  # a durable timer each wait
                except asyncio.TimeoutError:
                    continue
                async with lock:
                    tally.append(f"{name}:{item}")
                    await workflow.sleep(0.01)

        await asyncio.gather(produce(), consume("a"), consume("b"))
        return sorted(entry.split(":")[1] for entry in tally)


@workflow.defn
class CartWorkflow:
    """Items arrive as updates (validated; the handler awaits an activity); checkout ends it."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.checked_out = False

    @workflow.update
    async def add_item(self, item: str) -> int:
        self.items.append(await workflow.execute_activity(echo, item, start_to_close_timeout=timedelta(seconds=10)))
        return len(self.items)

    @add_item.validator
    def validate_add_item(self, item: str) -> None:
        if not item:
            raise ApplicationError("an item needs a name", type="EmptyItem")
        if self.checked_out:
            raise ApplicationError("the cart is checked out", type="CheckedOut")

    @workflow.update(name="checkout")
    def check_out(self) -> list[str]:
        self.checked_out = True
        return list(self.items)

    @workflow.query
    def size(self) -> int:
        return len(self.items)

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: self.checked_out)
        return self.items


@activity.defn
def count_runs(path: str) -> int:
    """Appends a line to `path`; how many lines it has: how often it ran."""
    with open(path, "a") as file:
        file.write("ran\n")
    return len(Path(path).read_text().splitlines())


@workflow.defn
class LocalStepsWorkflow:
    """Local activities: one that succeeds, one that succeeds on its third attempt, one that fails
    for good; a timer between them makes later tasks replay the earlier ones."""

    @workflow.run
    async def run(self, path: str) -> list[object]:
        first = await workflow.execute_local_activity(count_runs, path, start_to_close_timeout=timedelta(seconds=5))
        await workflow.sleep(0.05)
        flaky = await workflow.execute_local_activity(
            fail_until_third_attempt, "local", start_to_close_timeout=timedelta(seconds=5), retry_policy=FAST_RETRY,
        )
        try:
            await workflow.execute_local_activity(always_fail, "card", start_to_close_timeout=timedelta(seconds=5), retry_policy=FAST_RETRY)
            failed = "not failed"
        except ActivityError as err:
            failed = f"{err.retry_state.value if err.retry_state else ''}: {err.cause}"
        return [first, flaky, failed]


@workflow.defn
class StepSleepStepWorkflow:
    """An activity, a short durable timer, a second activity; each activity appends to its own
    file under `directory`, so a test counts how often each ran."""

    @workflow.run
    async def run(self, directory: str, sleep_seconds: float) -> list[int]:
        prefix = f"{directory}/{workflow.info().workflow_id}"
        first = await workflow.execute_activity(count_runs, f"{prefix}.first", start_to_close_timeout=timedelta(seconds=30))
        await workflow.sleep(sleep_seconds)
        second = await workflow.execute_activity(count_runs, f"{prefix}.second", start_to_close_timeout=timedelta(seconds=30))
        return [first, second]


@activity.defn
async def record_run(path: str) -> int:
    """Appends a line per run to `path`, the attempt and the process that ran it, then takes a
    moment, so a worker killed under load has attempts in flight; returns the attempt."""
    attempt = activity.info().attempt
    with open(path, "a") as file:
        file.write(f"{attempt} {os.getpid()}\n")
    await asyncio.sleep(0.2)
    return attempt


@workflow.defn
class RecordedStepsWorkflow:
    """A local activity, then two activities, each recording its every run in its own file under
    `directory` (record_run), so a test counts the runs of each attempt."""

    @workflow.run
    async def run(self, directory: str) -> list[int]:
        prefix, limit = f"{directory}/{workflow.info().workflow_id}", timedelta(seconds=5)
        local = await workflow.execute_local_activity(record_run, f"{prefix}.local", start_to_close_timeout=limit)
        first = await workflow.execute_activity(record_run, f"{prefix}.a", start_to_close_timeout=limit, retry_policy=FAST_RETRY)
        second = await workflow.execute_activity(record_run, f"{prefix}.b", start_to_close_timeout=limit, retry_policy=FAST_RETRY)
        return [local, first, second]


@workflow.defn
class DrawingWorkflow:
    """Draws a UUID, records it, sleeps, and returns what it drew: replayed, it draws the same."""

    @workflow.run
    async def run(self) -> dict[str, object]:
        drawn = str(workflow.uuid4())
        workflow.upsert_search_attributes({"Drawn": drawn})
        await workflow.sleep(0.05)
        return {"drawn": drawn, "roll": workflow.random().randint(1, 6), "history_length": workflow.get_current_history_length(),
                "suggested": workflow.is_continue_as_new_suggested()}


@workflow.defn
class FanOutWorkflow:
    """Runs `count` echo activities at once on `task_queue`."""

    @workflow.run
    async def run(self, task_queue: str, count: int) -> int:
        results = await asyncio.gather(*(
            workflow.execute_activity(echo, str(i), task_queue=task_queue, start_to_close_timeout=timedelta(seconds=60))
            for i in range(count)
        ))
        return len(results)


@workflow.defn
class ParentOfTwoStepWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        return await workflow.execute_child_workflow(TwoStepWorkflow.run, value, id=f"{workflow.info().workflow_id}-child")


@workflow.defn
class AwaitChildWorkflow:
    """Waits for an approval child and reports how it ended."""

    @workflow.run
    async def run(self, child_id: str) -> str:
        try:
            return await workflow.execute_child_workflow(ApprovalWorkflow.run, "order", id=child_id)
        except ChildWorkflowError as err:
            return f"{type(err.cause).__name__}: {err.cause}"


@workflow.defn
class LeavingParentWorkflow:
    """Starts a child with the given parent close policy and closes at once."""

    @workflow.run
    async def run(self, child_type: str, child_id: str, policy: str) -> str:
        await workflow.start_child_workflow(child_type, "left behind", id=child_id, parent_close_policy=ParentClosePolicy(policy))
        return "left"


@workflow.defn
class CancelChildWorkflow:
    """Cancels its child and reports how the child ended."""

    @workflow.run
    async def run(self, child_id: str) -> str:
        child = await workflow.start_child_workflow(CancellableWorkflow.run, "child", id=child_id)
        await workflow.sleep(0.05)
        child.cancel()
        try:
            await child
        except ChildWorkflowError as err:
            return type(err.cause).__name__
        return "not cancelled"


@workflow.defn
class ExternalRequestsWorkflow:
    """Signals one workflow, cancels another, and tries to signal one that does not exist."""

    @workflow.run
    async def run(self, approval_id: str, cancellable_id: str) -> list[str]:
        await workflow.get_external_workflow_handle(approval_id).signal(ApprovalWorkflow.approve, "a neighbour")
        await workflow.get_external_workflow_handle(cancellable_id).cancel()
        outcomes = ["signalled", "cancel requested"]
        try:
            await workflow.get_external_workflow_handle(f"{approval_id}-missing").signal("approve", "nobody")
        except ApplicationError as err:
            outcomes.append(str(err.type))
        return outcomes


@workflow.defn
class PatchedWorkflow:
    """Takes the patched path, recorded by a marker, and keeps taking it when replayed."""

    @workflow.run
    async def run(self) -> str:
        version = "v2" if workflow.patched("greeting-v2") else "v1"
        await workflow.sleep(0.05)
        return f"{version}, then {'v2' if workflow.patched('greeting-v2') else 'v1'}"


class GreetingActivities:
    """Activities as methods of an object holding what they share (temporalio's documented pattern)."""

    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    @activity.defn
    async def greet(self, name: str) -> str:
        return f"{self.greeting}, {name}"

    @activity.defn(name="shout")
    def shout_greeting(self, name: str) -> str:
        return f"{self.greeting.upper()}, {name.upper()}!"


ALL_WORKFLOWS = [
    StepSleepStepWorkflow, RetiredPatchWorkflow, PipelineWorkflow, CartWorkflow, LocalStepsWorkflow, DrawingWorkflow, FanOutWorkflow,
    ElsewhereWorkflow, ParentOfTwoStepWorkflow, AwaitChildWorkflow, FamilyWorkflow, LeavingParentWorkflow,
    CancelChildWorkflow, ExternalRequestsWorkflow, PatchedWorkflow, IndexedWorkflow, CancelActivityWorkflow,
    CountdownWorkflow, HugeResultWorkflow, HeartbeatWorkflow, MixedWorkflow, SignalOrTimerWorkflow, ApprovalWorkflow, CancellableWorkflow,
    UnservedActivityWorkflow, EchoWorkflow, FlakyWorkflow, DeclinedWorkflow, HangingActivityWorkflow, TwoStepWorkflow,
    SleepyWorkflow, StallOnceWorkflow, RecordedStepsWorkflow,
]
ALL_ACTIVITIES = [
    count_runs, touch, wait_for_cancellation, huge_result, count_with_heartbeats, fail_first_attempt, echo,
    fail_until_third_attempt, always_fail, hang_on_first_attempt, slow_echo, record_run,
]


# Local activities at a workflow task's edges: one pending when the run returns (in the task's
# first round or a later one), and an activity and a timer cancelled in a later round than the one
# that issued them (test_local_activity_rounds.py on the instance, test_local_activity_edges.py end to end).
LOCAL_TIMEOUT = timedelta(seconds=5)


@workflow.defn
class ReturnsWithALocalActivityPending:
    @workflow.run
    async def run(self) -> str:
        workflow.start_local_activity(echo, "late", start_to_close_timeout=LOCAL_TIMEOUT)
        return "done"


@workflow.defn
class ReturnsAfterARoundWithALocalActivityPending:
    @workflow.run
    async def run(self) -> str:
        first = await workflow.execute_local_activity(echo, "first", start_to_close_timeout=LOCAL_TIMEOUT)
        workflow.start_local_activity(echo, "late", start_to_close_timeout=LOCAL_TIMEOUT)
        return first


@workflow.defn
class CancelsInALaterRound:
    @workflow.run
    async def run(self) -> str:
        remote = workflow.start_activity(echo, "remote", start_to_close_timeout=LOCAL_TIMEOUT)
        timer = asyncio.create_task(workflow.sleep(60))
        local = await workflow.execute_local_activity(echo, "local", start_to_close_timeout=LOCAL_TIMEOUT)
        remote.cancel()
        timer.cancel()
        for withdrawn in (remote, timer):
            with contextlib.suppress(asyncio.CancelledError, ActivityError):
                await withdrawn
        return local
