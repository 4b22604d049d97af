"""Activities (services/history/machine/activity.py): dispatch, attempts, retries, heartbeats, timeouts, cancellation."""

from __future__ import annotations

from typing import Any

import pytest

from kadence.common import retry_backoff_ms
from kadence.protocol.events import CLOSE_COMMANDS, EVENT_FOR_COMMAND, FOLLOWING_EVENT, ONE_EVENT_COMMANDS
from kadence.protocol.limits import MAX_HISTORY_BYTES
from kadence.protocol.names import TaskCommandType
from kadence.protocol.task_token import TaskToken
from services.history.machine.activity import activity_retry_state
from services.history.machine.dispatch import decide
from services.history.machine.effects import TASK_REDISPATCH_MS
from services.history.machine.execution import ActivityState
from services.history.machine.transition import Redispatch, Rejected
from services.history.partition import PartitionState
from services.history.snapshot import RunRow
from services.history.step import step
from tests.machine_steps import (
    ACTIVITY,
    BIG,
    CHILD,
    NOW,
    apply,
    command,
    schedule_activities,
    started_workflow,
)


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
        assert again["effects"][1][1]["redispatched"]  # a worker may be running the first copy: this one waits for its start's answer
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
    assert not dispatch.effects[1][1]["redispatched"]  # the attempt's first dispatch: its worker starts it early


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


def test_schedule_to_close_times_out_an_activity_that_never_started() -> None:
    state, run_id = started_workflow()
    scheduled = schedule_activities(state, run_id, schedule_to_close_timeout_ms=2000, start_to_close_timeout_ms=0)
    assert ("ACTIVITY_SCHEDULE_TO_CLOSE", NOW + 2000) in [(e["kind"], e["fire_at_ms"]) for k, e in scheduled["effects"] if k == "Timer"]
    fired = command(state, "TimeoutFired", {"run_id": run_id, "timer_id": "t", "kind": "ACTIVITY_SCHEDULE_TO_CLOSE",
                                            "scheduled_event_id": 5, "attempt": 1}, 3)
    kind, attrs = fired["events"][0]["attributes"]
    assert (kind, attrs["retry_state"], attrs["failure"]["timeout_type"]) == ("ActivityTaskTimedOut", "TIMEOUT", "SCHEDULE_TO_CLOSE")


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
    assert RunRow.of(ex).run().activities[5].heartbeat == ex.activities[5].heartbeat  # as a checkpoint stores and reads it back


