"""Histories larger than a Kafka record: workflow tasks carry what the worker lacks, and no record
Kadence writes passes the topics' limit (a run that would write one ends with the reason)."""

from __future__ import annotations

import asyncio
import os
import uuid
from datetime import timedelta

import pytest

from kadence import activity, workflow
from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import TerminatedError, WorkflowFailureError
from kadence.protocol.kafka import partition_for_key
from kadence.protocol.limits import MAX_PAYLOAD_BYTES, MAX_RECORD_VALUE_BYTES, iter_payloads, payload_bytes
from kadence.worker import Worker
from tests.conftest import workflow_id_on

BLOB_BYTES = MAX_PAYLOAD_BYTES * 85 // 100  # under the payload limit, with room for the payload's own fields


@activity.defn
async def random_blob(size: int) -> bytes:
    return os.urandom(size)  # random: lz4 cannot make the records smaller than the limit


@activity.defn
async def blob_length(blob: bytes) -> int:
    return len(blob)


@workflow.defn
class BlobsWorkflow:
    """Collects `count` blobs, one activity after the other: each result stays in the history."""

    @workflow.run
    async def run(self, count: int, size: int) -> int:
        total = 0
        for _ in range(count):
            total += len(await workflow.execute_activity(random_blob, size, start_to_close_timeout=timedelta(seconds=30)))
        return total


@workflow.defn
class WideInputsWorkflow:
    """Schedules `count` activities at once, each with a blob of `size` as input: one workflow task
    completion whose commands fit in a command record, but whose history record would not."""

    @workflow.run
    async def run(self, count: int, size: int) -> int:
        blobs = [workflow.random().randbytes(size) for _ in range(count)]
        lengths = await asyncio.gather(*(
            workflow.execute_activity(blob_length, blob, start_to_close_timeout=timedelta(seconds=30)) for blob in blobs
        ))
        return sum(lengths)


def ids_on_one_partition(prefix: str, partitions: int) -> tuple[str, str]:
    """Two workflow ids whose commands and history share a partition."""
    first = f"{prefix}-{uuid.uuid4()}"
    partition = partition_for_key(first.encode(), partitions)
    return first, workflow_id_on(partition, partitions, f"{prefix}-neighbour")


def test_a_history_s_size_counts_the_data_of_every_payload_and_nothing_else() -> None:
    payload = {"metadata": {"encoding": b"json/plain"}, "data": b'"abcdef"'}
    attributes = {
        "input": [payload, {"metadata": {}, "data": b"xy"}], "identity": "worker", "raw": b"not a payload",
        "header": {"fields": {"trace": payload}}, "outcome": ("Failure", {"details": [payload], "cause": None}), "attempt": 3,
    }
    assert payload_bytes(attributes) == 8 + 2 + 8 + 8 == sum(len(p["data"]) for p in iter_payloads(attributes))
    assert payload_bytes(payload) == 8 and payload_bytes("text") == payload_bytes([]) == 0


async def test_a_history_larger_than_a_record_completes_and_its_partition_keeps_moving(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    count = MAX_RECORD_VALUE_BYTES // BLOB_BYTES + 1  # more than one record holds (each task used to carry them all)
    big, neighbour = ids_on_one_partition("big-history", stack.settings.partitions)
    async with Worker(client, task_queue=task_queue, workflows=[BlobsWorkflow], activities=[random_blob]):
        handle = await client.start_workflow(BlobsWorkflow.run, args=[count, BLOB_BYTES], id=big, task_queue=task_queue)
        small = await client.start_workflow(BlobsWorkflow.run, args=[1, 10], id=neighbour, task_queue=task_queue)
        assert await asyncio.wait_for(small.result(), 30) == 10
        assert await asyncio.wait_for(handle.result(), 60) == count * BLOB_BYTES
        after = await client.execute_workflow(BlobsWorkflow.run, args=[1, 10], id=f"{neighbour}-after", task_queue=task_queue)
    assert after == 10
    assert stack.services["history"].poll() is None, "the history service exited"


async def test_a_worker_without_the_run_cached_reads_the_events_its_task_lacks(client: Client, task_queue: str) -> None:
    # No cache: each workflow task after the first brings only the events since the previous one,
    # and the worker reads the rest from the read model.
    async with Worker(client, task_queue=task_queue, workflows=[BlobsWorkflow], activities=[random_blob], max_cached_workflows=0):
        result = await client.execute_workflow(BlobsWorkflow.run, args=[3, 100], id=f"uncached-{uuid.uuid4()}", task_queue=task_queue)
    assert result == 300


async def test_a_workflow_task_completion_too_large_for_a_record_ends_the_run_with_the_reason(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    wide, neighbour = ids_on_one_partition("wide-inputs", stack.settings.partitions)
    count = 5
    size = (MAX_RECORD_VALUE_BYTES - 200_000) // count  # the completion fits in a command; twice it does not
    assert size < MAX_PAYLOAD_BYTES
    async with Worker(client, task_queue=task_queue, workflows=[WideInputsWorkflow, BlobsWorkflow], activities=[blob_length, random_blob]):
        handle = await client.start_workflow(WideInputsWorkflow.run, args=[count, size], id=wide, task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), 30)
        assert await client.execute_workflow(BlobsWorkflow.run, args=[1, 10], id=neighbour, task_queue=task_queue) == 10
    assert isinstance(failure.value.cause, TerminatedError)
    events = (await handle.fetch_history()).events
    terminated = events[-1]["attributes"]
    assert terminated[0] == "WorkflowExecutionTerminated"
    assert "RespondWorkflowTaskCompleted would write a history record of up to" in terminated[1]["reason"]
    assert "ActivityTaskScheduled" not in {event["attributes"][0] for event in events}
    assert stack.services["history"].poll() is None, "the history service exited"


async def test_a_workflow_task_completion_too_large_to_send_fails_its_task_and_ends_the_run(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    wide, neighbour = ids_on_one_partition("too-large-to-send", stack.settings.partitions)
    count = MAX_RECORD_VALUE_BYTES // BLOB_BYTES + 1  # the completion's commands alone pass a record
    async with Worker(client, task_queue=task_queue, workflows=[WideInputsWorkflow, BlobsWorkflow], activities=[blob_length, random_blob]):
        handle = await client.start_workflow(WideInputsWorkflow.run, args=[count, BLOB_BYTES], id=wide, task_queue=task_queue)
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), 30)
        # The worker goes on: the same worker runs the next workflow of the partition.
        assert await client.execute_workflow(BlobsWorkflow.run, args=[1, 10], id=neighbour, task_queue=task_queue) == 10
    assert isinstance(failure.value.cause, TerminatedError)
    events = [event["attributes"] for event in (await handle.fetch_history()).events]
    assert [kind for kind, _ in events[-2:]] == ["WorkflowTaskStarted", "WorkflowExecutionTerminated"]
    assert "RespondWorkflowTaskCompleted for" in events[-1][1]["reason"]
    assert "a kadence.commands record holds at most" in events[-1][1]["reason"]
