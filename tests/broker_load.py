"""The workload the broker-fault tests (test_broker_faults.py, one node) and the cluster tests
(test_broker_cluster.py, three) put a broker fault under, and what they check after it.

200 workflows with activities, signals and durable timers start one after another; the fault lands
mid-run (when `fault_after_starts` have started), so it finds workflows at every step. Two workers
run them, as Kubernetes runs them. Each service's /readyz is sampled throughout. Afterwards every
workflow must have completed once with its result, no activity attempt (workflow, activity,
attempt) may have run twice, the audit of the whole log must be clean, and every service must be
the same process as before, ready again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kadence import activity
from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.ops.audit import audit_history
from kadence.worker import Worker
from tests.conftest import local_stack
from tests.workflows import SignalOrTimerWorkflow

# 200, not 500 as before: the starts still spread over 5 s and the fault still lands mid-run, so it
# finds workflows at every step (and the rest start during or after it); the 300 more only made the
# backlog the test waits for after the fault (about 5 s per fault) and the audit longer.
WORKFLOWS = 200
START_INTERVAL_S = 0.025  # starts spread over 5 s, so the fault finds workflows at every step
FAULT_AFTER_STARTS = 100  # the fault lands mid-run: half the workflows started, the rest start during or after it
TIMER_SECONDS = 1.5  # the unsignaled half wakes on this durable timer
SIGNALED_TIMER_SECONDS = 600.0  # the signaled half: a timer that never fires, so the signal decides
COMPLETION_TIMEOUT_S = 90.0  # from the broker coming back to every workflow completed
READY_TIMEOUT_S = 60.0  # from the broker coming back to every service ready (and staying so for READY_STABLE_S)
READY_STABLE_S = 2.0
WORKER_STOP_TIMEOUT_S = 30.0

Fault = Callable[[LocalStack], Awaitable[float]]  # does the fault; returns when the broker is whole again


@dataclass
class ReadinessLog:
    """Each service's /readyz, sampled every 100 ms: when it changed, and what it said."""

    ports: dict[str, int]
    changes: list[tuple[float, str, int, str]] = field(default_factory=list)  # (monotonic time, service, status, body)
    current: dict[str, int] = field(default_factory=dict)

    async def sample_until(self, stop: asyncio.Event) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as session:
            while not stop.is_set():
                await asyncio.gather(*(self._probe(session, name, port) for name, port in self.ports.items()))
                await asyncio.sleep(0.1)

    async def _probe(self, session: aiohttp.ClientSession, name: str, port: int) -> None:
        try:
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                status, body = response.status, (await response.text()).strip()
        except (aiohttp.ClientError, TimeoutError) as exc:
            status, body = 0, f"no answer: {exc!r}"
        if self.current.get(name) != status:
            self.current[name] = status
            self.changes.append((time.monotonic(), name, status, body))

    def all_ready_since(self) -> float | None:
        """Since when every service has answered 200 without a break; None if one does not now."""
        if set(self.current) != set(self.ports) or any(status != 200 for status in self.current.values()):
            return None
        return max((at for at, _, status, _ in self.changes if status == 200), default=0.0)

    def went_unready(self, since: float) -> set[str]:
        return {name for at, name, status, _ in self.changes if at >= since and status != 200}

    def describe(self, origin: float) -> str:
        return "\n".join(f"  {at - origin:+7.2f} s {name}: {status} {body!r}" for at, name, status, body in self.changes)


@dataclass
class LoadRun:
    """What one run of the workload through a fault saw (times are time.monotonic())."""

    what: str  # the fault, as the messages name it
    results: list[tuple[str, str, str]]  # (workflow id, run id, result), in start order
    completed_at: dict[str, float]
    attempt_runs: Counter[tuple[str, str, int]]  # (workflow, activity, attempt): how often it ran
    readiness: ReadinessLog
    processes: dict[str, subprocess.Popen[bytes]]  # the services when the run began
    started_at: float
    fault_at: float
    back_at: float  # when the fault returned: the broker whole again
    ready_at: float | None  # when every service was ready again for good

    def summary(self) -> str:
        after = sorted(at - self.back_at for at in self.completed_at.values() if at > self.back_at)
        last = max(self.completed_at.values()) - self.back_at
        return (
            f"{self.what}: fault at +{self.fault_at - self.started_at:.1f} s into the run, broker back "
            f"{self.back_at - self.fault_at:.1f} s later; {len(after)} of {WORKFLOWS} workflows completed after it: the first "
            f"{after[0] if after else 0:.1f} s, half {after[len(after) // 2] if after else 0:.1f} s, the last {last:.1f} s after "
            "the broker came back; "
            + (f"all services ready {self.ready_at - self.back_at:.1f} s after it" if self.ready_at is not None
               else "not all services ready again")
            + f" (not ready during the fault: {sorted(self.readiness.went_unready(self.fault_at)) or 'none'})"
        )


