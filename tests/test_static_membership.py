"""Static membership (KADENCE_INSTANCE_ID) on Apache Kafka: a history instance restarted with its
instance id gets its own partitions back, and the other instance keeps its partitions (and the
state it holds) without a rebalance; with dynamic membership the same restart rebalances both.
Every producer is idempotent: each record batch in the broker's log carries a producer id."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from kadence.client import Client
from kadence.dev.brokers.apache_kafka import cached_classpath, find_java
from kadence.dev.local_stack import LocalStack
from kadence.ops.audit import audit_history
from kadence.protocol import topics
from kadence.protocol.kafka import base_config, ensure_topics
from kadence.worker import Worker
from services.history.service import CONSUMER_GROUP as HISTORY_GROUP
from services.matching.app import APP_ID as MATCHING_GROUP
from tests.conftest import local_stack
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, TwoStepWorkflow

pytestmark = pytest.mark.kafka_only

HISTORY = ("history-0", "history-1")
# Longer than a service process takes to stop and start again here (about 2 s): the restarted
# static member is back before the broker would give its partitions to the other instance.
SESSION_TIMEOUT_MS = 20_000
OWNERSHIP = re.compile(r"event=partition_(assigned|revoked) partition=(\d+)")


def instance_env(instance: str, static: bool) -> dict[str, str]:
    return {"KADENCE_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS), **({"KADENCE_INSTANCE_ID": instance} if static else {})}


def log_text(stack: LocalStack, instance: str) -> str:
    path = stack.data_dir / "logs" / f"{instance}.log"
    return path.read_text() if path.exists() else ""


def owned(log: str) -> set[int]:
    """The partitions a history instance owns at the end of this stretch of its log."""
    partitions: set[int] = set()
    for change, partition in OWNERSHIP.findall(log):
        (partitions.add if change == "assigned" else partitions.discard)(int(partition))
    return partitions


async def until_split(stack: LocalStack, timeout: float = 60) -> dict[str, set[int]]:
    """Until the two instances own all partitions between them, each some."""
    deadline = time.monotonic() + timeout
    while True:
        owners = {instance: owned(log_text(stack, instance)) for instance in HISTORY}
        if all(owners.values()) and set.union(*owners.values()) == set(range(stack.partitions)) \
                and sum(map(len, owners.values())) == stack.partitions:
            return owners
        assert time.monotonic() < deadline, f"the partitions were never split between {HISTORY}: {owners}"
        await asyncio.sleep(0.1)


async def until_logged(stack: LocalStack, instance: str, after: int, text: str, timeout: float = 60) -> None:
    """Until `instance` logs `text` past the first `after` characters of its log."""
    deadline = time.monotonic() + timeout
    while text not in (log := log_text(stack, instance)[after:]):
        assert time.monotonic() < deadline, f"{instance} never logged {text!r}: {log[-2000:]}"
        await asyncio.sleep(0.1)


def producer_ids(stack: LocalStack, topic_names: list[str]) -> dict[str, list[int]]:
    """Per topic, the producer id of every record batch, from the broker's log segments (Kafka's
    own DumpLogSegments); -1 is a batch of a producer that is not idempotent."""
    classpath, java = cached_classpath(), find_java()
    assert classpath and java
    segments = [path for name in topic_names for path in sorted((stack.data_dir / "kafka").glob(f"{name}-*/*.log"))]
    dumped = subprocess.run([java, "-cp", classpath, "kafka.tools.DumpLogSegments", "--files", ",".join(map(str, segments))],
                            capture_output=True, text=True, timeout=120, check=True).stdout
    found: dict[str, list[int]] = {name: [] for name in topic_names}
    for section in dumped.split("Dumping ")[1:]:
        topic = Path(section.split("\n", 1)[0]).parent.name.rsplit("-", 1)[0]
        found[topic] += [int(pid) for pid in re.findall(r"producerId: (-?\d+)", section)]
    return found


async def static_members(stack: LocalStack, timeout: float = 30) -> dict[str, set[str]]:
    """Each service group's static members, once every service has joined (history's split says
    only that history has: the others may still be joining), or as they are at the deadline."""
    admin = AdminClient(base_config(stack.settings))  # held until the answers are in
    groups = [HISTORY_GROUP, MATCHING_GROUP, "kadence.timer", "kadence.visibility"]
    deadline = time.monotonic() + timeout
    while True:
        described = admin.describe_consumer_groups(groups)
        members = {group: {member.group_instance_id for member in future.result().members} for group, future in described.items()}
        if all(members.values()) or time.monotonic() > deadline:
            return members
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
async def test_restarting_a_history_instance_moves_the_other_one_partitions_only_without_an_instance_id(
    monkeypatch: pytest.MonkeyPatch, task_queue: str, static: bool,
) -> None:
    with local_stack(services=()) as stack:
        for key, value in stack.kadence_env.items():
            monkeypatch.setenv(key, value)  # the in-process client and worker use this stack
        for name in ("matching", "timer", "visibility"):
            stack.start_service(name, f"{name}-0", env=instance_env(f"{name}-0", static))
        for instance in HISTORY:
            stack.start_service("history", instance, env=instance_env(instance, static))
        before = await until_split(stack)
        marks = {instance: len(log_text(stack, instance)) for instance in HISTORY}

        if static:  # each service joined its group as the static member its instance id names
            groups = {HISTORY_GROUP: set(HISTORY), MATCHING_GROUP: {"matching-0"}, "kadence.timer": {"timer-0"},
                      "kadence.visibility": {"visibility-0"}}
            assert await static_members(stack) == groups

        client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
        try:
            async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
                ids = [f"restart-{i}-{uuid.uuid4()}" for i in range(30)]
                handles = await asyncio.gather(*(client.start_workflow(TwoStepWorkflow.run, i, id=i, task_queue=task_queue) for i in ids))
                results = [asyncio.ensure_future(h.result()) for h in handles]
                await asyncio.wait(results, return_when=asyncio.FIRST_COMPLETED, timeout=60)
                assert not all(r.done() for r in results), "the restart must land mid-run"

                stack.kill_service("history-1", signal.SIGTERM)
                stack.start_service("history", "history-1", env=instance_env("history-1", static))

                assert await asyncio.wait_for(asyncio.gather(*results), 120) == [f"{i}!" for i in ids]
        finally:
            await client.close()

        kept = log_text(stack, "history-0")[marks["history-0"]:]
        restarted = log_text(stack, "history-1")[marks["history-1"]:]
        if static:
            assert "event=partition_revoked" not in kept and "event=partition_assigned" not in kept, kept
            assert owned(restarted) == before["history-1"], "the restarted instance got its own partitions back"
        else:  # the control: a dynamic member leaving and joining again rebalances the other instance
            # (the workflows may all finish on history-0 before history-1 is back and takes its share)
            await until_logged(stack, "history-0", marks["history-0"], "event=partition_revoked")

        report = audit_history(stack.settings)
        assert report.violations == []
        for handle in handles:
            assert report.event_types(handle.id, handle.result_run_id).count("WorkflowExecutionCompleted") == 1

        if static:
            # confluent-kafka's producers (history, which writes the task queue topics, timer, client,
            # worker) and matching's faust one (relayed commands); a plain producer's batch shows the
            # check can fail. Activities ran eagerly, so their topic may hold nothing: the workflow one.
            ensure_topics(stack.settings, {"not-idempotent": 1})
            plain = Producer({**base_config(stack.settings), "enable.idempotence": False, "acks": 1})
            plain.produce("not-idempotent", b"x")
            plain.flush(30)
            written = producer_ids(stack, [topics.HISTORY, topics.COMMANDS, topics.task_queue_topic(task_queue, "workflow"),
                                           "not-idempotent"])
            assert written.pop("not-idempotent") == [-1]
            for topic, ids in written.items():
                assert ids and min(ids) >= 0, f"{topic}: {ids.count(-1)} of {len(ids)} batches have no producer id"

