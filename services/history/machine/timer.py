"""User timers: StartTimer and CancelTimer, TimerStarted, TimerFired and TimerCanceled."""

from __future__ import annotations

from kadence.protocol.names import EventType, TaskCommandType, TimerKind
from kadence.protocol.records import CancelTimer, StartTimer, TimeoutFired, TimerCanceled, TimerFired, TimerStarted
from services.history.machine.effects import drop, timer
from services.history.machine.execution import Execution, Pending
from services.history.machine.records import Effect, HistoryEvent, attributes
from services.history.machine.tables import Apply, EffectsOf, Planned, TaskCommand, Timeout
from services.history.machine.transition import Rejected, Transition

# ---- apply


def _started(ex: Execution, event: HistoryEvent) -> None:
    ex.timers[attributes(event)["timer_id"]] = event["event_id"]


def _ended(ex: Execution, event: HistoryEvent) -> None:
    ex.timers.pop(attributes(event)["timer_id"], None)


APPLY: dict[str, Apply] = {EventType.TimerStarted: _started, EventType.TimerFired: _ended, EventType.TimerCanceled: _ended}

# ---- the workflow task's commands


def _check_start(ex: Execution, attrs: StartTimer, planned: Planned) -> str | None:
    if attrs["start_to_fire_timeout_ms"] <= 0:
        return f"timer {attrs['timer_id']}: start_to_fire_timeout must be positive"
    if attrs["timer_id"] in planned.timers:
        return f"timer {attrs['timer_id']} is already pending"
    planned.timers.add(attrs["timer_id"])
    return None


def _started_event(t: Transition, attrs: StartTimer, completed_id: int, identity: str) -> TimerStarted:
    return {**attrs, "workflow_task_completed_event_id": completed_id}


def _check_cancel(ex: Execution, attrs: CancelTimer, planned: Planned) -> str | None:
    return None if attrs["timer_id"] in ex.timers else f"timer {attrs['timer_id']} is not pending"


def _canceled_event(t: Transition, attrs: CancelTimer, completed_id: int, identity: str) -> TimerCanceled:
    return {
        "timer_id": attrs["timer_id"], "started_event_id": t.execution.timers[attrs["timer_id"]],
        "workflow_task_completed_event_id": completed_id,
    }


TASK_COMMANDS: dict[str, TaskCommand] = {
    TaskCommandType.StartTimer: TaskCommand("BAD_START_TIMER_ATTRIBUTES", _started_event, _check_start),
    TaskCommandType.CancelTimer: TaskCommand("BAD_CANCEL_TIMER_ATTRIBUTES", _canceled_event, _check_cancel),
}

# ---- timeouts


def _fired(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    fired = next((tid for tid, started in ex.timers.items() if started == cmd["scheduled_event_id"]), None)
    if fired is None:
        raise Rejected("stale user timer")
    t = Transition(ex, now_ms)
    t.add_workflow_visible(EventType.TimerFired, TimerFired(timer_id=fired, started_event_id=cmd["scheduled_event_id"]))
    return t


TIMEOUTS: dict[str, Timeout] = {TimerKind.USER_TIMER: _fired}

# ---- effects


def _set(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    """Due from the timer's start (the transition's time, or a reset's copied start)."""
    fire_at = event["event_time_ms"] + attributes(event)["start_to_fire_timeout_ms"]
    return [timer(ex, TimerKind.USER_TIMER, fire_at, event["event_id"], 1)]


EFFECTS: dict[str, EffectsOf] = {EventType.TimerStarted: _set}


def released_effects(ex: Execution, t: Transition, before: Pending) -> list[Effect]:
    """The timers the transition ended (fired, canceled, dropped with the run) are dropped."""
    return [drop(ex, TimerKind.USER_TIMER, started_event_id, 1) for started_event_id in sorted(before.timers - set(ex.timers.values()))]
