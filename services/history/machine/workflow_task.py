"""The workflow task: scheduled, dispatched (again while no worker starts it), started, and
completed with the commands a worker's workflow code decided, failed or timed out and retried."""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import replace
from typing import cast

from kadence.common import workflow_task_backoff_ms
from kadence.protocol.codec import history_batch_codec, writes_field
from kadence.protocol.events import CLOSE_COMMANDS, EVENT_FOR_COMMAND, WORKFLOW_TASK_TOO_LARGE
from kadence.protocol.limits import name_problem, payload_problem
from kadence.protocol.names import CommandType, EffectType, EventType, TaskCommandType, TimerKind
from kadence.protocol.records import (
    EagerWorkflowTask,
    Failure,
    RecordWorkflowTaskStarted,
    RespondWorkflowTaskCompleted,
    RespondWorkflowTaskFailed,
    TimeoutFired,
    WorkflowTask,
)
from kadence.protocol.records import RespondWorkflowTaskCompletedCommands as TaskCommandRecord
from services.history.machine import activity, child, lifecycle, messages, nexus, timer
from services.history.machine.effects import TASK_REDISPATCH_MS, drop, redispatch_delay_ms
from services.history.machine.effects import timer as timer_effect
from services.history.machine.execution import RUNNING, Execution, WorkflowTaskState
from services.history.machine.limits import terminated_as_too_large
from services.history.machine.records import Effect, HistoryEvent, Record, attributes, event_type
from services.history.machine.tables import (
    Apply,
    Decide,
    EffectsOf,
    Planned,
    TaskCommand,
    Timeout,
    missing_attributes,
    recorded_as_given,
)
from services.history.machine.transition import Redispatch, Rejected, Transition, engine_failure

# A transient task's last_cause when its attempt timed out (the others are Temporal's WorkflowTaskFailedCause).
START_TO_CLOSE_TIMEOUT = "START_TO_CLOSE_TIMEOUT"
_ENDED = (EventType.WorkflowTaskCompleted, EventType.WorkflowTaskFailed, EventType.WorkflowTaskTimedOut)

# ---- apply


def _scheduled(ex: Execution, event: HistoryEvent) -> None:
    ex.workflow_task = WorkflowTaskState(event["event_id"], attributes(event)["attempt"])


def _started(ex: Execution, event: HistoryEvent) -> None:
    assert ex.workflow_task is not None
    ex.workflow_task.started_event_id = event["event_id"]
    ex.workflow_task.started_identity = attributes(event)["identity"]


def _ended(ex: Execution, event: HistoryEvent) -> None:
    ex.workflow_task = None
    ex.buffered = []  # the same batch writes them next


APPLY: dict[str, Apply] = {
    EventType.WorkflowTaskScheduled: _scheduled, EventType.WorkflowTaskStarted: _started, **{kind: _ended for kind in _ENDED},
}

# ---- commands: the worker's

# A worker's start or answer of a workflow task attempt.
TaskAnswer = RecordWorkflowTaskStarted | RespondWorkflowTaskCompleted | RespondWorkflowTaskFailed


def _same_attempt(wt: WorkflowTaskState, cmd: TaskAnswer) -> None:
    """An answer or start names the attempt it was dispatched as (0: a release that did not say):
    a transient task keeps its ids from one attempt to the next, so only the attempt tells a late
    answer to an attempt since retried from one to the current attempt."""
    if cmd.get("attempt") and cmd["attempt"] != wt.attempt:
        raise Rejected(f"workflow task {wt.scheduled_event_id} is at attempt {wt.attempt}; attempt {cmd['attempt']} was retried")


def _started_task(ex: Execution, cmd: RespondWorkflowTaskCompleted | RespondWorkflowTaskFailed, identity: str) -> WorkflowTaskState:
    wt, scheduled_event_id = ex.workflow_task, cmd["scheduled_event_id"]
    if wt is None or wt.scheduled_event_id != scheduled_event_id or wt.started_event_id == 0:
        raise Rejected(f"no started workflow task with scheduled_event_id={scheduled_event_id}")
    _same_attempt(wt, cmd)
    if wt.started_identity != identity:
        raise Rejected(f"workflow task {scheduled_event_id} was started by {wt.started_identity!r}, not {identity!r}")
    return wt


