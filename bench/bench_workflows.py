"""Throughput and latency of workflows, next to the raw broker round trip.

    python -m bench.bench_workflows --workflows 2000 --concurrency 50 [--broker kafka|tansu] [--processes one|separate]
    python -m bench.bench_workflows --workflows 200 --concurrency 1 --workload ten-activities --worker-in-process
    python -m bench.bench_workflows --workflows 200 --concurrency 1 --workload no-activity --worker-in-process --eager
    python -m bench.bench_workflows --against-settings   # in a pod of a deployment (docs/operations.md)

Starts its own local stack (broker, Postgres, services; --broker kafka|tansu), or with --against-settings uses the
deployment the KADENCE_* variables name, and a worker (a process of its own, or with
--worker-in-process in the client's process, as the engines compared in docs/performance.md run
it); runs N workflows of the --workload with at most C in flight: one activity that returns its
input (the default), ten such activities one after another, a 1 s durable timer and then the
activity, or no activity (the workflow returns its input: one workflow task). With --eager (and
--worker-in-process) each start asks for Temporal's eager workflow start, and the run says how many
the worker took. It prints workflows/s and start-to-result p50/p99, the p50 in broker round trips (the
produce-to-consume round trip measured in the same run, which bounds every hop a workflow makes),
the CPU-seconds each process spent in the measured run, in all and per 1,000 workflows, and the
records per workflow it wrote to each topic (counted from the topics' ends; not on Tansu, whose
ListOffsets is wrong). A record idempotence retried counts once; the offsets also count the
broker's transaction markers, which Kadence never writes. With --broker-requests (Apache Kafka) it
also prints the broker's requests per workflow by type (its JMX RequestMetrics, read through a
Jolokia agent it attaches to the broker; Maven fetches the agent once).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

import psycopg
import uvloop
from confluent_kafka import Consumer, Producer, TopicPartition

from bench.local import (
    BrokerRequests,
    CollectionMeter,
    CpuMeter,
    add_broker_option,
    describe_broker,
    requests_per_workflow,
    stack_processes,
)
from kadence import activity, workflow
from kadence.client import Client
from kadence.dev.local_stack import PROCESS_LAYOUTS, LocalStack
from kadence.protocol import topics
from kadence.protocol.kafka import base_config, ensure_topics, log_ends, topic_partitions
from kadence.protocol.settings import KafkaSettings
from kadence.worker import Worker

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


@workflow.defn
class TenActivitiesWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        for _ in range(10):
            value = await workflow.execute_activity(echo_input, value, start_to_close_timeout=timedelta(seconds=30))
        return value


@workflow.defn
class TimerWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        await workflow.sleep(1)
        return await workflow.execute_activity(echo_input, value, start_to_close_timeout=timedelta(seconds=30))


@workflow.defn
class NoActivityWorkflow:
    @workflow.run
    async def run(self, value: str) -> str:
        return value


WORKLOADS = {"one-activity": BenchWorkflow, "ten-activities": TenActivitiesWorkflow, "timer": TimerWorkflow,
             "no-activity": NoActivityWorkflow}


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


async def run_workflows(
    client: Client, workload: str, count: int, concurrency: int, *, eager: bool = False, taken: list[bool] | None = None,
) -> tuple[float, list[float]]:
    """(seconds, each workflow's start-to-result ms). With `eager`, each start asks for eager
    workflow start, and `taken` gets whether the worker took it."""
    slots = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def one(i: int) -> None:
        async with slots:
            started = time.perf_counter()
            value = f"bench-{i}-{uuid.uuid4().hex[:8]}"
            handle = await client.start_workflow(WORKLOADS[workload].run, value, id=value, task_queue=TASK_QUEUE, request_eager_start=eager)
            if taken is not None:
                taken.append(bool(getattr(handle, "__temporal_eagerly_started")))  # noqa: B009 (temporalio's mark)
            assert await handle.result() == value
            latencies.append((time.perf_counter() - started) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    return time.perf_counter() - began, latencies


@dataclass(frozen=True)
class Run:
    """What to run: the workload, how many, how many at once, and where the worker runs."""

    workload: str
    workflows: int
    concurrency: int
    worker_in_process: bool
    warm_up: int
    broker_requests: bool = False  # count the broker's requests (BrokerRequests)
    eager: bool = False  # request_eager_start on every start


def topic_ends(settings: KafkaSettings) -> dict[str, int] | None:
    """The sum of each Kadence topic's partition ends: commands, history, replies and the bench
    queue's task topics (None on Tansu)."""
    names = [topics.COMMANDS, topics.HISTORY, topics.REPLIES,
             topics.task_queue_topic(TASK_QUEUE, "workflow"), topics.task_queue_topic(TASK_QUEUE, "activity")]
    ends = {}
    for name in names:
        partition_ends = log_ends(settings, name, range(topic_partitions(settings, name)))
        if partition_ends is None:
            return None
        ends[name] = sum(partition_ends.values())
    return ends


def records_per_workflow(before: dict[str, int] | None, after: dict[str, int] | None, workflows: int) -> str:
    if before is None or after is None:
        return "records per workflow: not counted (Tansu's ListOffsets is wrong)"
    return "records per workflow: " + ", ".join(f"{name} {(after[name] - before[name]) / workflows:.2f}" for name in after)


def closed_runs_kept(postgres_dsn: str) -> str:
    """What the history service keeps of closed runs for the reset retention: the rows with events,
    their mean `state` bytes, and the table's whole size (docs/operations.md, "Postgres")."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        [(rows, mean_bytes, table_bytes)] = conn.execute(
            "SELECT count(state), coalesce(avg(pg_column_size(state)), 0), pg_total_relation_size('kadence_history_closed_runs') "
            "FROM kadence_history_closed_runs").fetchall()
    return (f"closed runs kept:     {rows} with their events for a reset, {mean_bytes:.0f} bytes of events each; "
            f"kadence_history_closed_runs {table_bytes / rows if rows else 0:.0f} bytes a row with its indexes")


async def bench(target: Target, run: Run, pings: int) -> None:
    worker_process = None if run.worker_in_process else subprocess.Popen([sys.executable, "-m", "bench.worker"], env=target.env, cwd=REPO)
    processes = {**(stack_processes(target.stack) if target.stack else {}), "client": os.getpid()}
    if worker_process is not None:
        processes["worker"] = worker_process.pid
    cpu = CpuMeter(processes)
    collections = CollectionMeter()
    broker_requests = await asyncio.to_thread(BrokerRequests.attach, target.stack) if target.stack and run.broker_requests else None
    requests_before: dict[str, int] = {}
    try:
        client = await Client.connect(target.settings.bootstrap_servers, postgres_dsn=target.postgres_dsn)
        async with contextlib.AsyncExitStack() as in_process:
            if run.worker_in_process:
                await in_process.enter_async_context(bench_worker(client))
            # Warm-up: group joins, topic creation, and (one at a time) 20 workflows, as the engines compared were.
            await run_workflows(client, run.workload, run.warm_up, run.concurrency, eager=run.eager)
            ends_before = await asyncio.to_thread(topic_ends, target.settings)
            if broker_requests is not None:
                requests_before = await asyncio.to_thread(broker_requests.counts)
            cpu.start()
            collections.start()
            taken: list[bool] = []
            elapsed, latencies = await run_workflows(client, run.workload, run.workflows, run.concurrency, eager=run.eager, taken=taken)
            cpu_report = cpu.report(per_thousand=run.workflows)
            collections_report = collections.report(run.workflows)
            requests_after = await asyncio.to_thread(broker_requests.counts) if broker_requests is not None else None
            await asyncio.sleep(0.5)  # the replies and batches of the last workflows land
            ends_after = await asyncio.to_thread(topic_ends, target.settings)
        await client.close()
    finally:
        if worker_process is not None:
            worker_process.terminate()
            worker_process.wait()
    round_trip = broker_round_trip(target.settings, pings)
    if target.stack is not None:
        print(describe_broker(target.stack))
    where = "in the client's process" if run.worker_in_process else "in a process of its own"
    print(f"workflows:            {run.workflows} ({run.workload}), concurrency {run.concurrency}, "
          f"{target.settings.partitions} partitions, worker {where}")
    if run.eager:
        print(f"eager start:          asked for every start, taken for {sum(taken)}")
    print(f"throughput:           {run.workflows / elapsed:.0f} workflows/s")
    p50, rtt_p50 = percentile(latencies, 50), percentile(round_trip, 50)
    print(f"start-to-result:      p50 {p50:.1f} ms ({p50 / rtt_p50:.0f} broker round trips), p99 {percentile(latencies, 99):.1f} ms")
    print(f"broker round trip:    p50 {rtt_p50:.2f} ms, p99 {percentile(round_trip, 99):.2f} ms ({pings} pings)")
    print(cpu_report)
    print(collections_report)
    print(records_per_workflow(ends_before, ends_after, run.workflows))
    if requests_after is not None:
        print(requests_per_workflow(requests_before, requests_after, run.workflows))
    if target.stack is not None:
        print(closed_runs_kept(target.stack.postgres_dsn))


def bench_worker(client: Client) -> Worker:
    """The benchmark's worker: every workload's workflow and the one activity."""
    return Worker(client, task_queue=TASK_QUEUE, workflows=list(WORKLOADS.values()), activities=[echo_input])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflows", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--pings", type=int, default=500)
    parser.add_argument("--workload", choices=list(WORKLOADS), default="one-activity")
    parser.add_argument("--warm-up", type=int, default=None,
                        help="workflows run before the measured ones (default: 20 one at a time, as the engines compared "
                             "were, else 50); the broker's JIT needs about 2,000 before its CPU per request settles")
    parser.add_argument("--worker-in-process", action="store_true",
                        help="run the worker in the client's process (default: a process of its own)")
    parser.add_argument("--fetch-wait-ms", type=int, default=None,
                        help="KADENCE_FETCH_WAIT_MAX_MS for every process (default: the local broker's: 100 on Apache Kafka, 5 on Tansu)")
    parser.add_argument("--broker-requests", action="store_true",
                        help="count the broker's requests per workflow (a JMX agent attached to the local Apache Kafka)")
    parser.add_argument("--eager", action="store_true",
                        help="ask for eager workflow start (request_eager_start) on every start; needs --worker-in-process")
    parser.add_argument("--processes", choices=list(PROCESS_LAYOUTS), default="one",
                        help="the services in one process (`kadence server`, the default) or each in its own")
    add_broker_option(parser)
    parser.add_argument("--against-settings", action="store_true",
                        help="Run against the deployment the KADENCE_* variables name instead of a local stack.")
    args = parser.parse_args()
    if args.eager and not args.worker_in_process:
        parser.error("--eager needs --worker-in-process: only a worker of the starting client's process takes an eager start")
    logging.basicConfig(level=logging.WARNING)
    warm_up = args.warm_up if args.warm_up is not None else min(50 if args.concurrency > 1 else 20, args.workflows)
    run = Run(args.workload, args.workflows, args.concurrency, args.worker_in_process, warm_up, args.broker_requests, args.eager)
    if args.against_settings:
        uvloop.run(bench(Target(dict(os.environ), KafkaSettings.from_env()), run, args.pings))
        return
    with tempfile.TemporaryDirectory(prefix="kadence-bench-") as data_dir:
        stack = LocalStack(Path(data_dir), partitions=args.partitions, fetch_wait_max_ms=args.fetch_wait_ms, broker_kind=args.broker)
        stack.start(PROCESS_LAYOUTS[args.processes])
        try:
            uvloop.run(bench(Target(stack.env, stack.settings, stack.postgres_dsn, stack), run, args.pings))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
