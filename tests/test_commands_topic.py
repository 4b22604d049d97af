"""What reaches kadence.commands from outside the SDK: any producer's start command, and garbage."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition

from examples.order import TASK_QUEUE, OrderWorkflow, cancel_order, process_payment, ship_order
from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.protocol import topics
from kadence.protocol.codec import command_codec, history_batch_codec
from kadence.protocol.kafka import partition_for_key, read_to_end
from kadence.worker import Worker
from tests.conftest import audit_of, workflow_id_on
from tests.test_cli import kadence
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, EchoWorkflow

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.also_on_tansu
async def test_start_command_from_a_plain_kafka_producer_starts_the_workflow(stack: LocalStack, client: Client) -> None:
    order_id = f"order-{uuid.uuid4()}"
    produced = subprocess.run(
        [sys.executable, "examples/start_by_topic.py", order_id, "42.0"], env=stack.env, cwd=REPO,
        capture_output=True, text=True, timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    async with Worker(client, task_queue=TASK_QUEUE, workflows=[OrderWorkflow], activities=[process_payment, ship_order, cancel_order]):
        assert await client.get_workflow_handle(order_id).result() == f"shipped_{order_id}"


async def test_garbage_on_the_commands_topic_goes_to_the_dlq_and_the_partition_keeps_moving(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    garbage = b"\x00\xff this is not an Avro command " + uuid.uuid4().bytes
    partition = 1
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    producer.produce(topics.COMMANDS, garbage, b"garbage", partition=partition, headers=[("kadence-trace", b"kept")])
    producer.flush(10)

    workflow_id = workflow_id_on(partition, stack.partitions, "after-garbage")
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        assert await client.execute_workflow(EchoWorkflow.run, "still moving", id=workflow_id, task_queue=task_queue) == "still moving"

    dead = [msg for msg in read_to_end(stack.settings, topics.DLQ, {0: 0}) if msg.value() == garbage]
    assert len(dead) == 1
    headers = dict(dead[0].headers())
    assert headers["kadence-source-topic"] == topics.COMMANDS.encode()
    assert headers["kadence-source-partition"] == str(partition).encode()
    assert b"Command" in headers["kadence-error"]
    assert headers["kadence-trace"] == b"kept", "the record's own headers stay with it"

    # Operators see it with `kadence dlq list`, and `kadence dlq replay` sends it back, unchanged,
    # to where it came from; still garbage, it is dead-lettered again from its new offset.
    [listed] = [json.loads(line) for line in kadence(stack, "dlq", "list", "--json").stdout.splitlines()
                if json.loads(line)["offset"] == dead[0].offset()]
    assert listed["source"] == f"{topics.COMMANDS}/{partition}@{headers['kadence-source-offset'].decode()}" and listed["key"] == "garbage"
    assert "Command" in listed["error"] and listed["bytes"] == len(garbage)
    replayed = kadence(stack, "dlq", "replay", "--offset", str(dead[0].offset()))
    assert replayed.returncode == 0, replayed.stderr
    # The partition moves past it again.
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        assert await client.execute_workflow(EchoWorkflow.run, "still", id=f"{workflow_id}-2", task_queue=task_queue) == "still"
    again = [msg for msg in read_to_end(stack.settings, topics.DLQ, {0: 0}) if msg.value() == garbage]
    assert len(again) == 2
    replayed_headers = dict(again[1].headers())
    assert replayed_headers["kadence-source-partition"] == str(partition).encode(), "replayed to the partition it came from"
    assert int(replayed_headers["kadence-source-offset"]) > int(headers["kadence-source-offset"])
    assert dict(again[1].headers())["kadence-trace"] == b"kept"


async def restart_history_and_pass_through(stack: LocalStack, client: Client, task_queue: str, partitions: list[int]) -> None:
    """Kill -9 the history service, start it again, and see a workflow through each partition, so
    whatever the restarted service reads again there has been dealt with."""
    stack.kill_service("history")
    stack.start_service("history")
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        for partition in partitions:
            workflow_id = workflow_id_on(partition, stack.partitions, "after-restart")
            assert await client.execute_workflow(EchoWorkflow.run, "on", id=workflow_id, task_queue=task_queue) == "on"


async def test_a_start_on_the_wrong_partition_is_forwarded_once_across_a_history_restart(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """What librdkafka's and kcat's default partitioner (consistent_random, not murmur2) do to a
    producer without a request id: history forwards the start to its owner. A restart of history
    must not forward it again (a second run of the workflow)."""
    owner = 0
    workflow_id = workflow_id_on(owner, stack.partitions, "misrouted")
    wrong = owner + 1
    commands = command_codec()
    start = {"workflow_id": workflow_id, "identity": "kcat", "command": ("StartWorkflowExecution", {
        "workflow_type": "EchoWorkflow", "task_queue": task_queue, "input": [{"metadata": {"encoding": b"json/plain"}, "data": b'"once"'}],
        "request_id": "", "workflow_task_timeout_ms": 0, "id_reuse_policy": "ALLOW_DUPLICATE", "id_conflict_policy": "FAIL",
        "execution_timeout_ms": 0, "run_timeout_ms": 0, "search_attributes": {},
    })}
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    producer.produce(topics.COMMANDS, commands.encode(start), workflow_id.encode(), partition=wrong)
    producer.flush(10)
    batches = history_batch_codec()

    def recorded(event_type: str) -> set[str]:
        """The runs of the workflow whose history holds an event of this type."""
        return {
            batch["run_id"] for msg in read_to_end(stack.settings, topics.HISTORY, {owner: 0})
            if (batch := batches.decode(msg.value(), msg.headers()))["workflow_id"] == workflow_id
            and any(event["attributes"][0] == event_type for event in batch["events"])
        }

    async def until_completed() -> None:
        while not recorded("WorkflowExecutionCompleted"):
            await asyncio.sleep(0.1)

    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        await asyncio.wait_for(until_completed(), 30)
    await restart_history_and_pass_through(stack, client, task_queue, [wrong, owner])
    runs = recorded("WorkflowExecutionStarted")
    assert len(runs) == 1, f"the misrouted start made {len(runs)} runs"


async def test_garbage_that_ends_its_partition_is_dead_lettered_once_across_a_history_restart(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    garbage = b"\x00 not a command, the last record of its partition " + uuid.uuid4().bytes
    partition = 3
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    producer.produce(topics.COMMANDS, garbage, b"garbage", partition=partition)
    producer.flush(10)

    async def dead_lettered() -> int:
        return sum(msg.value() == garbage for msg in read_to_end(stack.settings, topics.DLQ, {0: 0}))

    async def until_dead_lettered() -> None:
        while not await dead_lettered():
            await asyncio.sleep(0.1)

    await asyncio.wait_for(until_dead_lettered(), 30)
    await restart_history_and_pass_through(stack, client, task_queue, [partition])
    assert await dead_lettered() == 1


def _start_command(workflow_id: str, workflow_type: str, input_bytes: bytes = b'"x"') -> dict:
    """A start as any producer may write it: no request id, so nobody waits for its answer."""
    return {"workflow_id": workflow_id, "identity": "plain-producer", "command": ("StartWorkflowExecution", {
        "workflow_type": workflow_type, "task_queue": "nowhere", "request_id": "",
        "input": [{"metadata": {"encoding": b"json/plain"}, "data": input_bytes}],
        "workflow_task_timeout_ms": 0, "id_reuse_policy": "ALLOW_DUPLICATE", "id_conflict_policy": "FAIL",
        "execution_timeout_ms": 0, "run_timeout_ms": 0, "search_attributes": {},
    })}


async def test_a_refused_command_without_a_request_id_is_dead_lettered_with_the_reason_once(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    """Nobody waits for the answer to a command without a request id, so its refusal goes to
    kadence.dlq with the cause and the reason, once, across a history restart."""
    partition = 2
    refused = {
        "too large": _start_command(workflow_id_on(partition, stack.partitions, "huge"), "Big", b'"' + b"x" * 5_000_000 + b'"'),
        "unknown workflow": {"workflow_id": workflow_id_on(partition, stack.partitions, "nobody"), "identity": "plain-producer",
                             "command": ("SignalWorkflowExecution", {"run_id": "", "signal_name": "ping", "input": [], "request_id": ""})},
        "no workflow type": _start_command(workflow_id_on(partition, stack.partitions, "untyped"), ""),
    }
    codec = command_codec()
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "message.max.bytes": 10 * 1024 * 1024})
    values = {}
    for name, command in refused.items():
        values[name] = codec.encode(command)
        producer.produce(topics.COMMANDS, values[name], command["workflow_id"].encode(), partition=partition, headers=codec.headers())
    assert producer.flush(30) == 0
    await restart_history_and_pass_through(stack, client, task_queue, [partition])

    letters = [msg for msg in read_to_end(stack.settings, topics.DLQ, {0: 0}) if msg.value() in values.values()]
    errors = {name: [dict(msg.headers())["kadence-error"].decode() for msg in letters if msg.value() == value]
              for name, value in values.items()}
    assert {name: len(found) for name, found in errors.items()} == dict.fromkeys(refused, 1), errors
    assert errors["too large"][0] == "refused (INVALID_ARGUMENT): workflow input: a payload of 5.0 MB exceeds the 2 MB limit", errors
    assert errors["unknown workflow"][0].startswith("refused (WORKFLOW_NOT_FOUND): workflow execution not found"), errors
    assert errors["no workflow type"][0] == (
        "refused (INVALID_ARGUMENT): StartWorkflowExecution needs a workflow_type and a task_queue"
    ), errors


async def test_history_decides_a_command_at_its_log_append_time(stack: LocalStack, client: Client, task_queue: str) -> None:
    """The broker stamps each command (kadence.commands is LogAppendTime) and history decides it at
    that time, not its own clock's, so any instance that decides it again decides alike."""
    handle = await client.start_workflow(EchoWorkflow.run, "when", id=f"stamped-{uuid.uuid4()}", task_queue=task_queue)
    report = audit_of(stack, handle.id)
    assert handle.first_execution_run_id is not None
    [started] = [e for e in report.history(handle.id, handle.first_execution_run_id) if e["attributes"][0] == "WorkflowExecutionStarted"]
    [first] = [b for b in read_to_end(stack.settings, topics.HISTORY, {partition_for_key(handle.id.encode(), stack.partitions): 0})
               if b.key() == handle.id.encode()]
    source = history_batch_codec().decode(first.value(), first.headers())
    consumer = Consumer({"bootstrap.servers": stack.bootstrap_servers, "group.id": f"stamp-{uuid.uuid4()}"})
    try:
        consumer.assign([TopicPartition(topics.COMMANDS, source["source_partition"], source["source_offset"])])
        command = consumer.poll(30)
    finally:
        consumer.close()
    assert command is not None and command.error() is None and command.key() == handle.id.encode()
    assert command.timestamp() == (TIMESTAMP_LOG_APPEND_TIME, started["event_time_ms"])