def _pending_task(ex: Execution, cmd: TaskAnswer) -> WorkflowTaskState:
    wt, scheduled_event_id = ex.workflow_task, cmd["scheduled_event_id"]
    if wt is None or wt.scheduled_event_id != scheduled_event_id or wt.started_event_id != 0:
        raise Rejected(f"no pending workflow task with scheduled_event_id={scheduled_event_id}")
    _same_attempt(wt, cmd)
    return wt


def _record_started(t: Transition, wt: WorkflowTaskState, identity: str, started_time_ms: int | None) -> int:
    # The worker's start time, which its workflow code already read as workflow.now(): a replay reads the same.
    return t.add(EventType.WorkflowTaskStarted, {"scheduled_event_id": wt.scheduled_event_id, "identity": identity},
                 event_time_ms=started_time_ms or None)


def _transient_started(wt: WorkflowTaskState, identity: str, started_time_ms: int) -> WorkflowTaskState:
    """A transient task started: state only, its WorkflowTaskStarted is written with its answer."""
    return replace(wt, started_event_id=wt.scheduled_event_id + 1, started_identity=identity, started_time_ms=started_time_ms)


def _task_started(ex: Execution, cmd: RecordWorkflowTaskStarted, identity: str, now_ms: int) -> Transition:
    wt = _pending_task(ex, cmd)
    t = Transition(ex, now_ms)
    if not wt.transient:
        _record_started(t, wt, identity, cmd.get("started_time_ms"))
        return t
    t.workflow_task = _transient_started(wt, identity, cmd.get("started_time_ms") or now_ms)
    t.effects += [drop(ex, TimerKind.WORKFLOW_TASK_RETRY, wt.scheduled_event_id, wt.attempt),
                  timer_effect(ex, TimerKind.WORKFLOW_TASK_START_TO_CLOSE, now_ms + ex.workflow_task_timeout_ms,
                               wt.scheduled_event_id, wt.attempt)]
    return t


def _answered_task(t: Transition, cmd: RespondWorkflowTaskCompleted | RespondWorkflowTaskFailed, identity: str) -> WorkflowTaskState:
    """The task an answer is for: started before, or started by the answer itself (it carries the
    start the worker held back while the task ran: docs/architecture.md, "Workflow task start").
    Then its WorkflowTaskStarted comes first in the same batch, its re-dispatch timer goes, and no
    start-to-close timer is set for a task already over (`_on_started`)."""
    ex = t.execution
    started_time_ms = cmd.get("started_time_ms")
    if started_time_ms is None:
        return _started_task(ex, cmd, identity)
    wt = _pending_task(ex, cmd)
    t.effects.append(drop(ex, TimerKind.WORKFLOW_TASK_RETRY, wt.scheduled_event_id, wt.attempt))
    if wt.transient:
        return _transient_started(wt, identity, started_time_ms)
    return replace(wt, started_event_id=_record_started(t, wt, identity, started_time_ms), started_identity=identity)


def _recorded(t: Transition, wt: WorkflowTaskState) -> WorkflowTaskState:
    """The task as events record it: a transient task's WorkflowTaskScheduled and WorkflowTaskStarted
    are written now, by the attempt that completes (or fails for a new reason), as Temporal writes
    them; the ids they take may be past those the attempt was dispatched with."""
    if not wt.transient:
        return wt
    ex = t.execution
    scheduled_event_id = t.add(EventType.WorkflowTaskScheduled, {"task_queue": ex.task_queue, "attempt": wt.attempt},
                               event_time_ms=wt.scheduled_time_ms)
    started_event_id = t.add(EventType.WorkflowTaskStarted, {"scheduled_event_id": scheduled_event_id, "identity": wt.started_identity},
                             event_time_ms=wt.started_time_ms)
    t.effects.append(drop(ex, TimerKind.WORKFLOW_TASK_START_TO_CLOSE, wt.scheduled_event_id, wt.attempt))
    return WorkflowTaskState(scheduled_event_id, wt.attempt, started_event_id, wt.started_identity)


