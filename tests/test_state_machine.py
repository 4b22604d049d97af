"""The history state machine as pure functions: decide, evolve, effects, retry policy."""

from __future__ import annotations

from typing import Any

import pytest

from kadence.common import retry_backoff_ms
from kadence.protocol.codec import command_codec
from kadence.protocol.task_token import TaskToken
from services.history.checkpoint import decode_state, encode_state
from services.history.machine import activity, child, limits
from services.history.machine.activity import activity_retry_state
from services.history.machine.dispatch import decide
from services.history.machine.effects import TASK_REDISPATCH_MS, rejection_answer
from services.history.machine.execution import ActivityState
from services.history.machine.lifecycle import decide_signal_with_start, decide_start
from services.history.machine.transition import Redispatch, Rejected, Transition, batch_bytes_bound
from services.history.partition import PartitionState
from services.history.service import _continues
from services.history.step import commit

NOW = 1_000_000
START = {
    "workflow_type": "OrderWorkflow", "task_queue": "orders", "input": [], "request_id": "",
    "workflow_task_timeout_ms": 0, "id_reuse_policy": "ALLOW_DUPLICATE", "id_conflict_policy": "FAIL",
    "execution_timeout_ms": 0, "run_timeout_ms": 0, "search_attributes": {},
}


def apply(state: PartitionState, t: Transition, offset: int) -> dict[str, Any]:
    return commit(state, t, 0, offset).batch


def started_workflow() -> tuple[PartitionState, str]:
    state = PartitionState(0)
    batch = apply(state, decide_start(None, "order-1", START, "client", NOW, 0, 0), 0)
    return state, batch["run_id"]


def command(state: PartitionState, kind: str, body: dict[str, Any], offset: int) -> dict[str, Any]:
    return apply(state, decide(state.executions["order-1"], kind, body, "worker", NOW), offset)


ACTIVITY = {
    "activity_type": "charge", "task_queue": "", "input": [], "schedule_to_close_timeout_ms": 0,
    "schedule_to_start_timeout_ms": 0, "start_to_close_timeout_ms": 10_000, "heartbeat_timeout_ms": 0, "retry_policy": None,
}


def schedule_activities(state: PartitionState, run_id: str, count: int = 1, **timeouts: int) -> dict[str, Any]:
    """Complete the first workflow task with `count` ScheduleActivityTask commands (event ids 5, 6, ...)."""
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    return command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("ScheduleActivityTask", {**ACTIVITY, **timeouts, "activity_id": str(i)}) for i in range(count)
    ]}, 2)


def test_start_writes_started_and_a_workflow_task_with_its_dispatch() -> None:
    state, run_id = started_workflow()
    ex = state.executions["order-1"]
    assert [e["attributes"][0] for e in ex.history] == ["WorkflowExecutionStarted", "WorkflowTaskScheduled"]
    assert ex.next_event_id == 3 and ex.workflow_task is not None
    with pytest.raises(Rejected, match="already started"):
        decide_start(ex, "order-1", START, "", NOW, 0, 9)


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
    started = command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 9)
    assert ("DropTimer", {"timer_id": f"{run_id}/WORKFLOW_TASK_RETRY/2/1"}) in started["effects"]
    with pytest.raises(Rejected, match="stale workflow task retry timer"):
        decide(state.executions["order-1"], "TimeoutFired", fire, "timer", waited + 80_000)


def test_an_activity_task_no_worker_starts_is_dispatched_again_within_its_schedule_to_start_deadline() -> None:
    """As a workflow task: its retry timer dispatches it again after 10 s, then after as long again
    as it has waited; the start drops the timer. A re-dispatch does not move the deadline."""
    state, run_id = started_workflow()
    scheduled = schedule_activities(state, run_id, schedule_to_start_timeout_ms=60_000)
    assert [(k, e.get("kind"), e.get("fire_at_ms")) for k, e in scheduled["effects"] if k != "DropTimer"] == [
        ("ActivityTask", None, None), ("Timer", "ACTIVITY_RETRY", NOW + TASK_REDISPATCH_MS),
        ("Timer", "ACTIVITY_SCHEDULE_TO_START", NOW + 60_000),
    ]
    fire = {"run_id": run_id, "timer_id": f"{run_id}/ACTIVITY_RETRY/5/1", "kind": "ACTIVITY_RETRY", "scheduled_event_id": 5, "attempt": 1}
    at = NOW
    for offset, delay in enumerate((10_000, 10_000, 20_000), start=3):
        at += delay
        redispatch = decide(state.executions["order-1"], "TimeoutFired", fire, "timer", at)
        assert redispatch.redispatch == Redispatch("activity", 5, at - NOW)  # counted by the history service
        again = apply(state, redispatch, offset)
        assert [(k, e.get("kind")) for k, e in again["effects"]] == [
            ("DropTimer", None), ("ActivityTask", None), ("Timer", "ACTIVITY_RETRY")]
        assert again["effects"][1][1]["schedule_to_start_deadline_ms"] == NOW + 60_000
        assert again["effects"][2][1]["fire_at_ms"] == at + max(TASK_REDISPATCH_MS, at - NOW)
    started = command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1}, 9)
    assert ("DropTimer", {"timer_id": f"{run_id}/ACTIVITY_RETRY/5/1"}) in started["effects"]
    with pytest.raises(Rejected, match="already started"):
        decide(state.executions["order-1"], "TimeoutFired", fire, "timer", at + 40_000)


