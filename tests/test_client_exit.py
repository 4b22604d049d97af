"""A program's end with its clients in it, as temporalio's samples end theirs: a starter that never
closes its clients exits when its asyncio.run returns, one that never closes its loop either exits
silently, and a client closed mid-lookup says nothing on the way out."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg

from kadence import activity, workflow
from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import ApplicationError
from kadence.worker import Worker

REPO = Path(__file__).resolve().parents[1]


@activity.defn
async def stamp_receipt() -> None:
    await asyncio.sleep(0.2)


@workflow.defn
class ParcelWorkflow:
    """Delivers, loses or holds a parcel (by its input) once a signature is under way, and in each
    case lets the signature's update finish first, as message_passing/waiting_for_handlers does."""

    def __init__(self) -> None:
        self.signing = False

    @workflow.update
    async def sign_for(self) -> str:
        self.signing = True
        await workflow.execute_activity(stamp_receipt, start_to_close_timeout=timedelta(seconds=10))
        return "signed"

    @workflow.run
    async def run(self, outcome: str) -> str:
        try:
            await workflow.wait_condition(lambda: self.signing)
            if outcome == "lost":
                raise ApplicationError("parcel lost in transit")
            if outcome == "held":
                await asyncio.Future()  # until cancelled
            await workflow.wait_condition(workflow.all_handlers_finished)
            return "delivered"
        except (asyncio.CancelledError, ApplicationError):
            await workflow.wait_condition(workflow.all_handlers_finished)
            raise


# A client per run, never closed (temporalio's starters leave theirs: temporalio needs no close),
# and lookups of the read model left under way as the program ends, so its connection pool is
# still connecting when asyncio.run cancels what is left (the sample's starter got there by chance).
STARTER = textwrap.dedent("""
    import asyncio
    import sys

    from kadence.client import Client, WorkflowUpdateStage


    async def deliver(outcome: str, workflow_id: str, task_queue: str) -> None:
        client = await Client.connect()
        handle = await client.start_workflow("ParcelWorkflow", outcome, id=workflow_id, task_queue=task_queue)
        signature = await handle.start_update("sign_for", wait_for_stage=WorkflowUpdateStage.ACCEPTED)
        if outcome == "held":
            await handle.cancel()
        print(outcome, "update:", await signature.result())
        try:
            print(outcome, "workflow:", await handle.result())
        except Exception as exc:
            print(outcome, "workflow failed:", f"{exc}: {exc.__cause__}")
        for _ in range(4):
            asyncio.ensure_future(handle.describe())
        await asyncio.sleep(0.002)


    async def main() -> None:
        for outcome in ("delivered", "lost", "held"):
            await deliver(outcome, f"{sys.argv[1]}-{outcome}", sys.argv[2])


    asyncio.run(main())
""")


async def test_a_starter_that_never_closes_its_clients_exits(stack: LocalStack, client: Client, task_queue: str, tmp_path: Path) -> None:
    starter = tmp_path / "starter.py"
    starter.write_text(STARTER)
    async with Worker(client, task_queue=task_queue, workflows=[ParcelWorkflow], activities=[stamp_receipt]):
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(starter), f"parcel-{uuid.uuid4()}", task_queue, env=stack.env, cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        try:
            stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
        except TimeoutError:
            process.kill()
            stdout, stderr = await process.communicate()
            raise AssertionError(f"the starter did not exit: {stdout.decode()} {stderr.decode()[-3000:]}") from None
    assert process.returncode == 0, stderr.decode()[-3000:]
    assert stdout.decode().splitlines() == [
        "delivered update: signed", "delivered workflow: delivered",
        "lost update: signed", "lost workflow failed: Workflow execution failed: parcel lost in transit",
        "held update: signed", "held workflow failed: Workflow execution failed: Workflow cancelled",
    ]


