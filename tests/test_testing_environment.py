"""kadence.testing's WorkflowEnvironment, tested as temporalio's users test their workflows: an
environment for the module, a worker per test, the client's calls. Each test that does not depend
on skipped time runs twice, on a time-skipping environment and on `from_client` against the
session's plain stack (as temporalio users run one suite against every environment); the others
run where time skips (docs/testing.md)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kadence import activity, workflow
from kadence.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
    WorkflowFailureError,
    WorkflowHandle,
)
from kadence.common import RetryPolicy
from kadence.exceptions import ActivityError, ApplicationError, CancelledError
from kadence.ops.audit import audit_history
from kadence.testing import TimeSkipper, WorkflowEnvironment
from kadence.worker import Worker

DAY = timedelta(days=1)


@activity.defn
async def flaky(failures: int) -> str:
    attempt = activity.info().attempt
    if attempt <= failures:
        raise ApplicationError(f"attempt {attempt} failed")
    return f"done on attempt {attempt}"


@activity.defn
async def slow(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "slow done"


@workflow.defn
class RetryingWorkflow:
    @workflow.run
    async def run(self, backoff_s: float) -> str:
        return await workflow.execute_activity(
            flaky, 2, start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=backoff_s), backoff_coefficient=1.0, maximum_attempts=5),
        )


@workflow.defn
class SlowActivityWorkflow:
    @workflow.run
    async def run(self, seconds: float) -> str:
        return await workflow.execute_activity(slow, seconds, start_to_close_timeout=timedelta(seconds=1),
                                               retry_policy=RetryPolicy(maximum_attempts=1))


@workflow.defn
class ApprovalWorkflow:
    def __init__(self) -> None:
        self.approved = False
        self.status = "waiting"

    @workflow.run
    async def run(self) -> str:
        try:
            await workflow.wait_condition(lambda: self.approved, timeout=7 * DAY)
        except asyncio.TimeoutError:
            return "expired"
        self.status = "approved"
        await workflow.sleep(3 * DAY)
        return "shipped"

    @workflow.signal
    def approve(self) -> None:
        self.approved = True

    @workflow.query
    def state(self) -> str:
        return self.status


@workflow.defn
class CounterWorkflow:
    def __init__(self) -> None:
        self.count = 0
        self.done = False

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.done)
        return self.count

    @workflow.update
    def add(self, n: int) -> int:
        self.count += n
        return self.count

    @workflow.signal
    def finish(self) -> None:
        self.done = True


@workflow.defn
class SleeperWorkflow:
    @workflow.run
    async def run(self, days: int) -> float:
        started = workflow.now()
        await workflow.sleep(days * DAY)
        return (workflow.now() - started) / DAY


@workflow.defn
class ParentWorkflow:
    @workflow.run
    async def run(self, days: int) -> list[float]:
        started = workflow.now()
        child_days = await workflow.execute_child_workflow(SleeperWorkflow.run, days, id=f"{workflow.info().workflow_id}-child")
        return [child_days, (workflow.now() - started) / DAY]


@workflow.defn
class DailyLoopWorkflow:
    @workflow.run
    async def run(self, days_left: int) -> str:
        if days_left == 0:
            return "done"
        await workflow.sleep(DAY)
        workflow.continue_as_new(days_left - 1)


@workflow.defn
class AssertingWorkflow:
    @workflow.run
    async def run(self, n: int) -> int:
        assert n > 0, f"n must be positive, got {n}"
        return n


@workflow.defn
class SleepThenWaitWorkflow:
    def __init__(self) -> None:
        self.slept = False
        self.go = False

    @workflow.run
    async def run(self, days: int) -> str:
        await workflow.sleep(days * DAY)
        self.slept = True
        await workflow.wait_condition(lambda: self.go)
        return "went"

    @workflow.signal
    def proceed(self) -> None:
        self.go = True

    @workflow.query
    def has_slept(self) -> bool:
        return self.slept


WORKFLOWS = [
    SleepThenWaitWorkflow, RetryingWorkflow, SlowActivityWorkflow, ApprovalWorkflow, CounterWorkflow, SleeperWorkflow, ParentWorkflow,
    DailyLoopWorkflow, AssertingWorkflow,
]
ACTIVITIES = [flaky, slow]


@pytest.fixture(scope="module")
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        yield env
        # Runs that skipped time keep every invariant of the log, as the session stack's are checked.
        report = audit_history(env._stack.settings)  # type: ignore[attr-defined]  # the environment's own stack
        assert report.violations == [], "\n".join(report.violations[:20])


@pytest.fixture(params=["time_skipping", "from_client"])
async def env(request: pytest.FixtureRequest, skipping_env: WorkflowEnvironment, client: Client) -> AsyncIterator[WorkflowEnvironment]:
    """Either environment: the tests that take it hold on both (`client` is the session's plain stack's)."""
    if request.param == "time_skipping":
        yield skipping_env
        return
    async with WorkflowEnvironment.from_client(client) as plain:
        yield plain


def new_id() -> str:
    return f"wf-{uuid.uuid4()}"


async def test_a_workflow_that_sleeps_30_days_completes_now(skipping_env: WorkflowEnvironment, task_queue: str) -> None:
    assert skipping_env.supports_time_skipping
    before = await skipping_env.get_current_time()
    async with Worker(skipping_env.client, task_queue=task_queue, workflows=WORKFLOWS):
        slept = await skipping_env.client.execute_workflow(SleeperWorkflow.run, 30, id=new_id(), task_queue=task_queue)
    assert slept >= 30
    assert await skipping_env.get_current_time() - before >= 30 * DAY


async def test_activity_retries_back_off_on_the_environment_s_clock(skipping_env: WorkflowEnvironment, task_queue: str) -> None:
    before = await skipping_env.get_current_time()
    async with Worker(skipping_env.client, task_queue=task_queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        result = await skipping_env.client.execute_workflow(RetryingWorkflow.run, 3600.0, id=new_id(), task_queue=task_queue)
    assert result == "done on attempt 3"
    assert await skipping_env.get_current_time() - before >= timedelta(hours=2)  # two backoffs of an hour, skipped


async def test_activity_retries(env: WorkflowEnvironment, task_queue: str) -> None:
    async with Worker(env.client, task_queue=task_queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        assert await env.client.execute_workflow(RetryingWorkflow.run, 0.1, id=new_id(), task_queue=task_queue) == "done on attempt 3"


async def test_an_activity_that_really_sleeps_times_out_on_the_real_clock(env: WorkflowEnvironment, task_queue: str) -> None:
    async with Worker(env.client, task_queue=task_queue, workflows=WORKFLOWS, activities=ACTIVITIES):
        with pytest.raises(WorkflowFailureError) as failed:
            await env.client.execute_workflow(SlowActivityWorkflow.run, 3.0, id=new_id(), task_queue=task_queue)
    assert isinstance(failed.value.cause, ActivityError)


async def test_signals_and_queries_between_skipped_timers(skipping_env: WorkflowEnvironment, task_queue: str) -> None:
    async with Worker(skipping_env.client, task_queue=task_queue, workflows=WORKFLOWS):
        handle = await skipping_env.client.start_workflow(ApprovalWorkflow.run, id=new_id(), task_queue=task_queue)
        started = await skipping_env.get_current_time()
        assert await handle.query(ApprovalWorkflow.state) == "waiting"
        await skipping_env.sleep(DAY)  # a day of the seven the approval may take
        assert await handle.query(ApprovalWorkflow.state) == "waiting"
        await handle.signal(ApprovalWorkflow.approve)
        assert await handle.result() == "shipped"
        assert await handle.query(ApprovalWorkflow.state) == "approved"
        elapsed = await skipping_env.get_current_time() - started
    assert 4 * DAY <= elapsed < 5 * DAY  # the day slept, then the three the workflow waits after the approval


async def test_an_approval_never_given_expires_after_its_week(skipping_env: WorkflowEnvironment, task_queue: str) -> None:
    async with Worker(skipping_env.client, task_queue=task_queue, workflows=WORKFLOWS):
        assert await skipping_env.client.execute_workflow(ApprovalWorkflow.run, id=new_id(), task_queue=task_queue) == "expired"


async def test_updates(env: WorkflowEnvironment, task_queue: str) -> None:
    async with Worker(env.client, task_queue=task_queue, workflows=WORKFLOWS):
        handle = await env.client.start_workflow(CounterWorkflow.run, id=new_id(), task_queue=task_queue)
        assert await handle.execute_update(CounterWorkflow.add, 2) == 2
        assert await handle.execute_update(CounterWorkflow.add, 3) == 5
        await handle.signal(CounterWorkflow.finish)
        assert await handle.result() == 5


async def test_a_child_skips_with_its_parent_which_then_runs_on_the_child_s_time(
    skipping_env: WorkflowEnvironment, task_queue: str,
) -> None:
    async with Worker(skipping_env.client, task_queue=task_queue, workflows=WORKFLOWS):
        child_days, parent_days = await skipping_env.client.execute_workflow(ParentWorkflow.run, 10, id=new_id(), task_queue=task_queue)
    assert child_days >= 10 and parent_days >= 10


async def test_continue_as_new_keeps_the_clock(skipping_env: WorkflowEnvironment, task_queue: str) -> None:
    before = await skipping_env.get_current_time()
    async with Worker(skipping_env.client, task_queue=task_queue, workflows=WORKFLOWS):
        assert await skipping_env.client.execute_workflow(DailyLoopWorkflow.run, 3, id=new_id(), task_queue=task_queue) == "done"
    assert await skipping_env.get_current_time() - before >= 3 * DAY


async def test_cancellation(env: WorkflowEnvironment, task_queue: str) -> None:
    async with Worker(env.client, task_queue=task_queue, workflows=WORKFLOWS):
        handle = await env.client.start_workflow(SleeperWorkflow.run, 30, id=new_id(), task_queue=task_queue)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
    assert isinstance(failed.value.cause, CancelledError)


async def test_a_failed_assert_fails_the_workflow_rather_than_retrying_its_task(env: WorkflowEnvironment, task_queue: str) -> None:
    async with Worker(env.client, task_queue=task_queue, workflows=WORKFLOWS):
        with pytest.raises(WorkflowFailureError) as failed:
            await env.client.execute_workflow(AssertingWorkflow.run, -1, id=new_id(), task_queue=task_queue)
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "AssertionError" and cause.non_retryable
    assert "n must be positive, got -1" in str(cause)


async def test_results_awaited_with_auto_time_skipping_disabled_do_not_skip(
    skipping_env: WorkflowEnvironment, task_queue: str,
) -> None:
    async with Worker(skipping_env.client, task_queue=task_queue, workflows=WORKFLOWS):
        handle = await skipping_env.client.start_workflow(SleeperWorkflow.run, 30, id=new_id(), task_queue=task_queue)
        with skipping_env.auto_time_skipping_disabled():
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(handle.result(), 1.0)
        assert await handle.result() >= 30


async def test_a_plain_environment_does_not_skip_time(client: Client) -> None:
    async with WorkflowEnvironment.from_client(client) as plain:
        assert not plain.supports_time_skipping
        with pytest.raises(NotImplementedError, match="start_time_skipping_v2"):
            await plain.fast_forward(plain.client.get_workflow_handle(new_id()), DAY)


async def until_slept(handle: WorkflowHandle) -> None:
    while not await handle.query(SleepThenWaitWorkflow.has_slept):
        await asyncio.sleep(0.05)


@pytest.fixture(scope="module")
async def v2_env() -> AsyncIterator[WorkflowEnvironment]:
    async with await WorkflowEnvironment.start_time_skipping_v2() as env:
        yield env


async def test_each_workflow_has_its_own_clock_under_time_skipping_v2(v2_env: WorkflowEnvironment, task_queue: str) -> None:
    assert v2_env.supports_time_skipping_v2 and not v2_env.supports_time_skipping
    async with Worker(v2_env.client, task_queue=task_queue, workflows=WORKFLOWS):
        one_day = await v2_env.client.start_workflow(SleepThenWaitWorkflow.run, 1, id=new_id(), task_queue=task_queue)
        five_days = await v2_env.client.start_workflow(SleepThenWaitWorkflow.run, 5, id=new_id(), task_queue=task_queue)
        with v2_env.with_time_skipping_disabled():
            real_time = await v2_env.client.start_workflow(SleepThenWaitWorkflow.run, 1, id=new_id(), task_queue=task_queue)
        await asyncio.wait_for(asyncio.gather(until_slept(one_day), until_slept(five_days)), 30)
        apart = await v2_env.get_current_time(five_days) - await v2_env.get_current_time(one_day)
        assert 4 * DAY - timedelta(minutes=1) < apart < 4 * DAY + timedelta(minutes=1)

        before = await v2_env.get_current_time(one_day)
        await v2_env.fast_forward(one_day, 2 * DAY)
        assert await v2_env.get_current_time(one_day) - before >= 2 * DAY
        assert await v2_env.get_current_time(real_time) - datetime.now(UTC) < timedelta(minutes=1)
        assert not await real_time.query(SleepThenWaitWorkflow.has_slept)

        for handle in (one_day, five_days):
            await handle.signal(SleepThenWaitWorkflow.proceed)
            assert await handle.result() == "went"
        await real_time.cancel()
    with pytest.raises(NotImplementedError, match="fast_forward"):
        await v2_env.sleep(DAY)


async def test_a_schedule_over_a_skipped_week_takes_its_seven_daily_actions(v2_env: WorkflowEnvironment, task_queue: str) -> None:
    skipper = TimeSkipper(v2_env.client)
    schedule_id = f"daily-{uuid.uuid4()}"
    async with Worker(v2_env.client, task_queue=task_queue, workflows=WORKFLOWS):
        handle = await v2_env.client.create_schedule(schedule_id, Schedule(
            action=ScheduleActionStartWorkflow(SleeperWorkflow.run, 2, id=f"{schedule_id}-run", task_queue=task_queue),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=DAY)]),
        ))
        before = await skipper.get_schedule_current_time(handle)
        await skipper.fast_forward_schedule(handle, 7 * DAY)
        assert await skipper.get_schedule_current_time(handle) - before >= 7 * DAY

        async def seven_closed() -> None:  # the seventh action is taken as the week ends, and its run skips its two days
            while len([a for a in (await handle.describe()).info.recent_actions if a.status == "Completed"]) < 7:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(seven_closed(), 30)
        described = await handle.describe()
        await handle.delete()
    assert described.info.num_actions == 7 and described.info.num_actions_skipped_overlap == 0


async def test_start_local_runs_workflows_on_a_stack_of_its_own(task_queue: str) -> None:
    with pytest.raises(ValueError, match="tls=True is not supported"):
        await WorkflowEnvironment.start_local(tls=True)
    async with await WorkflowEnvironment.start_local() as env:
        assert not env.supports_time_skipping
        async with Worker(env.client, task_queue=task_queue, workflows=WORKFLOWS):
            assert await env.client.execute_workflow(AssertingWorkflow.run, 3, id=new_id(), task_queue=task_queue) == 3


def test_the_expense_example_s_test_runs_as_the_readme_runs_it() -> None:
    """examples/test_expense.py, a user's test suite of its own: `pytest examples/test_expense.py`."""
    repo = Path(__file__).resolve().parents[1]
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/test_expense.py"],
                         cwd=repo, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "1 passed" in ran.stdout