def test_the_dispatch_of_an_activity_retry_is_not_counted_as_a_redispatch_and_its_deadline_counts_from_the_backoff() -> None:
    state, run_id = started_workflow()
    schedule_activities(state, run_id, schedule_to_start_timeout_ms=60_000)
    command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1}, 3)
    failure = {"message": "boom", "type": "", "source": "", "stack_trace": "", "non_retryable": False, "timeout_type": None,
               "details": [], "activity_failure_info": None, "cause": None}
    failed = command(state, "RespondActivityTaskFailed", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "failure": failure}, 4)
    backoff = retry_backoff_ms(None, 1)
    assert [(e["kind"], e["fire_at_ms"]) for k, e in failed["effects"] if k == "Timer"] == [
        ("ACTIVITY_RETRY", NOW + backoff), ("ACTIVITY_SCHEDULE_TO_START", NOW + backoff + 60_000),
    ]
    fire = {"run_id": run_id, "timer_id": f"{run_id}/ACTIVITY_RETRY/5/2", "kind": "ACTIVITY_RETRY", "scheduled_event_id": 5, "attempt": 2}
    dispatch = decide(state.executions["order-1"], "TimeoutFired", fire, "timer", NOW + backoff + 300)
    assert dispatch.redispatch is None
    assert [(k, e.get("kind")) for k, e in dispatch.effects] == [("DropTimer", None), ("ActivityTask", None), ("Timer", "ACTIVITY_RETRY")]
    assert dispatch.effects[1][1]["schedule_to_start_deadline_ms"] == NOW + backoff + 60_000


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


def test_a_stale_or_foreign_completion_is_rejected() -> None:
    state, run_id = started_workflow()
    ex = state.executions["order-1"]
    with pytest.raises(Rejected, match="not the current run"):
        decide(ex, "RecordWorkflowTaskStarted", {"run_id": "other", "scheduled_event_id": 2}, "w", NOW)
    with pytest.raises(Rejected, match="no started workflow task"):
        decide(ex, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": []}, "w", NOW)


def test_an_activity_completion_counts_from_its_worker_or_by_task_token_or_activity_id() -> None:
    state, run_id = started_workflow()
    schedule_activities(state, run_id, 2)
    for offset, scheduled in ((3, 5), (4, 6)):
        command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": scheduled, "attempt": 1}, offset)
    ex = state.executions["order-1"]
    report = {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "result": None, "task_token": None, "activity_id": ""}
    with pytest.raises(Rejected, match="started by 'worker', not 'other-worker'"):  # no token: only the worker that started it
        decide(ex, "RespondActivityTaskCompleted", report, "other-worker", NOW)
    token = TaskToken("order-1", run_id, 5, 1, "0").encode()
    by_token = decide(ex, "RespondActivityTaskCompleted", {**report, "task_token": token}, "a-client", NOW)
    assert [(kind, attrs["identity"]) for kind, attrs in (e["attributes"] for e in by_token.events) if kind == "ActivityTaskCompleted"] == [
        ("ActivityTaskCompleted", "a-client")]
    stale = TaskToken("order-1", run_id, 5, 2, "0").encode()
    stale_reason = r"stale task token: attempt 2 of activity '0' \(scheduled_event_id=5\) is over \(attempt 1 is current\)"
    with pytest.raises(Rejected, match=stale_reason) as refused:
        decide(ex, "RespondActivityTaskCompleted", {**report, "task_token": stale}, "a-client", NOW)
    assert refused.value.cause == "ACTIVITY_NOT_FOUND"
    with pytest.raises(Rejected, match="not a Kadence activity task token"):
        decide(ex, "RespondActivityTaskCompleted", {**report, "task_token": b"forged"}, "a-client", NOW)
    by_id = {**report, "run_id": "", "scheduled_event_id": 0, "attempt": 0, "activity_id": "1"}
    completed = decide(ex, "RespondActivityTaskCompleted", by_id, "a-client", NOW)
    completions = [attrs for kind, attrs in (e["attributes"] for e in completed.events) if kind == "ActivityTaskCompleted"]
    assert [attrs["scheduled_event_id"] for attrs in completions] == [6]
    with pytest.raises(Rejected, match="no pending activity 'missing'"):
        decide(ex, "RespondActivityTaskCompleted", {**by_id, "activity_id": "missing"}, "a-client", NOW)


def test_retried_failure_schedules_the_next_attempt_through_a_timer() -> None:
    state, run_id = started_workflow()
    schedule_activities(state, run_id)
    command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1}, 3)
    failure = {"message": "boom", "type": "Boom", "source": "", "stack_trace": "", "non_retryable": False,
               "timeout_type": None, "details": [], "activity_failure_info": None, "cause": None}
    batch = command(state, "RespondActivityTaskFailed", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "failure": failure}, 4)
    assert [e["attributes"][1]["retry_state"] for e in batch["events"]] == ["IN_PROGRESS"]
    kinds = [(kind, effect.get("kind")) for kind, effect in batch["effects"]]
    assert kinds == [("DropTimer", None), ("Timer", "ACTIVITY_RETRY")]
    assert batch["effects"][1][1]["fire_at_ms"] == NOW + 1000
    assert state.executions["order-1"].activities[5].attempt == 2


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


