"""The audits that prove the log on a stack of their own: `kadence audit replay --worker-module`
re-executes every run against workflow code (a change that would break recorded runs diverges,
exit 1, with the event and the command the code issued instead; the same change behind a patch
does not; types the module lacks are skipped), and `kadence audit read-model` rebuilds the read
model from the log and finds each row that differs (and repairs it)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import json
import os
import pty
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.ops.audit import audit_history, audit_history_in_processes, check_timer_store
from kadence.ops.audit_report import ReportError, sign, verify
from kadence.ops.code_audit import WorkflowCodeAudit
from kadence.ops.read_model_audit import audit_read_model
from kadence.testing import workflows_in
from kadence.worker import Worker
from services.timer.store import DEFAULT_MEMORY_HORIZON_MS
from tests.conftest import local_stack
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, EchoWorkflow, SleepyWorkflow, TwoStepWorkflow

REPO = Path(__file__).resolve().parents[1]


def code_replay(stack: LocalStack, module: str, *workflow_types: str) -> dict[str, dict[str, int]]:
    """The audit's code replay, in this process: replayed, diverged and skipped runs by type."""
    code = WorkflowCodeAudit(workflows_in(importlib.import_module(module)), workflow_types=workflow_types)
    audit_history(stack.settings, keep_events=False, stuck_after_ms=None, code=code)
    code.close()
    return code.report.by_type()


