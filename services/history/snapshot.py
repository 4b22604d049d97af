"""A partition's changed runs, captured at one point of the command loop (docs/architecture.md,
"Checkpoints").

A checkpoint stores only the runs changed since the one before, one row each. Which runs changed
is known when it begins (`PartitionState.dirty`), but encoding them all there would stop the
command loop for as long as they take. So a `Snapshot` holds the changed runs' objects and encodes
them a slice at a time between batches, and a run the loop is about to change is encoded first
(copy-on-write): every row is the run as it was at the snapshot's point, and the snapshot is
exactly the fold of the log up to the last batch written before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from kadence.protocol.codec import RecordCodec, codec
from services.history.machine.dispatch import execution_from_events, fold
from services.history.machine.execution import RUNNING, Execution, closed_execution


def run_codec() -> RecordCodec:
    return codec("ExecutionCheckpoint")


@dataclass(frozen=True)
class RunRow:
    """What a checkpoint stores of a workflow id's current run: its whole state (its events and
    what no event records), and of a closed run also what a later start's id reuse policy and
    request id check need, and when it closed (its events are kept for the reset retention)."""

    workflow_id: str
    run_id: str
    status: str
    start_request_id: str
    state: bytes | None  # ExecutionCheckpoint; None for a closed run whose events are not kept
    closed_at_ms: int | None = None  # a closed run's close event time

    @classmethod
    def of(cls, ex: Execution) -> RunRow:
        state = run_codec().encode(saved_run(ex)) if ex.history else None
        closed_at_ms = ex.history[-1]["event_time_ms"] if ex.status != RUNNING and ex.history else None
        return cls(ex.workflow_id, ex.run_id, ex.status, ex.start_request_id, state, closed_at_ms)

    def run(self) -> Execution:
        """The run the row holds, as it was stored."""
        return run_of(self.workflow_id, self.run_id, self.status, self.start_request_id, self.state)


def saved_run(ex: Execution) -> dict[str, Any]:
    """An open run as ExecutionCheckpoint holds it: its events fold back into the same state."""
    return {
        "workflow_id": ex.workflow_id, "run_id": ex.run_id, "workflow_type": ex.workflow_type,
        "task_queue": ex.task_queue, "status": ex.status, "start_request_id": ex.start_request_id,
        "events": ex.history, "buffered": ex.buffered,
        "heartbeats": [a.heartbeat for a in ex.activities.values() if a.heartbeat is not None],
        "workflow_task": ex.workflow_task.as_transient() if ex.workflow_task is not None and ex.workflow_task.transient else None,
    }


def restored_run(saved: dict[str, Any]) -> Execution:
    ex = execution_from_events(saved["workflow_id"], saved["run_id"], saved["events"])
    fold(ex, [], saved["buffered"], saved["heartbeats"], saved["workflow_task"])  # buffered after: events may clear the buffer
    return ex


def run_of(workflow_id: str, run_id: str, status: str, start_request_id: str, state: bytes | None) -> Execution:
    """The run a stored row holds: a closed one without its events, once they are no longer kept."""
    if state is None:
        return closed_execution(workflow_id, run_id, status, start_request_id)
    return restored_run(run_codec().decode(state))


@dataclass
class Snapshot:
    """The runs of one partition changed since its last checkpoint, as they were when it began."""

    partition: int
    pending: dict[str, Execution]  # changed runs not encoded yet: the loop has not touched them since
    last_source_offset: int  # the last command the state had read when it began
    last_batch: int  # the number of batches the partition had written then (PartitionState.written)
    epoch: int  # the owner epoch the partition's state was claimed under: stored under it only
    rows: dict[str, RunRow] = field(default_factory=dict)
    history_offset: int | None = None  # once every batch written before it is acknowledged: the log's position after them

    def capture(self, workflow_id: str) -> None:
        """Before the loop changes the run: encode it as it was, if it is still pending."""
        ex = self.pending.pop(workflow_id, None)
        if ex is not None:
            self.rows[workflow_id] = RunRow.of(ex)

    def encode_some(self, count: int) -> bool:
        """Encode up to `count` pending runs; whether any remain."""
        for workflow_id in list(islice(self.pending, count)):
            self.capture(workflow_id)
        return bool(self.pending)

    @property
    def workflow_ids(self) -> set[str]:
        return set(self.pending) | set(self.rows)