@pytest.mark.parametrize(("attempt", "expected"), [(1, 1000), (2, 2000), (3, 4000), (8, 100_000), (20, 100_000)])
def test_default_backoff_doubles_and_caps_at_a_hundred_times_the_initial_interval(attempt: int, expected: int) -> None:
    assert retry_backoff_ms(None, attempt) == expected


def test_retry_state_follows_the_policy() -> None:
    activity = ActivityState(5, "1", "charge", "q", [], 0, 10_000, {"maximum_attempts": 3, "non_retryable_error_types": ["Declined"]}, NOW)
    failure = {"non_retryable": False, "type": "Flaky"}
    assert activity_retry_state(activity, failure, NOW) == "IN_PROGRESS"
    assert activity_retry_state(activity, {**failure, "type": "Declined"}, NOW) == "NON_RETRYABLE_FAILURE"
    assert activity_retry_state(activity, {**failure, "non_retryable": True}, NOW) == "NON_RETRYABLE_FAILURE"
    activity.attempt = 3
    assert activity_retry_state(activity, failure, NOW) == "MAXIMUM_ATTEMPTS_REACHED"


def test_schedule_to_close_alone_also_bounds_each_attempt() -> None:
    state, run_id = started_workflow()
    schedule_activities(state, run_id, schedule_to_close_timeout_ms=30_000, start_to_close_timeout_ms=0)
    batch = command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1}, 3)
    assert [(kind, effect["timer_id"].split("/")[1], effect.get("fire_at_ms")) for kind, effect in batch["effects"]] == [
        ("DropTimer", "ACTIVITY_RETRY", None), ("Timer", "ACTIVITY_START_TO_CLOSE", NOW + 30_000),
    ]


def test_only_adjacent_commands_of_one_run_share_a_history_record() -> None:
    batch = {
        "workflow_id": "w", "run_id": "r", "source_offset": 10, "events": [{"event_id": 3}], "buffered": [],
        "rejection": None, "next_run": None,
    }
    following = {**batch, "source_offset": 11, "events": [{"event_id": 4}]}
    assert _continues(batch, following)
    assert not _continues(batch, {**following, "source_offset": 12})
    assert not _continues(batch, {**following, "run_id": "other"})
    # commands passed on elsewhere (forwarded, dead-lettered) have no run: their batches join only their workflow's
    assert not _continues({**batch, "run_id": "", "events": []}, {**following, "workflow_id": "other", "run_id": "", "events": []})
    assert not _continues(batch, {**following, "rejection": {"request_id": "x"}})
    # evolve applies buffered events before events, so buffering must not follow written events
    assert not _continues(batch, {**following, "events": [], "buffered": [{"event_id": 0}]})


def test_signals_are_buffered_during_a_workflow_task_and_rejected_once_closed() -> None:
    state, run_id = started_workflow()
    ex = state.executions["order-1"]
    signal = {"run_id": "", "signal_name": "approve", "input": [], "request_id": ""}
    buffered = command(state, "SignalWorkflowExecution", signal, 1)  # the first workflow task is in flight
    assert buffered["events"] == [] and [e["attributes"][0] for e in buffered["buffered"]] == ["WorkflowExecutionSignaled"]
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 2)
    closing = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("CompleteWorkflowExecution", {"result": None}),
    ]}, 3)
    # The workflow never saw the signal, so it may not close yet: the task fails and a new one carries the signal.
    assert [e["attributes"][0] for e in closing["events"]] == ["WorkflowTaskFailed", "WorkflowExecutionSignaled", "WorkflowTaskScheduled"]
    assert closing["events"][0]["attributes"][1]["cause"] == "UNHANDLED_COMMAND"
    wt = ex.workflow_task.scheduled_event_id
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": wt}, 4)
    command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": wt, "commands": [
        ("CompleteWorkflowExecution", {"result": None}),
    ]}, 5)
    assert ex.status == "Completed"
    with pytest.raises(Rejected, match="Completed"):
        decide(ex, "SignalWorkflowExecution", signal, "client", NOW)


