"""A soak: workflows at a steady rate for a long while, with a fault every minute, on a local stack
that runs two instances of each service and two workers, as Kubernetes runs them.

    python -m bench.soak [--minutes 30] [--rate 20] [--fault-every 60] [--seed 1] [--faults service,worker,broker,postgres]

Each workflow runs a local activity, an activity, a 1 s durable timer and another activity; each
activity records every run of every attempt in a file of its own. Every `--fault-every` seconds
one fault, drawn at random: a service instance SIGKILLed (the stack's supervisor starts it again,
as Kubernetes would), a worker SIGKILLed (started again 3 s later), the broker SIGKILLed and
started again on its log dir, or Postgres stopped for 20 s (`--faults` narrows the draw). At the end, once every workflow has
a result, it checks what the project promises and prints it:
- every workflow completed once, with its result, in one run (the audit of the whole log: no
  violation);
- no activity attempt ran twice, and no local activity ran again after a completed workflow task
  recorded it;
- each process's resident memory flat within 10 %: its median over the first five minutes after
  the warm-up against its median over the last five, or over the two halves after the warm-up in a
  shorter soak (a process restarted by a fault starts a new series, compared from its restart).
The faults are dealt as a shuffled deck: every kind comes once in each round of four.
Half an hour by default; CI runs five minutes of it (tests/test_soak.py). A long run's figures go
in the closing note of the session that ran it, beside the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import uvloop

from bench.local import resident_bytes, stack_processes
from kadence import activity, workflow
from kadence.client import Client
from kadence.dev.local_stack import SERVICES, LocalStack, RestartBackoff
from kadence.ops.audit import AuditReport, audit_history
from kadence.protocol.logs import configure_logging
from kadence.worker import Worker

TASK_QUEUE = "soak"
REPO = Path(__file__).resolve().parents[1]
WORKERS = ("worker-a", "worker-b")
WARM_UP_S = 60.0  # before the memory series count: caches, JIT, pools fill
MEMORY_WINDOW_S = 300.0  # or, in a soak shorter than warm-up and two windows, half of what follows the warm-up
MEMORY_SAMPLE_S = 10.0
MEMORY_LOG_S = 60.0
FLAT_WITHIN = 0.10
FAULT_KINDS = ("service", "worker", "broker", "postgres")
WORKER_DOWN_S = 3.0
POSTGRES_DOWN_S = 20.0
BROKER_DOWN_S = 1.0
DRAIN_TIMEOUT_S = 600.0  # after the load stops, for every workflow's result

log = logging.getLogger("kadence.soak")


@activity.defn
async def record_run(path: str) -> int:
    """Appends a line per run (the attempt, the identity of the worker that ran it, and when, in
    epoch ms) to `path`; returns the attempt."""
    attempt = activity.info().attempt
    with open(path, "a") as file:
        file.write(f"{attempt} {worker_identity(os.environ.get(IDENTITY_VARIABLE, ''))} {int(time.time() * 1000)}\n")
    await asyncio.sleep(0.05)
    return attempt


@workflow.defn
class SoakWorkflow:
    @workflow.run
    async def run(self, directory: str) -> str:
        prefix, limit = f"{directory}/{workflow.info().workflow_id}", timedelta(seconds=10)
        await workflow.execute_local_activity(record_run, f"{prefix}.local", start_to_close_timeout=limit)
        await workflow.execute_activity(record_run, f"{prefix}.a", start_to_close_timeout=limit)
        await workflow.sleep(1)
        await workflow.execute_activity(record_run, f"{prefix}.b", start_to_close_timeout=limit)
        return "done"


IDENTITY_VARIABLE = "KADENCE_SOAK_WORKER"


def worker_identity(name: str) -> str:
    """A worker process's identity: its name and pid, so a worker started again is another."""
    return f"{name}@{os.getpid()}"


async def run_worker(name: str) -> None:
    os.environ[IDENTITY_VARIABLE] = name
    client = await Client.connect(identity=worker_identity(name))
    await Worker(client, task_queue=TASK_QUEUE, workflows=[SoakWorkflow], activities=[record_run]).run()


