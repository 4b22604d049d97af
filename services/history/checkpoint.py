"""Incremental Postgres checkpoints of partition state, so recovery reads only the log after them
(docs/architecture.md, "Checkpoints").

A checkpoint stores, in one transaction, the runs changed since the one before (a `Snapshot`), one
row each: an open run's state in `kadence_history_open_runs`, a closed run's summary in
`kadence_history_closed_runs`; and the partition's positions in `kadence_history_checkpoints`: the
`history_offset` the rows are the fold of the log up to, the last command read, and the partition's
`StoredIds`. So its cost follows the runs that changed, not the runs held. A run memory does not
hold is read back from its row (`load_runs`, one query per consumed batch).

Only the partition's current owner may write one: on gaining a partition an instance bumps the
partition's owner epoch, and a checkpoint is stored only under the epoch it holds. A deposed
instance (a zombie that has not noticed yet) would store rows missing the new owner's batches; its
write is refused instead.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from prometheus_client import Counter

from kadence.protocol.codec import UndecodableRecord, codec
from kadence.protocol.postgres import CONNECT_TIMEOUT_S
from kadence.protocol.topics import COMMANDS, RETENTION_MS
from services.history.machine.execution import RUNNING, Execution
from services.history.machine.reset import reset_retention_ms
from services.history.partition import PartitionState
from services.history.snapshot import RunRow, Snapshot, run_codec, run_of
from services.history.stored_ids import StoredIds

log = logging.getLogger("kadence.history.checkpoint")
STATE_BYTES = Counter("kadence_history_checkpoint_bytes_total", "Bytes of runs' state that checkpoints wrote, by open and closed runs",
                      ["run"])
# How often a partition's closed runs are looked at for events past the retention.
EXPIRY_INTERVAL_S = 600.0

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
    # The schema version of the partition's stored runs: ExecutionCheckpoint's for rows in
    # kadence_history_open_runs; PartitionCheckpoint's for a `state` blob of every open run, as
    # releases before rows stored it (converted to rows when claimed). Another is skipped for the log.
    "ALTER TABLE kadence_history_checkpoints ADD COLUMN IF NOT EXISTS schema_fingerprint text NOT NULL DEFAULT ''",
    # Checkpoints stored before the column existed were all written with this version.
    "UPDATE kadence_history_checkpoints SET schema_fingerprint = '76d07494a7d9f5ac' WHERE schema_fingerprint = ''",
    # The ids of the partition's closed runs, as releases before StoredIds stored them (a filter of the
    # same format), and the history_offset of the checkpoint that stored them last.
    "ALTER TABLE kadence_history_checkpoints ADD COLUMN IF NOT EXISTS closed_ids bytea",
    "ALTER TABLE kadence_history_checkpoints ADD COLUMN IF NOT EXISTS closed_ids_history_offset bigint",
    """
    CREATE TABLE IF NOT EXISTS kadence_history_open_runs (
        partition int NOT NULL,
        workflow_id text NOT NULL,
        run_id text NOT NULL,
        state bytea NOT NULL,
        PRIMARY KEY (partition, workflow_id)
    )
    """,
    # The partition's StoredIds (services/history/stored_ids.py) and the history_offset of the
    # checkpoint that stored them: a release that moves history_offset without them leaves them stale,
    # and the claim after reads the ids from the tables instead.
    "ALTER TABLE kadence_history_checkpoints ADD COLUMN IF NOT EXISTS stored_ids bytea",
    "ALTER TABLE kadence_history_checkpoints ADD COLUMN IF NOT EXISTS stored_ids_history_offset bigint",
    # A closed run's ExecutionCheckpoint, kept for the reset retention (a reset copies its events),
    # and its close event's time; rows of releases before keep no events (NULL).
    "ALTER TABLE kadence_history_closed_runs ADD COLUMN IF NOT EXISTS state bytea",
    "ALTER TABLE kadence_history_closed_runs ADD COLUMN IF NOT EXISTS closed_at timestamptz",
    "CREATE INDEX IF NOT EXISTS kadence_history_closed_runs_kept ON kadence_history_closed_runs (partition, closed_at) "
    "WHERE state IS NOT NULL",
]


def blob_codec_fingerprint() -> str:
    """The version of the one-blob checkpoints releases before rows stored."""
    return codec("PartitionCheckpoint").current_fingerprint


@dataclass(frozen=True)
class Positions:
    """Where a stored checkpoint stands: its rows are the fold of the partition's log up to
    `history_offset`, and the last command it had read is `last_source_offset`."""

    history_offset: int
    last_source_offset: int


@dataclass
class Claimed:
    """What claiming a partition loads: where its checkpoint stands, if one is stored and readable,
    and the ids of its stored runs (always known once claimed). Not the runs: they are read back
    as commands and batches name them."""

    positions: Positions | None
    stored_ids: StoredIds
    epoch: int  # this claim's: the checkpoints of the state it starts are stored under it only

    def state(self, partition: int) -> PartitionState:
        """The state recovery starts from: the checkpoint's positions, else an empty partition's."""
        if self.positions is None:
            return PartitionState(partition, stored_ids=self.stored_ids, epoch=self.epoch)
        state = PartitionState(partition, history_offset=self.positions.history_offset, stored_ids=self.stored_ids,
                               epoch=self.epoch)
        if self.positions.last_source_offset >= 0:
            state.fence.last_source_offset[partition] = self.positions.last_source_offset
        state.checkpointed(self.positions.history_offset)
        return state


class CheckpointStore:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        # Checkpoints are written beside the reads of runs (the command loop's, a recovery's): a
        # connection each, so a read never runs inside a checkpoint's transaction.
        self._writes: psycopg.Connection[Any] | None = None
        self._reads: psycopg.Connection[Any] | None = None
        self._next_expiry: dict[int, float] = {}  # per partition, when closed runs' events are next looked at

    def claim(self, partitions: list[int]) -> dict[int, Claimed]:
        """Become the owner of `partitions` (bump their epochs) and read where their checkpoints stand."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
            return {partition: self._claim(conn, partition) for partition in partitions}

    def _claim(self, conn: psycopg.Connection[Any], partition: int) -> Claimed:
        [(epoch,)] = conn.execute(
            "INSERT INTO kadence_history_owners (partition, epoch) VALUES (%s, 1) "
            "ON CONFLICT (partition) DO UPDATE SET epoch = kadence_history_owners.epoch + 1 RETURNING epoch",
            (partition,),
        ).fetchall()
        row = conn.execute(
            "SELECT history_offset, last_source_offset, schema_fingerprint, stored_ids, stored_ids_history_offset "
            "FROM kadence_history_checkpoints WHERE partition = %s", (partition,),
        ).fetchone()
        if row is None:
            return Claimed(None, _read_stored_ids(conn, partition), epoch)
        history_offset, last_source_offset, fingerprint, stored_ids, stored_ids_at = row
        if fingerprint == blob_codec_fingerprint():
            _convert_blob_to_rows(conn, partition)
            stored_ids = None
        elif fingerprint != run_codec().current_fingerprint:
            log.warning("event=checkpoint_skipped partition=%d reason=schema_version stored=%s current=%s",
                        partition, fingerprint, run_codec().current_fingerprint)
            # Rows of a version this release cannot read: the log, read from its start, holds every run again.
            conn.execute("DELETE FROM kadence_history_open_runs WHERE partition = %s", (partition,))
            conn.execute("UPDATE kadence_history_closed_runs SET state = NULL WHERE partition = %s AND state IS NOT NULL",
                         (partition,))
            return Claimed(None, _read_stored_ids(conn, partition), epoch)
        ids = _stored_ids(stored_ids) if stored_ids_at == history_offset else None
        return Claimed(Positions(history_offset, last_source_offset), ids if ids is not None else _read_stored_ids(conn, partition),
                       epoch)

    def save(self, snapshot: Snapshot, stored_ids: bytes | None) -> bool:
        """Store the snapshot's rows and positions, if the partition's epoch is still the one its
        state was claimed under (not a later claim's, this instance's own after a rebalance that gave
        the partition back included); `stored_ids`: the partition's StoredIds, if they changed since
        last stored."""
        partition, history_offset = snapshot.partition, snapshot.history_offset
        assert history_offset is not None and not snapshot.pending, "a snapshot is stored once encoded and acknowledged"
        rows = list(snapshot.rows.values())
        open_rows = [row for row in rows if row.status == RUNNING]
        closed_rows = [row for row in rows if row.status != RUNNING]
        conn = self._writes = _open(self._writes, self.dsn)
        with conn.transaction():
            owner = conn.execute(
                "SELECT epoch FROM kadence_history_owners WHERE partition = %s FOR UPDATE", (partition,),
            ).fetchone()
            if owner is None or owner[0] != snapshot.epoch:
                log.warning("event=checkpoint_fenced partition=%d epoch=%s owner_epoch=%s",
                            partition, snapshot.epoch, owner and owner[0])
                return False
            _store_rows(conn, partition, open_rows, closed_rows)
            self._drop_expired_events(conn, partition)
            conn.execute(
                "INSERT INTO kadence_history_checkpoints (partition, epoch, history_offset, last_source_offset, state, schema_fingerprint, "
                "stored_ids, stored_ids_history_offset) VALUES (%s, %s, %s, %s, '', %s, %s, %s) ON CONFLICT (partition) DO UPDATE SET "
                "epoch = EXCLUDED.epoch, history_offset = EXCLUDED.history_offset, last_source_offset = EXCLUDED.last_source_offset, "
                "state = '', schema_fingerprint = EXCLUDED.schema_fingerprint, taken_at = now(), "
                # An unchanged filter is not written again (it may be megabytes), only said to still hold.
                "stored_ids = COALESCE(EXCLUDED.stored_ids, kadence_history_checkpoints.stored_ids), "
                "stored_ids_history_offset = EXCLUDED.stored_ids_history_offset",
                (partition, owner[0], history_offset, snapshot.last_source_offset, run_codec().current_fingerprint,
                 stored_ids, history_offset),
            )
        STATE_BYTES.labels("open").inc(sum(len(row.state or b"") for row in open_rows))
        STATE_BYTES.labels("closed").inc(sum(len(row.state or b"") for row in closed_rows))
        return True

    def _drop_expired_events(self, conn: psycopg.Connection[Any], partition: int) -> None:
        """Now and then: the events of the partition's runs closed longer ago than the reset
        retention and the commands topic's retention (no reset command that could use them is
        left to decide) are dropped from their rows."""
        now = time.monotonic()
        if now < self._next_expiry.get(partition, 0.0):
            return
        self._next_expiry[partition] = now + EXPIRY_INTERVAL_S
        cursor = conn.execute(
            "UPDATE kadence_history_closed_runs SET state = NULL WHERE partition = %s AND state IS NOT NULL "
            "AND closed_at < now() - make_interval(secs => %s)", (partition, (reset_retention_ms() + RETENTION_MS[COMMANDS]) / 1000),
        )
        if cursor.rowcount:
            log.info("event=closed_run_events_dropped partition=%d runs=%d", partition, cursor.rowcount)

    def load_runs(self, wanted: list[tuple[int, str]]) -> list[tuple[int, Execution]]:
        """The stored current run of each (partition, workflow_id) that has one: its open run's
        state, else its last closed run."""
        self._reads = _open(self._reads, self.dsn)
        rows = self._reads.execute(
            "SELECT w.partition, w.workflow_id, o.run_id, o.state, c.run_id, c.status, c.start_request_id, c.state "
            "FROM unnest(%s::int[], %s::text[]) AS w(partition, workflow_id) "
            "LEFT JOIN kadence_history_open_runs o USING (partition, workflow_id) "
            "LEFT JOIN kadence_history_closed_runs c USING (partition, workflow_id) "
            "WHERE o.run_id IS NOT NULL OR c.run_id IS NOT NULL",
            ([p for p, _ in wanted], [w for _, w in wanted]),
        ).fetchall()
        return [
            (partition, run_of(workflow_id, open_run, "Running", "", bytes(state)) if state is not None
             else _closed_run(workflow_id, closed_run, status, start_request_id, closed_state))
            for partition, workflow_id, open_run, state, closed_run, status, start_request_id, closed_state in rows
        ]

    def close(self) -> None:
        for conn in (self._writes, self._reads):
            if conn is not None:
                conn.close()


