"""The worker's log of a failure carries temporalio's `__temporal_error_identifier`, so a log filter
written for temporalio (its hello_change_log_level sample's) picks the records it means."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest

from kadence import activity, workflow
from kadence.client import Client
from kadence.common import RetryPolicy
from kadence.exceptions import WorkflowFailureError
from kadence.worker import Worker

BROKEN_OVEN = "the oven is broken"
BURNT = "the bread is burnt"


@activity.defn
async def bake() -> str:
    raise RuntimeError(BURNT)


@workflow.defn
class BrokenOvenWorkflow:
    @workflow.run
    async def run(self) -> None:
        raise RuntimeError(BROKEN_OVEN)  # not an ApplicationError: fails the workflow task, again and again


@workflow.defn
class BurntBreadWorkflow:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(bake, start_to_close_timeout=timedelta(seconds=5),
                                               retry_policy=RetryPolicy(maximum_attempts=1))


class RaiseMarkedFailures(logging.Filter):
    """As the sample's filter: a record marked as a failure goes out at ERROR, whatever its level."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "__temporal_error_identifier", None) in ("WorkflowTaskFailure", "ActivityFailure"):
            record.levelno = logging.ERROR
            record.levelname = logging.getLevelName(logging.ERROR)
        return True


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.addFilter(RaiseMarkedFailures())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def marked(self, identifier: str, message: str) -> list[logging.LogRecord]:
        return [r for r in self.records
                if getattr(r, "__temporal_error_identifier", None) == identifier and message in r.getMessage()]


@contextmanager
def kept_logs() -> Iterator[Kept]:
    handler = Kept()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def test_a_workflow_task_failure_and_an_activity_failure_are_logged_with_temporalios_identifier(
    client: Client, task_queue: str,
) -> None:
    with kept_logs() as logs:
        async with Worker(client, task_queue=task_queue, workflows=[BrokenOvenWorkflow, BurntBreadWorkflow], activities=[bake]):
            broken = await client.start_workflow(BrokenOvenWorkflow.run, id=f"oven-{uuid.uuid4()}", task_queue=task_queue)
            burnt = await client.start_workflow(BurntBreadWorkflow.run, id=f"bread-{uuid.uuid4()}", task_queue=task_queue)
            async with asyncio.timeout(30):
                while not (logs.marked("WorkflowTaskFailure", BROKEN_OVEN) and logs.marked("ActivityFailure", BURNT)):
                    await asyncio.sleep(0.05)
            await broken.terminate()
            with pytest.raises(WorkflowFailureError):  # its one attempt failed, and the workflow with it
                await burnt.result()
    # The activity's failure is logged at INFO (the workflow decides what it means); the filter raised it.
    assert {r.levelname for r in logs.marked("ActivityFailure", BURNT)} == {"ERROR"}
    assert {r.levelname for r in logs.marked("WorkflowTaskFailure", BROKEN_OVEN)} == {"ERROR"}
    assert not logs.marked("WorkflowTaskFailure", BURNT)  # each failure carries its own mark