def test_a_repeated_start_request_is_answered_with_the_running_run() -> None:
    state, run_id = started_workflow()
    ex = state.executions["order-1"]
    again = START
    with pytest.raises(Rejected) as rejected:
        decide_start(ex, "order-1", {**again, "request_id": "other-request"}, "client", NOW, 0, 7)
    assert rejected.value.cause == "WORKFLOW_ALREADY_STARTED"
    ex.start_request_id = "request-1"
    retried = decide_start(ex, "order-1", {**again, "request_id": "request-1"}, "client", NOW, 0, 8)
    assert retried.events == [] and retried.batch(0, 8)["run_id"] == run_id


def complete_first_workflow_task(state: PartitionState, run_id: str) -> None:
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("CompleteWorkflowExecution", {"result": None}),
    ]}, 2)


@pytest.mark.parametrize(("policy", "after", "allowed"), [
    ("ALLOW_DUPLICATE", "Completed", True),
    ("ALLOW_DUPLICATE_FAILED_ONLY", "Completed", False),
    ("ALLOW_DUPLICATE_FAILED_ONLY", "Terminated", True),
    ("REJECT_DUPLICATE", "Terminated", False),
])
def test_id_reuse_policy_decides_whether_a_closed_id_starts_again(policy: str, after: str, allowed: bool) -> None:
    state, run_id = started_workflow()
    if after == "Completed":
        complete_first_workflow_task(state, run_id)
    else:
        command(state, "TerminateWorkflowExecution", {"run_id": "", "reason": "test", "details": [], "request_id": ""}, 1)
    closed = state.executions["order-1"]
    assert closed.status == after
    start = {**START, "id_reuse_policy": policy}
    if allowed:
        assert decide_start(closed, "order-1", start, "client", NOW, 0, 5).execution.run_id != run_id
    else:
        with pytest.raises(Rejected, match=policy):
            decide_start(closed, "order-1", start, "client", NOW, 0, 5)


def test_use_existing_answers_a_start_with_the_running_run() -> None:
    state, run_id = started_workflow()
    running = state.executions["order-1"]
    answer = decide_start(running, "order-1", {**START, "id_conflict_policy": "USE_EXISTING"}, "client", NOW, 0, 3)
    assert answer.events == [] and answer.batch(0, 3)["run_id"] == run_id


def test_run_timeout_closes_the_run_and_drops_its_pending_work() -> None:
    state = PartitionState(0)
    start = apply(state, decide_start(None, "order-1", {**START, "run_timeout_ms": 5000}, "client", NOW, 0, 0), 0)
    assert [(k, e["kind"], e["fire_at_ms"]) for k, e in start["effects"] if k == "Timer"] == [
        ("Timer", "WORKFLOW_RUN_TIMEOUT", NOW + 5000), ("Timer", "WORKFLOW_TASK_RETRY", NOW + TASK_REDISPATCH_MS),
    ]
    run_id = start["run_id"]
    schedule_activities(state, run_id)
    timed_out = command(state, "TimeoutFired", {"run_id": run_id, "timer_id": "t", "kind": "WORKFLOW_RUN_TIMEOUT",
                                                "scheduled_event_id": 1, "attempt": 1}, 3)
    assert [e["attributes"][0] for e in timed_out["events"]] == ["WorkflowExecutionTimedOut"]
    assert state.executions["order-1"].status == "TimedOut" and not state.executions["order-1"].activities
    assert ("DropTimer", {"timer_id": f"{run_id}/ACTIVITY_START_TO_CLOSE/5/1"}) not in timed_out["effects"]  # never started


def test_schedule_to_close_times_out_an_activity_that_never_started() -> None:
    state, run_id = started_workflow()
    scheduled = schedule_activities(state, run_id, schedule_to_close_timeout_ms=2000, start_to_close_timeout_ms=0)
    assert ("ACTIVITY_SCHEDULE_TO_CLOSE", NOW + 2000) in [(e["kind"], e["fire_at_ms"]) for k, e in scheduled["effects"] if k == "Timer"]
    fired = command(state, "TimeoutFired", {"run_id": run_id, "timer_id": "t", "kind": "ACTIVITY_SCHEDULE_TO_CLOSE",
                                            "scheduled_event_id": 5, "attempt": 1}, 3)
    kind, attrs = fired["events"][0]["attributes"]
    assert (kind, attrs["retry_state"], attrs["failure"]["timeout_type"]) == ("ActivityTaskTimedOut", "TIMEOUT", "SCHEDULE_TO_CLOSE")


def test_a_checkpoint_restores_open_runs_with_their_buffers_and_leaves_closed_runs_out() -> None:
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

    restored = decode_state(0, encode_state(state), state.resume_offset - 1, history_offset=state.history_offset)
    assert restored.executions["order-1"] == state.executions["order-1"]
    assert "order-2" not in restored.executions  # closed: stored as a row of its own beside the checkpoint
    assert restored.resume_offset == state.resume_offset == 9
    assert restored.fence.next_event_id == {run_id: state.executions["order-1"].next_event_id}


