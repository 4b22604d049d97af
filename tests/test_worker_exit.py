"""A worker program stopped by Ctrl-C as temporalio's samples stop theirs: the KeyboardInterrupt
leaves the loop, then `loop.shutdown_asyncgens()` runs while the worker's tasks still poll."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from kadence.client import Client
from kadence.dev.local_stack import LocalStack

REPO = Path(__file__).resolve().parents[1]

# As message_passing/waiting_for_handlers/worker.py ends: what shutdown_asyncgens() reports to the
# loop's exception handler (asyncio logs each at ERROR) is printed apart, to be counted.
WORKER = textwrap.dedent("""
    import asyncio
    import logging
    import sys

    from kadence import workflow
    from kadence.client import Client
    from kadence.worker import Worker

    interrupt_event = asyncio.Event()


    @workflow.defn
    class KettleWorkflow:
        @workflow.run
        async def run(self, drink: str) -> str:
            return f"{drink} brewed"


    async def main() -> None:
        logging.basicConfig(level=logging.INFO)
        client = await Client.connect()
        async with Worker(client, task_queue=sys.argv[1], workflows=[KettleWorkflow]):
            print("worker started", flush=True)
            await interrupt_event.wait()
            logging.info("Shutting down")


    if __name__ == "__main__":
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(main())
        except KeyboardInterrupt:
            interrupt_event.set()
            reported = []
            loop.set_exception_handler(lambda loop, context: reported.append(context["message"]))
            loop.run_until_complete(loop.shutdown_asyncgens())
            print("shutdown_asyncgens reported:", reported, flush=True)
""")


async def test_a_worker_stopped_by_ctrl_c_shuts_its_async_generators_down_cleanly(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path,
) -> None:
    program = tmp_path / "worker.py"
    program.write_text(WORKER)
    # SIGINT at its default, so the program's Python turns it into KeyboardInterrupt.
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(program), task_queue, env=stack.env, cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stdout is not None
        assert await asyncio.wait_for(process.stdout.readline(), 60) == b"worker started\n"
        # Its pollers are busy: a workflow goes through them before the interrupt.
        brewed = await client.execute_workflow("KettleWorkflow", "tea", id=f"kettle-{uuid.uuid4()}", task_queue=task_queue)
        assert brewed == "tea brewed"
        process.send_signal(signal.SIGINT)
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()[-3000:]
    assert stdout.decode().splitlines() == ["shutdown_asyncgens reported: []"]
    assert "aclose()" not in stderr.decode()
