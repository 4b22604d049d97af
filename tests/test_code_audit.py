"""`kadence audit replay --worker-module`: every run in the log re-executed against workflow code.
A change that would break recorded runs diverges (exit 1, with the event and the command the code
issued instead); the same change behind a patch does not; types the module lacks are skipped."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from kadence.client import Client
from kadence.worker import Worker
from tests.conftest import local_stack
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, EchoWorkflow, TwoStepWorkflow

REPO = Path(__file__).resolve().parents[1]


def audit(env: dict[str, str], *args: str) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "kadence.cli", "audit", "replay", "--json", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


async def test_the_audit_replays_every_run_against_the_code_and_reports_each_divergence() -> None:
    with local_stack() as stack:
        client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
        try:
            async with Worker(client, task_queue="audited", workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
                runs = []
                for value in ("a", "b"):
                    handle = await client.start_workflow(TwoStepWorkflow.run, value, id=f"two-{uuid.uuid4()}", task_queue="audited")
                    await handle.result()
                    runs.append(handle.result_run_id)
                await client.execute_workflow(EchoWorkflow.run, "hi", id=f"echo-{uuid.uuid4()}", task_queue="audited")
        finally:
            await client.close()

        code, same = audit(stack.env, "--worker-module", "tests.workflows")
        assert code == 0 and same["divergences"] == []
        assert same["code_replay"] == {"TwoStepWorkflow": {"replayed": 2, "diverged": 0, "skipped": 0},
                                       "EchoWorkflow": {"replayed": 1, "diverged": 0, "skipped": 0}}

        code, changed = audit(stack.env, "--worker-module", "tests.changed_workflows")
        assert code == 1
        assert changed["code_replay"]["TwoStepWorkflow"] == {"replayed": 0, "diverged": 2, "skipped": 0}
        assert changed["code_replay"]["EchoWorkflow"] == {"replayed": 0, "diverged": 0, "skipped": 1}  # not in that module
        for run_id in runs:
            [line] = [d for d in changed["divergences"] if f"run_id={run_id}" in d]
            assert "ActivityTaskScheduled" in line and "StartTimer" in line, line  # the event, and what the code issued instead

        code, patched = audit(stack.env, "--worker-module", "tests.patched_workflows", "--workflow-type", "TwoStepWorkflow")
        assert code == 0 and patched["code_replay"] == {"TwoStepWorkflow": {"replayed": 2, "diverged": 0, "skipped": 0}}
