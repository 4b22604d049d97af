"""Activities: scheduled by a workflow task, attempted by workers, retried by their policy, timed
out by their four timeouts, canceled on request."""

from __future__ import annotations

from collections import Counter
from typing import cast

from kadence.common import attempt_timeout_ms, next_attempt_backoff_ms, retry_state
from kadence.exceptions import RetryState
from kadence.protocol.events import ACTIVITY_RESULTS, CLOSE_STATUS, FOLLOWING_EVENT
from kadence.protocol.limits import MAX_PENDING_ACTIVITIES, payload_problem
from kadence.protocol.names import CommandType, EffectType, EventType, TaskCommandType, TimerKind
from kadence.protocol.records import (
    ActivityTaskCanceled,
    ActivityTaskCancelRequested,
    ActivityTaskFailed,
    ActivityTaskScheduled,
    ActivityTaskTimedOut,
    Failure,
    RecordActivityTaskHeartbeat,
    RecordActivityTaskStarted,
    RequestCancelActivityTask,
    RespondActivityTaskCanceled,
    RespondActivityTaskCompleted,
    RespondActivityTaskFailed,
    RespondWorkflowTaskCompleted,
    ScheduleActivityTask,
    TimeoutFired,
)
from kadence.protocol.task_token import TaskToken
from services.history.machine.effects import TASK_REDISPATCH_MS, drop, redispatch_delay_ms, timer
from services.history.machine.execution import RUNNING, ActivityState, Execution, Pending
from services.history.machine.records import ActivityHeartbeat, Effect, HistoryEvent, Record, attributes, event_type
from services.history.machine.tables import Apply, Decide, EffectsOf, Planned, TaskCommand, Timeout
from services.history.machine.transition import Redispatch, Rejected, Transition, engine_failure

# A worker's, or a client's async activity handle's, report on an activity attempt: one that names
# the activity by id may leave the run id empty (the current run).
REPORTS = {
    CommandType.RecordActivityTaskHeartbeat, CommandType.RespondActivityTaskCompleted, CommandType.RespondActivityTaskFailed,
    CommandType.RespondActivityTaskCanceled,
}


def activity_retry_state(activity: ActivityState, failure: Failure, now_ms: int) -> RetryState:
    """Whether the activity's current attempt, failed with `failure`, is followed by another."""
    time_left = None
    if activity.schedule_to_close_timeout_ms:
        time_left = activity.scheduled_time_ms + activity.schedule_to_close_timeout_ms - now_ms
    return retry_state(activity.retry_policy, activity.attempt, failure, time_left)


def _retried(attrs: Record) -> bool:
    """Whether a failure or timeout ends only the attempt: another follows."""
    return attrs["retry_state"] == RetryState.IN_PROGRESS


# ---- apply


def _scheduled(ex: Execution, event: HistoryEvent) -> None:
    attrs = attributes(event)
    ex.activities[event["event_id"]] = ActivityState(
        scheduled_event_id=event["event_id"],
        activity_id=attrs["activity_id"],
        activity_type=attrs["activity_type"],
        task_queue=attrs["task_queue"],
        input=attrs["input"],
        schedule_to_close_timeout_ms=attrs["schedule_to_close_timeout_ms"],
        start_to_close_timeout_ms=attrs["start_to_close_timeout_ms"],
        heartbeat_timeout_ms=attrs["heartbeat_timeout_ms"],
        schedule_to_start_timeout_ms=attrs["schedule_to_start_timeout_ms"],
        retry_policy=attrs["retry_policy"],
        scheduled_time_ms=event["event_time_ms"],
        dispatch_due_ms=event["event_time_ms"],
        header=attrs.get("header", {}),
    )


def _started(ex: Execution, event: HistoryEvent) -> None:
    attrs = attributes(event)
    activity = ex.activities[attrs["scheduled_event_id"]]
    activity.started_event_id = event["event_id"]
    activity.attempt = attrs["attempt"]
    activity.started_identity = attrs["identity"]
    activity.last_heartbeat_ms = event["event_time_ms"]


