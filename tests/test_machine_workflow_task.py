"""The workflow task (services/history/machine/workflow_task.py): dispatch and re-dispatch, start, completion, buffering, timeouts."""

from __future__ import annotations

import pytest

from kadence.protocol.events import WORKFLOW_TASK_TOO_LARGE
from services.history.machine import limits, workflow_task
from services.history.machine.dispatch import decide
from services.history.machine.effects import TASK_REDISPATCH_MS
from services.history.machine.lifecycle import decide_start
from services.history.machine.transition import Redispatch, Rejected, Transition, batch_bytes_bound, engine_failure
from services.history.partition import PartitionState
from services.history.snapshot import RunRow
from tests.machine_steps import (
    ACTIVITY,
    LARGE,
    NOW,
    START,
    apply,
    command,
    schedule_activities,
    started_workflow,
)


def test_a_workflow_task_no_worker_starts_is_dispatched_again_until_one_does() -> None:
    """Its record lost on the way to a worker (or no worker polling): the retry timer dispatches it
    again after 10 s, then after as long again as it has waited; the start drops the timer."""
    state, run_id = started_workflow()
    first = state.executions["order-1"].history[-1]
    assert first["attributes"][0] == "WorkflowTaskScheduled"
    fire = {"run_id": run_id, "timer_id": "t", "kind": "WORKFLOW_TASK_RETRY", "scheduled_event_id": 2, "attempt": 1}
    waited = NOW
    for offset, delay in enumerate((10_000, 10_000, 20_000, 40_000), start=1):
        waited += delay
        redispatch = decide(state.executions["order-1"], "TimeoutFired", fire, "timer", waited)
        assert redispatch.redispatch == Redispatch("workflow", 2, waited - NOW)  # counted by the history service
        again = apply(state, redispatch, offset)
        assert again["events"] == []
        # The timer that fired is dropped, and set again under its id (after the drop, so it stands).
        assert [(k, e["timer_id"] if k == "DropTimer" else e["scheduled_event_id"]) for k, e in again["effects"]] == [
            ("DropTimer", "t"), ("WorkflowTask", 2), ("Timer", 2)]
        assert again["effects"][2][1]["fire_at_ms"] == waited + max(TASK_REDISPATCH_MS, waited - NOW)
        # A worker may be running the first copy, its start held up: one that reads this copy runs its
        # local activities only once history accepted its start.
        assert again["effects"][1][1]["redispatched"]
    started = command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 9)
    assert ("DropTimer", {"timer_id": f"{run_id}/WORKFLOW_TASK_RETRY/2/1"}) in started["effects"]
    with pytest.raises(Rejected, match="stale workflow task retry timer"):
        decide(state.executions["order-1"], "TimeoutFired", fire, "timer", waited + 80_000)


def test_the_first_dispatch_of_a_delayed_workflow_task_is_not_counted_as_a_redispatch() -> None:
    state = PartitionState(0)
    run_id = apply(state, decide_start(None, "order-1", {**START, "start_delay_ms": 30_000}, "client", NOW, 0, 0), 0)["run_id"]
    fire = {"run_id": run_id, "timer_id": "t", "kind": "WORKFLOW_TASK_RETRY", "scheduled_event_id": 2, "attempt": 1}
    first = decide(state.executions["order-1"], "TimeoutFired", fire, "timer", NOW + 30_500)
    assert [k for k, _ in first.effects] == ["DropTimer", "WorkflowTask", "Timer"] and first.redispatch is None
    apply(state, first, 1)
    assert decide(state.executions["order-1"], "TimeoutFired", fire, "timer", NOW + 40_500).redispatch == Redispatch("workflow", 2, 40_500)