def test_an_oversized_activity_result_fails_the_activity_for_good() -> None:
    state, run_id = started_workflow()
    schedule_activities(state, run_id)
    command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1}, 3)
    batch = command(state, "RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "result": BIG}, 4)
    kind, attrs = batch["events"][0]["attributes"]
    assert (kind, attrs["retry_state"], attrs["failure"]["type"]) == ("ActivityTaskFailed", "NON_RETRYABLE_FAILURE", "BlobSizeLimitError")


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


def completed_with_eager_starts(state: PartitionState, run_id: str, foreseen: list[int], offset: int = 2) -> dict[str, Any]:
    """The first workflow task completed by a worker that runs activities "0", "1", ... itself,
    foreseen at the ids given, under the eager request id "eager-1"."""
    return step(state, {"workflow_id": "order-1", "identity": "worker", "command": ("RespondWorkflowTaskCompleted", {
        "run_id": run_id, "scheduled_event_id": 2, "eager_request_id": "eager-1", "commands": [
            ("ScheduleActivityTask", {**ACTIVITY, "activity_id": str(i), "eager_scheduled_event_id": sid}) for i, sid in enumerate(foreseen)
        ],
    })}, NOW, 0, offset).batch


def test_a_completion_starts_the_eager_activities_it_schedules_in_its_own_batch() -> None:
    """As Temporal's RespondWorkflowTaskCompleted: the worker runs activities "0" and "1" itself,
    foreseen at 5 and 6; the completion's batch records both started by it, after the commands'
    events, dispatches nothing and sets their start-to-close timers, and answers its eager request
    id. The worker's reports are accepted as any started attempt's."""
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    completed = completed_with_eager_starts(state, run_id, [5, 6])
    assert [(e["event_id"], e["attributes"][0], e["attributes"][1].get("scheduled_event_id")) for e in completed["events"]] == [
        (4, "WorkflowTaskCompleted", 2), (5, "ActivityTaskScheduled", None), (6, "ActivityTaskScheduled", None),
        (7, "ActivityTaskStarted", 5), (8, "ActivityTaskStarted", 6)]
    assert {e["attributes"][1]["identity"] for e in completed["events"][3:]} == {"worker"}
    assert [(k, e.get("kind")) for k, e in completed["effects"] if k != "DropTimer"] == [("Timer", "ACTIVITY_START_TO_CLOSE")] * 2
    assert not any("ACTIVITY" in e["timer_id"] for k, e in completed["effects"] if k == "DropTimer")
    assert (completed["request_ids"], completed["rejection"], completed["refusals"]) == (["eager-1"], None, [])
    done = command(state, "RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "result": None}, 3)
    assert [e["attributes"][0] for e in done["events"]] == ["ActivityTaskCompleted", "WorkflowTaskScheduled"]


def test_eager_starts_foreseen_at_the_wrong_ids_are_refused_and_their_activities_go_to_the_task_queue() -> None:
    """An event written while the task ran shifts every id after it: the completion applies, its
    activities are dispatched as usual, and its batch refuses the eager request id (the worker
    cancels its attempts): a refusal beside events, not the batch's rejection (which says the
    command did not apply). The batch folds like any other: the activities are pending, not started."""
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    completed = completed_with_eager_starts(state, run_id, [6, 7])
    assert [e["attributes"][0] for e in completed["events"]] == ["WorkflowTaskCompleted", "ActivityTaskScheduled", "ActivityTaskScheduled"]
    assert [k for k, _ in completed["effects"]].count("ActivityTask") == 2
    assert (completed["request_ids"], completed["rejection"]) == ([], None)
    assert [r["request_id"] for r in completed["refusals"]] == ["eager-1"]
    assert "ids [6, 7] were foreseen, none recorded" in completed["refusals"][0]["reason"]
    assert [(a.scheduled_event_id, a.started_event_id) for a in state.executions["order-1"].activities.values()] == [(5, 0), (6, 0)]


def test_a_refused_completion_refuses_its_eager_starts() -> None:
    state, run_id = started_workflow()
    stale = completed_with_eager_starts(state, run_id, [5])  # its workflow task was never started
    assert stale["events"] == [] and stale["request_ids"] == []
    assert stale["rejection"] is not None and stale["rejection"]["request_id"] == "eager-1"
    assert state.executions["order-1"].activities == {}


def test_a_completion_whose_eager_request_id_cannot_be_an_id_is_refused_as_a_bad_id_is() -> None:
    """Checked as every request id is (its answer goes through a Postgres notification): the
    completion does not apply, and nobody can wait under that id, so nothing is written."""
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    written = step(state, {"workflow_id": "order-1", "identity": "worker", "command": ("RespondWorkflowTaskCompleted", {
        "run_id": run_id, "scheduled_event_id": 2, "eager_request_id": "eager\x00", "commands": [
            ("ScheduleActivityTask", {**ACTIVITY, "activity_id": "0", "eager_scheduled_event_id": 5})],
    })}, NOW, 0, 2)
    assert written.batch is None and written.rejected is not None and "eager_request_id" in str(written.rejected)
    assert state.executions["order-1"].activities == {}


def test_a_completion_that_ends_the_run_at_a_history_limit_refuses_its_eager_starts() -> None:
    """The run is terminated instead of recording the completion: no activity is scheduled, so the
    worker must hear its eager attempts refused (and cancel them), not accepted."""
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    state.executions["order-1"].history_bytes = MAX_HISTORY_BYTES + 1  # as a run that never continued as new
    ended = completed_with_eager_starts(state, run_id, [5])
    assert [e["attributes"][0] for e in ended["events"]] == ["WorkflowExecutionTerminated"]
    assert ended["request_ids"] == []
    assert [(r["request_id"], "the run was terminated instead" in r["reason"]) for r in ended["refusals"]] == [("eager-1", True)]


def test_an_eager_activity_whose_id_the_worker_foresaw_is_not_dispatched_and_starts_by_that_id() -> None:
    """A worker of an older release sends no eager_request_id: it runs activity "0" itself and
    foresaw event 5, so history dispatches no task for it (its retry timer stays, in case the worker
    never starts it) and accepts a start naming it. Activity "1" was foreseen as 7 but is 6: it is
    dispatched as usual, and a start naming it at the wrong id is refused."""
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    completed = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("ScheduleActivityTask", {**ACTIVITY, "activity_id": "0", "eager_scheduled_event_id": 5}),
        ("ScheduleActivityTask", {**ACTIVITY, "activity_id": "1", "eager_scheduled_event_id": 7}),
    ]}, 2)
    assert [(k, e["scheduled_event_id"]) for k, e in completed["effects"] if k in ("ActivityTask", "Timer")] == [
        ("Timer", 5), ("ActivityTask", 6), ("Timer", 6)]
    assert all("eager_scheduled_event_id" not in e["attributes"][1] for e in completed["events"])
    ex = state.executions["order-1"]
    eager_start = {"run_id": run_id, "attempt": 1}
    with pytest.raises(Rejected, match="no pending activity attempt scheduled_event_id=7"):
        decide(ex, "RecordActivityTaskStarted", {**eager_start, "scheduled_event_id": 7, "activity_id": "1"}, "worker", NOW)
    with pytest.raises(Rejected, match="activity 6 is '1', not '0'"):
        decide(ex, "RecordActivityTaskStarted", {**eager_start, "scheduled_event_id": 6, "activity_id": "0"}, "worker", NOW)
    started = command(state, "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "activity_id": "0"}, 3)
    assert [e["attributes"][0] for e in started["events"]] == ["ActivityTaskStarted"]
    assert ("DropTimer", {"timer_id": f"{run_id}/ACTIVITY_RETRY/5/1"}) in started["effects"]


def test_an_eager_activity_its_worker_never_started_is_dispatched_by_its_retry_timer() -> None:
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("ScheduleActivityTask", {**ACTIVITY, "activity_id": "0", "eager_scheduled_event_id": 5}),
    ]}, 2)
    fire = {"run_id": run_id, "timer_id": f"{run_id}/ACTIVITY_RETRY/5/1", "kind": "ACTIVITY_RETRY", "scheduled_event_id": 5, "attempt": 1}
    dispatched = apply(state, decide(state.executions["order-1"], "TimeoutFired", fire, "timer", NOW + TASK_REDISPATCH_MS), 3)
    assert [(k, e.get("activity_id")) for k, e in dispatched["effects"]] == [("DropTimer", None), ("ActivityTask", "0"), ("Timer", None)]


