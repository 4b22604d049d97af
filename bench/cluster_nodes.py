"""What a local cluster of three Apache Kafka brokers and their controller costs on this machine,
for each JVM and thread setting `kadence dev --brokers 3` and tests/test_broker_cluster.py could run.

    python -m bench.cluster_nodes [--variants shipped,g1,c2,cores-2,kafka-threads] [--seconds 20] [--rate 500]

Each variant gets a fresh cluster, as the settings shipped in kadence/dev/brokers/apache_kafka.py
with one thing changed, and prints: how long the cluster took to start and the CPU-seconds its
JVMs spent doing so; under a produce load (`--rate` records a second of 1 KiB for `--seconds`,
acks=all, a topic laid out as Kadence's: 8 partitions on 3 replicas, 2 in sync) the CPU-seconds of
the brokers and the controller and the produce latency's p50 and p99; then the SIGKILL of the
broker leading most partitions under the same load: when the metadata names new leaders, the
longest produce wait meanwhile, and how long its restart takes until it is back in every ISR.
Run it beside nothing else: on two cores, the variants differ by less than another process's noise.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import uvloop
from confluent_kafka.admin import AdminClient, NewTopic

from bench.bench_workflows import percentile
from bench.local import broker_processes, cpu_seconds, resident_bytes
from kadence.dev.brokers import apache_kafka
from kadence.dev.brokers.apache_kafka import ApacheKafka
from kadence.dev.brokers.process import free_port
from kadence.protocol.kafka import AsyncProducer, base_config
from kadence.protocol.settings import KafkaSettings

NODES = 3
PARTITIONS = 8
RECORD = b"x" * 1024
IN_SYNC_TIMEOUT_S = 120.0

SHIPPED_JVM = apache_kafka.CLUSTER_JVM_OPTIONS
SHIPPED_THREADS = apache_kafka.CLUSTER_BROKER_THREADS


def _replace(options: tuple[str, ...], prefix: str, by: str | None) -> tuple[str, ...]:
    kept = tuple(option for option in options if not option.startswith(prefix))
    return kept if by is None else (*kept, by)


# One change each from what is shipped: the brokers' JVM options and threads.
VARIANTS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "shipped": (SHIPPED_JVM, SHIPPED_THREADS),
    "g1": (_replace(_replace(SHIPPED_JVM, "-XX:+UseSerialGC", "-XX:+UseG1GC"), "-XX:MaxGCPauseMillis", "-XX:MaxGCPauseMillis=20"),
           SHIPPED_THREADS),
    "serial": (_replace(_replace(SHIPPED_JVM, "-XX:+UseG1GC", "-XX:+UseSerialGC"), "-XX:MaxGCPauseMillis", None), SHIPPED_THREADS),
    "c2": (_replace(SHIPPED_JVM, "-XX:TieredStopAtLevel", None), SHIPPED_THREADS),
    "cores-2": (_replace(SHIPPED_JVM, "-XX:ActiveProcessorCount", "-XX:ActiveProcessorCount=2"), SHIPPED_THREADS),
    "kafka-threads": (SHIPPED_JVM, {"num.network.threads": "3", "num.io.threads": "8", "background.threads": "10"}),
}


@dataclass
class Figures:
    variant: str
    start_s: float = 0.0
    start_cpu_s: float = 0.0
    resident_mib: float = 0.0
    load_cpu_s: dict[str, float] = field(default_factory=dict)
    produce_ms: list[float] = field(default_factory=list)
    elected_s: float | None = None
    kill_wait_s: float = 0.0
    restart_s: float = 0.0

    def describe(self, rate: int, seconds: float) -> str:
        load = sum(self.load_cpu_s.values())
        parts = ", ".join(f"{name} {spent:.1f}" for name, spent in sorted(self.load_cpu_s.items()))
        elected = f"{self.elected_s:.1f} s" if self.elected_s is not None else "none"
        return (
            f"{self.variant:>14}: start {self.start_s:5.1f} s, {self.start_cpu_s:5.1f} CPU-s, {self.resident_mib:4.0f} MiB resident; "
            f"{rate}/s for {seconds:.0f} s: {load:5.1f} CPU-s ({parts}), produce p50 {percentile(self.produce_ms, 50):.1f} ms "
            f"p99 {percentile(self.produce_ms, 99):.1f} ms; SIGKILL of a leader: new leaders {elected}, produce waited "
            f"{self.kill_wait_s:.1f} s, restart until in sync {self.restart_s:.1f} s"
        )


async def _load(producer: AsyncProducer, topic: str, rate: int, seconds: float, waits: list[float]) -> None:
    """`rate` records a second, spread over the partitions, each produce's wait (ms) in `waits`."""
    async def one(partition: int) -> None:
        sent = time.perf_counter()
        await producer.produce(topic, RECORD, partition=partition)
        waits.append((time.perf_counter() - sent) * 1000)

    pending = []
    began = time.perf_counter()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, began + i / rate - time.perf_counter()))
        pending.append(asyncio.create_task(one(i % PARTITIONS)))
    await asyncio.gather(*pending)


