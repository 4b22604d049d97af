"""The live step and the partition state: a batch folded live is the state recovery and checkpoints rebuild; which batches join."""

from __future__ import annotations

from services.history.machine.dispatch import decide
from services.history.machine.lifecycle import decide_start
from services.history.partition import PartitionState
from services.history.step import Step, step
from tests.machine_steps import (
    NOW,
    START,
    apply,
    command,
    schedule_activities,
    started_workflow,
)


def test_recovery_folds_the_same_state_and_skips_zombie_duplicates() -> None:
    live, run_id = started_workflow()
    schedule_activities(live, run_id)
    log = []
    for offset, (kind, body) in enumerate([
        ("RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1}),
        ("RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "result": None}),
    ], start=3):
        log.append(command(live, kind, body, offset))
    recovered, _ = started_workflow()
    schedule_activities(recovered, run_id)
    for batch in log + log:  # every batch twice, as a zombie writer would leave them
        recovered.apply(batch)
    assert recovered.executions["order-1"] == live.executions["order-1"]
    assert recovered.resume_offset == 5


def test_a_checkpoint_stores_open_runs_with_their_buffers_and_closed_runs_as_what_reuse_needs() -> None:
    state, run_id = started_workflow()
    schedule_activities(state, run_id, count=2)
    for offset, scheduled in enumerate((5, 6), start=3):
        command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": scheduled, "attempt": 1}, offset)
    command(state, "RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "result": None}, 5)
    command(state, "SignalWorkflowExecution", {"run_id": "", "signal_name": "s", "input": [], "request_id": ""}, 6)
    assert state.executions["order-1"].buffered  # a workflow task is in flight
    apply(state, decide_start(None, "order-2", START, "client", NOW, 0, 7), 7)
    command_for_other = decide(state.executions["order-2"], "TerminateWorkflowExecution",
                               {"run_id": "", "reason": "x", "details": [], "request_id": ""}, "client", NOW)
    apply(state, command_for_other, 8)

    snapshot = state.begin_snapshot()
    assert not snapshot.encode_some(len(snapshot.pending))
    assert snapshot.rows["order-1"].run() == state.executions["order-1"]
    closed = snapshot.rows["order-2"]  # closed: its events kept for a reset, and when it closed
    assert closed.run() == state.executions["order-2"] and closed.closed_at_ms == NOW
    assert snapshot.last_source_offset + 1 == state.resume_offset == 9
    restored = PartitionState(0)
    restored.loaded(snapshot.rows["order-1"].run())
    assert restored.fence.next_event_id == {run_id: state.executions["order-1"].next_event_id}


def test_a_request_answered_again_writes_nothing_yet_the_partition_resumes_past_it() -> None:
    """The same start and the same signal sent again (one request id each) are answered without a
    batch; the partition's resume offset (what a checkpoint stores) moves past them all the same."""
    state = PartitionState(0)

    def sent(kind: str, body: dict[str, object], offset: int) -> Step:
        return step(state, {"workflow_id": "order-1", "identity": "client", "command": (kind, body), "reply_partition": None},
                    NOW, 0, offset)

    first = sent("StartWorkflowExecution", {**START, "request_id": "start-1"}, 0)
    assert first.batch is not None and first.batch["request_ids"] == ["start-1"]
    state.checkpointed(history_offset=1)
    again = sent("StartWorkflowExecution", {**START, "request_id": "start-1"}, 1)
    assert again.batch is None and again.answered_again is not None
    assert again.answered_again["request_ids"] == ["start-1"] and again.answered_again["run_id"] == first.batch["run_id"]
    assert state.resume_offset == 2 and state.checkpoint_due, "a checkpoint records that the command was read"

    signal = {"signal_name": "go", "input": [], "request_id": "signal-1", "run_id": ""}
    signaled = sent("SignalWorkflowExecution", signal, 2)
    assert signaled.batch is not None
    assert [e["attributes"][0] for e in signaled.batch["events"] + signaled.batch["buffered"]] == ["WorkflowExecutionSignaled"]
    resent = sent("SignalWorkflowExecution", signal, 3)
    assert resent.batch is None and resent.answered_again is not None and state.resume_offset == 4

    # New requests that change nothing are answered by a batch all the same: nobody heard them before.
    existing = sent("StartWorkflowExecution", {**START, "request_id": "start-2", "id_conflict_policy": "USE_EXISTING"}, 4)
    cancels = [sent("RequestCancelWorkflowExecution", {"run_id": "", "request_id": f"cancel-{i}", "reason": ""}, 5 + i) for i in range(2)]
    assert all(written.batch is not None and written.answered_again is None for written in [existing, *cancels])
    assert [written.batch["request_ids"] for written in [existing, *cancels] if written.batch] == [["start-2"], ["cancel-0"], ["cancel-1"]]
