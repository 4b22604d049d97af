"""The state of one history partition: the runs it holds in memory, folded from the log with the
fencing rule.

Live processing and recovery fold the same batches into it (`PartitionState.apply`), so the state
rebuilt from the log is the state the live service had. Memory holds the runs at work, not every
open run: `executions` holds the runs at work as objects (docs/architecture.md, "The run cache").
A run that a checkpoint stored and no batch changed since rests as its stored row (`at_rest`,
bytes: nothing for the garbage collector to walk) and is woken from it when a command names it
(`holds`); the least recently used rows, and runs read back but not changed, leave memory
(`rest_stored_runs`) and are read back from Postgres (`loaded`) before a command or a batch of
them is folded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice

from kadence.protocol.fence import LogFence
from kadence.protocol.names import EventType
from services.history.machine.dispatch import evolve, execution_from_events, new_execution
from services.history.machine.execution import RUNNING, Execution
from services.history.machine.records import HistoryBatch, event_type
from services.history.snapshot import RunRow, Snapshot, restored_run, run_codec
from services.history.stored_ids import StoredIds


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
    # The workflow ids with a run a checkpoint stored; None: not known, so every id not in memory
    # is looked up.
    stored_ids: StoredIds | None = None
    # The workflow ids whose runs changed since the last snapshot began: what the next one stores.
    dirty: set[str] = field(default_factory=set)
    snapshot: Snapshot | None = None  # the checkpoint being stored, if one is
    epoch: int = 0  # the owner epoch this state was claimed under (services/history/checkpoint.py)
    written: int = 0  # batches written to this partition (by this instance's producer)
    acknowledged: int = 0  # of which the broker has acknowledged
    # The rows of the last checkpoint stored, by workflow id: at the next `rest_stored_runs`, between
    # batches (never while a batch counts on the runs it named), those of runs unchanged since rest.
    stored_rows: dict[str, RunRow] = field(default_factory=dict)
    # Open runs whose stored row is their state, by workflow id, least recently used first: the
    # row's ExecutionCheckpoint bytes. A change to the run drops its row (it is stored again).
    at_rest: dict[str, bytes] = field(default_factory=dict)
    # Commands below this offset may have been decided before, by an earlier owner or this one's
    # producer lost in a fatal error, and their tasks dispatched: the end of the partition of
    # kadence.commands when this state was recovered. Their tasks go out marked as possible copies.
    decided_before: int = 0

    @property
    def checkpoint_due(self) -> bool:
        """Whether this state folded a batch, or read a command, its last checkpoint does not hold."""
        return bool(self.dirty) or self.history_offset != self.checkpointed_offset or self.resume_offset != self.checkpointed_resume_offset

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
        self._changing(batch["workflow_id"])
        events = batch["events"]
        if events and event_type(events[0]) in (EventType.WorkflowExecutionStarted, EventType.ScheduleCreated):
            ex = new_execution(batch["workflow_id"], batch["run_id"], events[0])
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

    def _changing(self, workflow_id: str) -> None:
        """Before a batch changes the workflow id's run: the snapshot being stored keeps it as it
        was, the next one stores it, and it becomes the most recently used."""
        if self.snapshot is not None:
            self.snapshot.capture(workflow_id)
        self.dirty.add(workflow_id)
        self.at_rest.pop(workflow_id, None)
        current = self.executions.pop(workflow_id, None)
        if current is not None:
            self.executions[workflow_id] = current

    def holds(self, workflow_id: str) -> bool:
        """Whether memory holds the workflow id's current run, woken from its row at rest if need be."""
        if workflow_id in self.executions:
            return True
        row = self.at_rest.get(workflow_id)
        if row is None:
            return False
        self.loaded(restored_run(run_codec().decode(row)))
        self.at_rest[workflow_id] = self.at_rest.pop(workflow_id)  # the most recently used
        return True

    def loaded(self, ex: Execution) -> None:
        """A run read back from its row, for commands or batches about to be folded: as it was
        stored, so not changed."""
        if ex.workflow_id in self.executions:
            return
        self.executions[ex.workflow_id] = ex
        if ex.status == RUNNING:
            self.fence.next_event_id[ex.run_id] = ex.next_event_id

    def begin_snapshot(self) -> Snapshot:
        """Capture the runs changed since the last snapshot; what the loop changes from here on
        goes to the next one."""
        snapshot = Snapshot(self.partition, {workflow_id: self.executions[workflow_id] for workflow_id in self.dirty},
                            self.resume_offset - 1, self.written, self.epoch)
        if self.acknowledged == self.written:
            snapshot.history_offset = self.history_offset
        self.dirty, self.snapshot = set(), snapshot
        return snapshot

    def batch_acknowledged(self, offset: int | None) -> None:
        """The broker acknowledged the next batch written; `offset` is where the log holds it (None
        when the broker did not say: an idempotent producer's retry of a batch written before, which
        a recovery from before it reads again and the fencing rule skips)."""
        self.acknowledged += 1
        if offset is not None:
            self.history_offset = max(self.history_offset, offset + 1)
        if self.snapshot is not None and self.snapshot.history_offset is None and self.acknowledged >= self.snapshot.last_batch:
            self.snapshot.history_offset = self.history_offset

    def snapshot_stored(self, snapshot: Snapshot) -> None:
        """The snapshot's rows and positions are stored: its closed runs may leave memory."""
        self.snapshot = None
        assert snapshot.history_offset is not None
        self.checkpointed_offset = snapshot.history_offset
        self.checkpointed_resume_offset = snapshot.last_source_offset + 1
        self.stored_rows.update(snapshot.rows)

    def snapshot_failed(self, snapshot: Snapshot) -> None:
        """Not stored: its runs go to the next snapshot."""
        self.snapshot = None
        self.dirty |= snapshot.workflow_ids

    def rest_stored_runs(self, keep: int) -> int:
        """Between batches only (a batch counts on the runs it named): closed runs that no batch
        changed since the last checkpoint leave memory (their rows hold them, events and all, for a
        reset); open runs the last checkpoint stored and no batch changed since rest as their rows;
        then the runs that memory holds as objects only because they were read, and the rows at
        rest, each beyond `keep`, leave least recently used first. How many left memory."""
        busy = self.dirty | (self.snapshot.workflow_ids if self.snapshot is not None else set())
        stored, self.stored_rows = self.stored_rows, {}
        left = 0
        for workflow_id, ex in list(self.executions.items()):  # in order of use, so the rows are too
            if workflow_id in busy:
                continue
            if ex.status != RUNNING:  # stored, or read back from its row
                del self.executions[workflow_id]
                left += 1
                continue
            row = stored.get(workflow_id)
            if row is not None and ex.run_id == row.run_id and row.state is not None:
                self.at_rest[workflow_id] = row.state
        for workflow_id in [w for w, ex in self.executions.items() if w in self.at_rest and w not in busy and not ex.pending_queries]:
            self._let_go(workflow_id)
        excess = len(self.executions) - keep
        if excess > 0:
            leaving = [
                workflow_id for workflow_id, ex in islice(self.executions.items(), excess + len(busy))
                if workflow_id not in busy and not ex.pending_queries
            ][:excess]
            for workflow_id in leaving:
                self._let_go(workflow_id)
            left += len(leaving)
        for workflow_id in list(islice(self.at_rest, max(0, len(self.at_rest) - keep))):
            del self.at_rest[workflow_id]
            left += 1
        return left

    def _let_go(self, workflow_id: str) -> None:
        ex = self.executions.pop(workflow_id)
        self.fence.next_event_id.pop(ex.run_id, None)