@dataclass
class Memory:
    """Per process name, its resident set size samples since its last (re)start: (time, bytes)."""

    series: dict[str, tuple[int, list[tuple[float, int]]]] = field(default_factory=dict)  # name -> (pid, samples)

    def sample(self, pids: dict[str, int], now: float) -> None:
        for name, pid in pids.items():
            rss = resident_bytes(pid)
            if rss is None:
                continue
            known_pid, samples = self.series.get(name, (pid, []))
            if known_pid != pid:  # restarted: a new series
                samples = []
            samples.append((now, rss))
            self.series[name] = (pid, samples)

    def report(self, started: float, load_s: float) -> list[tuple[str, float, float, float | None]]:
        """Per process: MiB at the first window after the warm-up, MiB at the last window, the change."""
        window_s = min(MEMORY_WINDOW_S, (load_s - WARM_UP_S) / 2)
        rows: list[tuple[str, float, float, float | None]] = []
        for name, (_, samples) in sorted(self.series.items()):
            counted = [(at, rss) for at, rss in samples if at >= max(started + WARM_UP_S, samples[0][0] + WARM_UP_S)]
            if len(counted) < 2:
                rows.append((name, samples[-1][1] / 2**20, samples[-1][1] / 2**20, None))
                continue
            first = statistics.median(rss for at, rss in counted if at < counted[0][0] + window_s)
            last = statistics.median(rss for at, rss in counted if at > counted[-1][0] - window_s)
            rows.append((name, first / 2**20, last / 2**20, last / first - 1))
        return rows


class Soak:
    def __init__(self, stack: LocalStack, runs_dir: Path, rng: random.Random, fault_kinds: list[str]) -> None:
        self.stack = stack
        self.runs_dir = runs_dir
        self.rng = rng
        self.fault_kinds = fault_kinds
        self._deck: list[str] = []  # the kinds not yet drawn in this round
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.faults: list[tuple[float, str]] = []
        self.memory = Memory()

    def start_worker(self, identity: str) -> None:
        self.workers[identity] = subprocess.Popen(
            [sys.executable, "-m", "bench.soak", "--worker", identity], env=self.stack.env, cwd=REPO,
            stdout=self.stack._log_file(identity), stderr=subprocess.STDOUT,
        )

    def pids(self) -> dict[str, int]:
        return {**stack_processes(self.stack), **{name: process.pid for name, process in self.workers.items()}}

    async def fault(self, started: float) -> None:
        """One fault, drawn from the kinds given, and its undoing: a fault that stops something
        starts it again in `finally`, so one cut short (the soak ending, Ctrl-C) still leaves the
        stack whole for the final wait and the audit. The kinds are dealt as a shuffled deck, so
        every kind comes once in each round of as many faults as there are kinds."""
        if not self._deck:
            self._deck = self.rng.sample(self.fault_kinds, len(self.fault_kinds))
        kind = self._deck.pop()
        if kind == "service":
            instance = self.rng.choice(sorted(self.stack.services))
            os.kill(self.stack.services[instance].pid, signal.SIGKILL)  # the supervisor starts it again
            what = f"SIGKILL {instance}"
        elif kind == "worker":
            identity = self.rng.choice(WORKERS)
            self.workers[identity].kill()
            self.workers[identity].wait()
            try:
                await asyncio.sleep(WORKER_DOWN_S)
            finally:
                self.start_worker(identity)
            what = f"SIGKILL {identity}, started again {WORKER_DOWN_S:.0f} s later"
        elif kind == "broker":
            assert self.stack.broker is not None
            broker = self.stack.broker
            await asyncio.to_thread(broker.kill)
            try:
                await asyncio.sleep(BROKER_DOWN_S)
            finally:
                back = await asyncio.to_thread(broker.start)
            what = f"SIGKILL the broker, answering again {back:.1f} s after its start"
        else:
            await asyncio.to_thread(self.stack.stop_postgres)
            try:
                await asyncio.sleep(POSTGRES_DOWN_S)
            finally:
                await asyncio.to_thread(self.stack.start_postgres)
            what = f"Postgres stopped for {POSTGRES_DOWN_S:.0f} s"
        self.faults.append((time.monotonic() - started, what))
        log.warning("event=soak_fault at_s=%.0f fault=%r", time.monotonic() - started, what)

    def python_blocks(self) -> dict[str, int]:
        """Each service instance's kadence_python_allocated_blocks, from its /metrics."""
        found = {}
        for instance, port in self.stack.http_ports.items():
            with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as response:
                for line in response.read().decode().splitlines():
                    if line.startswith("kadence_python_allocated_blocks "):
                        found[instance] = int(float(line.split()[1]))
        return found

    async def sample_memory(self, stop: asyncio.Event) -> None:
        logged = 0.0
        while not stop.is_set():
            now = time.monotonic()
            self.memory.sample(self.pids(), now)
            if now - logged >= MEMORY_LOG_S:  # the whole series, to tell a plateau from a leak afterwards
                logged = now
                log.info("event=soak_memory %s python_blocks %s", " ".join(
                    f"{name}={samples[-1][1] / 2**20:.1f}" for name, (_, samples) in sorted(self.memory.series.items())),
                    " ".join(f"{name}={blocks}" for name, blocks in sorted((await asyncio.to_thread(self.python_blocks)).items())))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), MEMORY_SAMPLE_S)