def _failed(ex: Execution, event: HistoryEvent) -> None:
    """A failure or timeout: the next attempt after its backoff, or the activity's end."""
    attrs = attributes(event)
    if not _retried(attrs):
        _ended(ex, event)
        return
    activity = ex.activities[attrs["scheduled_event_id"]]
    backoff_ms = next_attempt_backoff_ms(activity.retry_policy, activity.attempt, attrs["failure"])
    activity.attempt += 1
    activity.started_event_id = 0
    activity.dispatch_due_ms = event["event_time_ms"] + backoff_ms


def _cancel_requested(ex: Execution, event: HistoryEvent) -> None:
    ex.activities[attributes(event)["scheduled_event_id"]].cancel_requested_event_id = event["event_id"]


def _ended(ex: Execution, event: HistoryEvent) -> None:
    ex.activities.pop(attributes(event)["scheduled_event_id"], None)


APPLY: dict[str, Apply] = {
    EventType.ActivityTaskScheduled: _scheduled, EventType.ActivityTaskStarted: _started, EventType.ActivityTaskFailed: _failed,
    EventType.ActivityTaskTimedOut: _failed, EventType.ActivityTaskCancelRequested: _cancel_requested,
    EventType.ActivityTaskCompleted: _ended, EventType.ActivityTaskCanceled: _ended,
}


def apply_heartbeat(ex: Execution, heartbeat: ActivityHeartbeat) -> None:
    """Keep the latest heartbeat, whichever attempt sent it (the next attempt resumes from it);
    only the current attempt's heartbeat holds off its heartbeat timeout."""
    activity = ex.activities.get(heartbeat["scheduled_event_id"])
    if activity is None:
        return
    activity.heartbeat = heartbeat
    if activity.attempt == heartbeat["attempt"]:
        activity.last_heartbeat_ms = heartbeat["recorded_at_ms"]


# ---- the workflow task's commands


def pending_limit(ex: Execution, counts: Counter[str]) -> tuple[str, str] | None:
    if len(ex.activities) + counts[TaskCommandType.ScheduleActivityTask] > MAX_PENDING_ACTIVITIES:
        return "PENDING_ACTIVITIES_LIMIT_EXCEEDED", f"at most {MAX_PENDING_ACTIVITIES} activities may be pending"
    return None


def _check_schedule(ex: Execution, attrs: ScheduleActivityTask, planned: Planned) -> str | None:
    if not attrs["activity_type"]:
        return "ScheduleActivityTask needs an activity_type"
    if attrs.get("start_to_close_timeout_ms", 0) <= 0 and attrs.get("schedule_to_close_timeout_ms", 0) <= 0:
        return f"activity {attrs['activity_type']}: set start_to_close_timeout or schedule_to_close_timeout"
    # As Temporal: an activity id names one pending activity (reports and eager starts find it by it).
    if attrs["activity_id"]:
        if attrs["activity_id"] in planned.activity_ids:
            return f"activity id {attrs['activity_id']!r} is already in use by a pending activity of this run"
        planned.activity_ids.add(attrs["activity_id"])
    return None


def _scheduled_event(t: Transition, attrs: ScheduleActivityTask, completed_id: int, identity: str) -> ActivityTaskScheduled:
    recorded = {name: value for name, value in attrs.items() if name != "eager_scheduled_event_id"}
    return cast(ActivityTaskScheduled, {
        **recorded, "task_queue": attrs["task_queue"] or t.execution.task_queue,
        "start_to_close_timeout_ms": attempt_timeout_ms(attrs),
        "workflow_task_completed_event_id": completed_id, "header": attrs.get("header", {}),
    })


def _eager_if_foreseen(t: Transition, attrs: ScheduleActivityTask, scheduled_id: int) -> None:
    """The activity is scheduled; its first attempt goes to the task queue, unless the completing
    worker runs it itself and foresaw the event's id (`record_eager_starts`)."""
    if attrs.get("eager_scheduled_event_id") == scheduled_id:
        t.eager_activities.add(scheduled_id)


