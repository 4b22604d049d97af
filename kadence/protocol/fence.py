"""The one rule every reader of kadence.history folds with (DESIGN.md, 'Fencing without transactions').

A history instance that just lost a partition may still write for a moment; its batches repeat the
owner's. A batch applies only if its source offset is new on its partition and it continues its run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LogFence:
    """Per-partition last applied source offset, per-run next event id.

    `strict` readers (history recovery, audit) read a partition from its start or a checkpoint and
    know every run; lenient ones (matching, timer, projector) may start mid-log and admit unknown runs.
    """

    strict: bool = False
    last_source_offset: dict[int, int] = field(default_factory=dict)
    next_event_id: dict[str, int] = field(default_factory=dict)

    def admit(self, partition: int, batch: dict[str, Any]) -> bool:
        if batch["source_offset"] <= self.last_source_offset.get(partition, -1):
            return False
        if not batch["events"]:  # effects or an answer only: nothing of the run's history to continue
            self.last_source_offset[partition] = batch["source_offset"]
            return True
        expected = self.next_event_id.get(batch["run_id"])
        if expected is None:
            if self.strict and batch["first_event_id"] != 1:
                return False
        elif batch["first_event_id"] != expected:
            return False
        self.last_source_offset[partition] = batch["source_offset"]
        self.next_event_id[batch["run_id"]] = batch["first_event_id"] + len(batch["events"])
        if batch.get("next_run") is not None:  # a continue-as-new's run starts in the same record
            self.next_event_id[batch["next_run"]["run_id"]] = 1 + len(batch["next_run"]["events"])
        return True

    def forget_run(self, run_id: str) -> None:
        """Closed runs take no more batches; drop them to keep memory flat."""
        self.next_event_id.pop(run_id, None)
