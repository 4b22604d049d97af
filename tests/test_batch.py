"""Batch jobs (`kadence workflow signal|cancel|terminate|reset --query`, `kadence batch`), run as a
user runs them, in processes of their own against the stack; one is killed mid-job and resumed."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from click.testing import CliRunner

from kadence.client import Client, ResetType, WorkflowHandle
from kadence.dev.local_stack import LocalStack
from kadence.ops.batch import batch_request_id
from kadence.ops.cli import main
from kadence.worker import Worker
from tests.conftest import wait_for_event
from tests.test_cli import REPO
from tests.workflows import ApprovalWorkflow

NOTE = "batched"


async def kadence(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in its own process, stdin not a terminal (so it never waits to be asked)."""
    return await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "kadence.ops.cli", *args], env=stack.env, cwd=REPO,
                                   capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
async def worker(client: Client, task_queue: str) -> AsyncIterator[None]:
    async with Worker(client, task_queue=task_queue, workflows=[ApprovalWorkflow]):
        yield


async def start_approvals(client: Client, task_queue: str, prefix: str, count: int) -> list[WorkflowHandle]:
    """`count` ApprovalWorkflows `<prefix>0`, ..., once the read model lists every one (a batch
    job's filter reads the read model)."""
    handles = await asyncio.gather(*(
        client.start_workflow(ApprovalWorkflow.run, f"order-{i}", id=f"{prefix}{i}", task_queue=task_queue) for i in range(count)
    ))
    async with asyncio.timeout(30):
        while (await client.count_workflows(f"WorkflowId STARTS_WITH '{prefix}'")).count < count:
            await asyncio.sleep(0.05)
    return list(handles)


async def notes(handle: WorkflowHandle) -> str:
    """The notes the run was signalled, joined: NOTE once, "NOTE, NOTE" twice. A query is answered
    once the run's workflow task has taken every signal recorded before it."""
    answer: str = await handle.query(ApprovalWorkflow.notes_so_far)
    return answer


async def until_statuses(handles: list[WorkflowHandle], expected: list[str]) -> None:
    """Until the read model shows the runs so (it follows the answers the CLI heard by milliseconds)."""
    async with asyncio.timeout(30):
        while [(await h.describe()).status.value for h in handles] != expected:
            await asyncio.sleep(0.1)


