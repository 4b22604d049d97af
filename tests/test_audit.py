"""`kadence audit replay` over a history written by hand on a broker of its own."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kadence.client import Client
from kadence.dev.brokers import ApacheKafka
from kadence.dev.local_stack import LocalStack
from kadence.ops.audit import AuditReport, audit_history, closed_run_digest
from kadence.protocol import topics
from kadence.protocol.codec import history_batch_codec, task_codec
from kadence.protocol.kafka import core_topics, ensure_topics
from kadence.worker import Worker
from tests.conftest import MAIN_BROKER, formatted_kafka_log_dir, wait_for_event
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, SleepyWorkflow

STUCK_AFTER_S = 2.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """Only a broker: the test is the sole writer of kadence.history."""
    local = LocalStack(tmp_path_factory.mktemp("audit"), partitions=1, broker_kind=MAIN_BROKER)
    (local.data_dir / "logs").mkdir()
    if isinstance(local.broker, ApacheKafka):  # the session's formatted log dir, as local_stack does
        shutil.copytree(formatted_kafka_log_dir(), local.broker.log_dir)
    local.start_broker()
    ensure_topics(local.settings, core_topics(local.settings))
    yield local
    assert local.broker is not None
    local.broker.kill()  # its log goes with the temp dir: no clean stop needed (as local_stack's teardown)
    local.stop()


def event(event_id: int, kind: str, **attrs: Any) -> dict[str, Any]:
    return {"event_id": event_id, "event_time_ms": 1_700_000_000_000 + event_id, "attributes": (kind, attrs)}


def batch(first_event_id: int, events: list[dict[str, Any]], source_offset: int) -> dict[str, Any]:
    return {
        "workflow_id": "order-1", "run_id": "run-1", "first_event_id": first_event_id, "events": events, "buffered": [],
        "effects": [], "heartbeats": [], "request_ids": [], "rejection": None, "source_partition": 0, "source_offset": source_offset,
    }


def write(stack: LocalStack, batches: list[dict[str, Any]]) -> None:
    codec = history_batch_codec()
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    for record in batches:
        producer.produce(topics.HISTORY, codec.encode(record), b"order-1", partition=0, headers=codec.headers())
    producer.flush(10)


def audit(stack: LocalStack, *options: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "kadence.ops.cli", "audit", "replay", "--json", *options],
        env=stack.env, capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1],
    )
    return done.returncode, json.loads(done.stdout)


def test_audit_passes_a_good_history_skips_zombies_and_catches_a_duplicated_event(broker: LocalStack) -> None:
    started = event(1, "WorkflowExecutionStarted", workflow_type="OrderWorkflow", task_queue="orders", input=[],
                    request_id="", identity="", workflow_task_timeout_ms=10_000)
    good = [
        batch(1, [started, event(2, "WorkflowTaskScheduled", task_queue="orders", attempt=1)], 0),
        batch(3, [event(3, "WorkflowTaskStarted", scheduled_event_id=2, identity="w")], 1),
        batch(3, [event(3, "WorkflowTaskStarted", scheduled_event_id=2, identity="w")], 1),  # a zombie's copy
        batch(4, [event(4, "WorkflowTaskCompleted", scheduled_event_id=2, started_event_id=3, identity="w"),
                  event(5, "WorkflowExecutionCompleted", result=None, workflow_task_completed_event_id=4)], 2),
    ]
    write(broker, good)
    code, summary = audit(broker)
    assert (code, summary["runs"], summary["events"], summary["zombie_batches_skipped"], summary["violations"]) == (0, 1, 5, 1, [])

    code, summary = audit(broker, "--from-offset", "3")  # mid-run: checked from where the read begins
    assert (code, summary["events"], summary["violations"]) == (0, 2, [])
    assert audit(broker, "--from-time", "2000-01-01")[1]["records"] == 4
    if MAIN_BROKER == "kafka":  # Tansu answers a future time with an offset (it uses append time) where Kafka answers none
        assert audit(broker, "--from-time", "2100-01-01")[1]["records"] == 0

    # By hand: the completion written again, as if a command had been applied twice.
    write(broker, [batch(6, [event(6, "WorkflowExecutionCompleted", result=None, workflow_task_completed_event_id=4)], 3)])
    code, summary = audit(broker)
    assert code == 1
    assert len(summary["violations"]) == 1
    assert "event_id=6: WorkflowExecutionCompleted after the run closed" in summary["violations"][0]

    # The CLI's audit keeps no events, only what each run's checks need: same findings.
    kept, lean = audit_history(broker.settings), audit_history(broker.settings, keep_events=False)
    assert lean.summary() == kept.summary() == summary
    assert ("order-1", "run-1") not in lean.runs and closed_run_digest(("order-1", "run-1")) in lean.closed_runs
    assert len(kept.history("order-1", "run-1")) == 6


async def test_a_timer_nothing_fires_is_reported_as_stuck_until_it_fires(stack: LocalStack, client: Client, task_queue: str) -> None:
    """The timer service stopped: a workflow's timer comes due and stays pending, and the audit
    reports it (and only it) as stuck work; the timer service back, it fires and the report clears."""
    workflow_id = f"stuck-{uuid.uuid4()}"

    def stuck(report: AuditReport) -> list[str]:
        return [line for line in report.stuck if f"workflow_id={workflow_id} " in line]

    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        stack.kill_service("timer", signal.SIGTERM)
        try:
            handle = await client.start_workflow(SleepyWorkflow.run, 1.0, id=workflow_id, task_queue=task_queue)
            await wait_for_event(stack, workflow_id, "TimerStarted", timeout=30)
            await asyncio.sleep(1.0 + STUCK_AFTER_S)  # the short timer is due, and overdue by the margin
            overdue = stuck(audit_history(stack.settings, keep_events=False, stuck_after_ms=int(STUCK_AFTER_S * 1000)))
            assert len(overdue) == 1 and "the firing of timer" in overdue[0], overdue  # not the hour-long one
            code, summary = audit(stack, "--stuck-after", str(STUCK_AFTER_S))
            assert code == 1 and overdue[0] in summary["stuck"]
        finally:
            stack.start_service("timer")
        assert (await asyncio.wait_for(handle.result(), 60)).startswith("slept")
    assert stuck(audit_history(stack.settings, stuck_after_ms=int(STUCK_AFTER_S * 1000))) == []


def test_a_waiting_task_no_task_queue_holds_is_reported_as_never_routed(broker: LocalStack) -> None:
    """Nothing dispatches tasks here (no history service): the task waits, never routed, and the audit fails;
    once its record is in the queue's topic, it only waits for a worker."""
    run = {"workflow_id": "order-9", "run_id": "run-9"}
    started = event(1, "WorkflowExecutionStarted", workflow_type="OrderWorkflow", task_queue="unpolled", input=[],
                    request_id="", identity="", workflow_task_timeout_ms=10_000)
    write(broker, [{**batch(1, [started, event(2, "WorkflowTaskScheduled", task_queue="unpolled", attempt=1)], 100), **run}])
    code, summary = audit(broker, "--stuck-after", "1")
    [waiting] = [line for line in summary["waiting_for_worker"] if "workflow_id=order-9 " in line]
    assert code == 1 and summary["never_routed"] == [f"{waiting}, and no record in kadence.tq.unpolled.workflow carries it: never routed"]

    tasks = task_codec()
    topic = topics.task_queue_topic("unpolled", "workflow")
    ensure_topics(broker.settings, {topic: 2})
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce(topic, tasks.encode({**run, "task": ("WorkflowTask", {
        "task_queue": "unpolled", "workflow_type": "OrderWorkflow", "scheduled_event_id": 2, "attempt": 1, "history": []})}),
        b"order-9", partition=1, headers=tasks.headers())
    producer.flush(10)
    code, summary = audit(broker, "--stuck-after", "1")
    assert summary["never_routed"] == [] and any("workflow_id=order-9 " in line for line in summary["waiting_for_worker"])
