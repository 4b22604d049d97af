"""What the open runs it holds cost the history service: N workflows waiting on a one-hour durable
timer, the way Temporal's users keep subscriptions and orders open for days.

    python -m bench.bench_open_runs [--runs 10000 100000] [--partitions 8] [--broker kafka|tansu] [--worker-process]
                                    [--checkpoint-interval-ms 30000] [--batch-rps 2000] [--logs DIR]

For each N, on a fresh local stack (one instance of each service, each in a process of its own, as
Kubernetes runs them; the worker in this process, or with --worker-process in one of its own):
- the start rate of the first 1,000 starts (no run open, after 500 workflows that close at once
  warmed the path up) and of the last 1,000 (N open), each start returning once history answered it;
- while the last 1,000 start: history's checkpoints (mean and longest, bytes each, the share of
  the time spent in them), the longest its command loop held the event loop at a stretch, and its
  garbage collections of the oldest generation, from its /metrics
  (`kadence_history_checkpoint_seconds`, `kadence_history_checkpoint_bytes_total`,
  `kadence_history_loop_pause_seconds` and `kadence_gc_pause_seconds`: histograms, so "at most"
  is a bucket's bound);
- history's resident memory once the N are open, and what it grew by a run since the warm-up;
- SIGKILL of history, started again at once: until its /readyz answers 200, and until a new
  workflow (no timer) has its result;
- a bulk cancel of the N (one cancel request each, 200 in flight; with --batch-rps R, `kadence
  workflow cancel --query ... --rps R` as an operator runs it): cancels per second until the
  read model lists none running, the timer firings history read meanwhile and the commands it
  refused (a firing that joined a backlog is most often stale when history reaches it), and the
  CPU a cancel cost each process.
It prints the figures per N, the broker's own round trip, and the CPU-seconds each process spent.
History checkpoints every second, as the local stack does; --checkpoint-interval-ms 30000 is
deploy/'s (a restart then reads up to 30 s of the log again).
Runs outside CI: N = 1,000,000 takes hours on two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import uvloop
from prometheus_client.parser import text_string_to_metric_families

from bench.bench_workflows import broker_round_trip
from bench.local import CpuMeter, add_broker_option, describe_broker, resident_bytes, stack_processes
from kadence import workflow
from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.worker import Worker

REPO = Path(__file__).resolve().parent.parent

TASK_QUEUE = "bench-open-runs"
MEASURED_STARTS = 1000
WARM_UP = 500
IN_FLIGHT = 200
OPEN_TIMER = timedelta(hours=1)
READY_TIMEOUT_S = 300.0
CANCEL_TIMEOUT_S = 3600.0


@workflow.defn
class OpenRunWorkflow:
    """Open until cancelled: a one-hour durable timer."""

    @workflow.run
    async def run(self) -> None:
        await workflow.sleep(OPEN_TIMER)


@workflow.defn
class ProbeWorkflow:
    """Done at its first workflow task: whether history serves again."""

    @workflow.run
    async def run(self) -> str:
        return "served"


def open_runs_worker(client: Client) -> Worker:
    """The benchmark's worker, in this process or in `python -m bench.worker open-runs`."""
    return Worker(client, task_queue=TASK_QUEUE, workflows=[OpenRunWorkflow, ProbeWorkflow])


@dataclass
class Histogram:
    """One histogram of a /metrics page: cumulative counts by upper bound, and its sum."""

    buckets: dict[float, float]
    total: float

    @property
    def count(self) -> float:
        return self.buckets.get(float("inf"), 0.0)

    def since(self, before: Histogram) -> Histogram:
        return Histogram({le: n - before.buckets.get(le, 0.0) for le, n in self.buckets.items()}, self.total - before.total)

    def at_most(self) -> float:
        """The smallest bucket bound that holds every observation (inf: beyond the last bound)."""
        return min((le for le, n in self.buckets.items() if n >= self.count), default=0.0)