async def soak(minutes: float, rate: float, fault_every_s: float, seed: int, partitions: int, fault_kinds: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="kadence-soak-") as temp:
        stack = LocalStack(Path(temp) / "stack", kafka_port=0, partitions=partitions, broker_kind="kafka",
                           restart_backoff=RestartBackoff())
        runs_dir = Path(temp) / "runs"
        runs_dir.mkdir()
        stack.start()
        try:
            for name in SERVICES:  # the second instance of each, as Kubernetes runs two
                stack.start_service(name, f"{name}-2", env={"KADENCE_INSTANCE_ID": f"{name}-2"})
            os.environ.update(stack.env)
            code = await _run(Soak(stack, runs_dir, random.Random(seed), fault_kinds), minutes, rate, fault_every_s)
        finally:
            stack.stop()
        if code != 0:  # the logs of every process and the runs' records, to find out why
            kept = Path(tempfile.mkdtemp(prefix="kadence-soak-failed-"))
            shutil.copytree(stack.data_dir / "logs", kept / "logs")
            shutil.copytree(runs_dir, kept / "runs")
            print(f"soak: the logs and the runs' records are kept in {kept}")
        return code


async def _run(soak: Soak, minutes: float, rate: float, fault_every_s: float) -> int:
    stack = soak.stack
    for identity in WORKERS:
        soak.start_worker(identity)
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    stop_sampling = asyncio.Event()
    sampling = asyncio.create_task(soak.sample_memory(stop_sampling))
    results: dict[str, asyncio.Task[str]] = {}
    started = time.monotonic()

    async def start_and_wait(workflow_id: str) -> str:
        handle = await client.start_workflow(SoakWorkflow.run, str(soak.runs_dir), id=workflow_id, task_queue=TASK_QUEUE)
        return await handle.result()

    load_ended = asyncio.Event()

    async def faults() -> None:
        """A fault every fault_every_s until the load ends; one under way when it ends runs to its
        undoing rather than being cancelled (a stopped Postgres would hang the final wait)."""
        while not load_ended.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(load_ended.wait(), fault_every_s)
                return
            await soak.fault(started)

    faulting = asyncio.create_task(faults())
    try:
        i, deadline = 0, started + minutes * 60
        while (now := time.monotonic()) < deadline:
            due = started + i / rate
            if due > now:
                await asyncio.sleep(due - now)
            workflow_id = f"soak-{i}"
            results[workflow_id] = asyncio.create_task(start_and_wait(workflow_id))
            i += 1
        load_ended.set()
        await faulting
        load_s = time.monotonic() - started
        done, pending = await asyncio.wait(results.values(), timeout=DRAIN_TIMEOUT_S)
        drained_s = time.monotonic() - started - load_s
    finally:
        faulting.cancel()  # on an error or Ctrl-C: the fault under way undoes itself first
        await asyncio.gather(faulting, return_exceptions=True)
        stop_sampling.set()
        await sampling
        for process in soak.workers.values():
            process.terminate()
        for process in soak.workers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(30)
        await client.close()

    failed = {workflow_id: task for workflow_id, task in results.items() if task in done and task.exception() is not None}
    report = await asyncio.to_thread(audit_history, stack.settings)
    runs_per_id = Counter(workflow_id for workflow_id, _ in report.runs)
    twice, locals_again, in_flight_again = _repeated_runs(soak.runs_dir, results, report)
    memory = soak.memory.report(started, load_s)
    print(f"soak: {len(results)} workflows started at {rate:g}/s over {load_s / 60:.1f} min, "
          f"{len(done) - len(failed)} completed, {len(failed)} failed, {len(pending)} unfinished {drained_s:.0f} s after the load stopped")
    print(f"faults ({len(soak.faults)}):")
    for at, what in soak.faults:
        print(f"  +{at:6.0f} s  {what}")
    print(f"audit: {len(report.violations)} violations; workflow ids with more than one run: "
          f"{sum(1 for workflow_id in results if runs_per_id[workflow_id] != 1)}")
    print(f"activity attempts that ran twice: {len(twice)}; local activities run again after being recorded: {len(locals_again)} "
          f"(run more than once before it, in workflow task attempts a fault cost: {in_flight_again})")
    window_min = min(MEMORY_WINDOW_S, (load_s - WARM_UP_S) / 2) / 60
    print(f"resident memory (MiB): first {window_min:.1f} min after warm-up -> last {window_min:.1f} min, change")
    for name, first, last, change in memory:
        print(f"  {name:14} {first:8.1f} -> {last:8.1f}  {'n/a' if change is None else f'{change:+.1%}'}")
    for line in report.violations[:10] + [f"{k}: {t.exception()!r}" for k, t in list(failed.items())[:10]] + twice[:10] + locals_again[:10]:
        print(f"  ! {line}")
    grown = [name for name, _, _, change in memory if change is not None and abs(change) > FLAT_WITHIN]
    ok = not failed and not pending and not report.violations and not twice and not locals_again and not grown \
        and all(runs_per_id[workflow_id] == 1 for workflow_id in results)
    print("soak: " + ("every promise kept" if ok else f"FAILED (memory not flat: {grown})" if grown else "FAILED"))
    return 0 if ok else 1


