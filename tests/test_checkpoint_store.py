"""The history service's checkpoints in Postgres (services/history/checkpoint.py): rows of the runs
that changed, read back by workflow id; the owner's epoch fences a deposed writer; a checkpoint of
another version is skipped for the log; one a release before stored as a single value becomes rows."""

from __future__ import annotations

import time

import psycopg

from kadence.dev.local_stack import LocalStack
from kadence.protocol.codec import codec
from services.history.checkpoint import CheckpointStore, Claimed
from services.history.machine.dispatch import decide
from services.history.machine.execution import closed_execution
from services.history.machine.lifecycle import decide_start
from services.history.partition import PartitionState
from services.history.snapshot import RunRow, Snapshot, saved_run
from services.history.step import commit
from tests.machine_steps import START

# Partitions the running history service does not own: a test claims them for itself.
DEPOSED_PARTITION, ROWS_PARTITION, SKIPPED_PARTITION, BLOB_PARTITION, CLOSED_PARTITION = 1000, 1001, 1002, 1003, 1004


def _stored(claimed: Claimed, partition: int, history_offset: int, rows: list[RunRow] | None = None) -> Snapshot:
    """A snapshot as the service hands the store one: of a state claimed, its runs encoded, its
    batches acknowledged."""
    return Snapshot(partition, {}, history_offset - 1, 0, claimed.epoch, {row.workflow_id: row for row in rows or []}, history_offset)


def _open_run(partition: int, workflow_id: str) -> PartitionState:
    state = PartitionState(partition)
    commit(state, decide_start(None, workflow_id, START, "test", 0, partition, 0), partition, 0)
    return state


def test_only_the_latest_owner_of_a_partition_may_store_its_checkpoint(stack: LocalStack) -> None:
    deposed, owner = CheckpointStore(stack.postgres_dsn), CheckpointStore(stack.postgres_dsn)
    try:
        first = deposed.claim([DEPOSED_PARTITION])[DEPOSED_PARTITION]
        assert deposed.save(_stored(first, DEPOSED_PARTITION, 7), None)
        second = owner.claim([DEPOSED_PARTITION])[DEPOSED_PARTITION]
        assert second.positions is not None and second.positions.history_offset == 7
        assert not deposed.save(_stored(first, DEPOSED_PARTITION, 9), None), "a deposed owner's checkpoint must be refused"
        assert owner.save(_stored(second, DEPOSED_PARTITION, 11), None)
        # The owner's own state of before it claimed the partition again (a rebalance that gave it
        # back while that state's checkpoint was being stored): the new state recovers from 11.
        third = owner.claim([DEPOSED_PARTITION])[DEPOSED_PARTITION]
        assert not owner.save(_stored(second, DEPOSED_PARTITION, 13), None), "a state of an earlier claim must be refused"
        assert owner.save(_stored(third, DEPOSED_PARTITION, 13), None)
    finally:
        deposed.close()
        owner.close()


def test_a_checkpoint_stores_the_changed_runs_as_rows_read_back_by_workflow_id(stack: LocalStack) -> None:
    store = CheckpointStore(stack.postgres_dsn)
    partition = ROWS_PARTITION
    open_run = _open_run(partition, "open-1").executions["open-1"]
    try:
        first = store.claim([partition])[partition]
        rows = [RunRow.of(open_run), RunRow.of(closed_execution("done-1", "r2", "Completed", "start-7"))]
        assert store.save(_stored(first, partition, 3, rows), None)
        loaded = {ex.workflow_id: (p, ex) for p, ex in store.load_runs(
            [(partition, "open-1"), (partition, "done-1"), (partition, "never-started"), (partition + 1, "done-1")])}
        assert loaded == {
            "open-1": (partition, open_run), "done-1": (partition, closed_execution("done-1", "r2", "Completed", "start-7")),
        }
        claimed = store.claim([partition])[partition]
        assert claimed.state(partition).executions == {}, "a claim reads no run: they are read back as they are named"
        # Which ids have a run stored, read from the tables (the checkpoint stored no filter).
        assert all(claimed.stored_ids.may_hold(w) for w in ("open-1", "done-1")) and not claimed.stored_ids.may_hold("never-started")
        # The open run closes: its row moves to the closed runs, and the filter stored says which ids have one.
        claimed.stored_ids.add("done-2")
        closed = RunRow.of(closed_execution("open-1", open_run.run_id, "Failed", open_run.start_request_id))
        assert store.save(_stored(claimed, partition, 4, [closed]), claimed.stored_ids.to_bytes())
        assert store.load_runs([(partition, "open-1")]) == [(partition, closed.run())]
        again = store.claim([partition])[partition].stored_ids
        assert again.may_hold("done-2") and not again.may_hold("never-started")
        # A release that moves history_offset without the filter (a rollback) leaves it stale: the claim reads the tables.
        with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
            conn.execute("UPDATE kadence_history_checkpoints SET history_offset = 9 WHERE partition = %s", (partition,))
        after_rollback = store.claim([partition])[partition].stored_ids
        assert all(after_rollback.may_hold(w) for w in ("open-1", "done-1")) and not after_rollback.may_hold("done-2")
    finally:
        store.close()