def cli_process(stack: LocalStack, *args: str) -> subprocess.Popen[str]:
    """The CLI in a process of its own, left running: a batch job a test stops midway."""
    return subprocess.Popen([sys.executable, "-m", "kadence.ops.cli", *args], env=stack.env, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


async def until_outcomes(stack: LocalStack, job_id: str, process: subprocess.Popen[str], count: int) -> None:
    """Until the job has recorded `count` outcomes, its process running meanwhile."""
    async with asyncio.timeout(60):
        while await outcomes_recorded(stack, job_id) < count:
            assert process.poll() is None, process.communicate()
            await asyncio.sleep(0.05)


async def outcomes_recorded(stack: LocalStack, job_id: str) -> int:
    async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn:
        row = await (await conn.execute(
            "SELECT count(*) FROM kadence_batch_job_executions WHERE job_id = %s AND outcome IS NOT NULL", (job_id,),
        )).fetchone()
    return row[0] if row else 0


async def test_batch_signal_reaches_each_execution_the_filter_matches_once(
    stack: LocalStack, client: Client, task_queue: str, worker: None,
) -> None:
    prefix = f"batch-{uuid.uuid4()}-"
    chosen = await start_approvals(client, task_queue, f"{prefix}a-", 4)
    others = await start_approvals(client, task_queue, f"{prefix}b-", 2)
    job_id = f"signal-{uuid.uuid4()}"
    command = ("workflow", "signal", "-q", f"WorkflowId STARTS_WITH '{prefix}a-'", "-n", "add_note", "-i", f'"{NOTE}"',
               "--job-id", job_id, "--yes", "--json")

    signalled = await kadence(stack, *command)
    assert signalled.returncode == 0, signalled.stderr
    assert json.loads(signalled.stdout) == {"job_id": job_id, "matched": 4, "done": 4, "failed": 0, "already_closed": 0, "not_current": 0}
    assert [await notes(h) for h in chosen] == [NOTE] * 4
    assert [await notes(h) for h in others] == [""] * 2

    again = await kadence(stack, *command)  # a completed job, run again, does nothing
    assert again.returncode == 0 and "completed already" in again.stderr, again.stderr
    assert json.loads(again.stdout)["done"] == 4
    assert [await notes(h) for h in chosen] == [NOTE] * 4
    other = await kadence(stack, "workflow", "terminate", "--job-id", job_id, "--yes")
    assert other.returncode == 2 and f"batch job {job_id} was started with the operation 'signal'" in other.stderr

    described, listed = await asyncio.gather(kadence(stack, "batch", "describe", "--job-id", job_id, "--json"),
                                             kadence(stack, "batch", "list", "--json", "--limit", "100"))
    job = json.loads(described.stdout)
    assert (job["operation"], job["state"], job["signal_name"], job["signal_args"], job["matched"], job["done"]) == (
        "Signal", "Completed", "add_note", [NOTE], 4, 4)
    assert job["close_time"] is not None and job["executions"] == []
    assert job_id in [j["job_id"] for j in json.loads(listed.stdout)]


async def test_a_batch_job_killed_midway_resumes_and_signals_each_execution_once(
    stack: LocalStack, client: Client, task_queue: str, worker: None,
) -> None:
    prefix = f"batch-kill-{uuid.uuid4()}-"
    handles = await start_approvals(client, task_queue, prefix, 30)
    job_id = f"killed-{uuid.uuid4()}"
    process = cli_process(stack, "workflow", "signal", "-q", f"WorkflowId STARTS_WITH '{prefix}'", "-n", "add_note", "-i", f'"{NOTE}"',
                          "--job-id", job_id, "--rps", "2", "--yes")
    try:
        await until_outcomes(stack, job_id, process, 5)
        alongside = await kadence(stack, "workflow", "signal", "--job-id", job_id, "--yes")
        assert alongside.returncode == 1 and f"batch job {job_id} is being run by another process" in alongside.stderr, alongside.stderr
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL
    assert 5 <= await outcomes_recorded(stack, job_id) < 30  # stopped midway

    stopped = json.loads((await kadence(stack, "batch", "describe", "--job-id", job_id, "--json")).stdout)
    assert stopped["state"] == "Running" and stopped["matched"] == 30

    resumed = await kadence(stack, "workflow", "signal", "--job-id", job_id, "--yes", "--json")  # the job knows the rest
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"job_id": job_id, "matched": 30, "done": 30, "failed": 0, "already_closed": 0, "not_current": 0}
    assert [await notes(h) for h in handles] == [NOTE] * 30


async def test_a_resumed_job_finds_the_answer_to_a_command_its_killed_cli_sent(
    stack: LocalStack, client: Client, task_queue: str, worker: None,
) -> None:
    prefix = f"batch-sent-{uuid.uuid4()}-"
    handles = await start_approvals(client, task_queue, prefix, 8)
    job_id = f"sent-{uuid.uuid4()}"
    process = cli_process(stack, "workflow", "terminate", "-q", f"WorkflowId STARTS_WITH '{prefix}'", "--job-id", job_id, "--rps", "2",
                          "--yes")
    try:
        await until_outcomes(stack, job_id, process, 2)
    finally:
        process.kill()
        process.wait()
    async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn:
        row = await (await conn.execute(
            "SELECT workflow_id, run_id FROM kadence_batch_job_executions WHERE job_id = %s AND outcome IS NULL "
            "ORDER BY workflow_id DESC LIMIT 1", (job_id,),
        )).fetchone()
    assert row is not None
    # As a CLI killed after its command was answered and before it recorded the answer left it.
    await client.get_workflow_handle(row[0], run_id=row[1]).terminate(reason="batch", request_id=batch_request_id(job_id, row[1]))

    resumed = await kadence(stack, "workflow", "terminate", "--job-id", job_id, "--yes", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"job_id": job_id, "matched": 8, "done": 8, "failed": 0, "already_closed": 0, "not_current": 0}
    await until_statuses(handles, ["Terminated"] * 8)