@dataclass
class HistoryMetrics:
    loop_pause: Histogram
    oldest_collections: Histogram  # collections of the oldest generation, which walk every object
    checkpoint: Histogram
    checkpoint_bytes: float
    timeouts_fired: float  # TimeoutFired commands history read: timers the timer service fired
    rejected: float  # commands history refused (during a bulk cancel: stale timer firings, mostly)

    def since(self, before: HistoryMetrics) -> HistoryMetrics:
        return HistoryMetrics(self.loop_pause.since(before.loop_pause), self.oldest_collections.since(before.oldest_collections),
                              self.checkpoint.since(before.checkpoint),
                              self.checkpoint_bytes - before.checkpoint_bytes, self.timeouts_fired - before.timeouts_fired,
                              self.rejected - before.rejected)


def read_history_metrics(stack: LocalStack) -> HistoryMetrics:
    with urllib.request.urlopen(f"http://127.0.0.1:{stack.http_ports['history']}/metrics", timeout=5) as response:
        page = response.read().decode()
    histograms: dict[str, Histogram] = {}
    checkpoint_bytes = timeouts_fired = rejected = 0.0
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            name = family.name + "".join(f":{v}" for k, v in sample.labels.items() if k != "le")
            if sample.name.endswith("_bucket"):
                histograms.setdefault(name, Histogram({}, 0.0)).buckets[float(sample.labels["le"])] = sample.value
            elif sample.name.endswith("_sum") and family.type == "histogram":
                histograms.setdefault(name, Histogram({}, 0.0)).total = sample.value
            elif sample.name == "kadence_history_checkpoint_bytes_total" and sample.labels.get("run") == "open":
                checkpoint_bytes = sample.value
            elif sample.name == "kadence_history_commands_total" and sample.labels.get("command") == "TimeoutFired":
                timeouts_fired = sample.value
            elif sample.name == "kadence_history_commands_rejected_total":
                rejected += sample.value
    return HistoryMetrics(histograms["kadence_history_loop_pause_seconds"],
                          histograms.get("kadence_gc_pause_seconds:2", Histogram({}, 0.0)),
                          histograms["kadence_history_checkpoint_seconds"],
                          checkpoint_bytes, timeouts_fired, rejected)


async def settled_resident_mib(pid: int, samples: int = 5) -> float:
    """The median of a few samples a second apart: the last starts' work done."""
    resident = []
    for _ in range(samples):
        await asyncio.sleep(1.0)
        rss = resident_bytes(pid)
        if rss is None:
            raise RuntimeError(f"process {pid} is gone: no resident memory to measure")
        resident.append(rss / 2**20)
    return statistics.median(resident)


async def in_flight(count: int, one: Callable[[int], Awaitable[None]], first: int = 0) -> float:
    """Seconds to run `one(i)` for `count` indexes from `first`, at most IN_FLIGHT at once."""
    slots = asyncio.Semaphore(IN_FLIGHT)

    async def bounded(i: int) -> None:
        async with slots:
            await one(i)

    began = time.perf_counter()
    await asyncio.gather(*(bounded(i) for i in range(first, first + count)))
    return time.perf_counter() - began


def restart_history(stack: LocalStack) -> int:
    """SIGKILL the history service and start it again at once; its new pid."""
    stack.kill_service("history")
    stack.start_service("history")
    return stack.services["history"].pid


@dataclass
class Figures:
    runs: int
    start_rate_empty: float
    start_rate_full: float
    history_rss_mib: float
    history_rss_empty_mib: float
    while_full: HistoryMetrics
    full_s: float
    kill_to_ready_s: float
    kill_to_served_s: float
    cancel_rate: float
    while_cancelling: HistoryMetrics
    cancel_cpu: dict[str, float]  # CPU-seconds each process spent on the bulk cancel

    def report(self) -> str:
        checkpoints = self.while_full.checkpoint
        mean = checkpoints.total / checkpoints.count if checkpoints.count else 0.0
        each = self.while_full.checkpoint_bytes / checkpoints.count if checkpoints.count else 0.0
        return "\n".join([
            f"open runs:            {self.runs:,}",
            f"start rate:           {self.start_rate_empty:.0f} workflows/s with none open, "
            f"{self.start_rate_full:.0f} with {self.runs:,} open ({self.start_rate_full / self.start_rate_empty:.0%})",
            f"history RSS:          {self.history_rss_mib:.0f} MiB, {self.history_rss_empty_mib:.0f} with none open "
            f"({(self.history_rss_mib - self.history_rss_empty_mib) * 1024 / self.runs:.1f} KiB a run)",
            f"checkpoints:          {checkpoints.count:.0f} while the last {MEASURED_STARTS:,} started: mean {mean:.2f} s, "
            f"longest at most {checkpoints.at_most():g} s, {each / 2**20:.1f} MiB each, "
            f"{checkpoints.total / self.full_s:.0%} of the time",
            f"command loop:         held the event loop at most {self.while_full.loop_pause.at_most():g} s at a stretch; "
            f"{self.while_full.oldest_collections.count:.0f} collections of the oldest generation, "
            f"the longest at most {self.while_full.oldest_collections.at_most():g} s",
            f"SIGKILL of history:   ready {self.kill_to_ready_s:.1f} s later, a new workflow done {self.kill_to_served_s:.1f} s later",
            f"bulk cancel:          {self.cancel_rate:.0f} runs/s; meanwhile history read {self.while_cancelling.timeouts_fired:,.0f} "
            f"timer firings and refused {self.while_cancelling.rejected:,.0f} commands (stale firings, mostly)",
            f"a cancel's CPU:       {sum(self.cancel_cpu.values()) * 1000 / self.runs:.2f} CPU-ms: "
            + ", ".join(f"{name} {spent * 1000 / self.runs:.2f}" for name, spent in sorted(self.cancel_cpu.items(), key=lambda i: -i[1])),
        ])