def test_heartbeats_rearm_their_timer_and_reach_the_next_attempt() -> None:
    state, run_id = started_workflow()
    schedule_activities(state, run_id, start_to_close_timeout_ms=60_000, heartbeat_timeout_ms=1000)
    started = command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1}, 3)
    assert ("ACTIVITY_HEARTBEAT", NOW + 1000) in [(e["kind"], e["fire_at_ms"]) for k, e in started["effects"] if k == "Timer"]
    progress = [{"metadata": {"encoding": b"json/plain"}, "data": b"3"}]
    ex = state.executions["order-1"]
    beat = apply(state, decide(ex, "RecordActivityTaskHeartbeat", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1,
                                                                   "details": progress}, "worker", NOW + 500), 4)
    assert beat["events"] == [] and beat["heartbeats"][0]["details"] == progress
    assert [(e["kind"], e["fire_at_ms"]) for k, e in beat["effects"]] == [("ACTIVITY_HEARTBEAT", NOW + 1500)]
    fired = {"run_id": run_id, "timer_id": "t", "kind": "ACTIVITY_HEARTBEAT", "scheduled_event_id": 5, "attempt": 1}
    with pytest.raises(Rejected, match="heartbeat arrived since"):
        decide(ex, "TimeoutFired", fired, "timer", NOW + 1000)
    timed_out = apply(state, decide(ex, "TimeoutFired", fired, "timer", NOW + 1500), 5)
    _, attrs = timed_out["events"][0]["attributes"]
    assert (attrs["retry_state"], attrs["failure"]["timeout_type"], attrs["failure"]["details"]) == ("IN_PROGRESS", "HEARTBEAT", progress)
    retried = command(state, "TimeoutFired", {**fired, "kind": "ACTIVITY_RETRY", "attempt": 2}, 6)
    (task,) = [e for k, e in retried["effects"] if k == "ActivityTask"]
    assert (task["attempt"], task["heartbeat_details"]) == (2, progress)
    restored = decode_state(0, encode_state(state), state.resume_offset - 1, history_offset=state.history_offset)
    assert restored.executions["order-1"].activities[5].heartbeat == ex.activities[5].heartbeat


BIG = {"metadata": {"encoding": b"binary/plain"}, "data": b"x" * (2 * 1024 * 1024 + 1)}


def test_oversized_payloads_and_names_get_a_clear_answer() -> None:
    with pytest.raises(Rejected, match="exceeds the 2 MB limit"):
        decide_start(None, "order-1", {**START, "input": [BIG]}, "client", NOW, 0, 0)
    with pytest.raises(Rejected, match="workflow_id is 1001 bytes in UTF-8"):
        decide_start(None, "x" * 1001, START, "client", NOW, 0, 0)
    state, run_id = started_workflow()
    ex = state.executions["order-1"]
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    failed = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("CompleteWorkflowExecution", {"result": BIG}),
    ]}, 2)
    kind, attrs = failed["events"][0]["attributes"]
    assert (kind, attrs["cause"]) == ("WorkflowTaskFailed", "BAD_COMPLETE_WORKFLOW_EXECUTION_ATTRIBUTES")
    assert ex.status == "Running"


