"""Scale-out under load: two instances of each service (static members, as deployed), or two
instances of the one process that runs them all (`kadence server`), two workers, and while a few
hundred workflows run, instances stopped gracefully (SIGTERM) and killed (SIGKILL), then started
again: every rebalance that follows moves partitions between the instances. Every workflow
completes with its result, each activity runs once, the audit is clean."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from kadence.client import Client
from kadence.dev.local_stack import PROCESS_LAYOUTS, LocalStack
from kadence.ops.audit import audit_history
from tests.conftest import local_stack
from tests.workflows import StepSleepStepWorkflow

pytestmark = pytest.mark.kafka_only

REPO = Path(__file__).resolve().parents[1]
WORKFLOWS = 200
START_RATE_PER_S = 10  # the load runs about 20 s, while the faults land
SLEEP_S = 1.0

# (seconds after the first start, instance, signal or None to start it again), by process layout
FAULTS: dict[str, list[tuple[float, str, signal.Signals | None]]] = {"separate": [
    (3.0, "history-1", signal.SIGTERM),
    (5.0, "matching-0", signal.SIGKILL),
    (7.0, "timer-1", signal.SIGKILL),
    (8.0, "history-1", None),
    (9.0, "visibility-0", signal.SIGTERM),
    (10.0, "matching-0", None),
    (11.0, "timer-1", None),
    (12.0, "history-0", signal.SIGKILL),
    (13.0, "visibility-0", None),
    (14.0, "timer-0", signal.SIGTERM),
    (15.0, "matching-1", signal.SIGTERM),
    (17.0, "history-0", None),
    (18.0, "timer-0", None),
    (19.0, "matching-1", None),
], "one": [
    (3.0, "server-1", signal.SIGTERM),
    (6.0, "server-1", None),
    (9.0, "server-0", signal.SIGKILL),
    (12.0, "server-0", None),
    (15.0, "server-1", signal.SIGKILL),
    (18.0, "server-1", None),
]}


def start(stack: LocalStack, instance: str) -> None:
    stack.start_service(instance.rsplit("-", 1)[0], instance, env={"KADENCE_INSTANCE_ID": instance})


async def inflict(stack: LocalStack, layout: str, began: float) -> None:
    for at, instance, sig in FAULTS[layout]:
        await asyncio.sleep(max(0.0, began + at - time.monotonic()))
        if sig is None:
            start(stack, instance)
        else:
            await asyncio.to_thread(stack.kill_service, instance, sig)


@pytest.mark.parametrize("layout", list(PROCESS_LAYOUTS))
async def test_every_workflow_completes_once_while_each_service_rebalances_under_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, layout: str,
) -> None:
    with local_stack(services=()) as stack:
        for key, value in stack.kadence_env.items():
            monkeypatch.setenv(key, value)  # the in-process client uses this stack
        for name in PROCESS_LAYOUTS[layout]:
            for instance in (f"{name}-0", f"{name}-1"):
                start(stack, instance)
        stack.wait_until_ready()
        task_queue = f"rebalances-{uuid.uuid4()}"
        workers = [subprocess.Popen([sys.executable, "-m", "tests.worker_main", task_queue, f"worker-{i}"], env=stack.env, cwd=REPO)
                   for i in range(2)]
        client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)

        async def run_one(i: int, began: float) -> tuple[str, str, list[int]]:
            await asyncio.sleep(max(0.0, began + i / START_RATE_PER_S - time.monotonic()))  # a steady load
            handle = await client.start_workflow(
                StepSleepStepWorkflow.run, args=[str(tmp_path), SLEEP_S], id=f"rebalance-{i}-{uuid.uuid4()}", task_queue=task_queue,
            )
            return handle.id, handle.result_run_id or "", await handle.result()

        began = time.monotonic()
        faults = asyncio.ensure_future(inflict(stack, layout, began))
        try:
            runs = await asyncio.wait_for(asyncio.gather(*(run_one(i, began) for i in range(WORKFLOWS))), 150)
            await faults
        finally:
            faults.cancel()
            await client.close()
            for worker in workers:
                worker.terminate()
            for worker in workers:
                worker.wait(timeout=30)

        assert [result for _, _, result in runs] == [[1, 1]] * WORKFLOWS, "each activity ran once"
        ran = {path.name: len(path.read_text().splitlines()) for path in tmp_path.iterdir()}
        assert len(ran) == 2 * WORKFLOWS and set(ran.values()) == {1}, {name: n for name, n in ran.items() if n != 1}
        report = audit_history(stack.settings)
        assert report.violations == []
        for workflow_id, run_id, _ in runs:
            kinds = report.event_types(workflow_id, run_id)
            assert (kinds.count("ActivityTaskStarted"), kinds.count("TimerFired")) == (2, 1), kinds
            assert kinds[-1] == "WorkflowExecutionCompleted"