async def cancel_all(client: Client, stack: LocalStack, runs: int, batch_rps: float | None) -> float:
    """Cancel every open run: a cancel request each from this client, IN_FLIGHT at once, or with
    `batch_rps` as an operator does, `kadence workflow cancel --query` at that rate; returns once
    the list shows none running, with the CPU-seconds the CLI spent (0 without it)."""
    cli_cpu_s = 0.0
    if batch_rps is None:
        async def cancel(i: int) -> None:
            await client.get_workflow_handle(f"open-{i}").cancel()

        await in_flight(runs, cancel)
    else:
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        cli = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).parent / "kadence"), "workflow", "cancel", "--query", "WorkflowType = 'OpenRunWorkflow'",
            "--rps", str(batch_rps), "--yes", env=stack.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        _, stderr = await cli.communicate()
        if cli.returncode != 0:
            raise RuntimeError(f"kadence workflow cancel exited with {cli.returncode}: {stderr.decode(errors='replace')[-2000:]}")
        children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the CLI is the only child reaped meanwhile
        cli_cpu_s = children.ru_utime + children.ru_stime - children_before.ru_utime - children_before.ru_stime
    running = "WorkflowType = 'OpenRunWorkflow' AND ExecutionStatus = 'Running'"
    began = time.monotonic()
    while (await client.count_workflows(running)).count:
        if time.monotonic() - began > CANCEL_TIMEOUT_S:
            raise TimeoutError(f"runs still open {CANCEL_TIMEOUT_S:.0f} s after their cancel was requested")
        await asyncio.sleep(0.5)
    return cli_cpu_s