def test_an_oversized_activity_result_fails_the_activity_for_good() -> None:
    state, run_id = started_workflow()
    schedule_activities(state, run_id)
    command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1}, 3)
    batch = command(state, "RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "result": BIG}, 4)
    kind, attrs = batch["events"][0]["attributes"]
    assert (kind, attrs["retry_state"], attrs["failure"]["type"]) == ("ActivityTaskFailed", "NON_RETRYABLE_FAILURE", "BlobSizeLimitError")


def test_history_and_pending_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(activity, "MAX_PENDING_ACTIVITIES", 1)
    state, run_id = started_workflow()
    schedule_activities(state, run_id, count=2)
    ex = state.executions["order-1"]
    failed = [attrs for kind, attrs in (e["attributes"] for e in ex.history) if kind == "WorkflowTaskFailed"]
    assert [f["cause"] for f in failed] == ["PENDING_ACTIVITIES_LIMIT_EXCEEDED"]

    # With the history at its limit, a command that adds an event ends the run instead.
    monkeypatch.setattr(limits, "MAX_HISTORY_EVENTS", ex.next_event_id - 1)
    assert ex.workflow_task is not None
    ended = command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": ex.workflow_task.scheduled_event_id}, 3)
    kind, attrs = ended["events"][-1]["attributes"]
    assert (kind, ex.status) == ("WorkflowExecutionTerminated", "Terminated") and "event limit" in attrs["reason"]


def test_signal_with_start_signals_the_running_run_or_starts_one_with_the_signal_first() -> None:
    signal_with_start = {"start": START, "signal_name": "approve", "signal_input": []}
    started = decide_signal_with_start(None, "order-1", signal_with_start, "client", NOW, 0, 0)
    assert [e["attributes"][0] for e in started.events] == [
        "WorkflowExecutionStarted", "WorkflowExecutionSignaled", "WorkflowTaskScheduled",
    ]
    state, run_id = started_workflow()
    signaled = decide_signal_with_start(state.executions["order-1"], "order-1", signal_with_start, "client", NOW, 0, 1)
    assert signaled.execution.run_id == run_id
    assert [e["attributes"][0] for e in signaled.buffered] == ["WorkflowExecutionSignaled"]


def test_signal_with_start_sent_again_with_its_request_id_signals_once() -> None:
    """A retry, or a forward repeated after a restart of history, carries the same request id."""
    request = {"start": {**START, "request_id": "req-1"}, "signal_name": "approve", "signal_input": []}
    state = PartitionState(0)
    apply(state, decide_signal_with_start(None, "order-1", request, "client", NOW, 0, 0), 0)
    again = decide_signal_with_start(state.executions["order-1"], "order-1", request, "client", NOW, 0, 1)
    assert again.events == [] and again.buffered == [], "the request started the run with its signal already"
    other = {**request, "start": {**START, "request_id": "req-2"}}
    signaled = apply(state, decide_signal_with_start(state.executions["order-1"], "order-1", other, "client", NOW, 0, 2), 2)
    assert [e["attributes"][0] for e in signaled["buffered"]] == ["WorkflowExecutionSignaled"]
    repeated = decide_signal_with_start(state.executions["order-1"], "order-1", other, "client", NOW, 0, 3)
    assert repeated.events == [] and repeated.buffered == []


def test_continue_as_new_closes_the_run_and_starts_the_next_in_one_record() -> None:
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    batch = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("ContinueAsNewWorkflowExecution", {"workflow_type": "", "task_queue": "", "input": [], "workflow_task_timeout_ms": 0,
                                            "run_timeout_ms": 0}),
    ]}, 2)
    assert batch["events"][-1]["attributes"][0] == "WorkflowExecutionContinuedAsNew"
    following = batch["next_run"]
    assert [e["attributes"][0] for e in following["events"]] == ["WorkflowExecutionStarted", "WorkflowTaskScheduled"]
    current = state.executions["order-1"]
    assert current.run_id == following["run_id"] != run_id and current.status == "Running"
    assert current.workflow_task is not None and current.workflow_type == "OrderWorkflow"

    replayed, _ = started_workflow()
    command(replayed, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    replayed.apply(batch)
    assert replayed.executions["order-1"] == current


def test_a_continued_run_keeps_the_run_timeout_search_attributes_and_what_is_left_of_the_execution_timeout() -> None:
    """As Temporal: what the continue-as-new command leaves unset is the current run's."""
    state = PartitionState(0)
    color = {"metadata": {"encoding": b"json/plain"}, "data": b'"red"'}
    start = {**START, "run_timeout_ms": 60_000, "execution_timeout_ms": 600_000, "search_attributes": {"Color": color}}
    run_id = apply(state, decide_start(None, "order-1", start, "client", NOW, 0, 0), 0)["run_id"]
    ex = state.executions["order-1"]
    apply(state, decide(ex, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, "worker", NOW), 1)
    size = {"metadata": {"encoding": b"json/plain"}, "data": b'"XL"'}
    later = NOW + 100_000
    batch = apply(state, decide(ex, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("UpsertWorkflowSearchAttributes", {"search_attributes": {"Size": size}}),
        ("ContinueAsNewWorkflowExecution", {"workflow_type": "", "task_queue": "", "input": [], "workflow_task_timeout_ms": 0,
                                            "run_timeout_ms": 0}),
    ]}, "worker", later), 2)
    started = batch["next_run"]["events"][0]["attributes"][1]
    assert started["workflow_run_timeout_ms"] == 60_000
    assert started["workflow_execution_timeout_ms"] == 500_000
    assert started["search_attributes"] == {"Color": color, "Size": size}


def test_terminate_existing_ends_the_running_run_and_starts_the_new_one_in_one_record() -> None:
    state, run_id = started_workflow()
    running = state.executions["order-1"]
    t = decide_start(running, "order-1", {**START, "id_conflict_policy": "TERMINATE_EXISTING"}, "client", NOW, 0, 5)
    batch = apply(state, t, 5)
    assert batch["run_id"] == run_id and batch["events"][-1]["attributes"][0] == "WorkflowExecutionTerminated"
    assert batch["next_run"]["events"][0]["attributes"][0] == "WorkflowExecutionStarted"
    assert state.executions["order-1"].run_id == batch["next_run"]["run_id"] != run_id


def test_a_history_past_50_mb_terminates_its_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_HISTORY_BYTES", 1000)
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": []}, 2)
    ended = command(state, "SignalWorkflowExecution", {"run_id": "", "signal_name": "s", "request_id": "",
                                                       "input": [{"metadata": {}, "data": b"x" * 1500}]}, 3)
    _, attrs = ended["events"][-1]["attributes"]
    assert state.executions["order-1"].status == "Terminated" and "MB limit" in attrs["reason"]


