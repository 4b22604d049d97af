"""activity.info() has temporalio's fields (issue 49's audit): the timeouts and retry policy the
activity was scheduled with, when its current attempt was due and when it started."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from kadence import activity, workflow
from kadence.client import Client
from kadence.common import Priority, RetryPolicy
from kadence.exceptions import ApplicationError
from kadence.worker import Worker

RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), backoff_coefficient=1.0, maximum_attempts=3)


def seconds(duration: timedelta | None) -> float | None:
    return None if duration is None else duration.total_seconds()


@activity.defn
async def describe_itself(fail_first: bool) -> dict[str, Any]:
    info = activity.info()
    if fail_first and info.attempt == 1:
        raise ApplicationError("the first attempt fails: the second is due after the backoff")
    return {
        "attempt": info.attempt, "is_local": info.is_local, "namespace": info.workflow_namespace,
        "heartbeat_timeout": seconds(info.heartbeat_timeout), "start_to_close_timeout": seconds(info.start_to_close_timeout),
        "schedule_to_close_timeout": seconds(info.schedule_to_close_timeout),
        "retry_policy": None if info.retry_policy is None else {
            "maximum_attempts": info.retry_policy.maximum_attempts, "initial_interval": seconds(info.retry_policy.initial_interval),
        },
        "due_after_scheduling_ms": (info.current_attempt_scheduled_time - info.scheduled_time) / timedelta(milliseconds=1),
        "started_after_due_ms": (info.started_time - info.current_attempt_scheduled_time) / timedelta(milliseconds=1),
        "run_id": info.activity_run_id, "default_priority": info.priority == Priority.default,
    }


@workflow.defn
class InfoWorkflow:
    @workflow.run
    async def run(self) -> list[dict[str, Any]]:
        remote = await workflow.execute_activity(
            describe_itself, True, heartbeat_timeout=timedelta(seconds=5), start_to_close_timeout=timedelta(seconds=10),
            schedule_to_close_timeout=timedelta(seconds=60), retry_policy=RETRY,
        )
        local = await workflow.execute_local_activity(describe_itself, False, start_to_close_timeout=timedelta(seconds=7))
        return [remote, local]


async def test_an_activity_s_info_has_its_timeouts_retry_policy_and_attempt_times(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[InfoWorkflow], activities=[describe_itself]):
        remote, local = await client.execute_workflow(InfoWorkflow.run, id=f"info-{uuid.uuid4()}", task_queue=task_queue)
    assert (remote["attempt"], remote["is_local"], remote["namespace"], remote["run_id"]) == (2, False, "default", None)
    assert remote["heartbeat_timeout"] == 5.0 and remote["start_to_close_timeout"] == 10.0 and remote["schedule_to_close_timeout"] == 60.0
    assert remote["retry_policy"]["maximum_attempts"] == 3 and remote["retry_policy"]["initial_interval"] == 0.2
    assert remote["due_after_scheduling_ms"] >= 200  # the second attempt was due after the first failed and backed off
    assert remote["started_after_due_ms"] >= 0
    assert remote["default_priority"] and local["default_priority"]  # no priority can be set yet (issue 52)
    assert local["is_local"] and local["start_to_close_timeout"] == 7.0