def _task_completed(ex: Execution, cmd: RespondWorkflowTaskCompleted, identity: str, now_ms: int) -> Transition:
    t = Transition(ex, now_ms)
    wt = _answered_task(t, cmd, identity)
    runs_on = False
    if ex.buffered and any(kind in CLOSE_COMMANDS for kind, _ in cmd["commands"]):
        # New events arrived while the task ran: the workflow must see them before it may close.
        _fail(t, wt, "UNHANDLED_COMMAND", None, identity, retried=False)
    elif problem := _invalid_command(ex, cmd["commands"]):
        cause, message = problem
        failure: Failure = {**engine_failure(message, "BadCommandAttributes"), "non_retryable": True}
        _fail(t, wt, cause, failure, identity, retried=True)
    else:
        runs_on = _record_commands(t, _recorded(t, wt), cmd["commands"], identity)
    activity.record_eager_starts(t, cmd, identity)
    if runs_on and (ex.buffered or t.wake_workflow):
        t.flush_buffered()
        t.add(EventType.WorkflowTaskScheduled, {"task_queue": ex.task_queue, "attempt": 1})
    return t


def _record_commands(t: Transition, wt: WorkflowTaskState, commands: list[TaskCommandRecord], identity: str) -> bool:
    """WorkflowTaskCompleted and each command's events (the event EVENT_FOR_COMMAND names, and what
    its `then` adds), up to a command that closes the run; whether the run goes on."""
    completed_id = t.add(EventType.WorkflowTaskCompleted, {
        "scheduled_event_id": wt.scheduled_event_id, "started_event_id": wt.started_event_id, "identity": identity,
    })
    for kind, attrs in commands:
        command = TASK_COMMANDS[kind]
        command.then(t, attrs, t.add(EVENT_FOR_COMMAND[kind], command.event(t, attrs, completed_id, identity)))
        if kind in CLOSE_COMMANDS:
            return False
    return True


def _invalid_command(ex: Execution, commands: list[TaskCommandRecord]) -> tuple[str, str] | None:
    """The first command that cannot apply, as (Temporal's WorkflowTaskFailedCause, message)."""
    counts = Counter[str](kind for kind, _ in commands)
    limit = activity.pending_limit(ex, counts) or child.pending_limit(ex, counts)
    if limit:
        return limit
    planned = Planned.of(ex)
    for kind, attrs in commands:
        command = TASK_COMMANDS[kind]
        problem = name_problem(ex.workflow_id, attrs) or payload_problem(attrs, kind) or missing_attributes(kind, command, attrs)
        if problem or (problem := command.check(ex, attrs, planned)):
            return command.bad_attributes, problem
    return None


def _task_failed(ex: Execution, cmd: RespondWorkflowTaskFailed, identity: str, now_ms: int) -> Transition:
    t = Transition(ex, now_ms)
    wt = _answered_task(t, cmd, identity)
    if cmd["cause"] == WORKFLOW_TASK_TOO_LARGE:  # every attempt would fail alike
        return terminated_as_too_large(t, cmd["failure"]["message"][:10_000])
    _fail(t, wt, cmd["cause"], cmd["failure"], identity, retried=True)
    return t


def _fail(t: Transition, wt: WorkflowTaskState, cause: str, failure: Failure | None, identity: str, *, retried: bool) -> None:
    """The task failed: `retried`, its next attempt retries it after a backoff, as a transient task
    (the first failure is recorded, the ones after only counted, as Temporal does); else (new
    events it did not see) a new task follows at once."""
    if not (retried and wt.transient):
        wt = _recorded(t, wt)
        t.add(EventType.WorkflowTaskFailed, {
            "scheduled_event_id": wt.scheduled_event_id, "started_event_id": wt.started_event_id,
            "cause": cause, "failure": failure, "identity": identity, "base_run_id": "", "new_run_id": "",
        })
    if retried:
        _next_attempt(t, wt, cause, failure)
    else:
        t.flush_buffered()
        t.add(EventType.WorkflowTaskScheduled, {"task_queue": t.execution.task_queue, "attempt": 1})