async def test_a_terminated_batch_job_stops_its_cli_and_is_never_resumed(
    stack: LocalStack, client: Client, task_queue: str, worker: None,
) -> None:
    prefix = f"batch-terminate-{uuid.uuid4()}-"
    await start_approvals(client, task_queue, prefix, 12)
    job_id = f"terminated-{uuid.uuid4()}"
    process = cli_process(stack, "workflow", "signal", "-q", f"WorkflowId STARTS_WITH '{prefix}'", "-n", "add_note", "-i", f'"{NOTE}"',
                          "--job-id", job_id, "--rps", "2", "--yes")
    try:
        await until_outcomes(stack, job_id, process, 2)
        terminated = await kadence(stack, "batch", "terminate", "--job-id", job_id, "--reason", "wrong filter")
        assert terminated.returncode == 0, terminated.stderr
        _, stderr = await asyncio.to_thread(process.communicate, timeout=30)  # stops within a second or so
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 1 and f"batch job {job_id} was terminated (wrong filter)" in stderr, stderr
    signalled = await outcomes_recorded(stack, job_id)
    assert 2 <= signalled < 12

    described = json.loads((await kadence(stack, "batch", "describe", "--job-id", job_id, "--json")).stdout)
    assert (described["state"], described["terminate_reason"]) == ("Failed", "wrong filter") and described["close_time"]
    resumed, again = await asyncio.gather(kadence(stack, "workflow", "signal", "--job-id", job_id, "--yes"),
                                          kadence(stack, "batch", "terminate", "--job-id", job_id, "--reason", "twice"))
    assert resumed.returncode == 1 and "was terminated (wrong filter)" in resumed.stderr, resumed.stderr
    assert again.returncode == 1 and f"batch job {job_id} is Failed already" in again.stderr, again.stderr
    assert await outcomes_recorded(stack, job_id) == signalled  # nothing applied after the termination


async def reset_runs(stack: LocalStack, workflow_ids: list[str]) -> dict[str, list[tuple[str, str, str | None]]]:
    """Each workflow id's runs as the read model holds them: (run id, status, next run id), oldest first."""
    async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn:
        rows = await (await conn.execute(
            "SELECT workflow_id, run_id, status, next_run_id FROM kadence_executions WHERE workflow_id = ANY(%s) "
            "ORDER BY workflow_id, status <> 'Terminated', run_id", (workflow_ids,),
        )).fetchall()
    runs: dict[str, list[tuple[str, str, str | None]]] = {w: [] for w in workflow_ids}
    for workflow_id, run_id, status, next_run_id in rows:
        runs[workflow_id].append((run_id, status, next_run_id))
    return runs


