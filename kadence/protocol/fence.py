"""The one rule every reader of kadence.history folds with (docs/architecture.md, "The fencing rule").

A history instance that just lost a partition may still write for a moment; its batches repeat the
owner's. A batch applies only if its source offset is new on its partition and it continues its run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kadence.protocol.events import CLOSE_STATUS, run_sections

log = logging.getLogger("kadence.fence")


@dataclass
class LogFence:
    """Per-partition last applied source offset, per-run next event id.

    `strict` readers (history recovery, audit) read a partition from its start or a checkpoint and
    know every run; lenient ones (matching, timer, projector) may start mid-log and admit unknown runs.
    """

    strict: bool = False
    last_source_offset: dict[int, int] = field(default_factory=dict)
    next_event_id: dict[str, int] = field(default_factory=dict)

    def admit(self, partition: int, batch: Mapping[str, Any]) -> bool:
        if not self._new_on(partition, batch):
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

    def gap_before(self, partition: int, batch: Mapping[str, Any]) -> int | None:
        """For a batch `admit` refused: the run's next event id, if the batch is new on its
        partition and starts past it. That is no repeat: its writer held events the log lacks (it
        recovered before its own earlier batches landed, say), so the run's later batches will be
        refused too and the run waits. None for a repeat or an overlap (a batch an older
        release joined from several commands, written again by a zombie)."""
        expected = self.next_event_id.get(batch["run_id"])
        if not batch["events"] or expected is None or batch["first_event_id"] <= expected or not self._new_on(partition, batch):
            return None
        return expected

    def _new_on(self, partition: int, batch: Mapping[str, Any]) -> bool:
        """Whether the batch's source offset is past the last one applied on its partition."""
        return bool(batch["source_offset"] > self.last_source_offset.get(partition, -1))

    def forget_run(self, run_id: str) -> None:
        """Closed runs take no more batches; drop them to keep memory flat."""
        self.next_event_id.pop(run_id, None)


class PartitionFences:
    """The fence of a lenient reader that owns partitions for a while (timer, visibility, matching).

    What a fence knows of a partition is true only of one forward read of it. When the partition
    is (re)assigned, or the consumer reads it again from an earlier offset, the reader re-reads
    records it or another owner already handled: a fence that remembered their runs would take the
    re-read batches for repeats and skip them (a timer released on the revoke never held again, a
    task never routed). So the partition's fence starts afresh there, is rebuilt from what is
    re-read, and is forgotten on revoke; closed runs are forgotten as they close, so memory stays
    flat. What it still skips are true repeats within one read: a batch whose source offset was
    applied already, or that does not continue its run (a history instance that just lost the
    partition writing for a moment).
    """

    def __init__(self) -> None:
        self._fences: dict[int, LogFence] = {}
        self._next_offset: dict[int, int] = {}  # per partition, the log offset after the last record admitted or skipped

    def forget(self, partitions: set[int]) -> None:
        """On assignment and on revoke: what is read next of these partitions starts a new read."""
        for partition in partitions:
            self._forget(partition)

    def admit(self, partition: int, offset: int, batch: Mapping[str, Any]) -> bool:
        """Whether the batch at `offset` of `partition` applies."""
        seen_to = self._next_offset.get(partition, 0)
        if offset < seen_to:  # the consumer went back (faust seeks so after a rebalance): rebuilt from here
            log.info("event=history_partition_reread partition=%d from_offset=%d read_to=%d", partition, offset, seen_to)
            self._forget(partition)
        self._next_offset[partition] = offset + 1
        fence = self._fences.setdefault(partition, LogFence(strict=False))
        if not fence.admit(partition, batch):
            return False
        for run_id in _closed_runs(batch):
            fence.forget_run(run_id)
        return True

    def _forget(self, partition: int) -> None:
        self._fences.pop(partition, None)
        self._next_offset.pop(partition, None)


def _closed_runs(batch: Mapping[str, Any]) -> list[str]:
    return [s.run_id for s in run_sections(batch) if any(e["attributes"][0] in CLOSE_STATUS for e in s.events)]
