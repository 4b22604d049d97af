"""A cluster of three Apache Kafka nodes, as production runs (deploy/: replication 3,
min.insync.replicas 2, acks=all), losing one node while 200 workflows are in flight: a crash
(SIGKILL of the node leading most kadence.history partitions, started again once its partitions
have new leaders) and a rolling restart (each node stopped cleanly and started again, the next one
only once it is back in every ISR, as Strimzi rolls its pods).

With replication 3 a node's loss is a leader change, not an outage: every workflow completes once
with its result, no activity attempt runs twice, the audit is clean, every partition has a leader
and a full ISR again, and every service is ready again, the same process. Each leader change's
cost is measured and printed (and in the assertion messages): when the cluster's metadata named
new leaders for the node's kadence.history partitions, and how long a produce waited, acks=all, to
partitions laid out as kadence.history's (same replicas, same leader) that the node led and that
it did not. Run with -s to see them.

The tests share a stack of their own, since they break nodes (Apache Kafka only: Tansu runs one node).
They run on every CI run, on two cores beside another test file: the cluster is sized for that
(a controller of its own, small JVMs; kadence/dev/brokers/apache_kafka.py) and the services run in
one process (`kadence server`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kadence.dev.local_stack import LocalStack
from kadence.protocol import topics
from kadence.protocol.kafka import AsyncProducer, base_config
from tests.broker_load import (
    FAULT_AFTER_STARTS,
    START_INTERVAL_S,
    Fault,
    LoadRun,
    assert_each_completed_once,
    run_through,
    stack_of_its_own,
)
from tests.conftest import one_heavy_test_at_a_time

# Longer than the suite's default timeout: a test may wait for the soak to end (conftest's
# one_heavy_test_at_a_time) before its own deadline begins.
pytestmark = [pytest.mark.kafka_only, pytest.mark.cluster, pytest.mark.timeout(1200)]

NODES = 3
# The cluster answers its metadata within this; a node that is stuck is the failure this catches.
LEADER_CHANGE_BOUND_S = 30.0
IN_SYNC_TIMEOUT_S = 60.0  # a restarted node back in every ISR
PROBE_INTERVAL_S = 0.1
PROBE_STOP_TIMEOUT_S = 5.0
# Rolling: each node is away some 12 s (its restart waits out its session, see docs/operations.md),
# so the starts spread over 40 s and the first stop comes 4 s in: all three restarts find workflows in flight.
ROLLING_START_INTERVAL_S = 0.2
ROLLING_FAULT_AFTER_STARTS = 20
# A last resort against a hang, not a speed target: the steps have their own bounds (a leader change,
# a node back in sync, every workflow completed, every service ready again), which fail with what
# they waited for. A rolling restart on CI's two cores beside another test file has taken over 200 s.
TEST_DEADLINE_S = 480.0


@dataclass
class LeaderChange:
    """One node leaving: what it led, when, and what that cost."""

    node: int
    how: str  # "SIGKILL" or "clean stop"
    at: float
    led: list[int]  # the kadence.history partitions it led
    elected_s: float | None = None  # until the metadata named a new leader for each
    led_wait_s: float = 0.0  # the longest produce wait on the partitions it led
    other_wait_s: float = 0.0  # ... on the others
    back_s: float | None = None  # from leaving until serving again and back in every ISR

    def progress(self) -> str:
        """The node back, as it happens (the produce waits are measured once the run is over)."""
        elected = "led no kadence.history partition" if not self.led else (
            f"new leaders in {self.elected_s:.2f} s" if self.elected_s is not None else "NO new leader")
        return f"  node {self.node} ({self.how}): {elected}; back in every ISR {self.back_s or 0:.1f} s after it left"

    def describe(self) -> str:
        back = f"back in every ISR {self.back_s:.1f} s after it left" if self.back_s is not None else "not back in every ISR"
        if not self.led:
            return f"node {self.node} ({self.how}): led no kadence.history partition; {back}"
        elected = f"new leaders in {self.elected_s:.2f} s" if self.elected_s is not None else "NO new leader"
        return (
            f"node {self.node} ({self.how}, led kadence.history {self.led}): {elected}; a produce waited up to "
            f"{self.led_wait_s:.2f} s on the partitions it led, {self.other_wait_s:.2f} s on the others; {back}"
        )


@dataclass
class LeaderWatch:
    """kadence.history's leaders, from the metadata every 100 ms, and a produce (acks=all) every
    100 ms to each partition of a probe topic laid out as kadence.history: its waits are what a
    producer of kadence.history felt while the leaders changed."""

    stack: LocalStack
    leaders: list[tuple[float, dict[int, int]]] = field(default_factory=list)  # (time, partition -> leader)
    waits: list[tuple[int, float, float]] = field(default_factory=list)  # (partition, sent, delivered)
    changes: list[LeaderChange] = field(default_factory=list)
    probe_topic: str = field(default_factory=lambda: f"kadence-test.probe-{uuid.uuid4().hex[:8]}")

    def create_probe_topic(self) -> None:
        """One partition per kadence.history partition, on its replicas, its leader first (so led by it)."""
        assert self.stack.broker is not None
        partitions = self.stack.broker.metadata().topics[topics.HISTORY].partitions
        assignment = [[meta.leader, *(r for r in meta.replicas if r != meta.leader)] for _, meta in sorted(partitions.items())]
        admin = AdminClient(base_config(self.stack.settings))
        new = NewTopic(self.probe_topic, num_partitions=len(assignment), replica_assignment=assignment,
                       config={"min.insync.replicas": "2"})
        admin.create_topics([new])[self.probe_topic].result(30)

    async def run(self, stop: asyncio.Event) -> None:
        # One client for the whole test: the cluster never has every broker fenced at once, which is
        # what makes librdkafka give up on a cluster (confluentinc/librdkafka#5301).
        admin = AdminClient(base_config(self.stack.settings))
        producer = AsyncProducer(self.stack.settings)
        try:
            await asyncio.gather(self._watch(admin, stop), *(
                self._probe(producer, partition, stop) for partition in range(self.stack.partitions)
            ))
        finally:
            producer.close()

    async def _watch(self, admin: AdminClient, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                metadata = await asyncio.to_thread(admin.list_topics, topics.HISTORY, timeout=1)
                leaders = {p: meta.leader for p, meta in metadata.topics[topics.HISTORY].partitions.items()}
                if not self.leaders or self.leaders[-1][1] != leaders:
                    self.leaders.append((time.monotonic(), leaders))
            except Exception:  # no answer within the second: asked again
                pass
            await asyncio.sleep(PROBE_INTERVAL_S)

    async def _probe(self, producer: AsyncProducer, partition: int, stop: asyncio.Event) -> None:
        while not stop.is_set():
            sent = time.monotonic()
            await producer.produce(self.probe_topic, b"probe", partition=partition)
            self.waits.append((partition, sent, time.monotonic()))
            await asyncio.sleep(PROBE_INTERVAL_S)

    async def leader_now(self) -> dict[int, int]:
        """kadence.history's leaders as the metadata names them now, once it names one for every
        partition: the watch's last snapshot may be seconds old on a loaded machine (its requests
        time out), or from a node that does not know the leaders yet."""
        admin = AdminClient(base_config(self.stack.settings))
        deadline = time.monotonic() + LEADER_CHANGE_BOUND_S
        while True:
            try:
                metadata = await asyncio.to_thread(admin.list_topics, topics.HISTORY, timeout=5)
                leaders = {p: meta.leader for p, meta in metadata.topics[topics.HISTORY].partitions.items()}
                if leaders and all(leader >= 0 for leader in leaders.values()):
                    return leaders
            except Exception:  # no answer in time: asked again
                pass
            assert time.monotonic() < deadline, f"no leader for every kadence.history partition within {LEADER_CHANGE_BOUND_S:.0f} s"
            await asyncio.sleep(PROBE_INTERVAL_S)

    async def node_leaves(self, node: int, how: str) -> LeaderChange:
        led = sorted(p for p, leader in (await self.leader_now()).items() if leader == node)
        change = LeaderChange(node, how, time.monotonic(), led)
        self.changes.append(change)
        return change

    async def until_moved(self, change: LeaderChange) -> None:
        """Until the metadata names, for every partition the node led, a leader other than it (at
        once when it led none: the leaders it watches do not change)."""
        if not change.led:
            return
        deadline = change.at + LEADER_CHANGE_BOUND_S
        while time.monotonic() < deadline:
            moved = self._moved_at(change)
            if moved is not None:
                change.elected_s = moved - change.at
                return
            await asyncio.sleep(PROBE_INTERVAL_S)

    def _moved_at(self, change: LeaderChange) -> float | None:
        for at, leaders in self.leaders:
            if at >= change.at and all(leaders.get(p, -1) not in (-1, change.node) for p in change.led):
                return at
        return None

    def measure_waits(self) -> None:
        """Each change's longest produce waits: of the records sent from just before it until the next."""
        ends = [change.at for change in self.changes[1:]] + [float("inf")]
        for change, end in zip(self.changes, ends, strict=True):
            waits = [(p, delivered - sent) for p, sent, delivered in self.waits if change.at - 1.0 <= sent < end]
            change.led_wait_s = max((wait for p, wait in waits if p in change.led), default=0.0)
            change.other_wait_s = max((wait for p, wait in waits if p not in change.led), default=0.0)

    def delivered_to_every_partition_since(self, since: float) -> bool:
        return {p for p, sent, _ in self.waits if sent >= since} == set(range(self.stack.partitions))