def _closed_run(workflow_id: str, run_id: str, status: str, start_request_id: str, state: bytes | None) -> Execution:
    """A closed run's row: with its events, unless they are not kept or not readable (a row of
    another schema version: it can no longer be reset, but still answers a start)."""
    if state is not None:
        try:
            return run_of(workflow_id, run_id, status, start_request_id, bytes(state))
        except UndecodableRecord as exc:
            log.warning("event=closed_run_events_unreadable workflow_id=%s run_id=%s error=%s", workflow_id, run_id, exc)
    return run_of(workflow_id, run_id, status, start_request_id, None)


def _open(conn: psycopg.Connection[Any] | None, dsn: str) -> psycopg.Connection[Any]:
    """`conn`, or a new connection if it is not open."""
    if conn is None or conn.closed:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    return conn


def _store_rows(conn: psycopg.Connection[Any], partition: int, open_rows: list[RunRow], closed_rows: list[RunRow]) -> None:
    """Open runs' rows written over; a closed run's row replaces its open one (a workflow id's
    current run is its open one while it has one: a closed run's row may stay beside it)."""
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO kadence_history_open_runs (partition, workflow_id, run_id, state) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (partition, workflow_id) DO UPDATE SET run_id = EXCLUDED.run_id, state = EXCLUDED.state",
            [(partition, row.workflow_id, row.run_id, row.state) for row in open_rows],
        )
        cursor.executemany(
            "INSERT INTO kadence_history_closed_runs (partition, workflow_id, run_id, status, start_request_id, state, closed_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, to_timestamp(%s / 1000.0)) ON CONFLICT (partition, workflow_id) DO UPDATE SET "
            "run_id = EXCLUDED.run_id, status = EXCLUDED.status, start_request_id = EXCLUDED.start_request_id, "
            "state = EXCLUDED.state, closed_at = EXCLUDED.closed_at",
            [(partition, row.workflow_id, row.run_id, row.status, row.start_request_id, row.state, row.closed_at_ms)
             for row in closed_rows],
        )
        if closed_rows:
            cursor.execute(
                "DELETE FROM kadence_history_open_runs WHERE partition = %s AND workflow_id = ANY(%s)",
                (partition, [row.workflow_id for row in closed_rows]),
            )


