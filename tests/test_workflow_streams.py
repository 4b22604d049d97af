"""kadence.contrib.workflow_streams, as temporalio's: a workflow publishes to its stream, and so
do its activities and outside clients; subscribers read it by topic and offset while it runs,
follow it through continue-as-new, go on past a truncation, and read what a closed run holds.
The first tests need no stack: the client's refusals and the wire form."""

from __future__ import annotations

import asyncio
import base64
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest

from kadence import activity, workflow
from kadence.api.common.v1 import Payload
from kadence.client import Client, WorkflowHandle
from kadence.common import RawValue
from kadence.contrib.workflow_streams import (
    PublishEntry,
    PublishInput,
    WorkflowStream,
    WorkflowStreamClient,
    WorkflowStreamItem,
    WorkflowStreamState,
)
from kadence.contrib.workflow_streams._types import PUBLISH_SIGNAL, decode_payload, encode_payload
from kadence.converter import DataConverter
from kadence.exceptions import ApplicationError, WorkflowUpdateFailedError
from kadence.worker import Worker

CONVERTER = DataConverter.default.payload_converter


@dataclass
class BuildInput:
    steps: int
    stream_state: WorkflowStreamState | None = None


@dataclass
class StepEvent:
    step: int
    state: str


@dataclass
class LogLine:
    text: str


@activity.defn
async def compile_step(step: int) -> str:
    """Publishes its log lines to the stream of the workflow that runs it."""
    stream = WorkflowStreamClient.from_within_activity(batch_interval=timedelta(milliseconds=50))
    async with stream:
        lines = stream.topic("log", type=LogLine)
        lines.publish(LogLine(f"compiling step {step}"))
        lines.publish(LogLine(f"step {step} compiled"), force_flush=True)
    return f"artifact-{step}"


@workflow.defn
class BuildWorkflow:
    """Publishes each step's start and end; its activity publishes the step's log between them.
    It returns as soon as it is done: subscribers read the rest from the closed run."""

    @workflow.init
    def __init__(self, input: BuildInput) -> None:
        self.stream = WorkflowStream(prior_state=input.stream_state)
        self.steps = self.stream.topic("steps", type=StepEvent)

    @workflow.run
    async def run(self, input: BuildInput) -> list[str]:
        artifacts = []
        for step in range(input.steps):
            self.steps.publish(StepEvent(step, "started"))
            artifacts.append(await workflow.execute_activity(compile_step, step, start_to_close_timeout=timedelta(seconds=30)))
            self.steps.publish(StepEvent(step, "done"))
        return artifacts


@dataclass
class BoardInput:
    stream_state: WorkflowStreamState | None = None


@workflow.defn
class BoardWorkflow:
    """A notice board: only outside publishers write to its stream; an update truncates it."""

    @workflow.init
    def __init__(self, input: BoardInput) -> None:
        self.stream = WorkflowStream(prior_state=input.stream_state)
        self.closed = False

    @workflow.run
    async def run(self, input: BoardInput) -> None:
        await workflow.wait_condition(lambda: self.closed)
        # Released, then refused while the board stays up a moment: subscribers wait it out.
        self.stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        await workflow.sleep(0.3)

    @workflow.update
    def truncate(self, up_to_offset: int) -> None:
        self.stream.truncate(up_to_offset)

    @workflow.signal
    def close(self) -> None:
        self.closed = True


@dataclass
class RelayInput:
    laps: int
    beats_per_lap: int
    stream_state: WorkflowStreamState | None = None


@dataclass
class Beat:
    lap: int
    beat: int


@workflow.defn
class RelayWorkflow:
    """Publishes a lap of beats per run and hands its stream to the next run (continue-as-new)."""

    @workflow.init
    def __init__(self, input: RelayInput) -> None:
        self.stream = WorkflowStream(prior_state=input.stream_state)
        self.beats = self.stream.topic("beats", type=Beat)

    @workflow.run
    async def run(self, input: RelayInput) -> None:
        for beat in range(input.beats_per_lap):
            self.beats.publish(Beat(input.laps, beat))
            await workflow.sleep(0.1)
        if input.laps > 1:
            await self.stream.continue_as_new(lambda state: [RelayInput(input.laps - 1, input.beats_per_lap, state)])
        # The last run lets its waiting polls go before it ends, so none is cut off; their
        # subscribers read what is left by query.
        self.stream.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)


WORKFLOWS = [BuildWorkflow, BoardWorkflow, RelayWorkflow]


def offline_stream_client() -> WorkflowStreamClient:
    """A stream client whose handle's client is never called: for what it refuses before sending anything."""
    return WorkflowStreamClient(WorkflowHandle(DataConverterOnly(), "no-workflow"))


class DataConverterOnly:
    data_converter = DataConverter.default


def test_a_topic_keeps_one_type_and_payloads_are_asked_for_as_raw_values() -> None:
    stream = offline_stream_client()
    assert stream.topic("log", type=LogLine).type is LogLine
    stream.topic("log", type=LogLine)  # the same type again
    with pytest.raises(RuntimeError, match=r"topic 'log' is bound to .*LogLine.*: use one type per topic"):
        stream.topic("log", type=StepEvent)
    with pytest.raises(RuntimeError, match="cannot be bound to type=Payload.*result_type=RawValue"):
        stream.topic("raw", type=Payload)
    with pytest.raises(RuntimeError, match="pass result_type=RawValue"):
        stream.subscribe(result_type=Payload)