@functools.cache
def _retries_are_transient() -> bool:
    """Whether retried attempts may be transient: the HistoryBatch version this process writes
    carries them (one pinned to an earlier release's version, KADENCE_SCHEMA_PIN, records every
    attempt's events, as that release did)."""
    return writes_field(history_batch_codec(), "HistoryBatch", "workflow_task")


def _next_attempt(t: Transition, wt: WorkflowTaskState, cause: str, failure: Failure | None) -> None:
    """The next attempt of a task that failed or timed out: a transient task, dispatched after its
    backoff. It keeps the ids the task's events would take now (after the events it writes, those
    buffered while the attempt ran: the next attempt sees them)."""
    ex = t.execution
    t.flush_buffered()
    if not _retries_are_transient():
        t.add(EventType.WorkflowTaskScheduled, {"task_queue": ex.task_queue, "attempt": wt.attempt + 1})
        return
    if wt.transient:  # a recorded task's timers go with its end event (`_on_ended`)
        t.effects.append(drop(ex, TimerKind.WORKFLOW_TASK_START_TO_CLOSE, wt.scheduled_event_id, wt.attempt))
    retry = WorkflowTaskState(t.next_event_id, wt.attempt + 1, transient=True, scheduled_time_ms=t.now_ms,
                              last_cause=cause, last_failure=failure)
    t.workflow_task = retry
    t.effects.append(timer_effect(ex, TimerKind.WORKFLOW_TASK_RETRY, t.now_ms + workflow_task_backoff_ms(retry.attempt),
                                  retry.scheduled_event_id, retry.attempt))


COMMANDS: dict[str, Decide] = {
    CommandType.RecordWorkflowTaskStarted: _task_started,
    CommandType.RespondWorkflowTaskCompleted: _task_completed,
    CommandType.RespondWorkflowTaskFailed: _task_failed,
}

# Every command a workflow task may complete with, from the family that owns it.
TASK_COMMANDS: dict[str, TaskCommand] = {
    **lifecycle.TASK_COMMANDS, **activity.TASK_COMMANDS, **timer.TASK_COMMANDS, **child.TASK_COMMANDS,
    **messages.TASK_COMMANDS, **nexus.TASK_COMMANDS,
    TaskCommandType.RecordMarker: recorded_as_given("BAD_RECORD_MARKER_ATTRIBUTES", ("marker_name",)),
}

# ---- timeouts


