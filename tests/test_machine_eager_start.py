"""Eager workflow start in the history service: a start that names a worker of its client's process
records the run's first workflow task started by that worker in its own batch, dispatches no task,
and hands the task over in its answer on kadence.replies (services/history/machine/lifecycle.py,
workflow_task.py, step.py, replies.py); where it cannot, the task goes to the queue as any start's."""

from __future__ import annotations

from typing import Any

import pytest

from kadence.protocol.codec import codec
from services.history.machine import lifecycle
from services.history.machine.dispatch import decide
from services.history.machine.lifecycle import decide_signal_with_start, decide_start, decide_update_with_start
from services.history.machine.transition import Rejected
from services.history.partition import PartitionState
from services.history.replies import Replies
from services.history.step import Step, commit, step
from tests.machine_steps import NOW, START, apply

EAGER = {**START, "request_id": "start-1", "eager_worker_identity": "worker-1"}


def eager_start(state: PartitionState, start: dict[str, Any] = EAGER, offset: int = 0) -> Step:
    return commit(state, decide_start(state.executions.get("order-1"), "order-1", start, "client", NOW, 0, offset), 0, offset,
                  start["request_id"])


def kinds(batch: dict[str, Any]) -> list[str]:
    return [e["attributes"][0] for e in batch["events"]]


def effect_kinds(batch: dict[str, Any]) -> list[tuple[str, str]]:
    return [(kind, effect.get("kind", "")) for kind, effect in batch["effects"]]


def test_an_eager_start_records_the_first_task_started_by_the_worker_and_dispatches_none() -> None:
    state = PartitionState(0)
    written = eager_start(state)
    batch = written.batch
    assert batch is not None
    assert kinds(batch) == ["WorkflowExecutionStarted", "WorkflowTaskScheduled", "WorkflowTaskStarted"]
    assert batch["events"][2]["attributes"][1] == {"scheduled_event_id": 2, "identity": "worker-1"}
    # No WorkflowTask and no re-dispatch timer: only the start-to-close timeout, which covers a lost task.
    assert effect_kinds(batch) == [("Timer", "WORKFLOW_TASK_START_TO_CLOSE")]
    assert batch["effects"][0][1]["fire_at_ms"] == NOW + 10_000
    # The task for the start's answer, as a dispatch would carry it, and its start's time (workflow.now()).
    assert written.eager_workflow_task is not None
    task = written.eager_workflow_task["task"]
    assert (task["scheduled_event_id"], task["attempt"], task["first_event_id"], task["task_queue"], task["workflow_type"]) == (
        2, 1, 1, "orders", "OrderWorkflow")
    assert [e["event_id"] for e in task["history"]] == [1, 2]
    assert written.eager_workflow_task["started_time_ms"] == batch["events"][2]["event_time_ms"] == NOW
    wt = state.executions["order-1"].workflow_task
    assert wt is not None and (wt.started_event_id, wt.started_identity) == (3, "worker-1")


def test_the_worker_answers_the_eager_task_without_a_start_of_its_own() -> None:
    state = PartitionState(0)
    run_id = eager_start(state).batch["run_id"]  # type: ignore[index]
    ex = state.executions["order-1"]
    with pytest.raises(Rejected, match="no pending workflow task"):  # started already: a start is stale
        decide(ex, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2, "attempt": 1}, "worker-1", NOW)
    completion = {"run_id": run_id, "scheduled_event_id": 2, "attempt": 1, "commands": [("CompleteWorkflowExecution", {"result": None})]}
    with pytest.raises(Rejected, match="started by 'worker-1'"):
        decide(ex, "RespondWorkflowTaskCompleted", completion, "worker-2", NOW)
    completed = apply(state, decide(ex, "RespondWorkflowTaskCompleted", completion, "worker-1", NOW + 5), 1)
    assert kinds(completed) == ["WorkflowTaskCompleted", "WorkflowExecutionCompleted"]
    assert ("DropTimer", "") in effect_kinds(completed)  # the start-to-close timer goes with it
    assert state.executions["order-1"].status == "Completed"


def test_an_eager_task_never_answered_times_out_and_goes_through_the_queue() -> None:
    """The client or its worker died after the start, or the answer carrying the task was lost: the
    task costs its start-to-close timeout, then is retried as any started task is."""
    state = PartitionState(0)
    run_id = eager_start(state).batch["run_id"]  # type: ignore[index]
    fired = {"run_id": run_id, "timer_id": "t", "kind": "WORKFLOW_TASK_START_TO_CLOSE", "scheduled_event_id": 2, "attempt": 1}
    timed_out = apply(state, decide(state.executions["order-1"], "TimeoutFired", fired, "timer", NOW + 10_000), 1)
    assert kinds(timed_out) == ["WorkflowTaskTimedOut"]
    retry = timed_out["workflow_task"]
    assert retry is not None and retry["attempt"] == 2
    due = {"run_id": run_id, "timer_id": "r", "kind": "WORKFLOW_TASK_RETRY", "scheduled_event_id": retry["scheduled_event_id"],
           "attempt": 2}
    dispatched = apply(state, decide(state.executions["order-1"], "TimeoutFired", due, "timer", NOW + 11_000), 2)
    assert [kind for kind, _ in dispatched["effects"]] == ["DropTimer", "WorkflowTask", "Timer"]


