"""Answers and results on kadence.replies, straight from the history service (no visibility hop),
and the read model still answering when a reply cannot come."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from kadence import workflow
from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import WorkflowAlreadyStartedError, WorkflowFailureError
from kadence.protocol import topics
from kadence.protocol.kafka import partition_for_key, read_to_end
from kadence.worker import Worker


@workflow.defn
class GateWorkflow:
    """Waits until opened."""

    def __init__(self) -> None:
        self.opened = False

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.opened)
        return "opened"

    @workflow.signal
    def open(self) -> None:
        self.opened = True


@workflow.defn
class ChainWorkflow:
    """Continues as new `runs` times, then returns."""

    @workflow.run
    async def run(self, runs: int, done: int = 0) -> str:
        if done < runs:
            workflow.continue_as_new(args=[runs, done + 1])
        return f"done after {done} continue-as-new"


async def test_answers_and_results_come_on_the_reply_topic_while_the_read_model_lags(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """With the visibility service stopped, nothing reaches the read model: every answer and result
    here came on kadence.replies, a continue-as-new chain's result included (the history service
    carries a start's watchers over to the next run)."""
    stack.kill_service("visibility")
    try:
        async with Worker(client, task_queue=task_queue, workflows=[GateWorkflow, ChainWorkflow]):
            workflow_id = f"reply-{uuid.uuid4()}"
            handle = await asyncio.wait_for(client.start_workflow(GateWorkflow.run, id=workflow_id, task_queue=task_queue), 30)
            with pytest.raises(WorkflowAlreadyStartedError) as refused:
                await asyncio.wait_for(client.start_workflow(GateWorkflow.run, id=workflow_id, task_queue=task_queue), 30)
            assert (refused.value.cause, refused.value.run_id, refused.value.workflow_type) == (
                "WORKFLOW_ALREADY_STARTED", handle.result_run_id, "GateWorkflow",
            )
            assert refused.value.reason == f"workflow execution already started (run_id={handle.result_run_id})"
            await asyncio.wait_for(handle.signal(GateWorkflow.open), 30)
            assert await asyncio.wait_for(handle.result(), 30) == "opened"

            chain = await asyncio.wait_for(
                client.start_workflow(ChainWorkflow.run, 3, id=f"reply-chain-{uuid.uuid4()}", task_queue=task_queue), 30,
            )
            assert await asyncio.wait_for(chain.result(), 30) == "done after 3 continue-as-new"
            with pytest.raises(WorkflowFailureError) as first_run:  # the first run's own close
                await asyncio.wait_for(chain.result(follow_runs=False), 30)
            assert str(first_run.value.cause).startswith("ContinuedAsNew: Continued as new run ")
    finally:
        stack.start_service("visibility")
        stack.wait_until_ready()


async def test_a_result_whose_watcher_a_history_restart_forgot_comes_from_the_read_model(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """The history service keeps the clients waiting for a close in memory only: restarted between
    the start and the close, it sends no close, and result() has it from the read model."""
    async with Worker(client, task_queue=task_queue, workflows=[GateWorkflow]):
        handle = await client.start_workflow(GateWorkflow.run, id=f"reply-lost-{uuid.uuid4()}", task_queue=task_queue)
        stack.kill_service("history")
        stack.start_service("history")
        await asyncio.wait_for(handle.signal(GateWorkflow.open), 60)
        assert await asyncio.wait_for(handle.result(), 60) == "opened"
        assert handle._close_watch is not None and not handle._close_watch.last.done()


async def test_a_start_sent_again_is_answered_without_a_batch_and_its_partition_resumes_past_it(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """Twenty starts of one request id make one run and one history record: the nineteen sent
    again are answered from memory (each caller hears the run), and the partition's checkpoint
    moves past them, so a restart does not read them again."""
    workflow_id, request_id = f"again-{uuid.uuid4()}", str(uuid.uuid4())
    first = await client.start_workflow(GateWorkflow.run, id=workflow_id, task_queue=task_queue, request_id=request_id)
    again = await asyncio.gather(*(
        client.start_workflow(GateWorkflow.run, id=workflow_id, task_queue=task_queue, request_id=request_id) for _ in range(19)
    ))
    assert {handle.first_execution_run_id for handle in again} == {first.first_execution_run_id}

    partition = partition_for_key(workflow_id.encode(), stack.partitions)
    batches = await asyncio.to_thread(lambda: [m for m in read_to_end(stack.settings, topics.HISTORY, {partition: 0})
                                               if m.key() == workflow_id.encode()])
    assert len(batches) == 1, "only the first start writes a batch"
    last_start = max(m.offset() for m in await asyncio.to_thread(lambda: list(read_to_end(stack.settings, topics.COMMANDS, {partition: 0})))
                     if m.key() == workflow_id.encode())

    async def checkpointed_past() -> bool:
        async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn:
            row = await (await conn.execute(
                "SELECT last_source_offset FROM kadence_history_checkpoints WHERE partition = %s", (partition,))).fetchone()
        return row is not None and row[0] >= last_start

    deadline = asyncio.get_running_loop().time() + 30
    while not await checkpointed_past():
        assert asyncio.get_running_loop().time() < deadline, "no checkpoint moved past the starts sent again"
        await asyncio.sleep(0.2)
    await first.terminate("done")