async def test_a_batch_reset_killed_midway_resumes_and_resets_each_run_once(
    stack: LocalStack, client: Client, task_queue: str, worker: None,
) -> None:
    prefix = f"batch-reset-{uuid.uuid4()}-"
    handles = await start_approvals(client, task_queue, prefix, 12)
    for handle in handles:  # a run resets to a workflow task it completed
        await wait_for_event(stack, handle.id, "WorkflowTaskCompleted", 30)
    await handles[0].signal(ApprovalWorkflow.approve, "dave")  # closed before the job: reset too, within the retention
    await handles[0].result()
    await until_statuses(handles[:1], ["Completed"])
    job_id = f"reset-{uuid.uuid4()}"
    process = cli_process(stack, "workflow", "reset", "-q", f"WorkflowId STARTS_WITH '{prefix}'", "--type", "LastWorkflowTask",
                          "--reason", "redeployed", "--job-id", job_id, "--rps", "2", "--yes")
    try:
        await until_outcomes(stack, job_id, process, 4)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert 4 <= await outcomes_recorded(stack, job_id) < 12  # stopped midway
    stopped = json.loads((await kadence(stack, "batch", "describe", "--job-id", job_id, "--json")).stdout)
    assert (stopped["operation"], stopped["state"], stopped["reset_type"], stopped["reapply_exclude"]) == (
        "Reset", "Running", "LAST_WORKFLOW_TASK", [])

    async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn:
        pending = await (await conn.execute(
            "SELECT workflow_id, run_id FROM kadence_batch_job_executions WHERE job_id = %s AND outcome IS NULL "
            "ORDER BY workflow_id DESC LIMIT 3", (job_id,),
        )).fetchall()
        assert len(pending) == 3
        (answered_id, answered_run), (unrecorded_id, unrecorded_run), (closed_id, closed_run) = pending
        # As a killed CLI left them: a reset sent and answered, its outcome not recorded by the job; a
        # reset sent whose answer the read model has not recorded either (the resumed job sends it
        # again, and history answers the repeat with the run it made).
        for workflow_id, run_id in ((answered_id, answered_run), (unrecorded_id, unrecorded_run)):
            await client.get_workflow_handle(workflow_id, run_id=run_id).reset(
                reset_type=ResetType.LAST_WORKFLOW_TASK, reason="redeployed", request_id=batch_request_id(job_id, run_id))
        unrecorded = batch_request_id(job_id, unrecorded_run)
        async with asyncio.timeout(30):
            while not (await (await conn.execute("DELETE FROM kadence_command_outcomes WHERE request_id = %s RETURNING 1",
                                                  (unrecorded,))).fetchall()):
                await asyncio.sleep(0.05)
    # And one no longer current when the reset reaches it: closed, and its workflow id started again.
    await client.get_workflow_handle(closed_id, run_id=closed_run).terminate(reason="closed meanwhile")
    await client.start_workflow(ApprovalWorkflow.run, "order-again", id=closed_id, task_queue=task_queue)

    resumed = await kadence(stack, "workflow", "reset", "--job-id", job_id, "--yes", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"job_id": job_id, "matched": 12, "done": 11, "failed": 0, "already_closed": 0,
                                          "not_current": 1}
    described, other_type = await asyncio.gather(kadence(stack, "batch", "describe", "--job-id", job_id, "--json"),
                                                 kadence(stack, "workflow", "reset", "--job-id", job_id, "--type", "FirstWorkflowTask"))
    assert other_type.returncode == 2 and "was started with --type 'LastWorkflowTask'" in other_type.stderr, other_type.stderr
    described = json.loads(described.stdout)
    assert described["state"] == "Completed"
    assert [(e["workflow_id"], e["outcome"]) for e in described["executions"]] == [(closed_id, "NotCurrent")]

    reset_ids = [h.id for h in handles if h.id not in (handles[0].id, closed_id)]  # running when reset
    async with asyncio.timeout(30):  # the read model follows the answers the CLI heard by milliseconds
        while True:
            runs = await reset_runs(stack, reset_ids)
            if all([status for _, status, _ in r] == ["Terminated", "Running"] for r in runs.values()):
                break
            await asyncio.sleep(0.1)
    for handle in handles:
        if handle.id not in reset_ids:
            continue
        (base_run, base_status, next_run), (new_run, _, _) = runs[handle.id]  # exactly one run reset, and one new run
        assert (base_run, base_status, next_run) == (handle.result_run_id, "Terminated", new_run), handle.id
        base = (await client.get_workflow_handle(handle.id, run_id=base_run).fetch_history()).to_json()["events"]
        assert base[-1]["attributes"]["reason"].endswith(": redeployed") and base[-1]["attributes"]["new_execution_run_id"] == new_run
        new = (await client.get_workflow_handle(handle.id, run_id=new_run).fetch_history()).to_json()["events"]
        assert [e["attributes"]["base_run_id"] for e in new if e["attributes"].get("cause") == "RESET_WORKFLOW"] == [base_run]
    # The run closed before the job: reset, left as it closed; the run no longer current: not reset.
    closed_before = (await client.get_workflow_handle(handles[0].id).fetch_history()).to_json()["events"]
    assert [e["attributes"]["base_run_id"] for e in closed_before if e["attributes"].get("cause") == "RESET_WORKFLOW"] == [
        handles[0].result_run_id]
    assert (await client.get_workflow_handle(handles[0].id, run_id=handles[0].result_run_id).describe()).status.value == "Completed"
    assert sorted(s for _, s, _ in (await reset_runs(stack, [closed_id]))[closed_id]) == ["Running", "Terminated"]


async def test_batch_terminate_and_cancel_by_filter(stack: LocalStack, client: Client, task_queue: str, worker: None) -> None:
    prefix = f"batch-{uuid.uuid4()}-"
    terminated = await start_approvals(client, task_queue, f"{prefix}t-", 3)
    cancelled = await start_approvals(client, task_queue, f"{prefix}c-", 3)
    await terminated[0].signal(ApprovalWorkflow.approve, "dave")  # closed before the job: counted, not terminated
    assert await terminated[0].result() == "order-0 approved by dave with notes []"
    await until_statuses(terminated[:1], ["Completed"])

    terminate, cancel = await asyncio.gather(
        kadence(stack, "workflow", "terminate", "-q", f"WorkflowId STARTS_WITH '{prefix}t-'", "--reason", "duplicate orders",
                "--yes", "--json"),
        kadence(stack, "workflow", "cancel", "-q", f"WorkflowId STARTS_WITH '{prefix}c-'", "--yes", "--json"),
    )
    assert terminate.returncode == 0, terminate.stderr
    assert {k: v for k, v in json.loads(terminate.stdout).items() if k != "job_id"} == {
        "matched": 3, "done": 2, "failed": 0, "already_closed": 1, "not_current": 0}
    assert cancel.returncode == 0, cancel.stderr
    assert {k: v for k, v in json.loads(cancel.stdout).items() if k != "job_id"} == {
        "matched": 3, "done": 3, "failed": 0, "already_closed": 0, "not_current": 0}

    await until_statuses(terminated, ["Completed", "Terminated", "Terminated"])
    history = (await terminated[1].fetch_history()).to_json()
    assert (history["events"][-1]["event_type"], history["events"][-1]["attributes"]["reason"]) == (
        "WorkflowExecutionTerminated", "duplicate orders")
    await until_statuses(cancelled, ["Canceled"] * 3)  # the worker takes each cancel request and ends its run

    described = json.loads((await kadence(stack, "batch", "describe", "--job-id", json.loads(terminate.stdout)["job_id"], "--json")).stdout)
    assert described["operation"] == "Terminate" and described["reason"] == "duplicate orders"
    assert described["executions"] == [{"workflow_id": f"{prefix}t-0", "run_id": terminated[0].result_run_id,
                                        "outcome": "AlreadyClosed", "detail": "Completed when the job began"}]


