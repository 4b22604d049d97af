"""Local activities at a workflow task's edges, end to end: one still pending when the workflow
returns is abandoned (it never runs, no marker follows the close, and the history replays), and
an activity and a timer issued before a local activity and cancelled after it, in the same
workflow task, are withdrawn (history records neither)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta

from kadence import activity, workflow
from kadence.client import Client
from kadence.exceptions import ActivityError
from kadence.worker import Replayer, Worker

RAN: list[str] = []


@activity.defn
async def remember(text: str) -> str:
    RAN.append(text)
    return text


@workflow.defn
class ReturnsBeforeItsLocalActivity:
    @workflow.run
    async def run(self) -> str:
        workflow.start_local_activity(remember, "after the close", start_to_close_timeout=timedelta(seconds=5))
        return "returned"


@workflow.defn
class WithdrawsAfterALocalActivity:
    @workflow.run
    async def run(self) -> str:
        remote = workflow.start_activity(remember, "remote", start_to_close_timeout=timedelta(seconds=5))
        timer = asyncio.create_task(workflow.sleep(60))
        local = await workflow.execute_local_activity(remember, "local", start_to_close_timeout=timedelta(seconds=5))
        remote.cancel()
        timer.cancel()
        for withdrawn in (remote, timer):
            with contextlib.suppress(asyncio.CancelledError, ActivityError):
                await withdrawn
        return local


async def test_a_local_activity_pending_when_the_workflow_returns_never_runs(client: Client, task_queue: str) -> None:
    RAN.clear()
    async with Worker(client, task_queue=task_queue, workflows=[ReturnsBeforeItsLocalActivity], activities=[remember]):
        handle = await client.start_workflow(ReturnsBeforeItsLocalActivity.run, id=f"la-close-{uuid.uuid4()}", task_queue=task_queue)
        assert await asyncio.wait_for(handle.result(), 30) == "returned"
        await asyncio.sleep(0.5)  # time enough for a local activity the worker wrongly kept to run
    assert RAN == []
    history = await handle.fetch_history()
    assert "MarkerRecorded" not in [event["attributes"][0] for event in history.events]
    await Replayer(workflows=[ReturnsBeforeItsLocalActivity]).replay_workflow(history)


async def test_an_activity_and_a_timer_cancelled_after_a_local_activity_are_never_sent(client: Client, task_queue: str) -> None:
    RAN.clear()
    async with Worker(client, task_queue=task_queue, workflows=[WithdrawsAfterALocalActivity], activities=[remember]):
        handle = await client.start_workflow(WithdrawsAfterALocalActivity.run, id=f"la-withdraw-{uuid.uuid4()}", task_queue=task_queue)
        assert await asyncio.wait_for(handle.result(), 30) == "local"
    kinds = [event["attributes"][0] for event in (await handle.fetch_history()).events]
    assert "ActivityTaskScheduled" not in kinds and "TimerStarted" not in kinds, kinds
    assert RAN == ["local"]
    await Replayer(workflows=[WithdrawsAfterALocalActivity]).replay_workflow(await handle.fetch_history())