def test_items_travel_as_the_base64_of_their_protobuf_payload() -> None:
    payload = CONVERTER.to_payload(LogLine("hello"))
    wire = encode_payload(payload)
    assert base64.b64decode(wire) == payload.SerializeToString()
    assert decode_payload(wire) == payload


async def test_a_workflow_and_its_activity_publish_and_subscribers_read_while_it_runs_and_after(
    client: Client, task_queue: str,
) -> None:
    workflow_id = f"build-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, workflows=WORKFLOWS, activities=[compile_step]):
        handle = await client.start_workflow(BuildWorkflow.run, BuildInput(steps=3), id=workflow_id, task_queue=task_queue)
        stream = WorkflowStreamClient.create(client, workflow_id)
        # No in-band end: the iterator ends by itself once the run has closed and its items are read.
        items = [item async for item in stream.subscribe(result_type=RawValue, poll_cooldown=timedelta(0))]
        assert await handle.result() == ["artifact-0", "artifact-1", "artifact-2"]
        expected: list[tuple[str, Any]] = []
        for step in range(3):
            expected += [("steps", StepEvent(step, "started")), ("log", LogLine(f"compiling step {step}")),
                         ("log", LogLine(f"step {step} compiled")), ("steps", StepEvent(step, "done"))]
        decoded = [(item.topic, CONVERTER.from_payload(item.data.payload, StepEvent if item.topic == "steps" else LogLine))
                   for item in items]
        assert decoded == expected
        assert [item.offset for item in items] == list(range(12))

        # After the close: one topic, typed, from an offset, read by query.
        log = stream.topic("log", type=LogLine)
        late = [item async for item in log.subscribe(from_offset=7)]
        assert late == [WorkflowStreamItem("log", LogLine("compiling step 2"), 9),
                        WorkflowStreamItem("log", LogLine("step 2 compiled"), 10)]
        assert await stream.get_offset() == 12


async def test_outside_publishers_batches_are_taken_once_and_a_subscriber_goes_on_past_a_truncation(
    client: Client, task_queue: str,
) -> None:
    workflow_id = f"board-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, workflows=WORKFLOWS):
        handle = await client.start_workflow(BoardWorkflow.run, BoardInput(), id=workflow_id, task_queue=task_queue)
        publisher = WorkflowStreamClient.create(client, workflow_id, batch_interval=timedelta(hours=1), max_batch_size=3)
        async with publisher:
            notes = publisher.topic("notes", type=str)
            for n in range(7):
                notes.publish(f"note {n}")
            await publisher.flush()
        assert await publisher.get_offset() == 7

        # A batch sent twice (a flush retried after its signal landed) is taken once.
        again = PublishInput([PublishEntry("notes", encode_payload(CONVERTER.to_payload("retried")))], publisher_id="p1", sequence=1)
        await handle.signal(PUBLISH_SIGNAL, again)
        await handle.signal(PUBLISH_SIGNAL, again)
        assert await publisher.get_offset() == 8

        await handle.execute_update(BoardWorkflow.truncate, 5)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(BoardWorkflow.truncate, 9)
        assert isinstance(refused.value.cause, ApplicationError) and refused.value.cause.type == "TruncateOutOfRange"

        # From an offset truncated away, the subscriber starts again at the oldest item kept.
        behind = publisher.subscribe("notes", from_offset=2, result_type=str, poll_cooldown=timedelta(0))
        assert [(item.offset, item.data) async for item in _take(behind, 3)] == [(5, "note 5"), (6, "note 6"), (7, "retried")]

        live = asyncio.ensure_future(_collect(publisher.subscribe("notes", from_offset=8, result_type=str,
                                                                 poll_cooldown=timedelta(milliseconds=50))))
        async with publisher:
            notes.publish("last note", force_flush=True)
        await handle.signal(BoardWorkflow.close)
        assert [(item.offset, item.data) for item in await asyncio.wait_for(live, 30)] == [(8, "last note")]


async def test_a_subscriber_follows_the_stream_through_continue_as_new(client: Client, task_queue: str) -> None:
    workflow_id = f"relay-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=task_queue, workflows=WORKFLOWS):
        handle = await client.start_workflow(RelayWorkflow.run, RelayInput(laps=3, beats_per_lap=3), id=workflow_id, task_queue=task_queue)
        # On the first run: each poll after a continue-as-new finds its run closed, and moves to the next.
        first_run = client.get_workflow_handle(workflow_id, run_id=handle.result_run_id)
        stream = WorkflowStreamClient(first_run, client=client)
        items = [item async for item in stream.topic("beats", type=Beat).subscribe(poll_cooldown=timedelta(milliseconds=20))]
        assert [(item.offset, item.data) for item in items] == [
            (lap_index * 3 + beat, Beat(lap, beat)) for lap_index, lap in enumerate([3, 2, 1]) for beat in range(3)
        ]
        runs = [run async for run in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
        assert sorted(run.status.value for run in runs) == ["Completed", "ContinuedAsNew", "ContinuedAsNew"]


async def _take(items: Any, count: int) -> Any:
    async for item in items:
        yield item
        count -= 1
        if count == 0:
            return


async def _collect(items: Any) -> list[Any]:
    return [item async for item in items]
