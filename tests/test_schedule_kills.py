"""Schedules survive kill -9 of the history and timer services (issue 35's test, decision 0004):
while two schedules act every second, the history and timer processes are killed, each several
times and once together; every nominal time of the window then has exactly one run (ALLOW_ALL) or
one fate, a run or a skip, with no two runs overlapping (SKIP), and the audit passes."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from kadence import workflow
from kadence.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    WorkflowExecution,
)
from kadence.dev.local_stack import LocalStack
from kadence.ops.audit import AuditReport
from kadence.worker import Worker
from tests.conftest import audit_of

WINDOW_S = 40
# Seconds into the window, and what is killed then (and started again at once).
KILLS = ((4, ("history",)), (10, ("timer",)), (15, ("history",)), (21, ("timer",)), (27, ("history", "timer")), (33, ("history",)))


@workflow.defn
class QuickScheduled:
    @workflow.run
    async def run(self) -> str:
        return workflow.info().workflow_id


@workflow.defn
class SlowScheduled:
    @workflow.run
    async def run(self) -> None:
        await workflow.sleep(2.5)


def nominal_seconds(window_start: datetime) -> list[int]:
    first = int(window_start.timestamp())
    return [(first + s) * 1000 for s in range(WINDOW_S + 1)]


def schedule_events(report: AuditReport, key: str) -> list[dict[str, Any]]:
    (run_id,) = [run_id for workflow_id, run_id in report.runs if workflow_id == key]
    return report.history(key, run_id)


def fates(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(nominal ms, fate) of every action the schedule's log records."""
    taken = [e["attributes"][1] for e in events if e["attributes"][0] == "ScheduleActionsTaken"]
    return [(action["nominal_ms"], action["fate"]) for attributes in taken for action in attributes["actions"]]


async def runs_of(client: Client, schedule_id: str) -> list[WorkflowExecution]:
    return [e async for e in client.list_workflows(f"TemporalScheduledById = '{schedule_id}'")]


async def test_schedules_killed_with_history_and_timer_take_each_action_once(stack: LocalStack, client: Client, task_queue: str) -> None:
    suffix = uuid.uuid4().hex[:8]
    every, skipping = f"every-{suffix}", f"skipping-{suffix}"
    window_start = datetime.fromtimestamp(int(time.time()) + 3, UTC)
    spec = ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=1))], start_at=window_start,
                        end_at=window_start + timedelta(seconds=WINDOW_S))
    expected = nominal_seconds(window_start)
    async with Worker(client, task_queue=task_queue, workflows=[QuickScheduled, SlowScheduled]):
        await client.create_schedule(every, Schedule(
            action=ScheduleActionStartWorkflow(QuickScheduled.run, id=every, task_queue=task_queue), spec=spec,
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.ALLOW_ALL),
        ))
        await client.create_schedule(skipping, Schedule(
            action=ScheduleActionStartWorkflow(SlowScheduled.run, id=skipping, task_queue=task_queue), spec=spec,
        ))
        for at_s, services in KILLS:
            await asyncio.sleep(max(0.0, window_start.timestamp() + at_s - time.time()))
            for service in services:
                stack.kill_service(service)
            for service in services:
                stack.start_service(service)

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            runs = await runs_of(client, every)
            if len({r.id for r in runs}) >= len(expected) and all(r.close_time is not None for r in runs):
                break
            await asyncio.sleep(1)
        slow_runs: list[WorkflowExecution] = []
        while time.monotonic() < deadline:
            slow_runs = await runs_of(client, skipping)
            key = f"kadence-schedule:{skipping}"
            decided = {ms for ms, _ in fates(schedule_events(audit_of(stack, key), key))}
            if decided >= set(expected) and all(r.close_time is not None for r in slow_runs):
                break
            await asyncio.sleep(1)

    runs = await runs_of(client, every)
    assert Counter(r.id for r in runs).most_common(1)[0][1] == 1, "a workflow id with two runs: an action taken twice"
    assert sorted(r.id for r in runs) == sorted(f"{every}-{datetime.fromtimestamp(ms / 1000, UTC):%Y-%m-%dT%H:%M:%SZ}" for ms in expected)

    every_report = audit_of(stack, f"kadence-schedule:{every}", *(r.id for r in runs))
    assert every_report.violations == []
    started = [ms for ms, fate in fates(schedule_events(every_report, f"kadence-schedule:{every}")) if fate == "STARTED"]
    assert sorted(started) == expected

    skip_report = audit_of(stack, f"kadence-schedule:{skipping}")
    assert skip_report.violations == []
    decided = fates(schedule_events(skip_report, f"kadence-schedule:{skipping}"))
    assert Counter(ms for ms, _ in decided) == Counter(expected), "each nominal time decided once"
    assert {fate for _, fate in decided} == {"STARTED", "SKIPPED"}
    slow_runs = sorted(await runs_of(client, skipping), key=lambda r: r.start_time)
    assert len(slow_runs) == sum(1 for _, fate in decided if fate == "STARTED")
    for earlier, later in zip(slow_runs, slow_runs[1:], strict=False):
        assert earlier.close_time is not None and earlier.close_time <= later.start_time, "two runs of a SKIP schedule overlapped"