def test_each_command_records_the_events_the_shared_table_names() -> None:
    """History records each command's EVENT_FOR_COMMAND event and, after it, nothing but its
    FOLLOWING_EVENT: a worker foresees the ids of the events after ONE_EVENT_COMMANDS (an eager
    activity's) from the same table. Every command of a workflow task is recorded here once."""
    state, run_id = started_workflow()
    failure = {"message": "no", "type": "", "source": "", "stack_trace": "", "non_retryable": False, "timeout_type": None,
               "details": [], "activity_failure_info": None, "cause": None}
    payload = {"metadata": {"encoding": b"json/plain"}, "data": b"1"}
    offset = 0

    def step(kind: str, body: dict[str, Any]) -> dict[str, Any]:
        nonlocal offset
        offset += 1
        return command(state, kind, body, offset)

    def completed(*commands: tuple[str, dict[str, Any]]) -> list[str]:
        """The events of the pending workflow task completed with `commands`, WorkflowTaskCompleted left out."""
        task = state.executions["order-1"].workflow_task
        assert task is not None
        step("RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": task.scheduled_event_id})
        batch = step("RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": task.scheduled_event_id,
                                                      "commands": list(commands)})
        kinds = [e["attributes"][0] for e in batch["events"]]
        assert kinds[0] == "WorkflowTaskCompleted"
        return [kind for kind in kinds[1:] if kind != "WorkflowTaskScheduled"]

    def update(update_id: str) -> None:
        step("UpdateWorkflowExecution", {"run_id": "", "update_id": update_id, "name": "u", "args": [], "request_id": "",
                                         "identity": "", "header": {}})

    first = [
        ("StartTimer", {"timer_id": "t", "start_to_fire_timeout_ms": 60_000}),
        ("RecordMarker", {"marker_name": "m", "details": {}}),
        ("ScheduleActivityTask", {**ACTIVITY, "activity_id": "a"}),
        ("UpsertWorkflowSearchAttributes", {"search_attributes": {"Size": payload}}),
        ("ModifyWorkflowProperties", {"upserted_memo": {"note": payload}}),
        ("StartChildWorkflowExecution", CHILD),
        ("SignalExternalWorkflowExecution", {"workflow_id": "other", "run_id": "", "signal_name": "s", "input": [],
                                             "child_workflow_only": False, "header": {}}),
        ("RequestCancelExternalWorkflowExecution", {"workflow_id": "other", "run_id": "", "child_workflow_only": False, "reason": ""}),
        ("ScheduleNexusOperation", {"endpoint": "e", "service": "s", "operation": "o", "input": payload, "task_queue": "handlers"}),
    ]
    assert completed(*first) == [EVENT_FOR_COMMAND[kind] for kind, _ in first]
    update("u1")
    second = [
        ("AcceptWorkflowUpdate", {"update_id": "u1"}),
        ("CompleteWorkflowUpdate", {"update_id": "u1", "result": payload, "failure": None}),
        ("CancelTimer", {"timer_id": "t"}),
    ]
    assert completed(*second) == [EVENT_FOR_COMMAND[kind] for kind, _ in second]
    update("u2")
    third = [
        ("RejectWorkflowUpdate", {"update_id": "u2", "failure": failure}),
        ("RequestCancelActivityTask", {"scheduled_event_id": 7}),  # not started: canceled at once
        ("RequestCancelNexusOperation", {"scheduled_event_id": 13}),  # not started: canceled at once
        ("CompleteWorkflowExecution", {"result": None}),
    ]
    assert completed(*third) == [
        EVENT_FOR_COMMAND["RejectWorkflowUpdate"], EVENT_FOR_COMMAND["RequestCancelActivityTask"],
        FOLLOWING_EVENT["RequestCancelActivityTask"], EVENT_FOR_COMMAND["RequestCancelNexusOperation"],
        FOLLOWING_EVENT["RequestCancelNexusOperation"], EVENT_FOR_COMMAND["CompleteWorkflowExecution"],
    ]
    recorded = {kind for kind, _ in [*first, *second, *third]}
    assert ONE_EVENT_COMMANDS == recorded - {"RequestCancelActivityTask", "RequestCancelNexusOperation", "CompleteWorkflowExecution"}
    assert recorded | set(CLOSE_COMMANDS) == set(TaskCommandType)


def test_an_activity_id_names_one_pending_activity() -> None:
    """As Temporal: a second pending activity with the same id fails the workflow task (reports and
    eager starts find an activity by its id)."""
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    completed = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("ScheduleActivityTask", {**ACTIVITY, "activity_id": "a"}), ("ScheduleActivityTask", {**ACTIVITY, "activity_id": "a"}),
    ]}, 2)
    (failed,) = [attrs for kind, attrs in (e["attributes"] for e in completed["events"]) if kind == "WorkflowTaskFailed"]
    assert failed["cause"] == "BAD_SCHEDULE_ACTIVITY_ATTRIBUTES"
    assert "activity id 'a' is already in use by a pending activity" in failed["failure"]["message"]
