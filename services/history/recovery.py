"""Recovery of partition state from the history log.

On gaining command partition p, the service folds history partition p into state with the
shared fencing rule, from where its checkpoint stands (or the log's start), then resumes commands
just past the highest source offset it found. The runs the records after the checkpoint name are
read back from their rows as they come, a chunk of records at a time, one query each: the other
open runs stay stored, so recovery costs what changed since the checkpoint, not the runs held.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import cast

from confluent_kafka import Message

from kadence.protocol import topics
from kadence.protocol.codec import NewerSchemaVersion, UndecodableRecord, history_batch_codec
from kadence.protocol.kafka import position, read_to_end
from kadence.protocol.settings import KafkaSettings
from services.history.machine.execution import Execution
from services.history.machine.records import HistoryBatch
from services.history.partition import PartitionState

log = logging.getLogger("kadence.history.recovery")

# (partition, workflow_id) wanted -> the stored runs found (CheckpointStore.load_runs)
LoadRuns = Callable[[list[tuple[int, str]]], list[tuple[int, Execution]]]
CHUNK_RECORDS = 1000  # records decoded before the runs they name are read back, in one query


def recover_partitions(
    settings: KafkaSettings, states: dict[int, PartitionState], load_runs: LoadRuns | None = None,
) -> dict[int, PartitionState]:
    """Fold history into `states` (empty, or at their checkpoints' positions), each from its
    history_offset to the end of its partition, all read in one pass; `load_runs` reads back
    the stored runs the records name (none without a store: the log is read from its start)."""
    started = time.monotonic()
    partitions = sorted(states)
    read_from = {p: states[p].history_offset for p in partitions}
    records = skipped = loaded = 0
    for chunk in _chunks(_decoded(read_to_end(settings, topics.HISTORY, read_from), states), CHUNK_RECORDS):
        records += len(chunk)
        if load_runs is not None:
            loaded += _load_named_runs(states, [(partition, batch) for partition, _, batch in chunk], load_runs)
        for partition, offset, batch in chunk:
            if not states[partition].apply(batch):
                skipped += 1
                if (expected := states[partition].fence.gap_before(partition, batch)) is not None:
                    log.error("event=history_log_gap partition=%d offset=%d workflow_id=%s run_id=%s first_event_id=%d "
                              "next_event_id=%d reason=%r", partition, offset, batch["workflow_id"], batch["run_id"],
                              batch["first_event_id"], expected, "a writer's state held events the log lacks: see kadence audit")
    log.info(
        "event=partitions_recovered partitions=%s read_from=%s records=%d zombie_batches_skipped=%d runs_read_back=%d "
        "executions=%d resume_offsets=%s seconds=%.3f",
        partitions, read_from, records, skipped, loaded, sum(len(s.executions) for s in states.values()),
        {p: s.resume_offset for p, s in states.items()}, time.monotonic() - started,
    )
    return states


def runs_to_load(states: dict[int, PartitionState], named: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """Of the (partition, workflow_id) pairs that commands or batches name, those whose run memory
    does not hold (a run at rest is woken here) and a checkpoint may have stored (StoredIds says no
    for a new workflow id)."""
    wanted: set[tuple[int, str]] = set()
    for partition, workflow_id in named:
        state = states[partition]
        if workflow_id and not state.holds(workflow_id) and (
                state.stored_ids is None or state.stored_ids.may_hold(workflow_id)):
            wanted.add((partition, workflow_id))
    return sorted(wanted)


def _load_named_runs(states: dict[int, PartitionState], batches: list[tuple[int, HistoryBatch]], load_runs: LoadRuns) -> int:
    """Read back the stored runs of the batches' workflow ids, where the fencing rule will not skip
    the batch (its command was folded before the checkpoint)."""
    named = ((partition, batch["workflow_id"]) for partition, batch in batches
             if batch["source_offset"] > states[partition].fence.last_source_offset.get(partition, -1))
    wanted = runs_to_load(states, named)
    if not wanted:
        return 0
    found = load_runs(wanted)
    for partition, ex in found:
        states[partition].loaded(ex)
    return len(found)


def _decoded(messages: Iterator[Message], states: dict[int, PartitionState]) -> Iterator[tuple[int, int, HistoryBatch]]:
    """(partition, offset, batch) of each record; an undecodable one is said and passed."""
    codec = history_batch_codec()
    for msg in messages:
        partition, offset = position(msg)
        states[partition].history_offset = offset + 1
        try:
            yield partition, offset, cast(HistoryBatch, codec.decode(msg.value(), msg.headers()))  # what the schema decodes to
        except NewerSchemaVersion:
            raise  # skipping it would recover a state missing what it records
        except UndecodableRecord as exc:
            log.error("event=history_record_undecodable partition=%d offset=%d error=%s", partition, offset, exc)


def _chunks(items: Iterator[tuple[int, int, HistoryBatch]], size: int) -> Iterator[list[tuple[int, int, HistoryBatch]]]:
    while chunk := list(islice(items, size)):
        yield chunk
