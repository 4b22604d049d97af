"""Standalone activities through the client (as temporalio.client's, Temporal server 1.31): an
activity a client starts outside any workflow, its handle, and what list and count find. Each is a
run of the history service under the key `kadence-activity:<activity id>` whose only work is the
activity (docs/decisions/0007-standalone-activities.md); its handle and listing are those of any
standalone run (kadence/client/_standalone.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Any

from kadence.client._handles import HandleClient
from kadence.client._standalone import ExecutionAsyncIterator, StandaloneHandle
from kadence.exceptions import ActivityFailureError
from kadence.protocol.names import ACTIVITY_KEY_PREFIX
from kadence.types import ReturnType
from kadence.visibility import WorkflowExecution


def activity_key(activity_id: str) -> str:
    """The key a standalone activity's commands and history go under."""
    return f"{ACTIVITY_KEY_PREFIX}{activity_id}"


class ActivityExecutionStatus(IntEnum):
    """As temporalio.client.ActivityExecutionStatus (Kadence's standalone activities are never PAUSED)."""

    UNSPECIFIED = 0
    RUNNING = 1
    COMPLETED = 2
    FAILED = 3
    CANCELED = 4
    TERMINATED = 5
    TIMED_OUT = 6
    PAUSED = 7


@dataclasses.dataclass(frozen=True)
class ActivityExecution:
    """A standalone activity as the read model knows it (as temporalio.client.ActivityExecution)."""

    activity_id: str
    activity_run_id: str | None
    activity_type: str
    status: ActivityExecutionStatus
    task_queue: str
    schedule_time: datetime
    close_time: datetime | None
    search_attributes: dict[str, Any]
    namespace: str = "default"

    @property
    def execution_time(self) -> datetime:
        return self.schedule_time

    @property
    def execution_duration(self) -> timedelta | None:
        return None if self.close_time is None else self.close_time - self.schedule_time

    @classmethod
    def of(cls, run: WorkflowExecution) -> ActivityExecution:
        return cls(
            activity_id=run.id.removeprefix(ACTIVITY_KEY_PREFIX), activity_run_id=run.run_id, activity_type=run.workflow_type,
            status=ActivityExecutionStatus[run.status.name], task_queue=run.task_queue, schedule_time=run.start_time,
            close_time=run.close_time, search_attributes=run.search_attributes,
        )


@dataclasses.dataclass(frozen=True)
class ActivityExecutionCountAggregationGroup:
    count: int
    group_values: Sequence[Any]


@dataclasses.dataclass(frozen=True)
class ActivityExecutionCount:
    """How many standalone activities a filter matches; `groups` is empty (Kadence's filters have no GROUP BY)."""

    count: int
    groups: Sequence[ActivityExecutionCountAggregationGroup] = ()


class ActivityExecutionAsyncIterator(ExecutionAsyncIterator[ActivityExecution]):
    """What `Client.list_activities` returns: the matching standalone activities, page by page."""


class ActivityHandle(StandaloneHandle[ReturnType]):
    """A standalone activity (as temporalio.client.ActivityHandle): `result()` waits for it, and
    raises ActivityFailureError with the cause when it did not complete."""

    failure_error = ActivityFailureError

    def __init__(self, client: HandleClient, id: str, *, run_id: str | None = None, result_type: type | None = None) -> None:
        super().__init__(client, activity_key(id), run_id=run_id, result_type=result_type)
        self._id = id

    @property
    def id(self) -> str:
        return self._id

    async def describe(self) -> ActivityExecution:
        return ActivityExecution.of(await self._run.describe())
