"""The state of one history partition: its open executions, folded from the log with the fencing rule.

Live processing and recovery fold the same batches into it (`PartitionState.apply`), so the state
rebuilt from the log is the state the live service had.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kadence.protocol.fence import LogFence
from kadence.protocol.names import EventType
from services.history.closed_ids import ClosedIds
from services.history.machine.dispatch import evolve, execution_from_events
from services.history.machine.execution import RUNNING, Execution, execution_from_start
from services.history.machine.records import HistoryBatch, event_type


@dataclass
class PartitionState:
    partition: int
    executions: dict[str, Execution] = field(default_factory=dict)
    fence: LogFence = field(default_factory=lambda: LogFence(strict=True))
    history_offset: int = 0  # the next kadence.history offset this state has not folded
    # The history_offset of the checkpoint stored (or restored) last: every change to this state
    # comes with a batch, so while history_offset has not moved past it there is nothing to store.
    checkpointed_offset: int = -1
    # The resume_offset the last checkpoint stored: a request answered again writes no batch, yet
    # moves it, so a partition that only answered requests again is checkpointed too.
    checkpointed_resume_offset: int = -1
    # The workflow ids whose closed runs a checkpoint stored (evicted from `executions`); None:
    # not known, so every id not in memory is looked up.
    closed_ids: ClosedIds | None = None
    # Commands below this offset may have been decided before, by an earlier owner or this one's
    # producer lost in a fatal error, and their tasks dispatched: the end of the partition of
    # kadence.commands when this state was recovered. Their tasks go out marked as possible copies.
    decided_before: int = 0

    @property
    def checkpoint_due(self) -> bool:
        """Whether this state folded a batch, or read a command, its last checkpoint does not hold."""
        return self.history_offset != self.checkpointed_offset or self.resume_offset != self.checkpointed_resume_offset

    def checkpointed(self, history_offset: int) -> None:
        """A checkpoint of this state as of `history_offset` is stored (or was restored)."""
        self.checkpointed_offset = history_offset
        self.checkpointed_resume_offset = self.resume_offset

    @property
    def resume_offset(self) -> int:
        """The first command offset no batch on this partition came from, nor a request answered
        again without one."""
        return self.fence.last_source_offset.get(self.partition, -1) + 1

    def apply(self, batch: HistoryBatch) -> bool:
        """Fold one batch into state; False if the fencing rule skips it as a zombie duplicate."""
        if not self.fence.admit(self.partition, batch):
            return False
        if batch["rejection"] is not None or (not batch["events"] and batch["workflow_id"] not in self.executions):
            return True  # an answer, or a command passed on elsewhere: no run changes
        events = batch["events"]
        if events and event_type(events[0]) == EventType.WorkflowExecutionStarted:
            ex = execution_from_start(batch["workflow_id"], batch["run_id"], events[0])
            self.executions[batch["workflow_id"]] = ex
        else:
            ex = self.executions[batch["workflow_id"]]
        evolve(ex, batch)
        if ex.status != RUNNING:
            self.fence.forget_run(ex.run_id)
        following = batch.get("next_run")
        if following is not None:  # continue-as-new: the new run is the workflow id's current run
            self.executions[batch["workflow_id"]] = execution_from_events(batch["workflow_id"], following["run_id"], following["events"])
        return True

    def evict(self, closed: list[Execution]) -> None:
        """Drop closed runs stored elsewhere (the closed-runs table) from memory."""
        for ex in closed:
            if self.executions.get(ex.workflow_id) is ex:
                del self.executions[ex.workflow_id]