def test_activity_result_arriving_during_a_workflow_task_is_buffered_until_it_completes() -> None:
    state, run_id = started_workflow()
    schedule_activities(state, run_id, count=2)
    ex = state.executions["order-1"]
    for offset, scheduled in enumerate((5, 6), start=3):
        command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": scheduled, "attempt": 1}, offset)
    first = command(state, "RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "result": None}, 5)
    assert [e["attributes"][0] for e in first["events"]] == ["ActivityTaskCompleted", "WorkflowTaskScheduled"]
    assert [kind for kind, _ in first["effects"]] == ["WorkflowTask", "Timer", "DropTimer"]
    wt = ex.workflow_task
    assert wt is not None

    second = command(state, "RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 6, "attempt": 1, "result": None}, 6)
    assert second["events"] == [] and [e["attributes"][0] for e in second["buffered"]] == ["ActivityTaskCompleted"]
    with pytest.raises(Rejected):  # the activity is finished even while its event waits in the buffer
        decide(ex, "RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 6, "attempt": 1, "result": None}, "w", NOW)

    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": wt.scheduled_event_id}, 7)
    completed = {"run_id": run_id, "scheduled_event_id": wt.scheduled_event_id, "commands": []}
    flushed = command(state, "RespondWorkflowTaskCompleted", completed, 8)
    assert [e["attributes"][0] for e in flushed["events"]] == ["WorkflowTaskCompleted", "ActivityTaskCompleted", "WorkflowTaskScheduled"]
    assert [e["event_id"] for e in ex.history] == list(range(1, ex.next_event_id))
    assert ex.buffered == []


def test_a_workflow_task_starts_at_the_time_its_worker_gave_so_replay_reads_what_the_live_run_read() -> None:
    state, run_id = started_workflow()
    worker_time_ms = NOW + 1234
    started = command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2, "started_time_ms": worker_time_ms}, 1)
    assert [(e["attributes"][0], e["event_time_ms"]) for e in started["events"]] == [("WorkflowTaskStarted", worker_time_ms)]
    state, run_id = started_workflow()
    unstamped = command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2, "started_time_ms": 0}, 1)
    assert unstamped["events"][0]["event_time_ms"] == NOW  # a worker that gave no time: when history recorded it


