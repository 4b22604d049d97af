"""The `kadence workflow` commands, run as a user runs them: separate processes against the stack."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kadence.dev.local_stack import LocalStack

REPO = Path(__file__).resolve().parents[1]


def kadence(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kadence.ops.cli", *args], env=stack.env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def kadence_at_once(stack: LocalStack, *commands: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
    """Independent commands run side by side, as `kadence` runs each (a `workflow result` for a
    workflow nobody started waits out the client's 5 s before it says not found)."""
    processes = [subprocess.Popen([sys.executable, "-m", "kadence.ops.cli", *args], env=stack.env, cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for args in commands]
    done = []
    try:
        for args, process in zip(commands, processes, strict=True):
            stdout, stderr = process.communicate(timeout=120)
            done.append(subprocess.CompletedProcess([*args], process.returncode, stdout, stderr))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return done


@pytest.fixture
def worker(stack: LocalStack, task_queue: str) -> Iterator[None]:
    process = subprocess.Popen([sys.executable, "-m", "tests.worker_main", task_queue, "cli-worker"], env=stack.env, cwd=REPO)
    yield
    process.kill()
    process.wait()


def test_workflow_commands_start_signal_query_and_read_back(stack: LocalStack, task_queue: str, worker: None) -> None:
    workflow_id = f"cli-{uuid.uuid4()}"
    started = kadence(stack, "workflow", "start", "-t", "ApprovalWorkflow", "-q", task_queue, "-w", workflow_id,
                      "-i", '"order-9"', "--memo", 'team="ops"', "--memo", "limit=3", "--json")
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    assert kadence(stack, "workflow", "signal", "-w", workflow_id, "-n", "add_note", "-i", '"fragile"').returncode == 0
    assert json.loads(kadence(stack, "workflow", "query", "-w", workflow_id, "-n", "notes_so_far").stdout) == "fragile"
    described = json.loads(kadence(stack, "workflow", "describe", "-w", workflow_id, "--json").stdout)
    assert (described["status"], described["memo"]) == ("Running", {"team": "ops", "limit": 3})
    assert kadence(stack, "workflow", "signal", "-w", workflow_id, "-n", "approve", "-i", '"dave"').returncode == 0
    assert json.loads(kadence(stack, "workflow", "result", "-w", workflow_id).stdout) == "order-9 approved by dave with notes ['fragile']"

    show, listing, count = kadence_at_once(
        stack,
        ("workflow", "show", "-w", workflow_id, "--output", "json"),
        ("workflow", "list", "-q", f"WorkflowId = '{workflow_id}'", "--json"),
        ("workflow", "count", "-q", f"WorkflowId = '{workflow_id}'"),
    )
    shown = json.loads(show.stdout)
    assert shown["run_id"] == run_id and shown["events"][0]["event_type"] == "WorkflowExecutionStarted"
    listed = json.loads(listing.stdout)
    assert [(e["run_id"], e["status"]) for e in listed] == [(run_id, "Completed")]
    assert count.stdout.strip() == "1"


def test_workflow_commands_fail_with_the_reason_and_an_exit_code(stack: LocalStack, task_queue: str, worker: None) -> None:
    executed, failed, unknown, bad_filter, bad_input, bad_memo = kadence_at_once(
        stack,
        ("workflow", "execute", "-t", "EchoWorkflow", "-q", task_queue, "-w", f"cli-echo-{uuid.uuid4()}", "-i", '"hi"'),
        ("workflow", "execute", "-t", "DeclinedWorkflow", "-q", task_queue, "-w", f"cli-declined-{uuid.uuid4()}", "-i", '"card"'),
        ("workflow", "signal", "-w", f"nobody-{uuid.uuid4()}", "-n", "approve"),
        ("workflow", "list", "-q", "WorkflowType ="),
        ("workflow", "start", "-t", "EchoWorkflow", "-q", task_queue, "-w", "x", "-i", "not json"),
        ("workflow", "start", "-t", "EchoWorkflow", "-q", task_queue, "-w", "x", "--memo", "team"),
    )
    assert (executed.returncode, executed.stdout.strip()) == (0, '"hi"')
    assert failed.returncode == 1 and "workflow failed: ActivityError" in failed.stderr
    assert unknown.returncode == 1 and "workflow execution not found" in unknown.stderr
    assert bad_filter.returncode == 2 and "expected a value" in bad_filter.stderr
    assert bad_input.returncode == 2 and "--input takes JSON values" in bad_input.stderr
    assert bad_memo.returncode == 2 and "--memo takes KEY=JSON pairs" in bad_memo.stderr


@pytest.mark.also_on_tansu  # whose fetch past the end neither fails nor reaches an end by itself
def test_the_cli_answers_at_once_at_its_edges(stack: LocalStack) -> None:
    """Each of these used to hang or print a traceback."""
    unknown, unknown_run, past_the_end, replay_past_the_end, nested, negative = kadence_at_once(
        stack,
        ("workflow", "result", "-w", f"nobody-{uuid.uuid4()}"),
        ("workflow", "result", "-w", f"nobody-{uuid.uuid4()}", "-r", "no-such-run"),
        ("dlq", "list", "--from-offset", "999999999"),
        ("dlq", "replay", "--offset", "999999999"),
        ("workflow", "list", "-q", "(" * 5000 + "WorkflowId = 'a'" + ")" * 5000),
        ("workflow", "list", "--limit", "-1"),
    )
    assert unknown.returncode == 1 and "not found" in unknown.stderr, unknown.stderr
    assert unknown_run.returncode == 1 and "not found" in unknown_run.stderr, unknown_run.stderr
    assert past_the_end.returncode == 0 and past_the_end.stdout == "", past_the_end.stderr
    assert replay_past_the_end.returncode == 2 and "no records at offsets [999999999]" in replay_past_the_end.stderr
    assert nested.returncode == 2 and "nests parentheses more than" in nested.stderr, nested.stderr
    assert negative.returncode == 2 and "--limit" in negative.stderr, negative.stderr


def test_an_exported_history_replays_against_the_code_and_a_changed_workflow_fails(
    stack: LocalStack, task_queue: str, worker: None, tmp_path: Path,
) -> None:
    workflow_id = f"replayed-{uuid.uuid4()}"
    executed = kadence(stack, "workflow", "execute", "-t", "TwoStepWorkflow", "-q", task_queue, "-w", workflow_id, "-i", '"x"')
    assert executed.returncode == 0, executed.stderr
    export = tmp_path / "history.json"
    export.write_text(kadence(stack, "workflow", "show", "-w", workflow_id, "--output", "json").stdout)

    replayed, changed = kadence_at_once(
        stack,
        ("history", "replay", str(export), "--worker-module", "tests.workflows"),
        ("history", "replay", str(export), "--worker-module", "tests.changed_workflows", "--json"),
    )
    assert replayed.returncode == 0 and replayed.stdout.startswith("ok"), replayed.stdout + replayed.stderr
    assert changed.returncode == 1 and json.loads(changed.stdout)["failure"].startswith("NondeterminismError")
