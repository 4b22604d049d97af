"""The partition's run cache and its incremental checkpoints (services/history/partition.py,
services/history/snapshot.py): a snapshot holds the runs changed since the last one as they were
when it began, whatever the loop changes while it is stored; only stored, unchanged runs rest as
their rows, and the least recently used rows leave memory; a run woken or read back folds on as if
it had stayed; the clients watching runs' closes are bounded too."""

from __future__ import annotations

from typing import Any

from services.history.machine.dispatch import decide
from services.history.machine.lifecycle import decide_start
from services.history.partition import PartitionState
from services.history.replies import WATCHED_RUNS_PER_PARTITION, _PartitionReplies
from services.history.snapshot import RunRow
from tests.machine_steps import NOW, START, apply


def _started(state: PartitionState, workflow_ids: list[str], offset: int = 0) -> int:
    for workflow_id in workflow_ids:
        apply(state, decide_start(None, workflow_id, START, "client", NOW, 0, offset), offset)
        offset += 1
    return offset


def _client_command(state: PartitionState, workflow_id: str, kind: str, body: dict[str, Any], offset: int) -> None:
    apply(state, decide(state.executions[workflow_id], kind, body, "client", NOW), offset)


def _signal(state: PartitionState, workflow_id: str, offset: int) -> None:
    signal = {"run_id": "", "signal_name": "s", "input": [], "request_id": ""}
    _client_command(state, workflow_id, "SignalWorkflowExecution", signal, offset)


def test_a_snapshot_holds_each_changed_run_as_it_was_when_it_began() -> None:
    state = PartitionState(0)
    _started(state, ["a", "b", "c"])
    as_begun = RunRow.of(state.executions["a"])
    snapshot = state.begin_snapshot()
    assert set(snapshot.pending) == {"a", "b", "c"} and state.dirty == set()
    assert snapshot.history_offset == state.history_offset, "every batch written before it is acknowledged"
    _signal(state, "a", 3)  # "a" changes before the snapshot encoded it
    assert snapshot.rows["a"] == as_begun and "a" not in snapshot.pending
    assert state.dirty == {"a"}, "the change goes to the next snapshot"
    assert not snapshot.encode_some(10)
    assert set(snapshot.rows) == {"a", "b", "c"}
    assert snapshot.last_source_offset == 2, "the snapshot's resume position is the one it began at"


def test_a_snapshot_waits_for_the_batches_written_before_it() -> None:
    state = PartitionState(0)
    _started(state, ["a"])
    state.written = 2
    state.batch_acknowledged(40)
    snapshot = state.begin_snapshot()
    assert snapshot.history_offset in (None,), "a batch written before it is not acknowledged yet"
    state.written = 3  # a batch written after the snapshot began
    state.batch_acknowledged(41)
    assert snapshot.history_offset == 42, "the second batch, the last written before it, is at offset 41"
    state.batch_acknowledged(42)
    assert snapshot.history_offset == 42 and state.history_offset == 43


def _stored(state: PartitionState) -> None:
    snapshot = state.begin_snapshot()
    snapshot.encode_some(10)
    snapshot.history_offset = state.history_offset
    state.snapshot_stored(snapshot)


def test_runs_stored_unchanged_rest_as_their_rows_and_the_least_used_rows_leave_memory() -> None:
    state = PartitionState(0)
    offset = _started(state, ["a", "b", "c", "d"])
    assert state.rest_stored_runs(keep=1) == 0 and len(state.executions) == 4, "nothing stored yet: every run is only in memory"
    c_as_stored = state.executions["c"]
    _stored(state)
    _signal(state, "a", offset)  # "a" changed since: its row is not its state
    assert state.rest_stored_runs(keep=2) == 1, "b, the least recently used row beyond two, left memory"
    assert list(state.executions) == ["a"] and list(state.at_rest) == ["c", "d"]
    assert set(state.fence.next_event_id) == {state.executions["a"].run_id}, "the fence forgets the runs at rest"
    assert state.holds("c") and state.executions["c"] == c_as_stored, "woken as it was stored"
    assert list(state.at_rest) == ["d", "c"], "the most recently used row"
    assert not state.holds("b"), "b is read back from Postgres"
    _signal(state, "c", offset + 1)
    assert "c" not in state.at_rest and "c" in state.dirty, "changed: its row is stored again"


