"""The client's small types, below everything else in kadence.client: the update stages, a reset's
point and exclusions, an async activity's ids, a count of executions."""

from __future__ import annotations

import dataclasses
from enum import Enum, IntEnum


class WorkflowUpdateStage(IntEnum):
    """The stage start_update waits for the update to reach (as temporalio.client.WorkflowUpdateStage)."""

    ADMITTED = 1
    ACCEPTED = 2
    COMPLETED = 3


class ResetType(str, Enum):
    """Where `WorkflowHandle.reset` goes back to when given no event id (Temporal's CLI's --type)."""

    FIRST_WORKFLOW_TASK = "FIRST_WORKFLOW_TASK"
    LAST_WORKFLOW_TASK = "LAST_WORKFLOW_TASK"


class ResetReapplyExcludeType(str, Enum):
    """What a reset does not reapply after its point (as Temporal's ResetReapplyExcludeType)."""

    SIGNAL = "SIGNAL"
    UPDATE = "UPDATE"


@dataclasses.dataclass(frozen=True)
class AsyncActivityIDReference:
    """An activity by its ids (as temporalio.client.AsyncActivityIDReference); run_id None is the current run."""

    workflow_id: str
    run_id: str | None
    activity_id: str


@dataclasses.dataclass(frozen=True)
class WorkflowExecutionCount:
    """As temporalio.client.WorkflowExecutionCount."""

    count: int