async def _leaders(cluster: ApacheKafka, topic: str) -> dict[int, int]:
    return await asyncio.to_thread(cluster.leaders, topic)


async def measure(variant: str, rate: int, seconds: float) -> Figures:
    jvm, threads = VARIANTS[variant]
    apache_kafka.CLUSTER_JVM_OPTIONS, apache_kafka.CLUSTER_BROKER_THREADS = jvm, threads
    figures = Figures(variant)
    cluster = ApacheKafka(Path(tempfile.mkdtemp(prefix="kadence-bench-cluster-")), free_port(), node_count=NODES)
    try:
        figures.start_s = await asyncio.to_thread(cluster.start)
        pids = broker_processes(cluster)
        figures.start_cpu_s = sum(cpu_seconds(pid) for pid in pids.values())
        figures.resident_mib = sum(resident_bytes(pid) or 0 for pid in pids.values()) / 2**20
        settings = KafkaSettings(bootstrap_servers=cluster.bootstrap_servers, replication_factor=NODES)
        topic = f"kadence.bench.cluster.{uuid.uuid4().hex[:8]}"
        new = NewTopic(topic, num_partitions=PARTITIONS, replication_factor=NODES, config={"min.insync.replicas": "2"})
        admin = AdminClient(base_config(settings))
        admin.create_topics([new])[topic].result(30)
        producer = AsyncProducer(settings)
        try:
            await _load(producer, topic, rate, 2.0, [])  # connections, metadata, the JIT's first compiles
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            await _load(producer, topic, rate, seconds, figures.produce_ms)
            figures.load_cpu_s = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
            await _kill_a_leader(cluster, producer, topic, rate, figures)
        finally:
            producer.close()
    finally:
        await asyncio.to_thread(cluster.stop)
    return figures


async def _kill_a_leader(cluster: ApacheKafka, producer: AsyncProducer, topic: str, rate: int, figures: Figures) -> None:
    node = Counter((await _leaders(cluster, topic)).values()).most_common(1)[0][0]
    led = {p for p, leader in (await _leaders(cluster, topic)).items() if leader == node}
    waits: list[float] = []
    loading = asyncio.create_task(_load(producer, topic, rate, 15.0, waits))
    await asyncio.sleep(1.0)
    killed = time.monotonic()
    await asyncio.to_thread(cluster.kill, node)
    while time.monotonic() - killed < 60:
        leaders = await _leaders(cluster, topic)
        if all(leaders[p] not in (-1, node) for p in led):
            figures.elected_s = time.monotonic() - killed
            break
        await asyncio.sleep(0.1)
    restarting = time.monotonic()
    await asyncio.to_thread(cluster.start, node)
    while await asyncio.to_thread(cluster.out_of_sync, node):
        if time.monotonic() - restarting > IN_SYNC_TIMEOUT_S:
            break
        await asyncio.sleep(0.2)
    figures.restart_s = time.monotonic() - restarting
    await loading
    figures.kill_wait_s = max(waits, default=0.0) / 1000


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"some of {', '.join(VARIANTS)}")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=500, help="records a second (1 KiB each)")
    args = parser.parse_args()
    for variant in args.variants.split(","):
        figures = await measure(variant, args.rate, args.seconds)
        print(figures.describe(args.rate, args.seconds), flush=True)


if __name__ == "__main__":
    uvloop.run(main())