def audit(env: dict[str, str], *args: str, command: str = "replay") -> tuple[int, dict]:
    """The CLI's audit, for its exit code and output (each costs a process start: a few per test)."""
    done = subprocess.run([sys.executable, "-m", "kadence.ops.cli", "audit", command, "--json", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


async def test_the_audit_replays_every_run_against_the_code_and_reports_each_divergence(tmp_path: Path) -> None:
    with local_stack() as stack:
        client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
        try:
            async with Worker(client, task_queue="audited", workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
                runs, workflow_ids = [], []
                for value in ("a", "b"):
                    handle = await client.start_workflow(TwoStepWorkflow.run, value, id=f"two-{uuid.uuid4()}", task_queue="audited")
                    await handle.result()
                    runs.append(handle.result_run_id)
                    workflow_ids.append(handle.id)
                await client.execute_workflow(EchoWorkflow.run, "hi", id=f"echo-{uuid.uuid4()}", task_queue="audited")
        finally:
            await client.close()

        assert code_replay(stack, "tests.workflows") == {"TwoStepWorkflow": {"replayed": 2, "diverged": 0, "skipped": 0},
                                                         "EchoWorkflow": {"replayed": 1, "diverged": 0, "skipped": 0}}

        code, changed = audit(stack.env, "--worker-module", "tests.changed_workflows")
        assert code == 1
        assert changed["code_replay"]["TwoStepWorkflow"] == {"replayed": 0, "diverged": 2, "skipped": 0}
        assert changed["code_replay"]["EchoWorkflow"] == {"replayed": 0, "diverged": 0, "skipped": 1}  # not in that module
        for run_id in runs:
            [line] = [d for d in changed["divergences"] if f"run_id={run_id}" in d]
            assert "ActivityTaskScheduled" in line and "StartTimer" in line, line  # the event, and what the code issued instead

        patched = code_replay(stack, "tests.patched_workflows", "TwoStepWorkflow")
        assert patched == {"TwoStepWorkflow": {"replayed": 2, "diverged": 0, "skipped": 0}}

        in_processes, replayed = audit_history_in_processes(stack.settings, None, 2, stuck_after_ms=None,
                                                            worker_modules=("tests.changed_workflows",))
        alone = audit_history(stack.settings, keep_events=False, stuck_after_ms=None)
        assert in_processes.summary() == alone.summary() and in_processes.offsets == alone.offsets
        assert replayed is not None and replayed.by_type() == code_replay(stack, "tests.changed_workflows")

        with concurrent.futures.ThreadPoolExecutor(1) as beside:  # two CLI audits of the same log, side by side
            on_a_terminal = beside.submit(on_a_terminal_the_audit_shows_its_progress, stack.env)
            a_signed_report_verifies_until_one_byte_changes(stack.env, tmp_path)
            on_a_terminal.result()

        clean = await audit_read_model(stack.settings, stack.postgres_dsn)
        assert clean.differences == [], clean.summary()
        assert clean.compared["kadence_executions"] == 3 and clean.compared["kadence_events"] > 20
        with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
            conn.execute("UPDATE kadence_executions SET status = 'Failed', search_attributes = '{\"x\": 1}', memo = '{\"x\": 1}' "
                         "WHERE run_id = %s", (runs[0],))
            conn.execute("DELETE FROM kadence_events WHERE run_id = %s AND event_id = 3", (runs[1],))
            conn.execute("INSERT INTO kadence_command_outcomes (request_id, workflow_id, run_id, accepted) "
                         "VALUES ('forged', 'w', 'r', true)")
        code, corrupted = audit(stack.env, command="read-model")
        assert code == 1
        assert sorted(corrupted["differences"]) == sorted([
            f"kadence_executions {workflow_ids[0]}/{runs[0]}: differs in status, search_attributes, memo",
            f"kadence_events {workflow_ids[1]}/{runs[1]}/3: missing in the live read model",
            "kadence_command_outcomes forged: not in the log",
        ])
        assert (await audit_read_model(stack.settings, stack.postgres_dsn, repair=True)).repaired == 3
        assert (await audit_read_model(stack.settings, stack.postgres_dsn)).differences == []

        await a_timer_gone_from_the_store_is_found(stack)


def a_signed_report_verifies_until_one_byte_changes(env: dict[str, str], tmp_path: Path) -> None:
    private = Ed25519PrivateKey.generate()
    (tmp_path / "signing.pem").write_bytes(private.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    (tmp_path / "public.pem").write_bytes(private.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    report = tmp_path / "audit.json"
    code, _ = audit(env, "--worker-module", "tests.changed_workflows", "--report", str(report),
                    "--report-signing-key", str(tmp_path / "signing.pem"))
    assert code == 1
    kept = json.loads(report.read_text())
    assert kept["topic"] == "kadence.history" and kept["code_replay"]["TwoStepWorkflow"]["diverged"] == 2
    assert kept["worker_modules"]["tests.changed_workflows"].startswith("sha256:") and kept["partitions"]
    assert verify_report(env, report, tmp_path / "public.pem").returncode == 0
    report.write_text(report.read_text().replace('"diverged": 2', '"diverged": 0', 1))  # one byte
    refused = verify_report(env, report, tmp_path / "public.pem")
    assert refused.returncode == 1 and "does not match the report" in refused.stderr
    secret = b"an HMAC secret the auditor keeps"  # the other kind of key, in this process
    signed = sign(kept, secret)
    verify(signed, secret)
    with pytest.raises(ReportError, match="does not match the report"):
        verify({**signed, "records": signed["records"] + 1}, secret)


def on_a_terminal_the_audit_shows_its_progress(env: dict[str, str]) -> None:
    """Records read of those to read, partitions done, rate, time left, on stderr."""
    def on_a_terminal(*args: str) -> str:
        controller, terminal = pty.openpty()
        with subprocess.Popen([sys.executable, "-m", "kadence.ops.cli", "audit", "replay", *args], env={**env, "COLUMNS": "200"},
                              cwd=REPO, stdin=terminal, stdout=terminal, stderr=terminal) as process:
            os.close(terminal)
            shown = b""
            while chunk := _read(controller):
                shown += chunk
            assert process.wait(60) == 0
        os.close(controller)
        return shown.decode(errors="replace")

    shown = on_a_terminal()
    assert "4/4 partitions done" in shown and "records/s" in shown, shown


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # the terminal closed with the process
        return b""


def verify_report(env: dict[str, str], report: Path, key: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kadence.ops.cli", "audit", "verify-report", str(report), "--key", str(key)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=60)


def missing_timers(stack: LocalStack) -> list[str]:
    report = audit_history(stack.settings, keep_events=False, stuck_after_ms=None)
    check_timer_store(report, stack.postgres_dsn, DEFAULT_MEMORY_HORIZON_MS)
    return report.missing_timers


async def a_timer_gone_from_the_store_is_found(stack: LocalStack) -> None:
    """A pending timer removed from the timer service's store: the audit names it, exit 1."""
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    try:
        async with Worker(client, task_queue="audited", workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
            handle = await client.start_workflow(SleepyWorkflow.run, 600, id=f"sleepy-{uuid.uuid4()}", task_queue="audited")
            with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
                deadline = time.monotonic() + 30
                while len(stored := conn.execute("SELECT timer_id FROM kadence_timers WHERE workflow_id = %s ORDER BY fire_at_ms",
                                                 (handle.id,)).fetchall()) < 2:  # its 10-minute sleep and the hour-long one
                    assert time.monotonic() < deadline, "the timer service stored no timers"
                    await asyncio.sleep(0.1)
                assert missing_timers(stack) == []
                conn.execute("DELETE FROM kadence_timers WHERE timer_id = %s", (stored[1][0],))
            [line] = missing_timers(stack)
            assert stored[1][0] in line and f"workflow_id={handle.id}" in line
            await handle.terminate(reason="audited")
    finally:
        await client.close()
