"""Partition state and its recovery from the history log.

On gaining command partition p, the service folds history partition p into state with the
shared fencing rule, then resumes commands just past the highest source offset it found.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from kadence.protocol import topics
from kadence.protocol.codec import NewerSchemaVersion, UndecodableRecord, history_batch_codec
from kadence.protocol.fence import LogFence
from kadence.protocol.kafka import read_to_end
from kadence.protocol.settings import KafkaSettings
from services.history.state_machine import (
    RUNNING,
    Execution,
    Pending,
    Record,
    Transition,
    derive_effects,
    event_type,
    evolve,
    execution_from_events,
    execution_from_start,
)

log = logging.getLogger("kadence.history.recovery")


@dataclass
class PartitionState:
    partition: int
    executions: dict[str, Execution] = field(default_factory=dict)
    fence: LogFence = field(default_factory=lambda: LogFence(strict=True))
    history_offset: int = 0  # the next kadence.history offset this state has not folded

    @property
    def resume_offset(self) -> int:
        """The first command offset no batch on this partition came from."""
        return self.fence.last_source_offset.get(self.partition, -1) + 1

    def apply(self, batch: Record) -> bool:
        """Fold one batch into state; False if the fencing rule skips it as a zombie duplicate."""
        if not self.fence.admit(self.partition, batch):
            return False
        if batch["rejection"] is not None or (not batch["events"] and batch["workflow_id"] not in self.executions):
            return True  # an answer, or a command passed on elsewhere: no run changes
        events = batch["events"]
        if events and event_type(events[0]) == "WorkflowExecutionStarted":
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

    def apply_transition(self, transition: Transition, source_partition: int, source_offset: int) -> tuple[Record, Execution]:
        """Fold a live transition into state and derive its effects: the batch to write, and the
        execution it leaves current (the new run after a continue-as-new)."""
        before = Pending.of(transition.execution)
        batch = transition.to_batch(source_partition, source_offset)
        assert self.apply(batch), "a live batch always continues its run"
        execution = self.executions[batch["workflow_id"]]
        if transition.next_run is None:
            derive_effects(execution, transition, before)
        else:  # the closed run was evolved in place; `execution` is the run that follows it
            derive_effects(transition.execution, transition, before)
            derive_effects(execution, transition.next_run, Pending())
        return batch, execution


def recover_partitions(settings: KafkaSettings, states: dict[int, PartitionState]) -> dict[int, PartitionState]:
    """Fold history into `states` (empty, or restored from checkpoints), each from its
    history_offset to the end of its partition, all read in one pass."""
    started = time.monotonic()
    partitions = sorted(states)
    read_from = {p: states[p].history_offset for p in partitions}
    codec = history_batch_codec()
    records = skipped = 0
    for msg in read_to_end(settings, topics.HISTORY, read_from):
        records += 1
        states[msg.partition()].history_offset = msg.offset() + 1
        try:
            batch = codec.decode(msg.value(), msg.headers())
        except NewerSchemaVersion:
            raise  # skipping it would recover a state missing what it records
        except UndecodableRecord as exc:
            log.error("event=history_record_undecodable partition=%d offset=%d error=%s", msg.partition(), msg.offset(), exc)
            continue
        if not states[msg.partition()].apply(batch):
            skipped += 1
    log.info(
        "event=partitions_recovered partitions=%s read_from=%s records=%d zombie_batches_skipped=%d executions=%d "
        "resume_offsets=%s seconds=%.3f",
        partitions, read_from, records, skipped, sum(len(s.executions) for s in states.values()),
        {p: s.resume_offset for p, s in states.items()}, time.monotonic() - started,
    )
    return states
