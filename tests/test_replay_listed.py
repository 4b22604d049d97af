"""Replaying what a listing finds, as temporalio's replay sample does: three runs of one workflow id,
each of another workflow type, are listed by `client.list_workflows('WorkflowId = "..."')`, and
`.map_histories()` hands their histories to `Replayer.replay_workflows`. Today's code replays them
all; a changed workflow fails the replay of its run, by run id."""

from __future__ import annotations

import uuid
from datetime import timedelta

from kadence import activity, workflow
from kadence.client import Client, WorkflowExecutionAsyncIterator
from kadence.exceptions import NondeterminismError
from kadence.worker import Replayer, Worker


@activity.defn
async def stamp(label: str) -> str:
    return f"stamped {label}"


@workflow.defn
class StampOnce:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(stamp, "once", start_to_close_timeout=timedelta(seconds=10))


@workflow.defn
class PauseBriefly:
    @workflow.run
    async def run(self) -> str:
        await workflow.sleep(0.05)
        return "paused"


@workflow.defn
class PauseThenStamp:
    @workflow.run
    async def run(self) -> str:
        await workflow.sleep(0.05)
        return await workflow.execute_activity(stamp, "after the pause", start_to_close_timeout=timedelta(seconds=10))


@workflow.defn(name="PauseThenStamp")
class StampThenPause:
    """PauseThenStamp changed: the activity before the timer, which the recorded runs did not do."""

    @workflow.run
    async def run(self) -> str:
        stamped = await workflow.execute_activity(stamp, "before the pause", start_to_close_timeout=timedelta(seconds=10))
        await workflow.sleep(0.05)
        return stamped


async def test_the_listed_runs_histories_replay_and_a_changed_workflow_fails_its_own(client: Client, task_queue: str) -> None:
    workflow_id = f"replayed-{uuid.uuid4()}"
    run_ids = {}
    async with Worker(client, task_queue=task_queue, workflows=[StampOnce, PauseBriefly, PauseThenStamp], activities=[stamp]):
        for kind in (StampOnce, PauseBriefly, PauseThenStamp):
            handle = await client.start_workflow(kind.run, id=workflow_id, task_queue=task_queue)
            await handle.result()
            run_ids[kind.__name__] = handle.result_run_id

    listed = client.list_workflows(f'WorkflowId = "{workflow_id}"')
    assert isinstance(listed, WorkflowExecutionAsyncIterator)
    results = await Replayer(workflows=[StampOnce, PauseBriefly, PauseThenStamp]).replay_workflows(listed.map_histories())
    assert results.replay_failures == {}

    histories = [history async for history in client.list_workflows(f'WorkflowId = "{workflow_id}"').map_histories()]
    assert sorted(history.run_id for history in histories) == sorted(run_ids.values())
    changed = await Replayer(workflows=[StampOnce, PauseBriefly, StampThenPause]).replay_workflows(
        histories, raise_on_replay_failure=False,
    )
    assert list(changed.replay_failures) == [run_ids["PauseThenStamp"]]
    assert isinstance(changed.replay_failures[run_ids["PauseThenStamp"]], NondeterminismError)