@pytest.mark.parametrize("why", ["start delay", "cron schedule", "signal-with-start", "update-with-start", "standalone activity"])
def test_a_start_whose_first_task_is_not_due_at_once_alone_is_not_eager(why: str) -> None:
    """As Temporal's: eager only for a start whose first workflow task is due at once (no start delay
    or cron schedule) and that brings nothing else (a signal, an update); a standalone activity's
    run has no workflow task at all. The task then goes to the queue (or waits for its time)."""
    state = PartitionState(0)
    update = {"update_id": "u1", "name": "add", "args": [], "header": {}}
    activity = {"schedule_to_close_timeout_ms": 0, "schedule_to_start_timeout_ms": 0, "start_to_close_timeout_ms": 5_000,
                "heartbeat_timeout_ms": 0, "retry_policy": None}
    decided = {
        "start delay": lambda: decide_start(None, "order-1", {**EAGER, "start_delay_ms": 5_000}, "client", NOW, 0, 0),
        "cron schedule": lambda: decide_start(None, "order-1", {**EAGER, "cron_schedule": "@every 60s"}, "client", NOW, 0, 0),
        "signal-with-start": lambda: decide_signal_with_start(
            None, "order-1", {"start": EAGER, "signal_name": "go", "signal_input": []}, "client", NOW, 0, 0),
        "update-with-start": lambda: decide_update_with_start(None, "order-1", {"start": EAGER, "update": update}, "client", NOW, 0, 0),
        "standalone activity": lambda: decide_start(None, "kadence-activity:charge-1", {**EAGER, "activity": activity}, "client",
                                                    NOW, 0, 0),
    }[why]()
    written = commit(state, decided, 0, 0, "start-1")
    assert written.batch is not None and "WorkflowTaskStarted" not in kinds(written.batch)
    assert written.eager_workflow_task is None


def test_a_start_sent_again_or_taking_the_running_run_brings_no_task() -> None:
    """A start answered before (the client's retry, another start of the request id) is answered
    with its run and no task: the task was handed over once, with the first answer. A start that
    takes the running run (USE_EXISTING) starts nothing."""
    state = PartitionState(0)
    eager_start(state)
    again = step(state, {"workflow_id": "order-1", "identity": "client", "command": ("StartWorkflowExecution", EAGER)}, NOW + 1, 0, 1)
    assert again.batch is None and again.answered_again is not None and again.eager_workflow_task is None
    existing = eager_start(state, {**EAGER, "request_id": "start-2", "id_conflict_policy": "USE_EXISTING"}, offset=2)
    assert existing.batch is not None and existing.batch["events"] == [] and existing.eager_workflow_task is None


def test_a_start_terminating_the_running_run_starts_the_new_one_eagerly() -> None:
    state = PartitionState(0)
    first = eager_start(state).batch["run_id"]  # type: ignore[index]
    written = eager_start(state, {**EAGER, "request_id": "start-2", "id_conflict_policy": "TERMINATE_EXISTING"}, offset=1)
    assert written.batch is not None and kinds(written.batch) == ["WorkflowExecutionTerminated"]
    following = written.batch["next_run"]
    assert following is not None and following["run_id"] != first
    assert [e["attributes"][0] for e in following["events"]][-1] == "WorkflowTaskStarted"
    assert written.eager_workflow_task is not None and written.eager_workflow_task["task"]["history"][0]["event_id"] == 1


def test_a_build_whose_replies_cannot_carry_the_task_dispatches_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pinned to an earlier release's Reply (KADENCE_SCHEMA_PIN), history starts nothing eagerly."""
    monkeypatch.setattr(lifecycle, "_answers_carry_eager_tasks", lambda: False)
    written = eager_start(PartitionState(0))
    assert written.batch is not None and kinds(written.batch) == ["WorkflowExecutionStarted", "WorkflowTaskScheduled"]
    assert [kind for kind, _ in written.batch["effects"]] == ["WorkflowTask", "Timer"] and written.eager_workflow_task is None


def answers(start: dict[str, Any]) -> list[dict[str, Any]]:
    """What the history service sends on kadence.replies once the start's batch is written."""
    state, replies = PartitionState(0), Replies()
    replies.partition_count = 4
    command = {"workflow_id": "order-1", "identity": "client", "command": ("StartWorkflowExecution", start), "reply_partition": 3}
    replies.asked(0, command, start["request_id"])
    written = eager_start(state, start)
    assert written.batch is not None
    sent = replies.of_batch(0, written.batch, written.eager_workflow_task)
    assert {reply.partition for reply in sent} == {3}
    return [codec("Reply").decode(reply.value)["reply"][1] for reply in sent]


def test_the_start_answer_carries_the_task_for_the_worker() -> None:
    (answer,) = answers(EAGER)
    assert answer["accepted"] and answer["request_id"] == "start-1"
    eager = answer["eager_workflow_task"]
    assert eager is not None and eager["started_time_ms"] == NOW
    assert [e["event_id"] for e in eager["task"]["history"]] == [1, 2] and eager["task"]["first_event_id"] == 1
    (plain,) = answers({**EAGER, "eager_worker_identity": ""})
    assert plain["accepted"] and plain["eager_workflow_task"] is None

