"""The shapes of the tables each family module exports, which `dispatch` joins."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from kadence.protocol.events import EVENT_FOR_COMMAND
from kadence.protocol.records import TimeoutFired
from services.history.machine.execution import Execution
from services.history.machine.records import Effect, EventAttributes, HistoryEvent
from services.history.machine.transition import Rejected, Transition

Apply = Callable[[Execution, HistoryEvent], None]  # an event's effect on the execution's state
# (execution, command, identity, now_ms): the command is its branch's TypedDict of kadence.protocol.records.
Decide = Callable[[Execution, Any, str, int], Transition]
Timeout = Callable[[Execution, TimeoutFired, int], Transition]  # (execution, the timer's firing, now_ms)
EffectsOf = Callable[[Execution, Transition, HistoryEvent], list[Effect]]  # (applied execution, transition, event)


@dataclass
class Planned:
    """What the commands of a workflow task checked so far leave pending: the next is checked against it."""

    timers: set[str]
    updates: dict[str, str]
    activity_ids: set[str]

    @classmethod
    def of(cls, ex: Execution) -> Planned:
        return cls(set(ex.timers), dict(ex.updates), {activity.activity_id for activity in ex.activities.values()})


def _no_check(ex: Execution, attrs: Any, planned: Planned) -> str | None:
    return None


def _nothing_more(t: Transition, attrs: Any, event_id: int) -> None:
    return None


@dataclass(frozen=True)
class TaskCommand:
    """A command of a completed workflow task: how it is checked, and what it records. Its event is
    the one EVENT_FOR_COMMAND names (workflow_task.py records it); only FOLLOWING_EVENT's commands
    record another after it. A command's attributes are its own TypedDict of kadence.protocol.records."""

    bad_attributes: str  # Temporal's WorkflowTaskFailedCause when it cannot apply
    # Its event's attributes, from (transition, its attributes, WorkflowTaskCompleted event id, identity).
    event: Callable[[Transition, Any, int, str], EventAttributes]
    check: Callable[[Execution, Any, Planned], str | None] = _no_check  # why it cannot apply, or None
    required: tuple[str, ...] = ()  # attributes it needs set
    # What it does once its event is recorded, from (transition, its attributes, its event's id).
    then: Callable[[Transition, Any, int], None] = _nothing_more


def recorded_as_given(bad_attributes: str, required: tuple[str, ...] = ()) -> TaskCommand:
    """A command whose event carries its attributes as they are, plus the completing task's event id
    (the schemas give the event every field of the command)."""
    def event(t: Transition, attrs: Mapping[str, Any], completed_id: int, identity: str) -> EventAttributes:
        return cast(EventAttributes, {**attrs, "workflow_task_completed_event_id": completed_id})

    return TaskCommand(bad_attributes, event, required=required)


def missing_attributes(kind: str, command: TaskCommand, attrs: Mapping[str, Any]) -> str | None:
    missing = [name for name in command.required if not attrs[name]]
    return f"{kind} needs {' and '.join(missing)}" if missing else None


def record_alone(t: Transition, kind: str, command: TaskCommand, attrs: Any) -> None:
    """Record a workflow task's command with no workflow task: a standalone run's only work, which
    its start schedules (decisions 0007 and 0008), checked as a workflow's command is; a command
    that cannot apply refuses the start with the reason."""
    problem = missing_attributes(kind, command, attrs) or command.check(t.execution, attrs, Planned.of(t.execution))
    if problem:
        raise Rejected(problem)
    t.add(EVENT_FOR_COMMAND[kind], command.event(t, attrs, 0, ""))