async def test_batch_commands_refuse_what_they_cannot_do_and_say_why(stack: LocalStack) -> None:
    nobody = f"WorkflowId = 'nobody-{uuid.uuid4()}'"
    job_id = f"none-{uuid.uuid4()}"
    nothing, unconfirmed, unknown_job, unknown_described = await asyncio.gather(
        kadence(stack, "workflow", "terminate", "-q", nobody, "--yes", "--json", "--job-id", job_id),
        kadence(stack, "workflow", "cancel", "-q", "WorkflowType = 'ApprovalWorkflow'"),
        kadence(stack, "workflow", "cancel", "--job-id", job_id, "--yes"),
        kadence(stack, "batch", "describe", "--job-id", job_id),
    )
    assert nothing.returncode == 0, nothing.stderr
    assert json.loads(nothing.stdout) == {"job_id": job_id, "matched": 0, "done": 0, "failed": 0, "already_closed": 0, "not_current": 0}
    assert "nothing to do" in nothing.stderr
    assert unconfirmed.returncode == 2 and "Pass --yes" in unconfirmed.stderr
    assert unknown_job.returncode == 2 and f"there is no batch job {job_id}: give --query" in unknown_job.stderr
    assert unknown_described.returncode == 1 and f"there is no batch job {job_id}" in unknown_described.stderr


@pytest.mark.parametrize(("args", "error"), [
    (("signal", "-q", "WorkflowType = ", "-n", "add_note"), "Invalid value for --query: expected a value ('text', a number, true or "
                                                            "false), found the end of the filter"),
    (("terminate", "-w", "order-7", "-q", "WorkflowType = 'A'"), "--workflow-id names one workflow, --query and --job-id a batch job"),
    (("cancel", "-w", "order-7", "--yes", "--rps", "5"), "--yes, --rps: only for a batch job"),
    (("signal", "-w", "order-7", "-n", "approve", "--reason", "why"), "--reason: only for a batch job"),
    (("signal", "-q", "WorkflowType = 'A'", "-r", "run-1"), "--run-id goes with --workflow-id"),
    (("cancel", "--job-id", "a\x00b"), "--job-id contains a NUL character"),
    (("terminate", "--job-id", "j" * 201), "--job-id is 201 bytes long; at most 200"),
    (("terminate", "-q", "WorkflowType = 'A'", "--rps", "0"), "Invalid value for '--rps'"),
    (("terminate",), "Missing option '--workflow-id' / '-w' (or '--query' / '-q' for a batch job)"),
    (("reset", "-q", "WorkflowType = 'A'", "--reason", "why"), "a reset batch job needs --type (FirstWorkflowTask or LastWorkflowTask)"),
    (("reset", "-q", "WorkflowType = 'A'", "--type", "LastWorkflowTask"), "Missing option '--reason'"),
    (("reset", "-q", "WorkflowType = 'A'", "--event-id", "4", "--reason", "why"), "--event-id names an event of one run"),
    (("reset", "-q", "WorkflowType = 'A'", "--type", "LastWorkflowTask", "--reason", "why", "--request-id", "r"),
     "--request-id goes with --workflow-id"),
    (("reset", "-w", "order-7", "--type", "LastWorkflowTask", "--reason", "why", "--rps", "5"), "--rps: only for a batch job"),
    (("reset", "-w", "order-7", "--type", "LastWorkflowTask"), "Missing option '--reason'"),
])
def test_batch_options_are_checked_before_anything_is_asked(args: tuple[str, ...], error: str) -> None:
    refused = CliRunner().invoke(main, ["workflow", *args])
    assert refused.exit_code == 2 and error in refused.output, refused.output
