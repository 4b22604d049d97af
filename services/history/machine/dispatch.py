"""The machine's dispatchers, joined from the families' tables: `decide` a command, `evolve` an
execution by a batch, `derive_effects` of an applied transition. Each is a lookup, as Temporal's
one switch calls one Apply per event type."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from kadence.protocol.events import SCHEDULE_EVENTS
from kadence.protocol.limits import payload_bytes
from kadence.protocol.names import SCHEDULE_COMMANDS, SCHEDULE_KEY_PREFIX, CommandType, EffectType
from kadence.protocol.records import TimeoutFired
from services.history.machine import activity, child, clock, lifecycle, messages, nexus, schedule, timer, workflow_task
from services.history.machine.execution import RUNNING, Execution, Pending, WorkflowTaskState, execution_from_start
from services.history.machine.limits import within_history_limit
from services.history.machine.records import (
    ActivityHeartbeat,
    Effect,
    HistoryBatch,
    HistoryEvent,
    Record,
    TransientWorkflowTask,
    event_type,
)
from services.history.machine.tables import Apply, Decide, EffectsOf, Timeout
from services.history.machine.transition import Rejected, Transition

_FAMILIES = (lifecycle, workflow_task, activity, timer, child, messages, schedule, clock, nexus)
T = TypeVar("T")


def _joined(tables: list[Mapping[str, T]]) -> dict[str, T]:
    """One table from the families' tables; a name two families claim is a bug."""
    joined: dict[str, T] = {}
    for table in tables:
        overlap = joined.keys() & table.keys()
        assert not overlap, f"claimed by two families: {sorted(overlap)}"
        joined.update(table)
    return joined


APPLY: dict[str, Apply] = _joined([family.APPLY for family in _FAMILIES])
EFFECTS: dict[str, EffectsOf] = _joined([getattr(family, "EFFECTS", {}) for family in _FAMILIES])
TIMEOUTS: dict[str, Timeout] = _joined([getattr(family, "TIMEOUTS", {}) for family in _FAMILIES])
# What the transition's end of pending work drops or tells others, in this order; last, the time
# skip of a run it leaves idle.
RELEASED: tuple[Callable[[Execution, Transition, Pending], list[Effect]], ...] = (
    activity.released_effects, timer.released_effects, child.released_effects, nexus.released_effects, clock.skip_effects,
)

# Commands that may leave the run id empty: they are for the workflow id's current run.
# What a standalone run takes (decisions 0007 and 0008): a cancel request, a termination and its
# timers, and its work's reports: a standalone activity's attempts', a standalone Nexus operation's
# handler's answers and its handler workflow's close.
_STANDALONE_RUN_COMMANDS = {CommandType.RequestCancelWorkflowExecution, CommandType.TerminateWorkflowExecution, CommandType.TimeoutFired}
_STANDALONE_ACTIVITY_COMMANDS = activity.REPORTS | {CommandType.RecordActivityTaskStarted} | _STANDALONE_RUN_COMMANDS
_STANDALONE_NEXUS_COMMANDS = nexus.COMMANDS.keys() | _STANDALONE_RUN_COMMANDS
_CURRENT_RUN_COMMANDS = {
    CommandType.SignalWorkflowExecution, CommandType.RequestCancelWorkflowExecution, CommandType.TerminateWorkflowExecution,
    CommandType.UpdateWorkflowExecution, CommandType.UpdateSchedule, CommandType.PatchSchedule, CommandType.DeleteSchedule,
    CommandType.UpdateWorkflowTimeSkipping,
}


def timeout_fired(ex: Execution, cmd: TimeoutFired, identity: str, now_ms: int) -> Transition:
    """A timer's firing, and the timer dropped in the same record: the timer service, reading the
    log again after a restart or a rebalance, forgets the timer there rather than fire it again. A
    timer the transition sets again under the same id (a re-dispatch) comes after the drop and stands."""
    t = TIMEOUTS[cmd["kind"]](ex, cmd, now_ms)
    t.effects.insert(0, (EffectType.DropTimer, {"timer_id": cmd["timer_id"]}))
    return t


COMMANDS: dict[str, Decide] = _joined([
    *(getattr(family, "COMMANDS", {}) for family in _FAMILIES), {CommandType.TimeoutFired: timeout_fired},
])


