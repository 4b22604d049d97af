"""The fence of the readers that own partitions for a while (timer, visibility, matching): what it
knows of a partition holds for one forward read, so a partition read again is never taken for a
zombie's repeat."""

from __future__ import annotations

from typing import Any

from kadence.protocol.fence import LogFence, PartitionFences


def batch(run_id: str, first_event_id: int, source_offset: int, *, closes: bool = False) -> dict[str, Any]:
    kind = "WorkflowExecutionCompleted" if closes else "MarkerRecorded"
    return {
        "workflow_id": f"wf-{run_id}", "run_id": run_id, "first_event_id": first_event_id, "source_offset": source_offset,
        "events": [{"event_id": first_event_id, "event_time_ms": 0, "attributes": (kind, {})}], "effects": [], "next_run": None,
    }


def test_a_partition_assigned_again_is_read_again_and_what_another_owner_advanced_applies() -> None:
    fences = PartitionFences()
    assert [fences.admit(0, offset, batch("r", offset + 1, offset)) for offset in range(3)] == [True] * 3
    fences.forget({0})  # revoked: another instance takes the partition and reads on
    fences.forget({0})  # assigned back, positioned where the other instance left it
    assert fences.admit(0, 7, batch("r", 8, 7))
    fences.forget({0})  # assigned again after a restart, read from an older stored position
    assert fences.admit(0, 2, batch("r", 3, 2))


def test_a_seek_back_within_an_assignment_reads_again_and_true_repeats_are_skipped() -> None:
    fences = PartitionFences()
    assert fences.admit(1, 10, batch("r", 1, 100))
    assert fences.admit(1, 11, batch("r", 2, 101))
    assert not fences.admit(1, 12, batch("r", 2, 101)), "a zombie repeating the owner's batch"
    assert not fences.admit(1, 13, batch("r", 5, 102)), "a batch that does not continue its run"
    assert fences.admit(1, 10, batch("r", 1, 100)), "faust went back to the committed offset"
    assert fences.admit(1, 11, batch("r", 2, 101))


def test_closed_runs_and_revoked_partitions_are_forgotten() -> None:
    fences = PartitionFences()
    for i in range(1000):
        assert fences.admit(2, 2 * i, batch(f"run-{i}", 1, 2 * i))
        assert fences.admit(2, 2 * i + 1, batch(f"run-{i}", 2, 2 * i + 1, closes=True))
    assert fences._fences[2].next_event_id == {}
    assert fences.admit(3, 0, batch("open", 1, 0))
    fences.forget({3})
    assert 3 not in fences._fences


def test_a_batch_that_skips_events_of_its_run_is_told_from_a_repeat() -> None:
    """A writer whose state holds events the log lacks (it recovered before its own batches
    landed) writes batches that start past the run's next event: the audit reports them, where a
    repeat or a zombie's overlapping batch is only skipped."""
    fence = LogFence(strict=True)
    assert fence.admit(0, batch("r", 1, 10)) and fence.admit(0, batch("r", 2, 11))
    repeat, overlap, gap = batch("r", 2, 11), batch("r", 1, 12), batch("r", 5, 13)
    assert not fence.admit(0, repeat) and fence.gap_before(0, repeat) is None
    assert not fence.admit(0, overlap) and fence.gap_before(0, overlap) is None
    assert not fence.admit(0, gap) and fence.gap_before(0, gap) == 3
