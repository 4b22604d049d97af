"""Kadence under gevent, as temporalio's gevent_async sample runs a worker: monkey patching at the
top, asyncio.run on a thread of gevent's pool, sync activities on gevent's pool too. Patching
threads (or queues) is refused at once with the reason; patching the rest runs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from kadence.dev.local_stack import LocalStack

REPO = Path(__file__).resolve().parents[1]

PROGRAM = textwrap.dedent("""
    import sys

    from gevent import monkey

    monkey.patch_all({patch})

    import asyncio
    import concurrent.futures
    from datetime import timedelta

    from gevent import threadpool

    from kadence import activity, workflow
    from kadence.client import Client
    from kadence.worker import Worker


    class GeventPool(threadpool.ThreadPoolExecutor):
        \"\"\"gevent's pool, whose futures asyncio cannot await: each call settles a concurrent.futures.Future instead.\"\"\"

        def submit(self, fn, /, *args, **kwargs):
            settled = concurrent.futures.Future()

            def call():
                try:
                    settled.set_result(fn(*args, **kwargs))
                except BaseException as exc:
                    settled.set_exception(exc)

            super().submit(call)
            return settled


    @activity.defn
    def weigh_flour(grams: int) -> str:
        return f"{{grams}} g of flour"


    @workflow.defn
    class BakeryWorkflow:
        @workflow.run
        async def run(self, grams: int) -> str:
            return await workflow.execute_activity(weigh_flour, grams, start_to_close_timeout=timedelta(seconds=10))


    async def main() -> None:
        client = await Client.connect()
        async with Worker(client, task_queue=sys.argv[1], workflows=[BakeryWorkflow], activities=[weigh_flour],
                          activity_executor=GeventPool(max_workers=10)):
            print(await client.execute_workflow(BakeryWorkflow.run, 500, id=sys.argv[2], task_queue=sys.argv[1]), flush=True)


    loop_thread = GeventPool(max_workers=1)
    loop_thread.submit(asyncio.run, main()).result()
""")


def run_under_gevent(stack: LocalStack, task_queue: str, tmp_path: Path, patch: str) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "bakery.py"
    program.write_text(PROGRAM.format(patch=patch))
    return subprocess.run([sys.executable, str(program), task_queue, f"bakery-{uuid.uuid4()}"], env=stack.env, cwd=REPO,
                          capture_output=True, text=True, timeout=90)


def test_patching_every_module_is_refused_with_the_reason_instead_of_hanging(stack: LocalStack, task_queue: str, tmp_path: Path) -> None:
    ran = run_under_gevent(stack, task_queue, tmp_path, "")
    assert ran.returncode != 0 and ran.stdout == ""
    assert ("GreenThreadsError: gevent's monkey patching reached threading and queue, and Kadence's Kafka clients cannot run so"
            in ran.stderr), ran.stderr[-3000:]
    assert "monkey.patch_all(thread=False, queue=False)" in ran.stderr


def test_patching_all_but_threads_and_queues_runs_a_worker(stack: LocalStack, task_queue: str, tmp_path: Path) -> None:
    ran = run_under_gevent(stack, task_queue, tmp_path, "thread=False, queue=False")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout == "500 g of flour\n"