def record_eager_starts(t: Transition, cmd: RespondWorkflowTaskCompleted, identity: str) -> None:
    """Start, by the completing worker, the first attempts it runs itself, after the completion's
    command events (so they shift none of the ids it foresaw): as Temporal's
    RespondWorkflowTaskCompleted starts the eager activities it hands back. All or none, under the
    one eager_request_id: when an id was foreseen wrong (an event written while the task ran
    shifts every id after it), or the completion recorded no schedule (its task failed), the
    request is refused and the attempts go to the task queue. A completion without
    eager_request_id (a worker of an older release) leaves them for its RecordActivityTaskStarted."""
    request_id = cmd.get("eager_request_id") or ""
    if not request_id:
        return
    foreseen = []
    for command in cmd["commands"]:
        match command:
            case ("ScheduleActivityTask", schedule) if schedule.get("eager_scheduled_event_id"):
                foreseen.append(schedule["eager_scheduled_event_id"])
    recorded = sorted(t.eager_activities)
    closes = any(event_type(event) in CLOSE_STATUS for event in t.events)
    if foreseen != recorded or closes:
        t.eager_activities.clear()
        t.refuse_eager_starts(request_id, "the run closed" if closes else
                              f"ActivityTaskScheduled ids {foreseen} were foreseen, {recorded or 'none'} recorded")
        return
    t.eager_request_id = request_id
    for scheduled_event_id in foreseen:
        _record_started(t, scheduled_event_id, 1, identity)


def _record_started(t: Transition, scheduled_event_id: int, attempt: int, identity: str) -> None:
    t.add(EventType.ActivityTaskStarted, {"scheduled_event_id": scheduled_event_id, "attempt": attempt, "identity": identity})


def _check_cancel(ex: Execution, attrs: RequestCancelActivityTask, planned: Planned) -> str | None:
    return None if attrs["scheduled_event_id"] in ex.activities else f"activity {attrs['scheduled_event_id']} is not pending"


def _cancel_requested_event(
    t: Transition, attrs: RequestCancelActivityTask, completed_id: int, identity: str,
) -> ActivityTaskCancelRequested:
    return {"scheduled_event_id": attrs["scheduled_event_id"], "workflow_task_completed_event_id": completed_id}


def _canceled_if_not_started(t: Transition, attrs: RequestCancelActivityTask, requested_id: int) -> None:
    """An attempt not started is canceled at once (FOLLOWING_EVENT); a started one hears of it through its worker."""
    scheduled_event_id = attrs["scheduled_event_id"]
    if not t.execution.activities[scheduled_event_id].started_event_id:
        t.add(FOLLOWING_EVENT[TaskCommandType.RequestCancelActivityTask], ActivityTaskCanceled(
            scheduled_event_id=scheduled_event_id, started_event_id=0,
            latest_cancel_requested_event_id=requested_id, details=[], identity="",
        ))


def cancel_standalone(t: Transition) -> None:
    """A cancel request to a standalone activity's run asks its activity to cancel: at once when
    no attempt runs, which closes the run; else its worker hears of it."""
    for scheduled_event_id in list(t.execution.activities):
        requested = RequestCancelActivityTask(scheduled_event_id=scheduled_event_id)
        requested_id = t.add(EventType.ActivityTaskCancelRequested, _cancel_requested_event(t, requested, 0, ""))
        if not t.execution.activities[scheduled_event_id].started_event_id:
            t.add_workflow_visible(EventType.ActivityTaskCanceled, ActivityTaskCanceled(
                scheduled_event_id=scheduled_event_id, started_event_id=0,
                latest_cancel_requested_event_id=requested_id, details=[], identity="",
            ))


TASK_COMMANDS: dict[str, TaskCommand] = {
    TaskCommandType.ScheduleActivityTask: TaskCommand(
        "BAD_SCHEDULE_ACTIVITY_ATTRIBUTES", _scheduled_event, _check_schedule, then=_eager_if_foreseen,
    ),
    TaskCommandType.RequestCancelActivityTask: TaskCommand(
        "BAD_REQUEST_CANCEL_ACTIVITY_ATTRIBUTES", _cancel_requested_event, _check_cancel, then=_canceled_if_not_started,
    ),
}