def test_an_answer_carrying_its_start_writes_both_in_one_batch_as_two_commands_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's held start rides on its answer (docs/architecture.md, "Workflow task start"):
    WorkflowTaskStarted at the worker's time, then the answer's events; the re-dispatch timer
    goes, and no start-to-close timer is set for a task already over."""
    worker_time_ms = NOW + 7
    state, run_id = started_workflow()
    completed = command(state, "RespondWorkflowTaskCompleted", {
        "run_id": run_id, "scheduled_event_id": 2, "started_time_ms": worker_time_ms,
        "commands": [("ScheduleActivityTask", {**ACTIVITY, "activity_id": "a"})]}, 1)
    assert [(e["event_id"], e["attributes"][0]) for e in completed["events"]] == [
        (3, "WorkflowTaskStarted"), (4, "WorkflowTaskCompleted"), (5, "ActivityTaskScheduled")]
    assert completed["events"][0]["event_time_ms"] == worker_time_ms
    assert completed["events"][1]["attributes"][1]["started_event_id"] == 3
    timers = [(k, e.get("timer_id") or e["kind"]) for k, e in completed["effects"] if k in ("Timer", "DropTimer")]
    assert ("DropTimer", f"{run_id}/WORKFLOW_TASK_RETRY/2/1") in timers
    assert not any("WORKFLOW_TASK_START_TO_CLOSE" in str(timer) for timer in timers), timers

    # As two commands: the same events, and the state each leaves.
    apart, apart_run = started_workflow()
    command(apart, "RecordWorkflowTaskStarted", {"run_id": apart_run, "scheduled_event_id": 2, "started_time_ms": worker_time_ms}, 1)
    command(apart, "RespondWorkflowTaskCompleted", {
        "run_id": apart_run, "scheduled_event_id": 2, "commands": [("ScheduleActivityTask", {**ACTIVITY, "activity_id": "a"})]}, 2)
    assert [e["attributes"] for e in apart.executions["order-1"].history] == [e["attributes"] for e in state.executions["order-1"].history]

    failed_state, failed_run = started_workflow()
    failed = command(failed_state, "RespondWorkflowTaskFailed", {
        "run_id": failed_run, "scheduled_event_id": 2, "cause": "WORKFLOW_WORKER_UNHANDLED_FAILURE",
        "failure": engine_failure("boom", "ValueError"), "started_time_ms": worker_time_ms}, 1)
    assert [e["attributes"][0] for e in failed["events"]] == ["WorkflowTaskStarted", "WorkflowTaskFailed"]
    assert failed["events"][1]["attributes"][1]["started_event_id"] == 3
    assert failed["workflow_task"]["attempt"] == 2  # retried as a transient task

    too_large_state, too_large_run = started_workflow()
    ended = command(too_large_state, "RespondWorkflowTaskFailed", {
        "run_id": too_large_run, "scheduled_event_id": 2, "cause": WORKFLOW_TASK_TOO_LARGE,
        "failure": engine_failure("too large", "CommandTooLargeError"), "started_time_ms": worker_time_ms}, 1)
    assert [e["attributes"][0] for e in ended["events"]] == ["WorkflowTaskStarted", "WorkflowExecutionTerminated"]
    ended_timers = [(k, e.get("timer_id") or e["kind"]) for k, e in ended["effects"] if k in ("Timer", "DropTimer")]
    assert ("DropTimer", f"{too_large_run}/WORKFLOW_TASK_RETRY/2/1") in ended_timers
    assert not any("WORKFLOW_TASK_START_TO_CLOSE" in str(timer) for timer in ended_timers), "no timeout for a closed run"

    # At the history's event limit the run ends too, after the start the answer carried.
    limited_state, limited_run = started_workflow()
    monkeypatch.setattr(limits, "MAX_HISTORY_EVENTS", 3)
    limited = command(limited_state, "RespondWorkflowTaskCompleted", {
        "run_id": limited_run, "scheduled_event_id": 2, "started_time_ms": worker_time_ms,
        "commands": [("ScheduleActivityTask", {**ACTIVITY, "activity_id": "a"})]}, 1)
    assert [e["attributes"][0] for e in limited["events"]] == ["WorkflowTaskStarted", "WorkflowExecutionTerminated"]


def test_an_answer_carrying_a_start_for_a_task_already_started_is_rejected() -> None:
    """Only a pending task can be started: the thread sent the start already, or another worker's."""
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    with pytest.raises(Rejected, match="no pending workflow task"):
        decide(state.executions["order-1"], "RespondWorkflowTaskCompleted", {
            "run_id": run_id, "scheduled_event_id": 2, "commands": [], "started_time_ms": NOW}, "worker", NOW)