def _convert_blob_to_rows(conn: psycopg.Connection[Any], partition: int) -> None:
    """A checkpoint as releases before rows stored it (every open run in one PartitionCheckpoint
    value) becomes rows, once, at the positions it was stored at."""
    started = time.monotonic()
    with conn.transaction():
        [(blob,)] = conn.execute("SELECT state FROM kadence_history_checkpoints WHERE partition = %s FOR UPDATE", (partition,)).fetchall()
        runs = codec("PartitionCheckpoint").decode(bytes(blob))["executions"]
        encoded = run_codec()
        # Rows a release of rows left before a rollback to one of blobs are older than the blob.
        conn.execute("DELETE FROM kadence_history_open_runs WHERE partition = %s", (partition,))
        _store_rows(conn, partition, [
            RunRow(run["workflow_id"], run["run_id"], run["status"], run["start_request_id"], encoded.encode(run)) for run in runs
        ], [])
        conn.execute(
            "UPDATE kadence_history_checkpoints SET state = '', schema_fingerprint = %s, stored_ids_history_offset = NULL "
            "WHERE partition = %s", (run_codec().current_fingerprint, partition),
        )
    log.info("event=checkpoint_converted_to_rows partition=%d open_runs=%d seconds=%.3f", partition, len(runs), time.monotonic() - started)


def _stored_ids(data: bytes | None) -> StoredIds | None:
    """The StoredIds a checkpoint row holds, if it holds them in a format this release reads."""
    if data is None:
        return None
    try:
        return StoredIds.from_bytes(bytes(data))
    except ValueError as exc:
        log.warning("event=stored_ids_unreadable reason=%r", str(exc))
        return None


def _read_stored_ids(conn: psycopg.Connection[Any], partition: int) -> StoredIds:
    """The partition's stored run ids from their tables: for a partition whose checkpoint does not
    hold them (none stored yet, stored by a release before, or left stale by one)."""
    started = time.monotonic()
    stored_ids = StoredIds()
    with conn.transaction(), conn.cursor(name=f"stored_ids_{partition}") as cursor:  # server-side: the ids may be many
        cursor.execute(
            "SELECT workflow_id FROM kadence_history_closed_runs WHERE partition = %s "
            "UNION ALL SELECT workflow_id FROM kadence_history_open_runs WHERE partition = %s", (partition, partition),
        )
        for (workflow_id,) in cursor:
            stored_ids.add(workflow_id)
    log.info("event=stored_ids_read partition=%d ids=%d seconds=%.3f", partition, len(stored_ids), time.monotonic() - started)
    return stored_ids