# ---- commands: a worker's (or an async handle's) reports


def _attempt_started(ex: Execution, cmd: RecordActivityTaskStarted, identity: str, now_ms: int) -> Transition:
    activity = ex.activities.get(cmd["scheduled_event_id"])
    if activity is None or activity.attempt != cmd["attempt"] or activity.started_event_id != 0:
        raise Rejected(f"no pending activity attempt scheduled_event_id={cmd['scheduled_event_id']} attempt={cmd['attempt']}")
    if cmd.get("activity_id") and cmd["activity_id"] != activity.activity_id:  # an eager start whose foreseen id was wrong
        raise Rejected(f"activity {cmd['scheduled_event_id']} is {activity.activity_id!r}, not {cmd['activity_id']!r}")
    t = Transition(ex, now_ms)
    _record_started(t, activity.scheduled_event_id, activity.attempt, identity)
    return t


# A worker's, or a client's async activity handle's, report on a started attempt.
ActivityReport = RecordActivityTaskHeartbeat | RespondActivityTaskCompleted | RespondActivityTaskFailed | RespondActivityTaskCanceled


def _started_activity(ex: Execution, cmd: ActivityReport, identity: str) -> ActivityState:
    """The started attempt a report is for. A worker's report counts only from the worker that
    started the attempt; a client's, by task token or activity id, from anyone (async completion)."""
    if cmd.get("activity_id"):
        return _started_activity_by_id(ex, cmd["activity_id"])
    if token := cmd.get("task_token"):
        return _started_activity_by_token(ex, token)
    activity = ex.activities.get(cmd["scheduled_event_id"])
    if activity is None or activity.attempt != cmd["attempt"] or activity.started_event_id == 0:
        raise Rejected(f"no started activity attempt scheduled_event_id={cmd['scheduled_event_id']} attempt={cmd['attempt']}")
    if activity.started_identity != identity:
        raise Rejected(f"activity attempt was started by {activity.started_identity!r}, not {identity!r}")
    return activity


def _started_activity_by_id(ex: Execution, activity_id: str) -> ActivityState:
    for activity in ex.activities.values():
        if activity.activity_id == activity_id:
            if activity.started_event_id == 0:
                raise Rejected(f"activity {activity_id!r} of run {ex.run_id} has no started attempt "
                               f"(attempt {activity.attempt} waits for a worker)", "ACTIVITY_NOT_FOUND")
            return activity
    raise Rejected(f"run {ex.run_id} has no pending activity {activity_id!r} (it completed, failed or timed out, "
                   "or was never scheduled)", "ACTIVITY_NOT_FOUND")


def _started_activity_by_token(ex: Execution, token_bytes: bytes) -> ActivityState:
    try:
        token = TaskToken.decode(token_bytes)
    except ValueError as exc:
        raise Rejected(str(exc)) from None
    if (token.workflow_id, token.run_id) != (ex.workflow_id, ex.run_id):
        raise Rejected(f"the task token names run {token.run_id} of {token.workflow_id}, not this one", "ACTIVITY_NOT_FOUND")
    activity = ex.activities.get(token.scheduled_event_id)
    if activity is None or activity.attempt != token.attempt or activity.started_event_id == 0:
        now = "is over" if activity is None else f"is over (attempt {activity.attempt} is current)"
        raise Rejected(f"stale task token: attempt {token.attempt} of activity {token.activity_id!r} "
                       f"(scheduled_event_id={token.scheduled_event_id}) {now}", "ACTIVITY_NOT_FOUND")
    return activity


def _heartbeat(ex: Execution, cmd: RecordActivityTaskHeartbeat, identity: str, now_ms: int) -> Transition:
    activity = _started_activity(ex, cmd, identity)
    problem = payload_problem(cmd["details"], "heartbeat details")
    if problem:
        raise Rejected(problem)
    t = Transition(ex, now_ms)
    t.heartbeats.append({
        "scheduled_event_id": activity.scheduled_event_id, "attempt": activity.attempt,
        "details": cmd["details"], "recorded_at_ms": now_ms,
    })
    if activity.cancel_requested_event_id:  # told again, in case the first notice missed its worker
        t.effects.append((EffectType.ActivityCancellation, activity_cancellation_effect(activity)))
    if activity.heartbeat_timeout_ms:  # re-armed: the same timer id, a later fire time
        fire_at = now_ms + activity.heartbeat_timeout_ms
        t.effects.append(timer(ex, TimerKind.ACTIVITY_HEARTBEAT, fire_at, activity.scheduled_event_id, activity.attempt))
    return t