def test_a_stale_or_foreign_completion_is_rejected() -> None:
    state, run_id = started_workflow()
    ex = state.executions["order-1"]
    with pytest.raises(Rejected, match="not the current run"):
        decide(ex, "RecordWorkflowTaskStarted", {"run_id": "other", "scheduled_event_id": 2}, "w", NOW)
    with pytest.raises(Rejected, match="no started workflow task"):
        decide(ex, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": []}, "w", NOW)


def test_a_workflow_task_carries_the_events_since_the_previous_task_was_scheduled_and_a_copy_the_whole_history() -> None:
    state = PartitionState(0)
    started = apply(state, decide_start(None, "order-1", START, "client", NOW, 0, 0), 0)
    run_id = started["run_id"]
    first = [effect for kind, effect in started["effects"] if kind == "WorkflowTask"][0]
    assert (first["first_event_id"], [e["event_id"] for e in first["history"]]) == (1, [1, 2])
    schedule_activities(state, run_id)  # events 3 (started), 4 (completed), 5 (scheduled)
    command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1}, 3)
    done = command(state, "RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "result": None}, 4)
    task = [effect for kind, effect in done["effects"] if kind == "WorkflowTask"][0]
    # A worker that ran task 2 has events 1 and 2; the task brings the rest, its own scheduled event last.
    assert task["first_event_id"] == 3
    assert [e["event_id"] for e in task["history"]] == [3, 4, 5, 6, 7, 8] and task["scheduled_event_id"] == 8

    # Dispatched again (no worker started it): the worker it reaches may not hold the run, so the whole history.
    fire = {"run_id": run_id, "timer_id": "t", "kind": "WORKFLOW_TASK_RETRY", "scheduled_event_id": 8, "attempt": 1}
    again = apply(state, decide(state.executions["order-1"], "TimeoutFired", fire, "timer", NOW + 10_000), 5)
    [copy] = [effect for kind, effect in again["effects"] if kind == "WorkflowTask"]
    assert copy["redispatched"] and copy["first_event_id"] == 1
    assert [e["event_id"] for e in copy["history"]] == [1, 2, 3, 4, 5, 6, 7, 8]


def test_a_workflow_task_completion_whose_record_would_not_fit_terminates_the_run_without_its_buffered_events() -> None:
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    for offset in range(2, 5):  # buffered while the task runs: each batch fits, all three with their copies do not
        signal = {"run_id": "", "signal_name": "add", "input": [LARGE, LARGE], "request_id": ""}
        apply(state, decide(state.executions["order-1"], "SignalWorkflowExecution", signal, "client", NOW), offset)
    ex = state.executions["order-1"]
    completion = decide(ex, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": []}, "worker", NOW)
    assert completion.record_bytes_bound > limits.MAX_RECORD_VALUE_BYTES
    ended = apply(state, limits.within_record_limit(completion, "RespondWorkflowTaskCompleted"), 5)
    [(kind, attrs)] = [e["attributes"] for e in ended["events"]]
    assert kind == "WorkflowExecutionTerminated"
    assert attrs["reason"].startswith("RespondWorkflowTaskCompleted would write a history record of up to")
    assert ex.status == "Terminated" and batch_bytes_bound(Transition(ex, NOW, events=ended["events"])) < 100_000


def _timers(batch: dict) -> list[tuple[str, str]]:
    return [(kind, effect["timer_id"]) for kind, effect in batch["effects"] if kind in ("Timer", "DropTimer")]


def _failed(run_id: str, scheduled_event_id: int, attempt: int, message: str) -> dict:
    # Every field of the Failure, as the codec gives it: a checkpoint's round trip compares equal.
    failure = {**engine_failure(message, "ValueError"), "category": "UNSPECIFIED", "next_retry_delay_ms": None}
    return {"run_id": run_id, "scheduled_event_id": scheduled_event_id, "attempt": attempt, "cause": "WORKFLOW_WORKER_UNHANDLED_FAILURE",
            "failure": failure, "started_time_ms": NOW}


def test_a_workflow_task_that_keeps_failing_records_its_first_failure_then_only_the_attempt_that_completes() -> None:
    """As Temporal's transient workflow task: the first failure is recorded; the retries after it
    are counted in state (attempt, last failure) and dispatched after a backoff, with no events;
    the attempt that completes writes its WorkflowTaskScheduled (with its attempt) and Started
    before its completion."""
    state, run_id = started_workflow()
    first = command(state, "RespondWorkflowTaskFailed", _failed(run_id, 2, 1, "boom 1"), 1)
    assert [e["attributes"][0] for e in first["events"]] == ["WorkflowTaskStarted", "WorkflowTaskFailed"]
    assert {k: first["workflow_task"][k] for k in ("scheduled_event_id", "attempt", "last_cause")} == {
        "scheduled_event_id": 5, "attempt": 2, "last_cause": "WORKFLOW_WORKER_UNHANDLED_FAILURE"}
    assert (("Timer", f"{run_id}/WORKFLOW_TASK_RETRY/5/2")) in _timers(first)
    assert next(e for k, e in first["effects"] if k == "Timer" and "RETRY/5/2" in e["timer_id"])["fire_at_ms"] == NOW + 1_000
    assert not any(kind == "WorkflowTask" for kind, _ in first["effects"])  # it waits out its backoff

    retry = {"run_id": run_id, "timer_id": f"{run_id}/WORKFLOW_TASK_RETRY/5/2", "kind": "WORKFLOW_TASK_RETRY",
             "scheduled_event_id": 5, "attempt": 2}
    dispatched = apply(state, decide(state.executions["order-1"], "TimeoutFired", retry, "timer", NOW + 1_000), 2)
    [task] = [effect for kind, effect in dispatched["effects"] if kind == "WorkflowTask"]
    # The whole history (the worker whose attempt failed let the run go); the retry's own events are not written.
    assert (task["scheduled_event_id"], task["attempt"], task["first_event_id"], [e["event_id"] for e in task["history"]]) == (
        5, 2, 1, [1, 2, 3, 4])

    second = command(state, "RespondWorkflowTaskFailed", _failed(run_id, 5, 2, "boom 2"), 3)
    assert second["events"] == [] and second["workflow_task"]["attempt"] == 3
    assert second["workflow_task"]["last_failure"]["message"] == "boom 2"
    assert ("Timer", f"{run_id}/WORKFLOW_TASK_RETRY/5/3") in _timers(second)
    with pytest.raises(Rejected, match="attempt 2 was retried"):  # a late answer of the attempt before
        decide(state.executions["order-1"], "RespondWorkflowTaskFailed", _failed(run_id, 5, 2, "late"), "worker", NOW)

    started = command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 3,
                                                          "started_time_ms": NOW + 5}, 4)
    assert started["events"] == [] and started["workflow_task"]["started_time_ms"] == NOW + 5
    assert _timers(started) == [("DropTimer", f"{run_id}/WORKFLOW_TASK_RETRY/5/3"),
                                ("Timer", f"{run_id}/WORKFLOW_TASK_START_TO_CLOSE/5/3")]

    completed = command(state, "RespondWorkflowTaskCompleted", {
        "run_id": run_id, "scheduled_event_id": 5, "attempt": 3,
        "commands": [("ScheduleActivityTask", {**ACTIVITY, "activity_id": "a"})]}, 5)
    assert [(e["event_id"], e["attributes"][0]) for e in completed["events"]] == [
        (5, "WorkflowTaskScheduled"), (6, "WorkflowTaskStarted"), (7, "WorkflowTaskCompleted"), (8, "ActivityTaskScheduled")]
    assert completed["events"][0]["attributes"][1]["attempt"] == 3 and completed["events"][1]["event_time_ms"] == NOW + 5
    assert {k: completed["events"][2]["attributes"][1][k] for k in ("scheduled_event_id", "started_event_id")} == {
        "scheduled_event_id": 5, "started_event_id": 6}
    assert ("DropTimer", f"{run_id}/WORKFLOW_TASK_START_TO_CLOSE/5/3") in _timers(completed)
    assert completed["workflow_task"] is None and state.executions["order-1"].workflow_task is None
    failures = [e for e in state.executions["order-1"].history if e["attributes"][0] == "WorkflowTaskFailed"]
    assert len(failures) == 1


