"""temporalio's worker options for how tasks are polled and run. A worker runs on trio through
trio_asyncio, as temporalio's trio sample does (tests/trio_worker.py), with trio_asyncio's
executor for its sync activities and its workflow tasks: each activation runs on that executor's
threads. The poll limits and behaviours are taken and checked as temporalio checks them."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest

from kadence.dev.local_stack import LocalStack
from kadence.worker import PollerBehaviorAutoscaling, PollerBehaviorSimpleMaximum
from kadence.worker._polling import check_at_least_one


async def test_a_worker_on_trio_runs_workflow_tasks_and_sync_activities_on_the_executor_given(
    stack: LocalStack, task_queue: str,
) -> None:
    env = {**os.environ, **stack.kadence_env}
    program = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.trio_worker", task_queue, env=env, stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(program.communicate(), 120)
    assert program.returncode == 0
    ran = json.loads(out.decode().splitlines()[-1])
    assert ran["result"] == ["ada waved from trio", "ada nodded"]
    assert ran["activations_off_the_loop"]
    assert ran["submitted"] >= 4  # the three workflow tasks' activations and the sync activity, at least


def test_poll_limits_and_behaviours_are_checked_as_temporalio_checks_them() -> None:
    with pytest.raises(ValueError, match="maximum must be at least 1"):
        PollerBehaviorSimpleMaximum(0)
    with pytest.raises(ValueError, match="minimum <= initial <= maximum"):
        PollerBehaviorAutoscaling(minimum=5, initial=2, maximum=10)
    with pytest.raises(ValueError, match=r"Worker\(max_concurrent_workflow_tasks=0\): must be at least 1"):
        check_at_least_one(max_concurrent_workflow_tasks=0, max_concurrent_activity_task_polls=None)
    check_at_least_one(max_concurrent_workflow_tasks=1, max_concurrent_workflow_task_polls=None)
