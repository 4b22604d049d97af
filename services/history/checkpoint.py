"""Periodic Postgres checkpoints of partition state, so recovery reads only the log after them.

A checkpoint is the fold of kadence.history up to its `history_offset`: the running executions
in one blob, and the closed runs as rows of `kadence_history_closed_runs`, written in the same
transaction and then dropped from memory. A command for a workflow id not in memory looks its
last closed run up there (one query per consumed batch) unless the partition's ClosedIds, stored
with the checkpoint, says it has none; so memory holds only open executions and the runs closed
since the last checkpoint. Only the partition's
current owner may write one: on gaining a partition an instance bumps the partition's owner
epoch, and a checkpoint is stored only under the epoch it holds. A deposed instance (a zombie
that has not noticed yet) would store a state missing the new owner's batches; its write is
refused instead.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from prometheus_client import Counter

from kadence.protocol.codec import RecordCodec, codec
from kadence.protocol.postgres import CONNECT_TIMEOUT_S
from services.history.closed_ids import ClosedIds
from services.history.machine.dispatch import execution_from_events, fold
from services.history.machine.execution import RUNNING, Execution, closed_execution
from services.history.partition import PartitionState

log = logging.getLogger("kadence.history.checkpoint")
STATE_BYTES = Counter("kadence_history_checkpoint_bytes_total", "Bytes of running executions' state that checkpoints wrote")

CHECKPOINT_DDL = [
    """
    CREATE TABLE IF NOT EXISTS kadence_history_owners (
        partition int PRIMARY KEY,
        epoch bigint NOT NULL
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS kadence_history_checkpoints (
        partition int PRIMARY KEY,
        epoch bigint NOT NULL,
        history_offset bigint NOT NULL,
        last_source_offset bigint NOT NULL,
        state bytea NOT NULL,
        taken_at timestamptz NOT NULL DEFAULT now()
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS kadence_history_closed_runs (
        partition int NOT NULL,
        workflow_id text NOT NULL,
        run_id text NOT NULL,
        status text NOT NULL,
        start_request_id text NOT NULL,
        PRIMARY KEY (partition, workflow_id)
    )
    """,
    # A checkpoint of another schema version (an upgrade changed PartitionCheckpoint) is skipped:
    # recovery reads the log instead, which every version can.
    "ALTER TABLE kadence_history_checkpoints ADD COLUMN IF NOT EXISTS schema_fingerprint text NOT NULL DEFAULT ''",
    # Checkpoints stored before the column existed were all written with this version.
    "UPDATE kadence_history_checkpoints SET schema_fingerprint = '76d07494a7d9f5ac' WHERE schema_fingerprint = ''",
    # The partition's ClosedIds (services/history/closed_ids.py); NULL in a checkpoint stored before
    # the column existed, whose claim reads the ids from kadence_history_closed_runs instead.
    "ALTER TABLE kadence_history_checkpoints ADD COLUMN IF NOT EXISTS closed_ids bytea",
    # The history_offset of the checkpoint that last stored closed_ids. A release without the
    # column moves history_offset (and adds closed runs) without it: then claim reads the table.
    "ALTER TABLE kadence_history_checkpoints ADD COLUMN IF NOT EXISTS closed_ids_history_offset bigint",
]


def checkpoint_codec() -> RecordCodec:
    return codec("PartitionCheckpoint")


@dataclass
class Checkpoint:
    state: PartitionState
    history_offset: int


@dataclass
class Claimed:
    """What claiming a partition loads: its checkpoint, if one is stored and readable, and the ids
    of its closed runs stored (always known once claimed)."""

    checkpoint: Checkpoint | None
    closed_ids: ClosedIds

    def state(self, partition: int) -> PartitionState:
        """The state recovery starts from: the checkpoint's, else an empty one."""
        state = self.checkpoint.state if self.checkpoint is not None else PartitionState(partition)
        state.closed_ids = self.closed_ids
        return state


def encode_state(state: PartitionState) -> bytes:
    """The running executions (closed runs go to their table)."""
    return checkpoint_codec().encode({"executions": [
        {
            "workflow_id": ex.workflow_id, "run_id": ex.run_id, "workflow_type": ex.workflow_type,
            "task_queue": ex.task_queue, "status": ex.status, "start_request_id": ex.start_request_id,
            "events": ex.history, "buffered": ex.buffered,
            "heartbeats": [a.heartbeat for a in ex.activities.values() if a.heartbeat is not None],
            "workflow_task": ex.workflow_task.as_transient() if ex.workflow_task is not None and ex.workflow_task.transient else None,
        }
        for ex in state.executions.values() if ex.status == RUNNING
    ]})


def decode_state(partition: int, data: bytes, last_source_offset: int, *, history_offset: int) -> PartitionState:
    """The state a checkpoint holds, as of `history_offset`: recovery reads the log on from there,
    not from its start."""
    state = PartitionState(partition, history_offset=history_offset)
    for saved in checkpoint_codec().decode(data)["executions"]:
        state.executions[saved["workflow_id"]] = _restore(saved)
    for ex in state.executions.values():
        state.fence.next_event_id[ex.run_id] = ex.next_event_id
    if last_source_offset >= 0:
        state.fence.last_source_offset[partition] = last_source_offset
    state.checkpointed(history_offset)
    return state


def _restore(saved: dict[str, Any]) -> Execution:
    ex = execution_from_events(saved["workflow_id"], saved["run_id"], saved["events"])
    fold(ex, [], saved["buffered"], saved["heartbeats"], saved["workflow_task"])  # buffered after: events may clear the buffer
    return ex


class CheckpointStore:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.epochs: dict[int, int] = {}
        self._conn: psycopg.Connection[Any] | None = None

    def claim(self, partitions: list[int]) -> dict[int, Claimed]:
        """Become the owner of `partitions` (bump their epochs) and load their checkpoints."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            loaded: dict[int, Claimed] = {}
            for partition in partitions:
                [(self.epochs[partition],)] = conn.execute(
                    "INSERT INTO kadence_history_owners (partition, epoch) VALUES (%s, 1) "
                    "ON CONFLICT (partition) DO UPDATE SET epoch = kadence_history_owners.epoch + 1 RETURNING epoch",
                    (partition,),
                ).fetchall()
                row = conn.execute(
                    "SELECT history_offset, last_source_offset, state, schema_fingerprint, closed_ids, closed_ids_history_offset "
                    "FROM kadence_history_checkpoints WHERE partition = %s", (partition,),
                ).fetchone()
                closed_ids = _stored_closed_ids(row) if row is not None else None
                if closed_ids is None:
                    closed_ids = _read_closed_ids(conn, partition)
                if row is not None and row[3] != checkpoint_codec().current_fingerprint:
                    log.warning("event=checkpoint_skipped partition=%d reason=schema_version stored=%s current=%s",
                                partition, row[3], checkpoint_codec().current_fingerprint)
                    row = None
                checkpoint = None if row is None else Checkpoint(decode_state(partition, row[2], row[1], history_offset=row[0]), row[0])
                loaded[partition] = Claimed(checkpoint, closed_ids)
            return loaded

    def save(self, state: PartitionState, history_offset: int) -> bool:
        """Store the state as of `history_offset`, if this instance still holds the partition's epoch;
        the closed runs it stored leave memory."""
        partition = state.partition
        closed = [ex for ex in state.executions.values() if ex.status != RUNNING]
        if state.closed_ids is not None:
            for ex in closed:
                state.closed_ids.add(ex.workflow_id)
        conn = self._connection()
        with conn.transaction():
            owner = conn.execute(
                "SELECT epoch FROM kadence_history_owners WHERE partition = %s FOR UPDATE", (partition,),
            ).fetchone()
            if owner is None or owner[0] != self.epochs.get(partition):
                log.warning("event=checkpoint_fenced partition=%d epoch=%s owner_epoch=%s",
                            partition, self.epochs.get(partition), owner and owner[0])
                return False
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO kadence_history_closed_runs (partition, workflow_id, run_id, status, start_request_id) "
                    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (partition, workflow_id) DO UPDATE SET run_id = EXCLUDED.run_id, "
                    "status = EXCLUDED.status, start_request_id = EXCLUDED.start_request_id",
                    [(partition, ex.workflow_id, ex.run_id, ex.status, ex.start_request_id) for ex in closed],
                )
            encoded = encode_state(state)
            conn.execute(
                "INSERT INTO kadence_history_checkpoints (partition, epoch, history_offset, last_source_offset, state, schema_fingerprint, "
                "closed_ids, closed_ids_history_offset) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (partition) DO UPDATE SET "
                "epoch = EXCLUDED.epoch, history_offset = EXCLUDED.history_offset, last_source_offset = EXCLUDED.last_source_offset, "
                "state = EXCLUDED.state, schema_fingerprint = EXCLUDED.schema_fingerprint, taken_at = now(), "
                # An unchanged filter is not written again (it may be megabytes), only said to still hold.
                "closed_ids = COALESCE(EXCLUDED.closed_ids, kadence_history_checkpoints.closed_ids), "
                "closed_ids_history_offset = EXCLUDED.closed_ids_history_offset",
                (partition, owner[0], history_offset, state.resume_offset - 1, encoded, checkpoint_codec().current_fingerprint,
                 *_closed_ids_to_store(state.closed_ids, history_offset)),
            )
        STATE_BYTES.inc(len(encoded))
        if state.closed_ids is not None:
            state.closed_ids.changed = False
        state.evict(closed)
        state.checkpointed(history_offset)
        return True

    def closed_runs(self, wanted: list[tuple[int, str]]) -> list[tuple[int, Execution]]:
        """The last closed run of each (partition, workflow_id) that has one stored."""
        rows = self._connection().execute(
            "SELECT c.partition, c.workflow_id, c.run_id, c.status, c.start_request_id FROM kadence_history_closed_runs c "
            "JOIN unnest(%s::int[], %s::text[]) AS w(partition, workflow_id) USING (partition, workflow_id)",
            ([p for p, _ in wanted], [w for _, w in wanted]),
        ).fetchall()
        return [(partition, closed_execution(*row)) for partition, *row in rows]

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def _stored_closed_ids(row: tuple[Any, ...]) -> ClosedIds | None:
    """The ClosedIds a checkpoint row holds, if they hold every closed run stored: written by the
    checkpoint at the row's history_offset, in a format this release reads."""
    history_offset, data, written_at = row[0], row[4], row[5]
    if data is None or written_at != history_offset:
        return None
    try:
        return ClosedIds.from_bytes(data)
    except ValueError as exc:
        log.warning("event=closed_ids_unreadable reason=%r", str(exc))
        return None


def _closed_ids_to_store(closed_ids: ClosedIds | None, history_offset: int) -> tuple[bytes | None, int | None]:
    """The closed_ids and closed_ids_history_offset columns: none when the filter is not known,
    no bytes when those stored are still the filter's."""
    if closed_ids is None:
        return None, None
    return (closed_ids.to_bytes() if closed_ids.changed else None), history_offset


def _read_closed_ids(conn: psycopg.Connection[Any], partition: int) -> ClosedIds:
    """The partition's closed-run ids from their table: for a partition whose checkpoint does not
    hold them (none stored yet, or last stored by a release before ClosedIds)."""
    started = time.monotonic()
    closed_ids = ClosedIds()
    with conn.transaction(), conn.cursor(name=f"closed_ids_{partition}") as cursor:  # server-side: the ids may be many
        cursor.execute("SELECT workflow_id FROM kadence_history_closed_runs WHERE partition = %s", (partition,))
        for (workflow_id,) in cursor:
            closed_ids.add(workflow_id)
    log.info("event=closed_ids_read partition=%d ids=%d seconds=%.3f", partition, len(closed_ids), time.monotonic() - started)
    return closed_ids