def test_a_transient_attempt_folds_from_its_batches_and_its_checkpoint_as_it_was_decided() -> None:
    state = PartitionState(0)
    batches = [apply(state, decide_start(None, "order-1", START, "client", NOW, 0, 0), 0)]
    run_id = batches[0]["run_id"]
    batches.append(command(state, "RespondWorkflowTaskFailed", _failed(run_id, 2, 1, "boom"), 1))
    batches.append(command(state, "SignalWorkflowExecution", {"run_id": "", "signal_name": "s", "input": [], "request_id": ""}, 2))
    assert state.executions["order-1"].buffered  # the retry is pending: the signal waits for it
    batches.append(command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 2,
                                                                "started_time_ms": NOW}, 3))
    ex = state.executions["order-1"]
    assert ex.workflow_task is not None and ex.workflow_task.started_event_id == 6
    assert RunRow.of(ex).run() == ex  # as a checkpoint stores and reads it back

    # The attempt fails too: what was buffered is written, and the next attempt's ids follow it.
    batches.append(command(state, "RespondWorkflowTaskFailed", {**_failed(run_id, 5, 2, "boom"), "started_time_ms": None}, 4))
    assert [e["attributes"][0] for e in batches[-1]["events"]] == ["WorkflowExecutionSignaled"]
    assert (batches[-1]["workflow_task"]["scheduled_event_id"], batches[-1]["workflow_task"]["attempt"]) == (6, 3)
    assert ex.buffered == []
    recovered = PartitionState(0)
    assert all(recovered.apply(batch) for batch in batches)
    assert recovered.executions["order-1"] == ex


