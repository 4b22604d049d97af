"""Throughput and latency of one-activity workflows, next to the raw broker round trip.

    python -m bench.bench_workflows --workflows 2000 --concurrency 50 [--broker kafka|tansu]
    python -m bench.bench_workflows --against-settings   # in a pod of a deployment (docs/operations.md)

Starts its own local stack (broker, Postgres, services; --broker kafka|tansu), or with --against-settings uses the
deployment the KADENCE_* variables name, and a worker process; runs N workflows of one activity
that returns its input with at most C in flight, and prints workflows/s and start-to-result
p50/p99. In the same run it measures the broker's produce-to-consume round trip, which bounds
every hop a workflow makes, and the CPU-seconds each process spent in the measured run.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import uvloop
from confluent_kafka import Consumer, Producer, TopicPartition

from bench.local import CpuMeter, add_broker_option, describe_broker, stack_processes
from kadence import activity, workflow
from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.protocol.kafka import base_config, ensure_topics
from kadence.protocol.settings import KafkaSettings

TASK_QUEUE = "bench"
REPO = Path(__file__).resolve().parents[1]


@activity.defn
async def echo_input(value: str) -> str:
    return value


@workflow.defn
class BenchWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        return await workflow.execute_activity(echo_input, value, start_to_close_timeout=timedelta(seconds=30))


def percentile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1] if len(samples) > 1 else samples[0]


@dataclass
class Target:
    """Where the benchmark runs: a local stack, or the deployment the KADENCE_* variables name."""

    env: dict[str, str]
    settings: KafkaSettings
    postgres_dsn: str | None = None  # None: the client reads KADENCE_POSTGRES_DSN
    stack: LocalStack | None = None  # the local stack it started, if any


def broker_round_trip(settings: KafkaSettings, pings: int) -> list[float]:
    """Milliseconds from produce() to the consumer receiving the record, one record at a time."""
    topic = f"kadence.bench.ping.{uuid.uuid4().hex[:8]}"  # under the prefix a deployment's Kafka user may use
    ensure_topics(settings, {topic: 1})
    producer = Producer({**base_config(settings), "linger.ms": 0, "enable.idempotence": True})
    consumer = Consumer({
        **base_config(settings), "group.id": "kadence.bench-ping",
        "fetch.wait.max.ms": settings.fetch_wait_max_ms, "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    samples = []
    for i in range(pings):
        sent = time.perf_counter()
        producer.produce(topic, str(i).encode())
        producer.poll(0)
        while True:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                break
        samples.append((time.perf_counter() - sent) * 1000)
    producer.flush()
    consumer.close()
    return samples


async def run_workflows(client: Client, count: int, concurrency: int) -> tuple[float, list[float]]:
    slots = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(i: int) -> None:
        async with slots:
            started = time.perf_counter()
            value = f"bench-{i}-{uuid.uuid4().hex[:8]}"
            handle = await client.start_workflow(BenchWorkflow.run, value, id=value, task_queue=TASK_QUEUE)
            assert await handle.result() == value
            latencies.append((time.perf_counter() - started) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    return time.perf_counter() - began, latencies


async def bench(target: Target, workflows: int, concurrency: int, pings: int) -> None:
    worker = subprocess.Popen([sys.executable, "-m", "bench.worker"], env=target.env, cwd=REPO)
    processes = {**(stack_processes(target.stack) if target.stack else {}), "worker": worker.pid, "client": os.getpid()}
    cpu = CpuMeter(processes)
    try:
        client = await Client.connect(target.settings.bootstrap_servers, postgres_dsn=target.postgres_dsn)
        await run_workflows(client, min(50, workflows), concurrency)  # warm-up: group joins, topic creation
        cpu.start()
        elapsed, latencies = await run_workflows(client, workflows, concurrency)
        cpu_report = cpu.report()
        await client.close()
    finally:
        worker.terminate()
        worker.wait()
    round_trip = broker_round_trip(target.settings, pings)
    if target.stack is not None:
        print(describe_broker(target.stack))
    print(f"workflows:            {workflows} (one activity each), concurrency {concurrency}, {target.settings.partitions} partitions")
    print(f"throughput:           {workflows / elapsed:.0f} workflows/s")
    print(f"start-to-result:      p50 {percentile(latencies, 50):.1f} ms, p99 {percentile(latencies, 99):.1f} ms")
    print(f"broker round trip:    p50 {percentile(round_trip, 50):.2f} ms, p99 {percentile(round_trip, 99):.2f} ms ({pings} pings)")
    print(cpu_report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflows", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--pings", type=int, default=500)
    parser.add_argument("--fetch-wait-ms", type=int, default=None,
                        help="KADENCE_FETCH_WAIT_MAX_MS for every process (default: the broker's: 500 on Apache Kafka, 5 on Tansu)")
    add_broker_option(parser)
    parser.add_argument("--against-settings", action="store_true",
                        help="Run against the deployment the KADENCE_* variables name instead of a local stack.")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.against_settings:
        uvloop.run(bench(Target(dict(os.environ), KafkaSettings.from_env()), args.workflows, args.concurrency, args.pings))
        return
    with tempfile.TemporaryDirectory(prefix="kadence-bench-") as data_dir:
        stack = LocalStack(Path(data_dir), partitions=args.partitions, fetch_wait_max_ms=args.fetch_wait_ms, broker_kind=args.broker)
        stack.start()
        try:
            uvloop.run(bench(Target(stack.env, stack.settings, stack.postgres_dsn, stack), args.workflows, args.concurrency, args.pings))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