# The consumer groups' sessions: the stack's 2 s, on two cores that three JVMs share, run out while
# a node restarts (a heartbeat late behind the starved coordinator), and each rebalance recovers
# history's partitions again and sends the workers' tasks the slow way (docs/architecture.md,
# "Exactly once"). deploy/ sets 10 s, and 30 s for the static members.
CLUSTER_SESSION_TIMEOUT_MS = 10_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One cluster for both tests: each leaves it whole (every node back in every ISR, which it asserts)."""
    with one_heavy_test_at_a_time(tmp_path_factory), pytest.MonkeyPatch.context() as monkeypatch, stack_of_its_own(
        monkeypatch, tmp_path_factory.mktemp("cluster"), services=("server",), brokers=NODES,
        session_timeout_ms=CLUSTER_SESSION_TIMEOUT_MS,
    ) as stack:
        yield stack


async def _until_in_sync(stack: LocalStack, node: int) -> None:
    """Until the node is back in the ISR of every partition it holds a replica of."""
    assert stack.broker is not None
    deadline = time.monotonic() + IN_SYNC_TIMEOUT_S
    while (lagging := await asyncio.to_thread(stack.broker.out_of_sync, node)):
        assert time.monotonic() < deadline, f"node {node} not back in sync after {IN_SYNC_TIMEOUT_S:.0f} s: {lagging}"
        await asyncio.sleep(0.2)


def kill_the_history_leader(watch: LeaderWatch) -> Fault:
    async def fault(stack: LocalStack) -> float:
        assert stack.broker is not None
        node = Counter((await watch.leader_now()).values()).most_common(1)[0][0]
        change = await watch.node_leaves(node, "SIGKILL")
        await asyncio.to_thread(stack.broker.kill, node)
        await watch.until_moved(change)
        await asyncio.to_thread(stack.broker.start, node)  # later: once its partitions have new leaders
        await _until_in_sync(stack, node)
        change.back_s = time.monotonic() - change.at
        print(change.progress(), flush=True)
        return time.monotonic()

    return fault


def restart_each_node(watch: LeaderWatch) -> Fault:
    async def fault(stack: LocalStack) -> float:
        assert stack.broker is not None
        for node in stack.broker.nodes:
            change = await watch.node_leaves(node, "clean stop")
            await asyncio.to_thread(stack.broker.stop, node)
            await watch.until_moved(change)
            await asyncio.to_thread(stack.broker.start, node)
            await _until_in_sync(stack, node)
            change.back_s = time.monotonic() - change.at
            print(change.progress(), flush=True)  # on a failure, pytest shows how far the restart got
        return time.monotonic()

    return fault


async def _through(
    stack: LocalStack, what: str, fault: Fault, watch: LeaderWatch, *,
    start_interval_s: float = START_INTERVAL_S, fault_after_starts: int = FAULT_AFTER_STARTS,
) -> tuple[LoadRun, str]:
    """The workload through the fault, the leaders watched meanwhile; the run and its summary."""
    await asyncio.to_thread(watch.create_probe_topic)
    stop = asyncio.Event()
    watching = asyncio.create_task(watch.run(stop))
    try:
        while not watch.leaders:
            await asyncio.sleep(PROBE_INTERVAL_S)
        run = await run_through(stack, what, fault, start_interval_s=start_interval_s, fault_after_starts=fault_after_starts)
        await asyncio.sleep(1.0)  # a probe to every partition after the cluster is whole again
    finally:
        stop.set()
        # A probe's produce waits for its partition's leader: after a failure it may never come.
        await asyncio.wait([watching], timeout=PROBE_STOP_TIMEOUT_S)
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
    watch.measure_waits()
    summary = "\n".join([run.summary(), *(f"  leader change: {change.describe()}" for change in watch.changes)])
    print(f"\n{summary}")
    return run, summary


async def _assert_whole(stack: LocalStack, run: LoadRun, watch: LeaderWatch, summary: str) -> None:
    assert stack.broker is not None
    assert any(change.led for change in watch.changes), f"no node that left led a kadence.history partition; {summary}"
    for change in watch.changes:
        assert not change.led or change.elected_s is not None, f"a partition of node {change.node} had no new leader: {summary}"
    metadata = await asyncio.to_thread(stack.broker.metadata)
    leaderless = [f"{name}-{p}" for name, topic in metadata.topics.items() for p, meta in topic.partitions.items() if meta.leader == -1]
    assert leaderless == [], f"partitions without a leader: {leaderless}; {summary}"
    for node in stack.broker.nodes:
        assert await asyncio.to_thread(stack.broker.out_of_sync, node) == [], f"node {node} out of sync; {summary}"
    assert watch.delivered_to_every_partition_since(run.back_at), f"a partition took no produce after the cluster was whole; {summary}"
    await assert_each_completed_once(stack, run, summary)


async def test_a_crash_of_the_node_leading_most_history_partitions_loses_and_repeats_nothing(cluster: LocalStack) -> None:
    watch = LeaderWatch(cluster)
    async with asyncio.timeout(TEST_DEADLINE_S):
        run, summary = await _through(cluster, "SIGKILL of a node", kill_the_history_leader(watch), watch)
        await _assert_whole(cluster, run, watch, summary)


async def test_a_rolling_restart_of_every_node_loses_and_repeats_nothing(cluster: LocalStack) -> None:
    watch = LeaderWatch(cluster)
    async with asyncio.timeout(TEST_DEADLINE_S):
        run, summary = await _through(
            cluster, "rolling restart", restart_each_node(watch), watch,
            start_interval_s=ROLLING_START_INTERVAL_S, fault_after_starts=ROLLING_FAULT_AFTER_STARTS,
        )
        assert len(watch.changes) == NODES, summary
        await _assert_whole(cluster, run, watch, summary)
