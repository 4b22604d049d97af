"""Schedules end to end through the client, on the session stack: create, the actions a schedule
takes on its own, describe, list, trigger, backfill, pause, update and delete (as temporalio's
schedules sample uses them)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from kadence import workflow
from kadence.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleBackfill,
    ScheduleDescription,
    ScheduleIntervalSpec,
    ScheduleNotFoundError,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from kadence.dev.local_stack import LocalStack
from kadence.worker import Worker
from tests.conftest import audit_of


@workflow.defn
class ScheduledGreeting:
    @workflow.run
    async def run(self, name: str) -> str:
        return f"hello {name} at {workflow.info().workflow_id}"


async def described_when(handle_describe: Callable[[], object], check: Callable[[ScheduleDescription], bool],
                         timeout_s: float = 20) -> ScheduleDescription:
    """The schedule's description once `check` holds (its actions are taken on its own time)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    last = None
    while asyncio.get_running_loop().time() < deadline:
        last = await handle_describe()  # type: ignore[misc]
        if check(last):
            return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"the schedule never got there: {last}")


async def test_a_schedule_starts_its_workflow_every_second_and_is_managed_through_its_handle(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    schedule_id = f"greet-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[ScheduledGreeting]):
        handle = await client.create_schedule(schedule_id, Schedule(
            action=ScheduleActionStartWorkflow(ScheduledGreeting.run, "ada", id=f"greeting-{schedule_id}", task_queue=task_queue),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=1))]),
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.ALLOW_ALL),
            state=ScheduleState(note="a note"),
        ))
        with pytest.raises(ScheduleAlreadyRunningError):
            await client.create_schedule(schedule_id, Schedule(
                action=ScheduleActionStartWorkflow("Other", id="other", task_queue=task_queue),
                spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(hours=1))]),
            ))
        described = await described_when(handle.describe, lambda d: len([
            a for a in d.info.recent_actions if a.status == "Completed"]) >= 3)
        assert described.schedule.state.note == "a note" and described.schedule.action.args == ["ada"]
        assert described.info.next_action_times and described.info.next_action_times[0] > datetime.now(UTC) - timedelta(seconds=2)
        completed = [a for a in described.info.recent_actions if a.status == "Completed"][0]
        assert completed.action.workflow_id == f"greeting-{schedule_id}-{completed.scheduled_at.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        result = await client.get_workflow_handle(completed.action.workflow_id).result()
        assert result == f"hello ada at {completed.action.workflow_id}"
        started = [e async for e in client.list_workflows(f"TemporalScheduledById = '{schedule_id}'")]
        assert len(started) >= 3

        await handle.pause(note="for maintenance")
        paused = await handle.describe()
        assert paused.schedule.state.paused and paused.schedule.state.note == "for maintenance"
        assert paused.info.next_action_times == []
        count = paused.info.num_actions
        await asyncio.sleep(2.5)
        assert (await handle.describe()).info.num_actions == count
        await handle.trigger()
        await described_when(handle.describe, lambda d: d.info.num_actions == count + 1)

        async def new_argument(input: ScheduleUpdateInput) -> ScheduleUpdate:
            action = input.description.schedule.action
            action.args = ["grace"]
            return ScheduleUpdate(schedule=input.description.schedule)
        await handle.update(new_argument)
        assert (await handle.describe()).schedule.action.args == ["grace"]

        ten_minutes_ago = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
        await handle.backfill(ScheduleBackfill(start_at=ten_minutes_ago, end_at=ten_minutes_ago + timedelta(seconds=2),
                                               overlap=ScheduleOverlapPolicy.ALLOW_ALL))
        await described_when(handle.describe, lambda d: d.info.num_actions == count + 4)

        listed = [s async for s in await client.list_schedules()]
        mine = [s for s in listed if s.id == schedule_id]
        assert mine and mine[0].schedule.action.workflow == "ScheduledGreeting" and mine[0].schedule.state.paused

        await handle.delete()
        with pytest.raises(ScheduleNotFoundError):
            await handle.describe()
        with pytest.raises(ScheduleNotFoundError):
            await handle.pause()
    report = audit_of(stack, f"kadence-schedule:{schedule_id}")
    assert report.violations == []