def test_a_closed_runs_events_are_kept_for_the_reset_retention_then_dropped(stack: LocalStack) -> None:
    """A closed run's row keeps its events (a reset copies them) and its close time; once it closed
    longer ago than the reset retention and the commands' retention, the row keeps its summary only.
    A row whose events this release cannot read answers as one without them."""
    store = CheckpointStore(stack.postgres_dsn)
    partition = CLOSED_PARTITION
    state = _open_run(partition, "done-1")
    terminate = {"run_id": "", "reason": "x", "details": [], "request_id": ""}
    closed_ms = int(time.time() * 1000)
    commit(state, decide(state.executions["done-1"], "TerminateWorkflowExecution", terminate, "test", closed_ms), partition, 1)
    closed = state.executions["done-1"]
    try:
        claimed = store.claim([partition])[partition]
        assert store.save(_stored(claimed, partition, 2, [RunRow.of(closed)]), None)
        [(_, read_back)] = store.load_runs([(partition, "done-1")])
        assert (read_back.status, read_back.history) == ("Terminated", closed.history)
        with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
            [(closed_at,)] = conn.execute("SELECT extract(epoch FROM closed_at) FROM kadence_history_closed_runs "
                                          "WHERE partition = %s", (partition,)).fetchall()
            assert round(float(closed_at) * 1000) == closed_ms  # the close event's time
            conn.execute("UPDATE kadence_history_closed_runs SET state = '\\x00ff'::bytea WHERE partition = %s", (partition,))
            unreadable = store.load_runs([(partition, "done-1")])
            assert unreadable == [(partition, closed_execution("done-1", closed.run_id, "Terminated", closed.start_request_id))]
        assert store.save(_stored(claimed, partition, 3, [RunRow.of(closed)]), None)  # within the retention: kept
        store._next_expiry.clear()  # the expiry looks again at the next checkpoint, as it does every EXPIRY_INTERVAL_S
        with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
            conn.execute("UPDATE kadence_history_closed_runs SET closed_at = now() - interval '15 days' WHERE partition = %s",
                         (partition,))
        assert store.save(_stored(claimed, partition, 4), None)
        assert store.load_runs([(partition, "done-1")]) == [
            (partition, closed_execution("done-1", closed.run_id, "Terminated", closed.start_request_id))]
    finally:
        store.close()


def test_a_checkpoint_of_another_schema_version_is_skipped_for_the_log(stack: LocalStack) -> None:
    """After an upgrade that changed the rows' schema, recovery reads the log instead of decoding
    rows written with another, and those rows are dropped (the log holds every run again)."""
    store = CheckpointStore(stack.postgres_dsn)
    partition = SKIPPED_PARTITION
    try:
        claimed = store.claim([partition])[partition]
        assert store.save(_stored(claimed, partition, 5, [RunRow.of(_open_run(partition, "open-1").executions["open-1"])]), None)
        assert store.claim([partition])[partition].positions.history_offset == 5  # type: ignore[union-attr]
        with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
            conn.execute("UPDATE kadence_history_checkpoints SET schema_fingerprint = 'an-earlier-one' WHERE partition = %s", (partition,))
        assert store.claim([partition])[partition].positions is None
        assert store.load_runs([(partition, "open-1")]) == []
    finally:
        store.close()


def test_a_checkpoint_a_release_before_stored_as_one_value_becomes_rows(stack: LocalStack) -> None:
    """The upgrade from one PartitionCheckpoint value of every open run (and the closed runs'
    table beside it): the claim converts it to rows at the same positions, once."""
    store = CheckpointStore(stack.postgres_dsn)
    partition = BLOB_PARTITION
    state = _open_run(partition, "open-1")
    commit(state, decide_start(None, "open-2", START, "test", 0, partition, 1), partition, 1)
    blob = codec("PartitionCheckpoint").encode({"executions": [saved_run(ex) for ex in state.executions.values()]})
    try:
        store.claim([partition])  # the tables
        with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO kadence_history_checkpoints (partition, epoch, history_offset, last_source_offset, state, schema_fingerprint) "
                "VALUES (%s, 1, 12, 1, %s, %s) ON CONFLICT (partition) DO UPDATE SET history_offset = 12, last_source_offset = 1, "
                "state = EXCLUDED.state, schema_fingerprint = EXCLUDED.schema_fingerprint",
                (partition, blob, codec("PartitionCheckpoint").current_fingerprint),
            )
            conn.execute("INSERT INTO kadence_history_closed_runs VALUES (%s, 'done-1', 'r4', 'Completed', 'start-9') "
                         "ON CONFLICT DO NOTHING", (partition,))
            # The row of a run that was open when this release was rolled back, and closed since.
            left_behind = RunRow.of(_open_run(partition, "done-1").executions["done-1"])
            conn.execute("INSERT INTO kadence_history_open_runs VALUES (%s, 'done-1', %s, %s) ON CONFLICT DO NOTHING",
                         (partition, left_behind.run_id, left_behind.state))
        claimed = store.claim([partition])[partition]
        assert claimed.positions is not None and (claimed.positions.history_offset, claimed.positions.last_source_offset) == (12, 1)
        assert all(claimed.stored_ids.may_hold(w) for w in ("open-1", "open-2", "done-1"))
        loaded = {ex.workflow_id: ex for _, ex in store.load_runs([(partition, w) for w in ("open-1", "open-2", "done-1")])}
        assert loaded == {**state.executions, "done-1": closed_execution("done-1", "r4", "Completed", "start-9")}
        again = store.claim([partition])[partition]  # converted once: now rows
        assert again.positions == claimed.positions
    finally:
        store.close()