def _canceled(ex: Execution, cmd: RespondActivityTaskCanceled, identity: str, now_ms: int) -> Transition:
    activity = _started_activity(ex, cmd, identity)
    if not activity.cancel_requested_event_id:
        raise Rejected("activity cancellation was not requested")
    t = Transition(ex, now_ms)
    t.add_workflow_visible(EventType.ActivityTaskCanceled, {
        "scheduled_event_id": activity.scheduled_event_id, "started_event_id": activity.started_event_id,
        "latest_cancel_requested_event_id": activity.cancel_requested_event_id, "details": cmd["details"], "identity": identity,
    })
    return t


def _completed(ex: Execution, cmd: RespondActivityTaskCompleted, identity: str, now_ms: int) -> Transition:
    activity = _started_activity(ex, cmd, identity)
    too_large = payload_problem(cmd["result"], f"result of activity {activity.activity_type}")
    if too_large:  # as Temporal: the attempt fails for good, and the workflow hears why
        t = Transition(ex, now_ms)
        _record_failure(t, activity, {**engine_failure(too_large, "BlobSizeLimitError"), "non_retryable": True}, failed_by=identity)
        return t
    t = Transition(ex, now_ms)
    t.add_workflow_visible(EventType.ActivityTaskCompleted, {
        "scheduled_event_id": activity.scheduled_event_id, "started_event_id": activity.started_event_id,
        "result": cmd["result"], "identity": identity,
    })
    return t


def _attempt_failed(ex: Execution, cmd: RespondActivityTaskFailed, identity: str, now_ms: int) -> Transition:
    activity = _started_activity(ex, cmd, identity)
    problem = payload_problem(cmd["failure"], "activity failure")
    failure = cmd["failure"]
    if problem:  # keep the failure, drop what is too large to keep
        failure = {**failure, "details": [], "stack_trace": "", "cause": None,
                   "message": f"{failure['message'][:1000]} ({problem}; details dropped)"}
    t = Transition(ex, now_ms)
    _record_failure(t, activity, failure, failed_by=identity)
    return t


def _record_failure(t: Transition, activity: ActivityState, failure: Failure, failed_by: str | None = None) -> None:
    """A failed attempt (`failed_by` the worker's identity) or a timed-out one: written at once if
    another follows, else the workflow's to see."""
    state = activity_retry_state(activity, failure, t.now_ms)
    timed_out = ActivityTaskTimedOut(
        scheduled_event_id=activity.scheduled_event_id, started_event_id=activity.started_event_id,
        failure=failure, retry_state=state.value,
    )
    kind = EventType.ActivityTaskTimedOut if failed_by is None else EventType.ActivityTaskFailed
    attrs: ActivityTaskTimedOut | ActivityTaskFailed = timed_out if failed_by is None else {**timed_out, "identity": failed_by}
    if state == RetryState.IN_PROGRESS:
        t.add(kind, attrs)
    else:
        t.add_workflow_visible(kind, attrs)


COMMANDS: dict[str, Decide] = {
    CommandType.RecordActivityTaskStarted: _attempt_started,
    CommandType.RecordActivityTaskHeartbeat: _heartbeat,
    CommandType.RespondActivityTaskCanceled: _canceled,
    CommandType.RespondActivityTaskCompleted: _completed,
    CommandType.RespondActivityTaskFailed: _attempt_failed,
}

# ---- timeouts


def _timed_activity(ex: Execution, cmd: TimeoutFired, *, any_attempt: bool = False) -> ActivityState:
    activity = ex.activities.get(cmd["scheduled_event_id"])
    if activity is None or (not any_attempt and activity.attempt != cmd["attempt"]):
        raise Rejected(f"stale {cmd['kind']} timer")
    return activity