async def measure(stack: LocalStack, runs: int, cpu: CpuMeter, worker_in_process: bool, batch_rps: float | None) -> Figures:
    client = await Client.connect(stack.settings.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    history_pid = stack.services["history"].pid
    try:
        async with contextlib.AsyncExitStack() as in_process:
            if worker_in_process:
                await in_process.enter_async_context(open_runs_worker(client))

            async def start(i: int) -> None:
                await client.start_workflow(OpenRunWorkflow.run, id=f"open-{i}", task_queue=TASK_QUEUE)

            async def probe(i: int) -> None:
                await client.execute_workflow(ProbeWorkflow.run, id=f"probe-warm-up-{i}", task_queue=TASK_QUEUE)

            await in_flight(WARM_UP, probe)
            rss_empty = await settled_resident_mib(history_pid)
            empty_s = await in_flight(MEASURED_STARTS, start)
            await in_flight(runs - 2 * MEASURED_STARTS, start, first=MEASURED_STARTS)
            before = await asyncio.to_thread(read_history_metrics, stack)
            full_s = await in_flight(MEASURED_STARTS, start, first=runs - MEASURED_STARTS)
            while_full = (await asyncio.to_thread(read_history_metrics, stack)).since(before)
            rss = await settled_resident_mib(history_pid)

            killed = time.monotonic()
            await asyncio.to_thread(cpu.replace, "history", lambda: restart_history(stack))
            await asyncio.to_thread(stack.wait_until_ready, READY_TIMEOUT_S)  # the others are: until history's /readyz says 200
            ready_s = time.monotonic() - killed
            await asyncio.wait_for(client.execute_workflow(ProbeWorkflow.run, id="probe-after-kill", task_queue=TASK_QUEUE),
                                   READY_TIMEOUT_S)
            served_s = time.monotonic() - killed

            before_cancel = await asyncio.to_thread(read_history_metrics, stack)
            cpu_before_cancel = cpu.spent()
            cancelling = time.monotonic()
            cli_cpu_s = await cancel_all(client, stack, runs, batch_rps)
            cancel_s = time.monotonic() - cancelling
            cancel_cpu = {name: seconds - cpu_before_cancel[name] for name, seconds in cpu.spent().items()}
            if batch_rps is not None:
                cancel_cpu["kadence workflow cancel"] = cli_cpu_s
            while_cancelling = (await asyncio.to_thread(read_history_metrics, stack)).since(before_cancel)
    finally:
        await client.close()
    return Figures(runs, MEASURED_STARTS / empty_s, MEASURED_STARTS / full_s, rss, rss_empty, while_full, full_s, ready_s, served_s,
                   runs / cancel_s, while_cancelling, cancel_cpu)


@dataclass(frozen=True)
class Options:
    partitions: int
    broker: str | None
    worker_process: bool
    logs: Path | None
    checkpoint_interval_ms: int
    batch_rps: float | None


def bench(runs: int, options: Options) -> None:
    with tempfile.TemporaryDirectory(prefix="kadence-bench-") as data_dir:
        if options.logs is not None:  # kept past the stack: `event=long_loop_hold` and `long_gc_pause` say what held the loop
            logs_to = options.logs / str(runs)
            logs_to.mkdir(parents=True, exist_ok=True)
            (Path(data_dir) / "logs").symlink_to(logs_to.resolve())
        stack = LocalStack(Path(data_dir), partitions=options.partitions, broker_kind=options.broker,
                           checkpoint_interval_ms=options.checkpoint_interval_ms)
        stack.start()
        worker = None
        if options.worker_process:
            worker = subprocess.Popen([sys.executable, "-m", "bench.worker", "open-runs"], env=stack.env, cwd=REPO)
        try:
            processes = {**stack_processes(stack), "client" if worker else "client and worker": os.getpid()}
            if worker is not None:
                processes["worker"] = worker.pid
            cpu = CpuMeter(processes)
            cpu.start()
            figures = uvloop.run(measure(stack, runs, cpu, worker is None, options.batch_rps))
            print(describe_broker(stack))
            print(figures.report())
            print(cpu.report())
            round_trip = sorted(broker_round_trip(stack.settings, 200))
            print(f"broker round trip:    p50 {round_trip[len(round_trip) // 2]:.2f} ms")
        finally:
            if worker is not None:
                worker.terminate()
                worker.wait()
            stack.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, nargs="+", default=[10_000])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--worker-process", action="store_true",
                        help="run the worker in a process of its own, as a worker Deployment does (default: in this one)")
    parser.add_argument("--logs", type=Path, default=None, help="keep the services' logs under this directory, a folder per N")
    parser.add_argument("--checkpoint-interval-ms", type=int, default=LocalStack.checkpoint_interval_ms,
                        help="history's KADENCE_CHECKPOINT_INTERVAL_MS (default: the local stack's; deploy/ gives 30000)")
    parser.add_argument("--batch-rps", type=float, default=None,
                        help="cancel with `kadence workflow cancel --query ... --rps` at this rate, as an operator does "
                             f"(default: a cancel request each from the benchmark's client, {IN_FLIGHT} at once)")
    add_broker_option(parser)
    args = parser.parse_args()
    if min(args.runs) < 2 * MEASURED_STARTS:
        parser.error(f"--runs must be at least {2 * MEASURED_STARTS}: the first and the last {MEASURED_STARTS} starts are timed")
    logging.basicConfig(level=logging.WARNING)
    for runs in args.runs:
        bench(runs, Options(args.partitions, args.broker, args.worker_process, args.logs, args.checkpoint_interval_ms, args.batch_rps))


if __name__ == "__main__":
    main()