def test_activity_cancellation_before_and_after_it_started() -> None:
    state, run_id = started_workflow()
    schedule_activities(state, run_id, count=2)
    ex = state.executions["order-1"]
    command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 6, "attempt": 1}, 3)
    wt = ex.workflow_task
    assert wt is None
    # a signal gives the workflow a task in which to cancel both activities
    command(state, "SignalWorkflowExecution", {"run_id": "", "signal_name": "s", "input": [], "request_id": ""}, 4)
    wt_id = ex.workflow_task.scheduled_event_id
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": wt_id}, 5)
    batch = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": wt_id, "commands": [
        ("RequestCancelActivityTask", {"scheduled_event_id": 5}), ("RequestCancelActivityTask", {"scheduled_event_id": 6}),
    ]}, 6)
    assert [e["attributes"][0] for e in batch["events"]][1:] == [
        "ActivityTaskCancelRequested", "ActivityTaskCanceled", "ActivityTaskCancelRequested",
    ]
    assert [(k, e["scheduled_event_id"]) for k, e in batch["effects"] if k == "ActivityCancellation"] == [("ActivityCancellation", 6)]
    assert set(ex.activities) == {6}
    canceled = command(state, "RespondActivityTaskCanceled", {"run_id": run_id, "scheduled_event_id": 6, "attempt": 1, "details": []}, 7)
    assert [e["attributes"][0] for e in canceled["events"]] == ["ActivityTaskCanceled", "WorkflowTaskScheduled"]
    assert ex.activities == {}


def test_schedule_to_start_times_out_an_attempt_no_worker_took_without_retrying() -> None:
    state, run_id = started_workflow()
    scheduled = schedule_activities(state, run_id, schedule_to_start_timeout_ms=1000, start_to_close_timeout_ms=5000)
    assert ("ACTIVITY_SCHEDULE_TO_START", NOW + 1000) in [(e["kind"], e["fire_at_ms"]) for k, e in scheduled["effects"] if k == "Timer"]
    fired = command(state, "TimeoutFired", {"run_id": run_id, "timer_id": "t", "kind": "ACTIVITY_SCHEDULE_TO_START",
                                            "scheduled_event_id": 5, "attempt": 1}, 3)
    _, attrs = fired["events"][0]["attributes"]
    assert (attrs["retry_state"], attrs["failure"]["timeout_type"]) == ("TIMEOUT", "SCHEDULE_TO_START")
    assert state.executions["order-1"].activities == {}