def test_a_transient_attempt_that_times_out_is_retried_without_an_event() -> None:
    state, run_id = started_workflow()
    command(state, "RespondWorkflowTaskFailed", _failed(run_id, 2, 1, "boom"), 1)
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 2}, 2)
    timeout = {"run_id": run_id, "timer_id": f"{run_id}/WORKFLOW_TASK_START_TO_CLOSE/5/2", "kind": "WORKFLOW_TASK_START_TO_CLOSE",
               "scheduled_event_id": 5, "attempt": 2}
    timed_out = apply(state, decide(state.executions["order-1"], "TimeoutFired", timeout, "timer", NOW + 10_000), 3)
    assert timed_out["events"] == []
    assert (timed_out["workflow_task"]["attempt"], timed_out["workflow_task"]["last_cause"]) == (3, "START_TO_CLOSE_TIMEOUT")
    assert "start-to-close" in timed_out["workflow_task"]["last_failure"]["message"]
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 3}, 4)
    with pytest.raises(Rejected, match="stale workflow task timeout"):
        decide(state.executions["order-1"], "TimeoutFired", timeout, "timer", NOW + 20_000)


def test_a_transient_attempt_answered_with_new_events_unseen_records_its_events_and_a_new_task() -> None:
    """A retry that would close the run while signals arrived is failed for them (UNHANDLED_COMMAND):
    that is no repeat of the failure before, so the attempt is recorded and a first attempt follows."""
    state, run_id = started_workflow()
    command(state, "RespondWorkflowTaskFailed", _failed(run_id, 2, 1, "boom"), 1)
    command(state, "SignalWorkflowExecution", {"run_id": "", "signal_name": "s", "input": [], "request_id": ""}, 2)
    closed = command(state, "RespondWorkflowTaskCompleted", {
        "run_id": run_id, "scheduled_event_id": 5, "attempt": 2, "started_time_ms": NOW,
        "commands": [("CompleteWorkflowExecution", {"result": None})]}, 3)
    assert [(e["attributes"][0], e["attributes"][1].get("attempt")) for e in closed["events"]] == [
        ("WorkflowTaskScheduled", 2), ("WorkflowTaskStarted", None), ("WorkflowTaskFailed", None),
        ("WorkflowExecutionSignaled", None), ("WorkflowTaskScheduled", 1)]
    assert closed["workflow_task"] is None and state.executions["order-1"].workflow_task.attempt == 1


def test_a_build_pinned_to_a_batch_version_without_transient_tasks_records_every_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mid-upgrade (KADENCE_SCHEMA_PIN to a HistoryBatch without `workflow_task`), the state a
    transient task lives in could not be written: each retry is an event, as that release wrote it."""
    monkeypatch.setattr(workflow_task, "_retries_are_transient", lambda: False)
    state, run_id = started_workflow()
    failed = command(state, "RespondWorkflowTaskFailed", _failed(run_id, 2, 1, "boom"), 1)
    assert [(e["event_id"], e["attributes"][0]) for e in failed["events"]] == [
        (3, "WorkflowTaskStarted"), (4, "WorkflowTaskFailed"), (5, "WorkflowTaskScheduled")]
    assert failed["workflow_task"] is None and failed["events"][2]["attributes"][1]["attempt"] == 2
    assert ("Timer", f"{run_id}/WORKFLOW_TASK_RETRY/5/2") in _timers(failed)
