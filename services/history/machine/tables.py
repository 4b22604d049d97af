"""The shapes of the tables each family module exports, which `dispatch` joins."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kadence.protocol.events import EVENT_FOR_COMMAND
from services.history.machine.execution import Execution
from services.history.machine.records import Effect, HistoryEvent, Record
from services.history.machine.transition import Transition

Apply = Callable[[Execution, HistoryEvent], None]  # an event's effect on the execution's state
Decide = Callable[[Execution, Record, str, int], Transition]  # (execution, command, identity, now_ms)
Timeout = Callable[[Execution, Record, int], Transition]  # (execution, TimeoutFired, now_ms)
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


def _no_check(ex: Execution, attrs: Record, planned: Planned) -> str | None:
    return None


@dataclass(frozen=True)
class TaskCommand:
    """A command of a completed workflow task: how it is checked and what it records."""

    bad_attributes: str  # Temporal's WorkflowTaskFailedCause when it cannot apply
    record: Callable[[Transition, Record, int, str], None]  # (transition, attributes, WorkflowTaskCompleted event id, identity)
    check: Callable[[Execution, Record, Planned], str | None] = _no_check  # why it cannot apply, or None
    required: tuple[str, ...] = ()  # attributes it needs set


def recorded_as_given(command: str, bad_attributes: str, required: tuple[str, ...] = ()) -> TaskCommand:
    """A command whose event carries its attributes as they are (plus the completing task's event id)."""
    def record(t: Transition, attrs: Record, completed_id: int, identity: str) -> None:
        t.add(EVENT_FOR_COMMAND[command], {**attrs, "workflow_task_completed_event_id": completed_id})

    return TaskCommand(bad_attributes, record, required=required)