def decode_outbound(effect: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(target workflow id, command kind, body) of an OutboundCommand effect."""
    command = command_codec().decode(effect["command"])
    kind, body = command["command"]
    return command["workflow_id"], kind, body


CHILD = {
    "workflow_id": "order-1-invoice", "workflow_type": "InvoiceWorkflow", "task_queue": "", "input": [], "execution_timeout_ms": 0,
    "run_timeout_ms": 0, "workflow_task_timeout_ms": 0, "id_reuse_policy": "ALLOW_DUPLICATE", "parent_close_policy": "TERMINATE",
    "search_attributes": {},
}


def start_child(state: PartitionState, run_id: str, **child: Any) -> tuple[str, dict[str, Any]]:
    """Complete the first workflow task with StartChildWorkflowExecution (initiated event 5); the relayed start."""
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    batch = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("StartChildWorkflowExecution", {**CHILD, **child}),
    ]}, 2)
    (effect,) = [e for kind, e in batch["effects"] if kind == "OutboundCommand"]
    target, kind, start = decode_outbound(effect)
    assert (target, kind, start["request_id"], start["initiated_by"]["initiated_event_id"]) == (
        CHILD["workflow_id"], "StartWorkflowExecution", f"{run_id}/5", 5,
    )
    return target, start


def test_a_child_start_relayed_twice_starts_one_run_even_after_it_closed() -> None:
    parent, run_id = started_workflow()
    child_id, start = start_child(parent, run_id)
    children = PartitionState(1)
    first = commit(children, decide_start(None, child_id, start, "kadence-history", NOW, 1, 40), 1, 40).batch
    (answer,) = [decode_outbound(e) for kind, e in first["effects"] if kind == "OutboundCommand"]
    assert answer[:2] == ("order-1", "RecordChildExecutionStarted")
    child = children.executions[child_id]
    commit(children, decide(child, "TerminateWorkflowExecution", {"run_id": "", "reason": "", "details": []}, "op", NOW), 1, 41)
    again = decide_start(child, child_id, start, "kadence-history", NOW, 1, 42)
    assert again.events == [] and again.execution.run_id == first["run_id"]


def test_a_child_close_implies_its_start_and_a_second_report_is_stale() -> None:
    parent, run_id = started_workflow()
    start_child(parent, run_id)
    closed = {"run_id": run_id, "initiated_event_id": 5, "child_run_id": "c1", "status": "Completed",
              "result": None, "failure": None, "details": [], "retry_state": "RETRY_POLICY_NOT_SET"}
    batch = command(parent, "RecordChildExecutionClosed", closed, 3)
    assert [e["attributes"][0] for e in batch["events"]] == [
        "ChildWorkflowExecutionStarted", "ChildWorkflowExecutionCompleted", "WorkflowTaskScheduled",
    ]
    with pytest.raises(Rejected, match="no pending child"):
        decide(parent.executions["order-1"], "RecordChildExecutionClosed", closed, "kadence-history", NOW)


def test_a_parent_closing_first_applies_its_parent_close_policy() -> None:
    for policy, expected in (("TERMINATE", ["TerminateWorkflowExecution"]), ("REQUEST_CANCEL", ["RequestCancelWorkflowExecution"]),
                             ("ABANDON", [])):
        parent, run_id = started_workflow()
        start_child(parent, run_id, parent_close_policy=policy)
        batch = command(parent, "TerminateWorkflowExecution", {"run_id": "", "reason": "done", "details": []}, 3)
        sent = [decode_outbound(e) for kind, e in batch["effects"] if kind == "OutboundCommand"]
        assert [(target, kind) for target, kind, _ in sent] == [(CHILD["workflow_id"], kind) for kind in expected]


def test_a_signal_sent_again_with_its_request_id_applies_once_and_answers_its_sender() -> None:
    state, run_id = started_workflow()
    sender = {"workflow_id": "sender", "run_id": "s1", "initiated_event_id": 7}
    signal = {"run_id": "", "signal_name": "approve", "input": [], "request_id": "s1/7", "initiated_by": sender}
    first = command(state, "SignalWorkflowExecution", signal, 1)
    assert [e["attributes"][0] for e in first["buffered"]] == ["WorkflowExecutionSignaled"]  # the first task is pending
    (answer,) = [decode_outbound(e) for kind, e in first["effects"] if kind == "OutboundCommand"]
    assert answer == ("sender", "RecordExternalRequestOutcome", {"run_id": "s1", "initiated_event_id": 7, "cause": ""})
    again = command(state, "SignalWorkflowExecution", signal, 2)
    assert again["events"] == again["buffered"] == again["effects"] == []


def test_a_rejected_command_from_a_workflow_is_answered_with_the_cause() -> None:
    sender = {"workflow_id": "sender", "run_id": "s1", "initiated_event_id": 7}
    effect = rejection_answer({"initiated_by": sender}, Rejected("workflow execution not found", "WORKFLOW_NOT_FOUND"))
    assert effect is not None
    answer = {"run_id": "s1", "initiated_event_id": 7, "cause": "WORKFLOW_NOT_FOUND"}
    assert decode_outbound(effect[1])[1:] == ("RecordExternalRequestOutcome", answer)
    assert rejection_answer({"initiated_by": None}, Rejected("no")) is None


@pytest.mark.parametrize(("limit", "commands", "cause"), [
    ("MAX_PENDING_CHILDREN", [("StartChildWorkflowExecution", {**CHILD, "workflow_id": f"child-{i}"}) for i in range(2)],
     "PENDING_CHILD_WORKFLOWS_LIMIT_EXCEEDED"),
    ("MAX_PENDING_EXTERNAL_REQUESTS", [("SignalExternalWorkflowExecution", {
        "workflow_id": "other", "run_id": "", "signal_name": "s", "input": [], "child_workflow_only": False}) for _ in range(2)],
     "PENDING_SIGNALS_LIMIT_EXCEEDED"),
    ("MAX_PENDING_CHILDREN", [("StartChildWorkflowExecution", {**CHILD, "workflow_type": ""})], "BAD_START_CHILD_EXECUTION_ATTRIBUTES"),
])
def test_child_and_external_request_limits_fail_the_workflow_task(
    monkeypatch: pytest.MonkeyPatch, limit: str, commands: list[Any], cause: str,
) -> None:
    monkeypatch.setattr(child, limit, 1)
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    batch = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": commands}, 2)
    kind, attrs = batch["events"][0]["attributes"]
    assert (kind, attrs["cause"]) == ("WorkflowTaskFailed", cause)
    assert [k for k, _ in batch["effects"] if k == "OutboundCommand"] == []


def test_a_workflow_task_carries_the_events_since_the_previous_task_was_scheduled() -> None:
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


LARGE = {"metadata": {"encoding": b"binary/plain"}, "data": b"x" * (limits.MAX_RECORD_VALUE_BYTES // 6)}


def test_a_client_command_whose_history_record_would_not_fit_is_refused() -> None:
    state, run_id = started_workflow()
    ex = state.executions["order-1"]
    signal = {"run_id": "", "signal_name": "add", "input": [LARGE] * 7, "request_id": ""}
    with pytest.raises(Rejected, match="would write a history record of up to"):
        limits.within_record_limit(decide(ex, "SignalWorkflowExecution", signal, "client", NOW), "SignalWorkflowExecution")
    small = decide(ex, "SignalWorkflowExecution", {**signal, "input": [LARGE]}, "client", NOW)
    assert limits.within_record_limit(small, "SignalWorkflowExecution") is small


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
