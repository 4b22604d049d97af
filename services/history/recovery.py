"""Recovery of partition state from the history log.

On gaining command partition p, the service folds history partition p into state with the
shared fencing rule, then resumes commands just past the highest source offset it found.
"""

from __future__ import annotations

import logging
import time
from typing import cast

from kadence.protocol import topics
from kadence.protocol.codec import NewerSchemaVersion, UndecodableRecord, history_batch_codec
from kadence.protocol.kafka import position, read_to_end
from kadence.protocol.settings import KafkaSettings
from services.history.machine.records import HistoryBatch
from services.history.partition import PartitionState

log = logging.getLogger("kadence.history.recovery")


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
        partition, offset = position(msg)
        states[partition].history_offset = offset + 1
        try:
            batch = cast(HistoryBatch, codec.decode(msg.value(), msg.headers()))  # what the schema decodes to
        except NewerSchemaVersion:
            raise  # skipping it would recover a state missing what it records
        except UndecodableRecord as exc:
            log.error("event=history_record_undecodable partition=%d offset=%d error=%s", partition, offset, exc)
            continue
        if not states[partition].apply(batch):
            skipped += 1
            if (expected := states[partition].fence.gap_before(partition, batch)) is not None:
                log.error("event=history_log_gap partition=%d offset=%d workflow_id=%s run_id=%s first_event_id=%d "
                          "next_event_id=%d reason=%r", partition, offset, batch["workflow_id"], batch["run_id"],
                          batch["first_event_id"], expected, "a writer's state held events the log lacks: see kadence audit")
    log.info(
        "event=partitions_recovered partitions=%s read_from=%s records=%d zombie_batches_skipped=%d executions=%d "
        "resume_offsets=%s seconds=%.3f",
        partitions, read_from, records, skipped, sum(len(s.executions) for s in states.values()),
        {p: s.resume_offset for p, s in states.items()}, time.monotonic() - started,
    )
    return states