# A result awaited twice: the second time, the read model's lookup of the run waits on Postgres (the
# test holds its table, then stops the server process that runs it, so its cancellation waits too)
# when the client is closed; then the end of uvloop.run (the CLI's) cancels what is left.
CLOSER = textwrap.dedent("""
    import asyncio
    import sys

    import uvloop

    from kadence.client import Client


    async def main() -> None:
        client = await Client.connect()
        handle = client.get_workflow_handle(sys.argv[1])
        first = asyncio.ensure_future(handle.result())
        await asyncio.sleep(1.0)  # found in the read model, still running
        print("waiting", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        second = asyncio.ensure_future(handle.result())
        print("looking up", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await client.close()
        left = asyncio.all_tasks() - {asyncio.current_task(), first, second}
        print("closed, tasks left running:", sorted(task.get_coro().__qualname__ for task in left))


    uvloop.run(main())
""")


async def test_a_client_closed_during_a_lookup_says_nothing_on_the_way_out(
    stack: LocalStack, client: Client, task_queue: str, tmp_path: Path,
) -> None:
    closer = tmp_path / "closer.py"
    closer.write_text(CLOSER)
    handle = await client.start_workflow("NobodyRunsThis", id=f"unserved-{uuid.uuid4()}", task_queue=task_queue)
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(closer), handle.id, env=stack.env, cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        assert await asyncio.wait_for(process.stdout.readline(), 60) == b"waiting\n"
        async with await psycopg.AsyncConnection.connect(stack.postgres_dsn) as conn:
            await conn.execute("LOCK TABLE kadence_executions IN ACCESS EXCLUSIVE MODE")
            process.stdin.write(b"locked\n")
            assert await asyncio.wait_for(process.stdout.readline(), 60) == b"looking up\n"
            async with asyncio.timeout(30), await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as watcher:
                while not (blocked := await (await watcher.execute(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s", ("%FROM kadence_executions%",),
                )).fetchone()):
                    await asyncio.sleep(0.05)
            os.kill(blocked[0], signal.SIGSTOP)
            try:
                process.stdin.write(b"close\n")
                await asyncio.sleep(2.0)  # the close under way meanwhile
            finally:
                os.kill(blocked[0], signal.SIGCONT)
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    await handle.terminate()
    assert (process.returncode, stdout.decode(), stderr.decode()) == (0, "closed, tasks left running: []\n", "")


# As hello_nexus/caller/app.py ends: neither the client nor the loop closed, the workflow in a module
# of its own (so the interpreter frees the loop as it exits, with whatever tasks are left on it).
GREETER = textwrap.dedent("""
    import asyncio
    import sys

    from kadence.client import Client
    from kadence.worker import Worker

    from greeting import GreetingWorkflow


    async def main() -> str:
        client = await Client.connect()
        async with Worker(client, task_queue=sys.argv[2], workflows=[GreetingWorkflow]):
            return await client.execute_workflow(GreetingWorkflow.run, "world", id=sys.argv[1], task_queue=sys.argv[2])


    if __name__ == "__main__":
        loop = asyncio.new_event_loop()
        print(loop.run_until_complete(main()))
""")
GREETING = textwrap.dedent("""
    from kadence import workflow


    @workflow.defn
    class GreetingWorkflow:
        @workflow.run
        async def run(self, name: str) -> str:
            return f"Hello, {name}!"
""")


async def test_a_program_that_never_closes_its_client_nor_its_loop_exits_silently(
    stack: LocalStack, task_queue: str, tmp_path: Path,
) -> None:
    (tmp_path / "greeting.py").write_text(GREETING)
    (tmp_path / "greeter.py").write_text(GREETER)
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(tmp_path / "greeter.py"), f"greeting-{uuid.uuid4()}", task_queue, env=stack.env, cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert (process.returncode, stdout.decode()) == (0, "Hello, world!\n"), stderr.decode()[-3000:]
    for noise in ("Task was destroyed", "Exception ignored", "Traceback"):
        assert noise not in stderr.decode(), stderr.decode()[-3000:]