@contextlib.contextmanager
def stack_of_its_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **options: Any) -> Iterator[LocalStack]:
    """A stack for one test that breaks its broker, the test process's client and worker pointed at
    it, their logs beside the services'; the broker's and the services' logs are kept in
    tmp_path/logs (the stack's data dir goes with it)."""
    with local_stack(**options) as stack, logging_to(tmp_path / "logs" / "test-process.log"):
        for key, value in stack.kadence_env.items():  # the in-process client and worker read KADENCE_* as any process
            monkeypatch.setenv(key, value)
        try:
            yield stack
        finally:
            shutil.copytree(stack.data_dir / "logs", tmp_path / "logs", dirs_exist_ok=True)
            print(f"logs: {tmp_path / 'logs'}")


@contextlib.contextmanager
def logging_to(path: Path) -> Iterator[None]:
    """The in-process client's and worker's logs (INFO and up) in a file beside the services' logs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s level=%(levelname)s service=test logger=%(name)s %(message)s"))
    kadence = logging.getLogger("kadence")
    level = kadence.level
    kadence.setLevel(logging.INFO)
    kadence.addHandler(handler)
    try:
        yield
    finally:
        kadence.removeHandler(handler)
        kadence.setLevel(level)
        handler.close()


async def run_through(
    stack: LocalStack, what: str, fault: Fault, *,
    start_interval_s: float = START_INTERVAL_S, fault_after_starts: int = FAULT_AFTER_STARTS,
) -> LoadRun:
    """Run the workload, `fault` when `fault_after_starts` workflows have started, and wait until
    every workflow completed and every service is ready again."""
    task_queue = f"broker-{uuid.uuid4().hex[:8]}"
    processes = dict(stack.services)
    readiness = ReadinessLog({name: stack.http_ports[name] for name in processes})
    stop_sampling = asyncio.Event()
    sampling = asyncio.create_task(readiness.sample_until(stop_sampling))
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    started = 0
    enough_started = asyncio.Event()
    completed_at: dict[str, float] = {}

    async def run_one(i: int) -> tuple[str, str, str]:
        nonlocal started
        await asyncio.sleep(i * start_interval_s)
        workflow_id = f"{task_queue}-{i}"
        signaled = i % 2 == 0
        handle = await client.start_workflow(
            SignalOrTimerWorkflow.run, args=[f"w{i}", SIGNALED_TIMER_SECONDS if signaled else TIMER_SECONDS],
            id=workflow_id, task_queue=task_queue,
        )
        started += 1
        if started >= fault_after_starts:
            enough_started.set()
        if signaled:
            await handle.signal(SignalOrTimerWorkflow.proceed, f"s{i}")
        result = await handle.result()
        completed_at[workflow_id] = time.monotonic()
        return workflow_id, handle.result_run_id or "", result

    attempt_runs: Counter[tuple[str, str, int]] = Counter()

    @activity.defn(name="echo")
    async def counted_echo(value: str) -> str:
        info = activity.info()
        attempt_runs[(info.workflow_id, info.activity_id, info.attempt)] += 1
        return value

    # Two workers, as Kubernetes runs them: the group rebalances when the broker comes back, and a
    # partition may go to the worker that did not read its records before.
    workers = [
        Worker(client, task_queue=task_queue, workflows=[SignalOrTimerWorkflow], activities=[counted_echo],
               max_concurrent_activities=200, identity=f"worker-{i}")
        for i in range(2)
    ]
    working = asyncio.ensure_future(asyncio.gather(*(worker.run() for worker in workers)))
    try:
        assert await stably_ready(readiness, time.monotonic()) is not None, f"the stack never got ready:\n{readiness.describe(0)}"
        await asyncio.wait_for(asyncio.gather(*(worker.ready.wait() for worker in workers)), 60)
        started_at = time.monotonic()
        runs = asyncio.ensure_future(asyncio.gather(*(run_one(i) for i in range(WORKFLOWS))))
        await asyncio.wait_for(enough_started.wait(), 60)
        assert not runs.done()
        fault_at = time.monotonic()
        back_at = await fault(stack)
        try:
            results = await asyncio.wait_for(asyncio.shield(runs), COMPLETION_TIMEOUT_S)
        except TimeoutError:
            runs.cancel()
            unfinished = [f"{task_queue}-{i}" for i in range(WORKFLOWS) if f"{task_queue}-{i}" not in completed_at]
            exited = [name for name, process in processes.items() if process.poll() is not None]
            pytest.fail(
                f"{len(unfinished)} of {WORKFLOWS} workflows not completed {COMPLETION_TIMEOUT_S:.0f} s after "
                f"the broker came back ({what}); readiness since the fault:\n{readiness.describe(back_at)}\n"
                + "".join(exit_of(stack, name, processes[name]) for name in exited)
                + await asyncio.to_thread(where_they_stand, stack, unfinished)
            )
        ready_at = await stably_ready(readiness, back_at)
        for worker in workers:
            await worker.shutdown()
        try:
            await asyncio.wait_for(working, WORKER_STOP_TIMEOUT_S)
        except TimeoutError:
            pytest.fail(f"the workers did not stop within {WORKER_STOP_TIMEOUT_S:.0f} s of their shutdown ({what})")
    finally:
        if not working.done():  # the test failed: stop the worker without waiting for it
            working.cancel()
            await asyncio.gather(working, return_exceptions=True)
        stop_sampling.set()
        await sampling
        await client.close()
    return LoadRun(what, results, completed_at, attempt_runs, readiness, processes, started_at, fault_at, back_at, ready_at)


async def assert_each_completed_once(stack: LocalStack, run: LoadRun, summary: str) -> None:
    """Every service the same process, ready again; every workflow completed once with its result;
    no activity attempt ran twice; the audit of the whole log clean."""
    assert run.ready_at is not None, f"not every service ready again:\n{summary}\n{run.readiness.describe(run.back_at)}"
    for name, process in run.processes.items():
        assert process.poll() is None and stack.services[name] is process, (
            f"the {name} service did not survive ({run.what}; exit code {process.returncode}); {summary}"
        )
    expected = [f"w{i} after signal s{i}" if i % 2 == 0 else f"w{i} after timer" for i in range(WORKFLOWS)]
    assert [result for _, _, result in run.results] == expected, summary
    twice = [(key, count) for key, count in run.attempt_runs.items() if count > 1]
    assert twice == [], f"activity attempts that ran more than once ((workflow, activity, attempt), runs): {twice[:10]}; {summary}"

    report = await asyncio.to_thread(audit_history, stack.settings)
    assert report.violations == [], f"{summary}\n" + "\n".join(report.violations[:20])
    for i, (workflow_id, run_id, _) in enumerate(run.results):
        runs_of_id = [key for key in report.runs if key[0] == workflow_id]
        assert runs_of_id == [(workflow_id, run_id)], f"{workflow_id} has runs {runs_of_id}; {summary}"
        kinds = report.event_types(workflow_id, run_id)
        assert kinds.count("ActivityTaskCompleted") == 2 and kinds.count("WorkflowExecutionCompleted") == 1, (
            f"{workflow_id}: {kinds}; {summary}"
        )
        assert kinds.count("WorkflowExecutionSignaled") == (1 if i % 2 == 0 else 0), f"{workflow_id}: {kinds}; {summary}"
        assert kinds.count("TimerFired") == (0 if i % 2 == 0 else 1), f"{workflow_id}: {kinds}; {summary}"
        assert kinds[-1] == "WorkflowExecutionCompleted", f"{workflow_id}: {kinds}; {summary}"


def exit_of(stack: LocalStack, name: str, process: subprocess.Popen[bytes], lines: int = 20) -> str:
    """A service that exited, with its log's last lines (on CI the logs go with the machine)."""
    log_file = stack.data_dir / "logs" / f"{name}.log"
    tail = log_file.read_text(errors="replace").splitlines()[-lines:] if log_file.exists() else ["(no log)"]
    return f"the {name} service exited (code {process.returncode}); its log ends:\n" + "\n".join(tail) + "\n"


def where_they_stand(stack: LocalStack, workflow_ids: list[str]) -> str:
    """The audit's view of the unfinished workflows (their events, what they wait for), so a failure
    on CI, whose logs are gone with its machine, says where each one stopped."""
    report = audit_history(stack.settings)
    wanted = set(workflow_ids[:5])
    lines = [f"audit: {len(report.violations)} violations {report.violations[:5]}"]
    for (workflow_id, run_id), run in report.runs.items():
        if workflow_id in wanted:
            lines.append(f"{workflow_id} run {run_id}: {report.event_types(workflow_id, run_id)}; waits for {sorted(run.pending)}")
    lines += [f"stuck: {line}" for line in report.stuck if any(w in line for w in wanted)]
    lines += [f"waiting for a worker: {line}" for line in report.waiting if any(w in line for w in wanted)]
    return "\n".join(lines)


async def stably_ready(readiness: ReadinessLog, back_at: float) -> float | None:
    """When every service became ready for good (ready for READY_STABLE_S since), or None by the deadline."""
    deadline = back_at + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        since = readiness.all_ready_since()
        if since is not None and time.monotonic() - since >= READY_STABLE_S:
            return max(since, back_at)
        await asyncio.sleep(0.1)
    return None
