"""The run's clock: time skipping (docs/decisions/0006-time-skipping.md).

A run's commands are decided at the log-append time plus its `clock_offset_ms`, zero unless it was
started with time skipping. A run that may skip (`TimeSkipping.enabled`) and has nothing in flight
jumps to its next deadline: the transition that leaves it so sets a `TIME_SKIP` timer due at once,
keyed by its next event id; its firing records `WorkflowExecutionTimeSkipped`, which moves the
offset, and sets every pending timer again at its new wall-clock time, so the due one fires at
once through the timer service. History refuses time skipping unless it runs with
KADENCE_TIME_SKIPPING=1, which only test stacks set.
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace
from typing import NamedTuple

from kadence.protocol.names import WITH_START, CommandType, EventType, TimerKind
from kadence.protocol.records import TimeoutFired, TimeSkipping, UpdateWorkflowTimeSkipping
from kadence.protocol.settings import TIME_SKIPPING, SettingError
from services.history.machine import schedule
from services.history.machine.effects import outbound, timer
from services.history.machine.execution import RUNNING, Execution, Pending, run_timeout_ms
from services.history.machine.execution import TimeSkipping as SkippingState
from services.history.machine.records import Effect, HistoryEvent, Record, attributes, event_type
from services.history.machine.tables import Apply, Decide, EffectsOf, Timeout
from services.history.machine.transition import Rejected, Transition


@functools.cache
def time_skipping_allowed() -> bool:
    """Whether this history service takes runs that skip time (KADENCE_TIME_SKIPPING=1: test stacks
    only; deploy/ never sets it). Every instance must be set alike."""
    raw = os.environ.get(TIME_SKIPPING, "")
    if raw not in ("", "0", "1"):
        raise SettingError(f"{TIME_SKIPPING}={raw!r}: set it to 1 (a test stack whose runs may skip time) or leave it unset")
    return raw == "1"


def check_allowed(what: str) -> None:
    if not time_skipping_allowed():
        raise Rejected(f"{what}: time skipping is off on this server. It is for test stacks only: "
                       "kadence.testing.WorkflowEnvironment.start_time_skipping() starts one (KADENCE_TIME_SKIPPING=1)")


def start_of(kind: str, body: Record) -> Record | None:
    """The StartWorkflowExecution a command carries (a start, or the start of a with-start), which
    gives the run it starts its clock; None for any other command."""
    if kind == CommandType.StartWorkflowExecution:
        return body
    return body["start"] if kind in WITH_START else None


def check_command(kind: str, body: Record) -> None:
    """Every command that asks for time skipping passes here before it is decided: a start with it
    (or with its run's clock ahead), an update of a run's, a schedule's patch; refused unless the
    server allows it, or when the setting cannot apply."""
    if (start := start_of(kind, body)) is not None:
        if start.get("time_skipping") is not None or start.get("clock_offset_ms"):
            check_allowed("a start with time skipping")
            _check_setting(start.get("time_skipping"))
    elif kind == CommandType.UpdateWorkflowTimeSkipping:
        check_allowed(kind)
        _check_setting(body["time_skipping"])
    elif kind in (CommandType.CreateSchedule, CommandType.PatchSchedule) and (setting := body["patch"].get("time_skipping")):
        check_allowed("a schedule's time skipping")
        _check_setting(setting)
        if setting["enabled"] and not setting["fast_forward_ms"]:
            raise Rejected("a schedule's time skipping needs a fast_forward_ms bound: a schedule never ends, so it would skip for ever")


def _check_setting(setting: TimeSkipping | None) -> None:
    if setting is None:
        return
    if setting["fast_forward_ms"] < 0:
        raise Rejected(f"time skipping: fast_forward_ms {setting['fast_forward_ms']} is negative")
    if setting["fast_forward_ms"] and not setting["enabled"]:
        raise Rejected("time skipping: a fast-forward needs skipping enabled")


# ---- what a run passes on


def inherited(ex: Execution, now_ms: int) -> Record:
    """The clock and the skipping of the run that continues `ex` (continue-as-new, cron): as it
    stands now, the bound left as it was."""
    ts = ex.time_skipping
    setting: TimeSkipping | None = None if ts is None else {
        "enabled": ts.enabled, "fast_forward_ms": max(1, ts.until_ms - now_ms) if ts.until_ms else 0,
        "disable_propagation": ts.disable_propagation,
    }
    return {"time_skipping": setting, "clock_offset_ms": ex.clock_offset_ms}


# ---- apply


def _updated(ex: Execution, event: HistoryEvent) -> None:
    attrs = attributes(event)
    setting = attrs["time_skipping"]
    ex.time_skipping = SkippingState(setting["enabled"], attrs["until_ms"], attrs["request_id"], setting["disable_propagation"])


def _skipped(ex: Execution, event: HistoryEvent) -> None:
    attrs = attributes(event)
    ex.clock_offset_ms += attrs["skipped_ms"]
    if attrs["bound_reached"] and ex.time_skipping is not None:
        ex.time_skipping = replace(ex.time_skipping, enabled=False, until_ms=0)


APPLY: dict[str, Apply] = {
    EventType.WorkflowExecutionTimeSkippingUpdated: _updated, EventType.WorkflowExecutionTimeSkipped: _skipped,
}

# ---- commands


def _update(ex: Execution, cmd: UpdateWorkflowTimeSkipping, identity: str, now_ms: int) -> Transition:
    setting = cmd["time_skipping"]
    if cmd["request_id"] and ex.time_skipping is not None and ex.time_skipping.request_id == cmd["request_id"]:
        return Transition(ex, now_ms, repeat=True)
    t = Transition(ex, now_ms)
    t.add(EventType.WorkflowExecutionTimeSkippingUpdated, {
        "time_skipping": setting, "until_ms": now_ms + setting["fast_forward_ms"] if setting["fast_forward_ms"] else 0,
        "request_id": cmd["request_id"], "identity": identity,
    })
    return t


COMMANDS: dict[str, Decide] = {CommandType.UpdateWorkflowTimeSkipping: _update}

# ---- the skip


def _skip_due(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    """The TIME_SKIP timer: jump, if the run is still as it was when the timer was set."""
    target = skip_target(ex, now_ms) if cmd["scheduled_event_id"] == ex.next_event_id else None
    if target is None:
        raise Rejected("stale time skip: the run moved on")
    if ex.schedule is not None:  # its events carry its whole state: it records its own
        return schedule.skipped(ex, now_ms, target.to_ms, target.bound_reached)
    t = Transition(ex, now_ms)
    request_id = ex.time_skipping.request_id if target.bound_reached and ex.time_skipping is not None else ""
    t.add(EventType.WorkflowExecutionTimeSkipped, {
        "skipped_ms": target.to_ms - now_ms, "bound_reached": target.bound_reached, "request_id": request_id,
    })
    return t


TIMEOUTS: dict[str, Timeout] = {TimerKind.TIME_SKIP: _skip_due}


class Target(NamedTuple):
    to_ms: int  # the virtual time the clock jumps to
    bound_reached: bool


def skip_target(ex: Execution, now_ms: int) -> Target | None:
    """Where the run's clock jumps at `now_ms` (virtual): to its next deadline, or to its
    fast-forward's bound if that comes first; None when it may not skip, has work in flight, or
    its next deadline is due already (it fires on its own)."""
    ts = ex.time_skipping
    if ts is None or not ts.enabled or ex.status != RUNNING or _in_flight(ex, now_ms):
        return None
    next_ms = min((fire_at for _, fire_at, _, _ in pending_timers(ex)), default=None)
    if ts.until_ms and (next_ms is None or ts.until_ms <= next_ms):
        return Target(max(ts.until_ms, now_ms), True)
    if next_ms is None or next_ms <= now_ms:
        return None
    return Target(next_ms, False)


def _in_flight(ex: Execution, now_ms: int) -> bool:
    """Work a worker or another workflow is doing, or is about to: a workflow task (but a first one
    waiting out its start delay), an activity attempt (but one waiting out its retry backoff), a
    child, a request to another workflow, an update, a buffered event; a schedule's runs running or
    buffered (so its actions of a skipped week run one after another, as they would have)."""
    if ex.schedule_info is not None:
        return bool(ex.schedule_info["running"] or ex.schedule_info["buffered"])
    if ex.buffered or ex.children or ex.external_requests or ex.updates:
        return True
    if ex.workflow_task is not None and _delayed_first_task(ex) is None:
        return True
    return any(a.started_event_id or a.dispatch_due_ms <= now_ms for a in ex.activities.values())


def _delayed_first_task(ex: Execution) -> int | None:
    """When the run's first workflow task goes to a worker, if a start delay or a cron schedule holds it back."""
    wt = ex.workflow_task
    if wt is None or wt.scheduled_event_id != 2 or wt.attempt != 1 or wt.started_event_id or not ex.first_task_backoff_ms:
        return None
    return ex.history[0]["event_time_ms"] + ex.first_task_backoff_ms


# (kind, virtual fire time, scheduled event id, attempt): a timer as machine/effects.timer sets it.
PendingTimer = tuple[str, int, int, int]


def pending_timers(ex: Execution) -> list[PendingTimer]:
    """The timers an idle run has pending, each at its virtual time, as the families set them: its
    user timers, its activities' retry backoffs and schedule-to-close deadlines, its run timeout,
    a delayed first workflow task."""
    if ex.schedule_info is not None:  # a schedule's one timer: its next action's
        info = ex.schedule_info
        return [(TimerKind.SCHEDULE_ACTION, info["timer_fire_ms"], info["timer_event_id"], 1)] if info["timer_event_id"] else []
    pending: list[PendingTimer] = []
    for started_event_id in ex.timers.values():
        started = _event(ex, started_event_id)
        pending.append((TimerKind.USER_TIMER, started["event_time_ms"] + attributes(started)["start_to_fire_timeout_ms"],
                        started_event_id, 1))
    for sid, activity in ex.activities.items():
        if not activity.started_event_id:
            pending.append((TimerKind.ACTIVITY_RETRY, activity.dispatch_due_ms, sid, activity.attempt))
        if activity.schedule_to_close_timeout_ms:
            closes_at = activity.scheduled_time_ms + activity.schedule_to_close_timeout_ms
            pending.append((TimerKind.ACTIVITY_SCHEDULE_TO_CLOSE, closes_at, sid, 1))
    if timeout_ms := run_timeout_ms(ex.started):
        pending.append((TimerKind.WORKFLOW_RUN_TIMEOUT, ex.history[0]["event_time_ms"] + timeout_ms, 1, 1))
    if (first_task_due := _delayed_first_task(ex)) is not None and ex.workflow_task is not None:
        pending.append((TimerKind.WORKFLOW_TASK_RETRY, first_task_due, ex.workflow_task.scheduled_event_id, 1))
    return pending


def _event(ex: Execution, event_id: int) -> HistoryEvent:
    """One of a running run's events (it holds them all, from event 1)."""
    event = ex.history[event_id - 1]
    assert event["event_id"] == event_id, f"run {ex.run_id} holds event {event['event_id']} at {event_id}"
    return event


def catch_up(t: Transition, clock_offset_ms: int) -> None:
    """A run that skips time hears of a run whose clock is ahead (its child's close): its own clock
    jumps there first, so time never runs backwards from cause to effect."""
    ex = t.execution
    if ex.time_skipping is None or clock_offset_ms <= ex.clock_offset_ms:
        return
    skipped_ms = clock_offset_ms - ex.clock_offset_ms
    t.add(EventType.WorkflowExecutionTimeSkipped, {"skipped_ms": skipped_ms, "bound_reached": False, "request_id": ""})
    t.now_ms += skipped_ms  # the events after the jump are on the new clock


# ---- effects


def _on_skipped(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    """Every pending timer again, at its wall-clock time under the new offset: the due one fires at
    once. A fast-forward's end stops the children skipping too."""
    effects = [timer(ex, kind, fire_at, sid, attempt) for kind, fire_at, sid, attempt in pending_timers(ex)]
    return effects + _propagated(ex, event) if attributes(event)["bound_reached"] else effects


def _on_updated(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    """The run's children skip (or stop) as it does: a test awaiting a parent's result waits for its children too."""
    return _propagated(ex, event)


def _propagated(ex: Execution, event: HistoryEvent) -> list[Effect]:
    """UpdateWorkflowTimeSkipping to each child the run has pending, with the run's skipping as the
    event leaves it (no bound: the parent's own bound stops them), unless it disables propagation."""
    ts = ex.time_skipping
    if ts is None or ts.disable_propagation:
        return []
    setting: TimeSkipping = {"enabled": ts.enabled, "fast_forward_ms": 0, "disable_propagation": False}
    return [outbound(child.workflow_id, CommandType.UpdateWorkflowTimeSkipping, {
        "run_id": child.run_id, "request_id": f"{ex.run_id}/{event['event_id']}/{initiated}", "time_skipping": setting,
    }) for initiated, child in sorted(ex.children.items())]


_SKIPPED = (EventType.WorkflowExecutionTimeSkipped, EventType.ScheduleTimeSkipped)
EFFECTS: dict[str, EffectsOf] = {
    **dict.fromkeys(_SKIPPED, _on_skipped), EventType.WorkflowExecutionTimeSkippingUpdated: _on_updated,
}


def skip_effects(ex: Execution, t: Transition, before: Pending) -> list[Effect]:
    """The TIME_SKIP timer, due at once, when the transition leaves a run that may skip idle with a
    deadline ahead (the run's virtual now moved by the transition's own skip, if it made one)."""
    if ex.time_skipping is None:
        return []
    now_ms = t.now_ms + sum(attributes(e)["skipped_ms"] for e in t.events if event_type(e) in _SKIPPED)
    if skip_target(ex, now_ms) is None:
        return []
    return [timer(ex, TimerKind.TIME_SKIP, now_ms, ex.next_event_id, 1)]
