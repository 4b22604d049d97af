"""The client's small types, below everything else in kadence.client: the update stages, a reset's
point and exclusions, an async activity's ids, a count of executions, a run's time skipping."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
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


@dataclasses.dataclass(frozen=True)
class FastForwardConfig:
    """One fast-forward of a run's clock (temporalio.testing.FastForwardConfig): skip at most
    `duration` ahead, then stop skipping."""

    duration: timedelta
    id: str = ""  # names the fast-forward; "" draws one

    def __post_init__(self) -> None:
        if self.duration <= timedelta(0):
            raise ValueError(f"FastForwardConfig.duration {self.duration} must be positive")


@dataclasses.dataclass(frozen=True)
class TimeSkippingConfig:
    """A run's time skipping (temporalio.testing.TimeSkippingConfig; docs/testing.md): while
    `enabled` and nothing is in flight, the run's clock jumps to its next timer, up to the
    fast-forward's bound if one is set, else until the run closes. Children and the runs a
    continue-as-new starts inherit `enabled` unless `disable_propagation`; they always inherit the
    clock. Only a stack that allows it takes it (WorkflowEnvironment.start_time_skipping*)."""

    enabled: bool = True
    fast_forward_config: FastForwardConfig | None = None
    disable_propagation: bool = False
    max_session_skip_count: int = 0  # temporalio's limit on skips per session; 0, the server's: Kadence has none

    def __post_init__(self) -> None:
        if self.fast_forward_config is not None and not self.enabled:
            raise ValueError("TimeSkippingConfig: a fast_forward_config needs enabled=True")
        if self.max_session_skip_count:
            raise ValueError("TimeSkippingConfig.max_session_skip_count: Kadence sets no limit on skips; leave it 0")

    def record(self) -> dict[str, object]:
        """As the TimeSkipping record of schemas/TimeSkipping.avsc."""
        bound = self.fast_forward_config.duration if self.fast_forward_config is not None else None
        return {"enabled": self.enabled, "fast_forward_ms": int(bound.total_seconds() * 1000) if bound else 0,
                "disable_propagation": self.disable_propagation}