def _repeated_runs(
    runs_dir: Path, results: dict[str, asyncio.Task[str]], report: AuditReport,
) -> tuple[list[str], list[str], int]:
    """Activity attempts that ran more than once; local activities that ran again after the
    workflow task that recorded them completed (a run begun after its WorkflowTaskCompleted was
    recorded, or none by the worker that recorded it); and how many local activities ran more than
    once before their recording: in workflow task attempts that did not complete (a worker killed,
    a task timed out), the attempt in flight that a fault may cost."""
    twice, locals_again, in_flight_again = [], [], 0
    for workflow_id in results:
        for step in ("a", "b"):
            path = runs_dir / f"{workflow_id}.{step}"
            attempts = Counter(line.split()[0] for line in path.read_text().splitlines()) if path.exists() else Counter()
            twice += [f"{workflow_id}.{step} attempt {attempt} ran {n} times" for attempt, n in attempts.items() if n > 1]
        local = runs_dir / f"{workflow_id}.local"
        runs = [line.split()[1:3] for line in local.read_text().splitlines()] if local.exists() else []
        run_ids = [run_id for run_workflow_id, run_id in report.runs if run_workflow_id == workflow_id]
        events = [e for run_id in run_ids for e in report.history(workflow_id, run_id)]
        recorded = next((e for e in events if e["attributes"][0] == "WorkflowTaskCompleted"), None)
        if recorded is None:
            continue
        recorded_by, recorded_at = recorded["attributes"][1]["identity"], recorded["event_time_ms"]
        late = [(identity, int(at) - recorded_at) for identity, at in runs if int(at) > recorded_at]
        if late or recorded_by not in [identity for identity, _ in runs]:
            locals_again.append(f"{workflow_id}.local ran by {runs}, recorded by {recorded_by} at {recorded_at}; after it: {late}")
        in_flight_again += len(runs) > 1
    return twice, locals_again, in_flight_again


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=20.0, help="workflows started per second")
    parser.add_argument("--fault-every", type=float, default=60.0, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=1, help="the faults' draw")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--faults", default=",".join(FAULT_KINDS), help="the kinds of fault drawn from, comma-separated")
    parser.add_argument("--worker", metavar="IDENTITY", help=argparse.SUPPRESS)  # the soak's worker processes
    args = parser.parse_args()
    if args.worker:
        configure_logging(args.worker)
        uvloop.run(run_worker(args.worker))
        return
    configure_logging("soak")
    fault_kinds = args.faults.split(",")
    if unknown := set(fault_kinds) - set(FAULT_KINDS):
        parser.error(f"unknown fault kinds {sorted(unknown)}: choose from {', '.join(FAULT_KINDS)}")
    sys.exit(uvloop.run(soak(args.minutes, args.rate, args.fault_every, args.seed, args.partitions, fault_kinds)))


if __name__ == "__main__":
    main()
