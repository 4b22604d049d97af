"""Local activities at a workflow task's edges, end to end: one still pending when the workflow
returns is abandoned (it never runs, no marker follows the close, and the history replays), and
an activity and a timer issued before a local activity and cancelled after it, in the same
workflow task, are withdrawn (history records neither)."""

from __future__ import annotations

import asyncio
import uuid

from kadence import activity
from kadence.client import Client
from kadence.worker import Replayer, Worker
from tests.workflows import CancelsInALaterRound, ReturnsWithALocalActivityPending

RAN: list[str] = []


@activity.defn(name="echo")  # the name the workflows' activity has: this one says whether it ran
async def noted(text: str) -> str:
    RAN.append(text)
    return text


async def test_a_local_activity_pending_when_the_workflow_returns_never_runs(client: Client, task_queue: str) -> None:
    RAN.clear()
    async with Worker(client, task_queue=task_queue, workflows=[ReturnsWithALocalActivityPending], activities=[noted]):
        handle = await client.start_workflow(ReturnsWithALocalActivityPending.run, id=f"la-close-{uuid.uuid4()}", task_queue=task_queue)
        assert await asyncio.wait_for(handle.result(), 30) == "done"
        await asyncio.sleep(0.5)  # time enough for a local activity the worker wrongly kept to run
    assert RAN == []
    history = await handle.fetch_history()
    assert "MarkerRecorded" not in [event["attributes"][0] for event in history.events]
    await Replayer(workflows=[ReturnsWithALocalActivityPending]).replay_workflow(history)


async def test_an_activity_and_a_timer_cancelled_after_a_local_activity_are_never_sent(client: Client, task_queue: str) -> None:
    RAN.clear()
    async with Worker(client, task_queue=task_queue, workflows=[CancelsInALaterRound], activities=[noted]):
        handle = await client.start_workflow(CancelsInALaterRound.run, id=f"la-withdraw-{uuid.uuid4()}", task_queue=task_queue)
        assert await asyncio.wait_for(handle.result(), 30) == "local"
    kinds = [event["attributes"][0] for event in (await handle.fetch_history()).events]
    assert "ActivityTaskScheduled" not in kinds and "TimerStarted" not in kinds, kinds
    assert RAN == ["local"]
    await Replayer(workflows=[CancelsInALaterRound]).replay_workflow(await handle.fetch_history())