def _start_to_close_timed_out(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    wt = ex.workflow_task
    if (wt is None or wt.scheduled_event_id != cmd["scheduled_event_id"] or not wt.started_event_id
            or (wt.transient and wt.attempt != cmd["attempt"])):
        raise Rejected("stale workflow task timeout")
    t = Transition(ex, now_ms)
    if not wt.transient:
        t.add(EventType.WorkflowTaskTimedOut, {
            "scheduled_event_id": wt.scheduled_event_id, "started_event_id": wt.started_event_id, "timeout_type": "START_TO_CLOSE",
        })
    failure = engine_failure(f"workflow task attempt {wt.attempt} did not complete within its start-to-close timeout "
                             f"({ex.workflow_task_timeout_ms / 1000:g} s)", "WorkflowTaskTimeout")
    _next_attempt(t, wt, START_TO_CLOSE_TIMEOUT, failure)
    return t


def _retry_due(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    """Its start delay or backoff ended, or no worker started it yet: dispatched (again)."""
    wt = ex.workflow_task
    if wt is None or wt.scheduled_event_id != cmd["scheduled_event_id"] or wt.attempt != cmd["attempt"] or wt.started_event_id:
        raise Rejected("stale workflow task retry timer")
    t = Transition(ex, now_ms)
    if _waited_ms(ex, wt, now_ms) >= _first_dispatch_delay_ms(ex, wt) + TASK_REDISPATCH_MS:
        t.redispatch = Redispatch("workflow", wt.scheduled_event_id, _waited_ms(ex, wt, now_ms))
    # Marked so: a worker may be running the task already, its start not recorded yet, so the one
    # that reads this copy runs its local activities only once history accepted its start.
    t.effects.extend(_dispatch(ex, wt, now_ms, redispatched=t.redispatch is not None))
    return t


TIMEOUTS: dict[str, Timeout] = {
    TimerKind.WORKFLOW_TASK_START_TO_CLOSE: _start_to_close_timed_out, TimerKind.WORKFLOW_TASK_RETRY: _retry_due,
}

# ---- effects


def workflow_task_effect(ex: Execution, wt: WorkflowTaskState, *, redispatched: bool = False) -> Record:
    """The task carries the events after the previous started workflow task's WorkflowTaskScheduled:
    what a worker that ran that task (and caches the run) lacks; a worker without the run reads the
    earlier events from the read model. So a task's size follows what happened since the previous
    one, not the whole history (Temporal sends a sticky worker the same part).

    A task no worker can be counted on to hold the run for carries the whole history, as Temporal
    sends a task that left the sticky queue: a retry (the worker whose attempt failed let the run
    go) and a task dispatched again (its first worker may be gone). Those are what an overloaded
    worker meets, and they then never wait for the read model, which lags most then too."""
    known = 0 if wt.attempt > 1 or redispatched else _known_to_sticky_worker(ex, wt)
    history = []
    for event in reversed(ex.history):
        if event["event_id"] <= known:
            break
        if event["event_id"] <= wt.scheduled_event_id:
            history.append(event)
    history.reverse()
    return {
        "task_queue": ex.task_queue, "workflow_type": ex.workflow_type,
        "scheduled_event_id": wt.scheduled_event_id, "attempt": wt.attempt, "first_event_id": known + 1, "history": history,
        "redispatched": redispatched, "clock_offset_ms": ex.clock_offset_ms,
    }


def _known_to_sticky_worker(ex: Execution, wt: WorkflowTaskState) -> int:
    """The last event a worker that ran the previous started workflow task has: its scheduled event."""
    for event in reversed(ex.history):
        if event_type(event) == EventType.WorkflowTaskStarted and event["event_id"] < wt.scheduled_event_id:
            return int(attributes(event)["scheduled_event_id"])
    return 0


def eager_workflow_task(ex: Execution, t: Transition) -> EagerWorkflowTask | None:
    """The first workflow task of the run `t` started, if `t` recorded it started too (an eager start:
    lifecycle._start_eagerly), for the start's answer: the task as `_dispatch` would have sent it
    (`ex` applied), and its start's time, which its activation takes as workflow.now()."""
    wt = ex.workflow_task
    if wt is None or wt.transient or not wt.started_event_id or not _scheduled_in(t, wt.scheduled_event_id):
        return None
    started = t.events[wt.started_event_id - t.first_event_id]
    return {"task": cast(WorkflowTask, workflow_task_effect(ex, wt)), "started_time_ms": started["event_time_ms"]}


def _dispatch(ex: Execution, wt: WorkflowTaskState, now_ms: int, *, redispatched: bool = False) -> list[Effect]:
    """The task for a worker, and the timer that dispatches it again if no worker starts it (the
    retry timer: when it fires, a task still not started is dispatched again)."""
    fire_at = now_ms + redispatch_delay_ms(_waited_ms(ex, wt, now_ms))
    return [(EffectType.WorkflowTask, workflow_task_effect(ex, wt, redispatched=redispatched)),
            timer_effect(ex, TimerKind.WORKFLOW_TASK_RETRY, fire_at, wt.scheduled_event_id, wt.attempt)]


def _waited_ms(ex: Execution, wt: WorkflowTaskState, now_ms: int) -> int:
    """How long the workflow task has waited since it was scheduled (0 if its event is not in memory)."""
    if wt.transient:
        return now_ms - wt.scheduled_time_ms
    scheduled = ex.history[wt.scheduled_event_id - 1] if len(ex.history) >= wt.scheduled_event_id else None
    return now_ms - scheduled["event_time_ms"] if scheduled and scheduled["event_id"] == wt.scheduled_event_id else 0


def _first_dispatch_delay_ms(ex: Execution, wt: WorkflowTaskState) -> int:
    """How long after it was scheduled the workflow task was first dispatched: the start delay of a
    first task, the backoff of a retried one. Its retry timer firing 10 s or more after that is a
    re-dispatch (a backoff timer fired that late counts as one too)."""
    if wt.attempt > 1:
        return workflow_task_backoff_ms(wt.attempt)
    return ex.first_task_backoff_ms if wt.scheduled_event_id == 2 else 0


def _on_scheduled(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    """The task goes to a worker at once, or when its start delay or retry backoff ends."""
    wt = ex.workflow_task
    if wt is None or wt.scheduled_event_id != event["event_id"]:  # over in the same transition
        return []
    if wt.started_event_id:  # started with its schedule (an eager start): it goes to its worker in the start's answer
        return []
    started = next((attributes(e) for e in t.events if event_type(e) == EventType.WorkflowExecutionStarted), None)
    if started is not None and started.get("first_workflow_task_backoff_ms"):  # a start delay
        fire_at = t.now_ms + started["first_workflow_task_backoff_ms"]
        return [timer_effect(ex, TimerKind.WORKFLOW_TASK_RETRY, fire_at, wt.scheduled_event_id, wt.attempt)]
    if wt.attempt == 1:
        return _dispatch(ex, wt, t.now_ms)
    # A retry recorded as an event (a build pinned to a release before transient tasks): after its backoff.
    return [timer_effect(ex, TimerKind.WORKFLOW_TASK_RETRY, t.now_ms + _first_dispatch_delay_ms(ex, wt), wt.scheduled_event_id, wt.attempt)]


def _on_started(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    """Its start-to-close timer is set, its re-dispatch dropped; neither for a task its start's
    own batch answered or whose run it ended (`_answered_task` dropped the re-dispatch)."""
    scheduled_event_id = attributes(event)["scheduled_event_id"]
    if _recorded_in(t, _ENDED, scheduled_event_id) or ex.status != RUNNING:  # over, or its run ended in the same batch
        return []
    effects = [timer_effect(ex, TimerKind.WORKFLOW_TASK_START_TO_CLOSE, t.now_ms + ex.workflow_task_timeout_ms, scheduled_event_id, 1)]
    if ex.workflow_task is not None and not _scheduled_in(t, scheduled_event_id):  # one scheduled with it was never dispatched
        effects.append(drop(ex, TimerKind.WORKFLOW_TASK_RETRY, scheduled_event_id, ex.workflow_task.attempt))
    return effects


def _on_ended(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    scheduled_event_id = attributes(event)["scheduled_event_id"]
    if _recorded_in(t, (EventType.WorkflowTaskStarted,), scheduled_event_id):  # started by its answer: no start-to-close timer was set
        return []
    return [drop(ex, TimerKind.WORKFLOW_TASK_START_TO_CLOSE, scheduled_event_id, 1)]


def _scheduled_in(t: Transition, scheduled_event_id: int) -> bool:
    """Whether the transition writes the task's WorkflowTaskScheduled."""
    return t.first_event_id <= scheduled_event_id < t.next_event_id


def _recorded_in(t: Transition, kinds: tuple[str, ...], scheduled_event_id: int) -> bool:
    """Whether the transition records an event of these kinds for the task."""
    return any(event_type(e) in kinds and attributes(e)["scheduled_event_id"] == scheduled_event_id for e in t.events)


EFFECTS: dict[str, EffectsOf] = {
    EventType.WorkflowTaskScheduled: _on_scheduled, EventType.WorkflowTaskStarted: _on_started, **{kind: _on_ended for kind in _ENDED},
}