def test_a_run_read_and_not_changed_leaves_its_object_and_keeps_its_row() -> None:
    state = PartitionState(0)
    _started(state, ["a", "b"])
    _stored(state)
    assert state.rest_stored_runs(keep=10) == 0 and not state.executions
    assert state.holds("a") and "a" in state.executions, "woken for a command that changed nothing (a query)"
    assert state.rest_stored_runs(keep=10) == 0
    assert not state.executions and list(state.at_rest) == ["b", "a"]


def test_a_run_read_back_folds_on_as_if_it_had_stayed() -> None:
    stayed = PartitionState(0)
    offset = _started(stayed, ["a"])
    row = RunRow.of(stayed.executions["a"])
    _signal(stayed, "a", offset)

    read_back = PartitionState(0)
    read_back.fence.last_source_offset[0] = offset - 1
    read_back.loaded(row.run())
    assert read_back.dirty == set(), "a run read back is as stored"
    _signal(read_back, "a", offset)
    assert read_back.executions["a"] == stayed.executions["a"]
    assert read_back.dirty == {"a"}


def test_closed_runs_leave_memory_once_stored_unless_the_id_started_again() -> None:
    state = PartitionState(0)
    offset = _started(state, ["a", "b"])
    for workflow_id in ("a", "b"):
        terminate = {"run_id": "", "reason": "x", "details": [], "request_id": ""}
        _client_command(state, workflow_id, "TerminateWorkflowExecution", terminate, offset)
        offset += 1
        assert state.executions[workflow_id].status == "Terminated"
    snapshot = state.begin_snapshot()
    snapshot.encode_some(10)
    snapshot.history_offset = state.history_offset
    _started(state, ["b"], offset)  # a new run of "b" while the snapshot is stored
    state.snapshot_stored(snapshot)
    assert list(state.executions) == ["a", "b"], "a batch waiting for runs to be read back counts on those it holds"
    assert state.rest_stored_runs(keep=10) == 1
    assert list(state.executions) == ["b"] and state.executions["b"].status == "Running" and not state.at_rest


def test_a_closed_run_read_back_leaves_memory_at_the_next_rest() -> None:
    """A closed run read back for a command (a reset, a start reusing its id) holds its events:
    its row keeps them, so memory lets it go at once rather than with the cache's least used."""
    state = PartitionState(0)
    offset = _started(state, ["a"])
    _client_command(state, "a", "TerminateWorkflowExecution", {"run_id": "", "reason": "x", "details": [], "request_id": ""}, offset)
    row = RunRow.of(state.executions.pop("a"))
    state.dirty.clear()
    state.loaded(row.run())
    assert state.executions["a"].history, "read back with its events"
    assert state.rest_stored_runs(keep=10) == 1 and not state.executions and not state.at_rest


def test_a_snapshot_not_stored_gives_its_runs_to_the_next() -> None:
    state = PartitionState(0)
    offset = _started(state, ["a", "b"])
    snapshot = state.begin_snapshot()
    _signal(state, "a", offset)
    state.snapshot_failed(snapshot)
    assert state.dirty == {"a", "b"} and state.snapshot is None


def test_history_watches_the_closes_of_a_bounded_number_of_runs_the_latest_started() -> None:
    """A start's client hears of its run's close from history while the run is among the latest
    started on its partition; past that it reads the close from the read model, as after a restart."""
    watched = _PartitionReplies()
    for i in range(WATCHED_RUNS_PER_PARTITION + 2):
        watched.watch(f"wf-{i}", "run", {(0, f"start-{i}")})
    assert len(watched.watchers) == WATCHED_RUNS_PER_PARTITION
    assert ("wf-0", "run") not in watched.watchers and ("wf-1", "run") not in watched.watchers
    assert watched.watchers[(f"wf-{WATCHED_RUNS_PER_PARTITION + 1}", "run")] == {(0, f"start-{WATCHED_RUNS_PER_PARTITION + 1}")}