def _unstarted_activity(ex: Execution, cmd: TimeoutFired) -> ActivityState:
    activity = _timed_activity(ex, cmd)
    if activity.started_event_id:
        raise Rejected("activity attempt already started")
    return activity


def _retry_due(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    """The backoff before this attempt ended, or no worker started it yet: dispatched (again)."""
    activity = _unstarted_activity(ex, cmd)
    t = Transition(ex, now_ms)
    if now_ms - activity.dispatch_due_ms >= TASK_REDISPATCH_MS:
        t.redispatch = Redispatch("activity", activity.scheduled_event_id, now_ms - activity.dispatch_due_ms)
    # A copy marked so: a worker may be running the attempt already, its start not recorded yet (a
    # backlog, a slow broker), and one that reads this copy must not run it too before history says so.
    t.effects.extend(_dispatch(ex, activity, now_ms, redispatched=t.redispatch is not None))
    return t


def _schedule_to_start_timed_out(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    activity = _unstarted_activity(ex, cmd)
    # As Temporal: not retried, another attempt would wait in the same queue.
    failure: Failure = {**engine_failure("activity ScheduleToStart timeout", ""), "timeout_type": "SCHEDULE_TO_START"}
    t = Transition(ex, now_ms)
    t.add_workflow_visible(EventType.ActivityTaskTimedOut, ActivityTaskTimedOut(
        scheduled_event_id=activity.scheduled_event_id, started_event_id=0, failure=failure, retry_state=RetryState.TIMEOUT.value,
    ))
    return t


def _schedule_to_close_timed_out(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    activity = _timed_activity(ex, cmd, any_attempt=True)
    failure: Failure = {**engine_failure("activity ScheduleToClose timeout", ""), "timeout_type": "SCHEDULE_TO_CLOSE"}
    t = Transition(ex, now_ms)
    t.add_workflow_visible(EventType.ActivityTaskTimedOut, ActivityTaskTimedOut(
        scheduled_event_id=activity.scheduled_event_id, started_event_id=activity.started_event_id,
        failure=failure, retry_state=RetryState.TIMEOUT.value,
    ))
    return t


def _start_to_close_timed_out(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    return _attempt_timed_out(_started_attempt(ex, cmd), "START_TO_CLOSE", ex, now_ms)


def _heartbeat_timed_out(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    activity = _started_attempt(ex, cmd)
    if activity.last_heartbeat_ms + activity.heartbeat_timeout_ms > now_ms:
        raise Rejected("a heartbeat arrived since the heartbeat timer was set")
    return _attempt_timed_out(activity, "HEARTBEAT", ex, now_ms)


def _started_attempt(ex: Execution, cmd: TimeoutFired) -> ActivityState:
    activity = _timed_activity(ex, cmd)
    if not activity.started_event_id:
        raise Rejected("activity attempt not started")
    return activity


def _attempt_timed_out(activity: ActivityState, timeout_type: str, ex: Execution, now_ms: int) -> Transition:
    kind = "".join(word.capitalize() for word in timeout_type.split("_"))  # Temporal's message: "activity StartToClose timeout"
    failure: Failure = {**engine_failure(f"activity {kind} timeout", ""), "timeout_type": timeout_type,
               "details": activity.heartbeat["details"] if activity.heartbeat else []}
    t = Transition(ex, now_ms)
    _record_failure(t, activity, failure)
    return t


TIMEOUTS: dict[str, Timeout] = {
    TimerKind.ACTIVITY_RETRY: _retry_due,
    TimerKind.ACTIVITY_SCHEDULE_TO_START: _schedule_to_start_timed_out,
    TimerKind.ACTIVITY_SCHEDULE_TO_CLOSE: _schedule_to_close_timed_out,
    TimerKind.ACTIVITY_START_TO_CLOSE: _start_to_close_timed_out,
    TimerKind.ACTIVITY_HEARTBEAT: _heartbeat_timed_out,
}

# ---- effects


def activity_task_effect(ex: Execution, activity: ActivityState, *, redispatched: bool = False) -> Record:
    timeout = activity.schedule_to_start_timeout_ms
    return {
        "task_queue": activity.task_queue, "workflow_type": ex.workflow_type,
        "scheduled_event_id": activity.scheduled_event_id, "attempt": activity.attempt,
        "activity_id": activity.activity_id, "activity_type": activity.activity_type, "input": activity.input,
        "start_to_close_timeout_ms": activity.start_to_close_timeout_ms,
        "scheduled_time_ms": activity.scheduled_time_ms,
        "heartbeat_timeout_ms": activity.heartbeat_timeout_ms,
        "heartbeat_details": activity.heartbeat["details"] if activity.heartbeat else [],
        # In wall-clock time: the worker and matching compare it with their clocks.
        "schedule_to_start_deadline_ms": activity.dispatch_due_ms + timeout - ex.clock_offset_ms if timeout else 0,
        "header": activity.header, "redispatched": redispatched,
        "schedule_to_close_timeout_ms": activity.schedule_to_close_timeout_ms, "retry_policy": activity.retry_policy,
        "current_attempt_scheduled_time_ms": activity.dispatch_due_ms, "clock_offset_ms": ex.clock_offset_ms,
    }


def activity_cancellation_effect(activity: ActivityState) -> Record:
    return {"task_queue": activity.task_queue, "scheduled_event_id": activity.scheduled_event_id, "attempt": activity.attempt}


def _dispatch(ex: Execution, activity: ActivityState, now_ms: int, *, redispatched: bool = False) -> list[Effect]:
    """The attempt's task for a worker, and its retry timer."""
    return [(EffectType.ActivityTask, activity_task_effect(ex, activity, redispatched=redispatched)), _retry_timer(ex, activity, now_ms)]


def _retry_timer(ex: Execution, activity: ActivityState, now_ms: int) -> Effect:
    """The timer that dispatches the attempt again if no worker starts it (as a workflow task's):
    also what sends an eager attempt to the task queue when its worker never started it."""
    delay = redispatch_delay_ms(now_ms - activity.dispatch_due_ms)
    return timer(ex, TimerKind.ACTIVITY_RETRY, now_ms + delay, activity.scheduled_event_id, activity.attempt)


def _schedule_to_start_timer(ex: Execution, activity: ActivityState) -> list[Effect]:
    """The attempt's schedule-to-start deadline, counted from when it is due to a worker (so set
    with the backoff before it, and not moved by a re-dispatch)."""
    if not activity.schedule_to_start_timeout_ms:
        return []
    fire_at = activity.dispatch_due_ms + activity.schedule_to_start_timeout_ms
    return [timer(ex, TimerKind.ACTIVITY_SCHEDULE_TO_START, fire_at, activity.scheduled_event_id, activity.attempt)]


def _on_scheduled(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    activity = ex.activities.get(event["event_id"])
    if activity is None:  # ended in the same transition
        return []
    if activity.started_event_id:  # started by the completing worker in the same batch: nothing to dispatch or wait for
        effects = []
    elif activity.scheduled_event_id in t.eager_activities:  # its worker's start is still to come
        effects = [_retry_timer(ex, activity, t.now_ms), *_schedule_to_start_timer(ex, activity)]
    else:
        effects = [*_dispatch(ex, activity, t.now_ms), *_schedule_to_start_timer(ex, activity)]
    return effects + schedule_to_close_timer(ex, activity)


def schedule_to_close_timer(ex: Execution, activity: ActivityState) -> list[Effect]:
    """The activity's schedule-to-close deadline, from its scheduling, if it has one."""
    if not activity.schedule_to_close_timeout_ms:
        return []
    fire_at = activity.scheduled_time_ms + activity.schedule_to_close_timeout_ms
    return [timer(ex, TimerKind.ACTIVITY_SCHEDULE_TO_CLOSE, fire_at, activity.scheduled_event_id, 1)]


def _on_cancel_requested(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    activity = ex.activities.get(attributes(event)["scheduled_event_id"])
    return [] if activity is None else [(EffectType.ActivityCancellation, activity_cancellation_effect(activity))]


def _on_started(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    """The attempt's re-dispatch and schedule-to-start deadline go; its start-to-close and heartbeat
    timers are set, due from its start (the transition's time, or a reset's copied start)."""
    activity = ex.activities.get(attributes(event)["scheduled_event_id"])
    if activity is None:
        return []
    sid, attempt = activity.scheduled_event_id, activity.attempt
    effects = []
    if sid < t.first_event_id:  # else scheduled in this batch, and no timer set to wait for the start
        effects.append(drop(ex, TimerKind.ACTIVITY_RETRY, sid, attempt))
        if activity.schedule_to_start_timeout_ms:
            effects.append(drop(ex, TimerKind.ACTIVITY_SCHEDULE_TO_START, sid, attempt))
    started_ms = event["event_time_ms"]
    if activity.start_to_close_timeout_ms:
        effects.append(timer(ex, TimerKind.ACTIVITY_START_TO_CLOSE, started_ms + activity.start_to_close_timeout_ms, sid, attempt))
    if activity.heartbeat_timeout_ms:
        effects.append(timer(ex, TimerKind.ACTIVITY_HEARTBEAT, started_ms + activity.heartbeat_timeout_ms, sid, attempt))
    return effects


def _on_failed(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    """A retried attempt: its timers go, the next attempt is dispatched when its backoff ends."""
    attrs = attributes(event)
    if not _retried(attrs):
        return []
    activity = ex.activities[attrs["scheduled_event_id"]]
    sid, previous = activity.scheduled_event_id, activity.attempt - 1
    effects = [drop(ex, TimerKind.ACTIVITY_START_TO_CLOSE, sid, previous)]
    if activity.heartbeat_timeout_ms:
        effects.append(drop(ex, TimerKind.ACTIVITY_HEARTBEAT, sid, previous))
    effects.append(timer(ex, TimerKind.ACTIVITY_RETRY, activity.dispatch_due_ms, sid, activity.attempt))
    return effects + _schedule_to_start_timer(ex, activity)


EFFECTS: dict[str, EffectsOf] = {
    EventType.ActivityTaskScheduled: _on_scheduled, EventType.ActivityTaskCancelRequested: _on_cancel_requested,
    EventType.ActivityTaskStarted: _on_started, EventType.ActivityTaskFailed: _on_failed, EventType.ActivityTaskTimedOut: _on_failed,
}


def released_effects(ex: Execution, t: Transition, before: Pending) -> list[Effect]:
    """The timers of the activities the transition ended go; a started one dropped with its run
    is told to stop rather than run to a timeout."""
    finished = {attributes(e)["scheduled_event_id"] for e in t.events + t.buffered if event_type(e) in ACTIVITY_RESULTS}
    effects: list[Effect] = []
    for activity in (activity for sid, activity in before.activities.items() if sid not in ex.activities):
        if ex.status != RUNNING and activity.started_event_id and activity.scheduled_event_id not in finished:
            effects.append((EffectType.ActivityCancellation, activity_cancellation_effect(activity)))
        effects.extend(_released_timers(ex, activity))
    return effects


def _released_timers(ex: Execution, activity: ActivityState) -> list[Effect]:
    sid, attempt = activity.scheduled_event_id, activity.attempt
    effects = [drop(ex, TimerKind.ACTIVITY_SCHEDULE_TO_CLOSE, sid, 1)] if activity.schedule_to_close_timeout_ms else []
    if activity.started_event_id:
        effects.append(drop(ex, TimerKind.ACTIVITY_START_TO_CLOSE, sid, attempt))
        if activity.heartbeat_timeout_ms:
            effects.append(drop(ex, TimerKind.ACTIVITY_HEARTBEAT, sid, attempt))
        return effects
    effects.append(drop(ex, TimerKind.ACTIVITY_RETRY, sid, attempt))
    if activity.schedule_to_start_timeout_ms:
        effects.append(drop(ex, TimerKind.ACTIVITY_SCHEDULE_TO_START, sid, attempt))
    return effects