def decide(ex: Execution, kind: str, cmd: Record, identity: str, now_ms: int) -> Transition:
    """What a command (not a start) does to the execution; raises Rejected with the cause."""
    by_activity_id = kind in activity.REPORTS and cmd.get("activity_id")  # an async handle without a run id: the current run
    addressed_here = (kind in _CURRENT_RUN_COMMANDS or by_activity_id) and cmd["run_id"] == ""
    if cmd["run_id"] != ex.run_id and not addressed_here and not child.answers_a_reset_run(ex, kind, cmd):
        raise Rejected(f"run {cmd['run_id']} is not the current run ({ex.run_id})", "WORKFLOW_NOT_FOUND")
    is_schedule = ex.workflow_id.startswith(SCHEDULE_KEY_PREFIX)  # a deleted one read back from its row holds no schedule
    if kind != CommandType.TimeoutFired and is_schedule != (kind in SCHEDULE_COMMANDS):
        entity = "schedule" if is_schedule else "workflow execution"
        raise Rejected(f"{kind} does not apply to a {entity}", "WORKFLOW_NOT_FOUND")
    if ex.standalone_activity and kind not in _STANDALONE_ACTIVITY_COMMANDS:
        raise Rejected(f"{kind} does not apply to a standalone activity", "WORKFLOW_NOT_FOUND")
    if ex.standalone_nexus_operation and kind not in _STANDALONE_NEXUS_COMMANDS:
        raise Rejected(f"{kind} does not apply to a standalone Nexus operation", "WORKFLOW_NOT_FOUND")
    if is_schedule and schedule.repeated(ex, cmd):
        return Transition(ex, now_ms, repeat=True)  # a change sent again: answered as it was
    if is_schedule and ex.status != RUNNING:
        raise Rejected("schedule not found: it was deleted", "WORKFLOW_NOT_FOUND")
    if ex.status != RUNNING:
        raise Rejected(f"workflow execution is {ex.status}", "WORKFLOW_CLOSED")
    handler = COMMANDS.get(kind)
    if handler is None:
        raise Rejected(f"unknown command {kind}")
    return within_history_limit(handler(ex, cmd, identity, now_ms))


def _apply(ex: Execution, event: HistoryEvent) -> None:
    """State effect of one event. Buffered events are applied twice (when buffered, when written):
    only events whose effect is idempotent (removing a finished activity) are ever buffered."""
    apply = APPLY.get(event["attributes"][0])
    if apply is not None:  # the others (a marker, an upsert) change nothing the machine keeps
        apply(ex, event)


def evolve(ex: Execution, batch: HistoryBatch) -> None:
    """Fold a batch into the execution (live and recovery)."""
    fold(ex, batch["events"], batch["buffered"], batch["heartbeats"], batch.get("workflow_task"))


def fold(
    ex: Execution, events: list[HistoryEvent], buffered: list[HistoryEvent], heartbeats: list[ActivityHeartbeat],
    transient: TransientWorkflowTask | None = None,
) -> None:
    """Fold a batch's parts into the execution: its buffered events first, as they were buffered,
    and its transient workflow task last. A new attempt of one ends the attempt before, as an
    ended task's event would: the batch that schedules it writes what was buffered. A closed run
    keeps its events: a reset may copy them (the reset retention, docs/architecture.md, "Reset");
    memory lets the run go once a checkpoint stores them."""
    if transient is not None and _new_attempt(ex.workflow_task, transient):
        ex.buffered = []
    for event in buffered:
        _apply(ex, event)
        ex.buffered.append(event)
    for event in events:
        _apply(ex, event)
        ex.history.append(event)
        ex.next_event_id = event["event_id"] + 1
        ex.history_bytes += payload_bytes(event["attributes"][1])
    for heartbeat in heartbeats:
        activity.apply_heartbeat(ex, heartbeat)
    if transient is not None and ex.status == RUNNING:
        ex.workflow_task = WorkflowTaskState.from_transient(transient)
    if ex.schedule is not None:
        ex.history, ex.history_bytes = ex.history[-1:], 0  # its last event holds its whole state


def _new_attempt(current: WorkflowTaskState | None, transient: TransientWorkflowTask) -> bool:
    return current is None or (current.scheduled_event_id, current.attempt) != (transient["scheduled_event_id"], transient["attempt"])


def new_execution(workflow_id: str, run_id: str, first: HistoryEvent) -> Execution:
    """An execution from the event that begins its state: a run's WorkflowExecutionStarted, or any
    of a schedule's events (each carries its whole state)."""
    if event_type(first) in SCHEDULE_EVENTS:
        return schedule.execution_from_schedule_event(workflow_id, run_id, first)
    return execution_from_start(workflow_id, run_id, first)


def execution_from_events(workflow_id: str, run_id: str, events: list[HistoryEvent]) -> Execution:
    """A run's state from its events, the first being WorkflowExecutionStarted (a schedule's: any of its events)."""
    ex = new_execution(workflow_id, run_id, events[0])
    fold(ex, events, [], [])
    return ex


def derive_effects(ex: Execution, t: Transition, before: Pending) -> list[Effect]:
    """The tasks, timers and outbound commands the transition's events call for (Temporal's task
    generator). `ex` has the transition applied; `before` is what it had pending: the timers of
    what it no longer has go."""
    effects: list[Effect] = []
    for event in t.events[t.copied_events:] if t.copied_events else t.events:  # no copy of the list on the hot path
        effects_of = EFFECTS.get(event["attributes"][0])
        if effects_of is not None:
            effects.extend(effects_of(ex, t, event))
    for released in RELEASED:
        effects.extend(released(ex, t, before))
    return effects
