"""What one command does to one execution: a `Transition`, the content of one HistoryBatch."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from kadence.exceptions import RetryState
from kadence.protocol.events import CLOSE_STATUS, INITIATED, failure_record
from kadence.protocol.limits import encoded_bytes_bound
from kadence.protocol.names import CommandType, EffectType, EventType
from kadence.protocol.records import Failure, WorkflowTaskScheduled
from services.history.machine.execution import HISTORY_IDENTITY, Execution, WorkflowTaskState
from services.history.machine.records import (
    ActivityHeartbeat,
    Effect,
    EventAttributes,
    HistoryBatch,
    HistoryEvent,
    NextRun,
    Rejection,
    event_type,
    history_batch,
    history_event,
)


class Rejected(Exception):
    """The command does not apply to the execution's current state; the message says why, and
    `cause` says it in a word a client can act on."""

    def __init__(self, reason: str, cause: str = "INVALID_ARGUMENT") -> None:
        super().__init__(reason)
        self.cause = cause


@dataclass(frozen=True)
class Redispatch:
    """A task dispatched again because no worker started it (its record lost, or no worker polling)."""

    task: str  # "workflow" or "activity"
    scheduled_event_id: int
    waited_ms: int  # since the workflow task was scheduled, or the activity attempt was due


@dataclass
class Transition:
    """What one command does to one execution: the content of one HistoryBatch."""

    execution: Execution
    now_ms: int
    events: list[HistoryEvent] = field(default_factory=list)
    buffered: list[HistoryEvent] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    heartbeats: list[ActivityHeartbeat] = field(default_factory=list)
    next_run: "Transition | None" = None  # the run a continue-as-new starts in the same record
    redispatch: "Redispatch | None" = None
    # Activities whose first attempt the completing worker runs itself (eager execution): no task is dispatched.
    eager_activities: set[int] = field(default_factory=set)
    # The request id of the eager activity starts this transition records, or their refusal
    # (a request the command carried that did not apply though the command did).
    eager_request_id: str = ""
    refused: Rejection | None = None
    # The same request again (its request id answered before: a client's retry, a relay's
    # redelivery): nothing to record, and its answer was given then.
    repeat: bool = False
    # The transient workflow task this transition leaves (a new attempt, or one started): written
    # as state, since no event records it (docs/architecture.md, "Transient workflow tasks").
    workflow_task: WorkflowTaskState | None = None
    # A reset's new run: its first events are the base run's, copied, which derive no effects
    # (reset.resumed_effects sets going what was pending at the point).
    copied_events: int = 0
    # A workflow task's command recorded an event its workflow must hear of in a task of its own
    # (a Nexus operation canceled at once): a new workflow task follows the completion's events.
    wake_workflow: bool = False
    first_event_id: int = field(init=False)  # the run's next event id when it was decided

    def __post_init__(self) -> None:
        self.first_event_id = self.execution.next_event_id

    @property
    def next_event_id(self) -> int:
        return self.first_event_id + len(self.events)

    @functools.cached_property
    def record_bytes_bound(self) -> int:
        """An upper bound of the encoded HistoryBatch this transition makes (taken before it applies)."""
        return batch_bytes_bound(self)

    def add(self, event_type: str, attributes: EventAttributes, event_time_ms: int | None = None) -> int:
        event_id = self.next_event_id
        self.events.append(history_event(event_id, self.now_ms if event_time_ms is None else event_time_ms, event_type, attributes))
        return event_id

    def refuse_eager_starts(self, request_id: str, why: str) -> None:
        """Refuse the eager activity starts a workflow task completion asked for (`record_eager_starts`)."""
        self.refused = {"request_id": request_id, "command": CommandType.RespondWorkflowTaskCompleted, "cause": "INVALID_ARGUMENT",
                        "reason": f"the eager activity attempts were not started ({why}); any scheduled go to the task queue"}

    def add_workflow_visible(self, event_type: str, attributes: EventAttributes) -> None:
        """Buffer the event while a workflow task is in flight, else write it and schedule a task
        (one per transition, after its last workflow-visible event). A standalone run has no
        workflow to tell: its work's end closes it (decisions 0007 and 0008)."""
        if self.execution.standalone:
            self.add(event_type, attributes)
            if event_type != EventType.NexusOperationStarted:  # else its handler workflow's close ends the operation
                self.add(*_standalone_close(event_type, attributes))
            return
        if self.execution.workflow_task is not None:
            self.buffered.append(history_event(0, self.now_ms, event_type, attributes))
            return
        if self.events and self.events[-1]["attributes"] == (EventType.WorkflowTaskScheduled, self._first_task_attributes()):
            self.events.pop()
        self.add(event_type, attributes)
        self.add(EventType.WorkflowTaskScheduled, self._first_task_attributes())

    def _first_task_attributes(self) -> WorkflowTaskScheduled:
        return {"task_queue": self.execution.task_queue, "attempt": 1}

    def flush_buffered(self) -> None:
        for event in self.execution.buffered:
            event_type, attributes = event["attributes"]
            self.add(event_type, attributes)

    def batch(
        self, source_partition: int, source_offset: int, effects: list[Effect] | None = None,
        next_run_effects: list[Effect] | None = None, request_ids: list[str] | None = None,
    ) -> HistoryBatch:
        """The HistoryBatch of this transition, with the effects derived once it applied."""
        ex = self.execution
        following: NextRun | None = None if self.next_run is None else {
            "run_id": self.next_run.execution.run_id, "events": self.next_run.events, "effects": next_run_effects or [],
        }
        return history_batch(
            ex.workflow_id, ex.run_id, self.first_event_id, source_partition, source_offset, events=self.events,
            buffered=self.buffered, effects=effects or [], heartbeats=self.heartbeats, next_run=following,
            request_ids=request_ids or [], refusals=[self.refused] if self.refused else [],
            workflow_task=self.workflow_task.as_transient() if self.workflow_task is not None else None,
        )


# How a standalone run's work ended (its activity's, or its Nexus operation's end), as the run's close.
_STANDALONE_CLOSES: dict[str, str] = {
    EventType.ActivityTaskCompleted: EventType.WorkflowExecutionCompleted,
    EventType.NexusOperationCompleted: EventType.WorkflowExecutionCompleted,
    EventType.ActivityTaskFailed: EventType.WorkflowExecutionFailed,
    EventType.NexusOperationFailed: EventType.WorkflowExecutionFailed,
    EventType.ActivityTaskTimedOut: EventType.WorkflowExecutionTimedOut,
    EventType.NexusOperationTimedOut: EventType.WorkflowExecutionTimedOut,
    EventType.ActivityTaskCanceled: EventType.WorkflowExecutionCanceled,
    EventType.NexusOperationCanceled: EventType.WorkflowExecutionCanceled,
}


def _standalone_close(event_type: str, attributes: EventAttributes) -> tuple[str, EventAttributes]:
    """The event that closes a standalone run after its work's end: the result, the last failure,
    the timeout (TimedOut, as Temporal's status says, with the timeout's failure), or the cancellation."""
    attrs = cast(Mapping[str, Any], attributes)
    close = _STANDALONE_CLOSES.get(event_type)
    if close == EventType.WorkflowExecutionCompleted:
        return close, cast(EventAttributes, {
            "result": attrs.get("result"), "workflow_task_completed_event_id": 0, "new_execution_run_id": "",
        })
    if close == EventType.WorkflowExecutionTimedOut:  # a Nexus operation's schedule-to-close deadline is not retried past
        return close, cast(EventAttributes, {
            "retry_state": attrs.get("retry_state", RetryState.TIMEOUT.value), "new_execution_run_id": "", "failure": attrs["failure"],
        })
    if close == EventType.WorkflowExecutionFailed:
        return close, cast(EventAttributes, {
            "failure": attrs["failure"], "workflow_task_completed_event_id": 0, "new_execution_run_id": "",
        })
    if close == EventType.WorkflowExecutionCanceled:
        return close, cast(EventAttributes, {
            "details": attrs.get("details", []), "workflow_task_completed_event_id": 0,
        })
    raise Rejected(f"a standalone run has no workflow to tell of {event_type}", "WORKFLOW_NOT_FOUND")


def engine_failure(message: str, failure_type: str) -> Failure:
    """A Failure the history service itself records (a timeout, a bad command)."""
    return failure_record(message, failure_type, HISTORY_IDENTITY)


def batch_bytes_bound(t: Transition) -> int:
    """An upper bound of the encoded HistoryBatch `t` makes, its workflow tasks' events left out
    (the history service drops those from a record that would not fit: the worker reads them)."""
    ex = t.execution
    transient = t.workflow_task.as_transient() if t.workflow_task is not None else None
    size = encoded_bytes_bound([ex.workflow_id, ex.run_id, t.buffered, t.heartbeats, transient]) + 1024
    for run in (t, t.next_run):
        if run is None:
            continue
        ids = encoded_bytes_bound([run.execution.workflow_id, run.execution.run_id]) + 64
        # Each event sets at most a few timers or drops them, or sends a task: ids and names.
        per_event = 4 * ids + encoded_bytes_bound([run.execution.task_queue, run.execution.workflow_type])
        size += encoded_bytes_bound(run.events) + per_event * len(run.events)
        size += encoded_bytes_bound([e for e in run.events if _repeated_by_effect(run.execution, e)])
        size += encoded_bytes_bound([
            (kind, {**effect, "history": []} if kind == EffectType.WorkflowTask else effect) for kind, effect in run.effects
        ])
        if any(event_type(e) in CLOSE_STATUS for e in run.events):  # what a close cancels, drops and tells children
            size += sum(encoded_bytes_bound(a.task_queue) + 4 * ids for a in run.execution.activities.values())
            size += ids * len(run.execution.timers)
            size += sum(2 * encoded_bytes_bound(c.workflow_id) + ids + 256 for c in run.execution.children.values())
    return size


def _repeated_by_effect(ex: Execution, event: HistoryEvent) -> bool:
    """Whether an effect of `event` repeats its content: the task or command it sends."""
    kind = event_type(event)
    return kind == EventType.ActivityTaskScheduled or kind in INITIATED or (kind in CLOSE_STATUS and ex.parent is not None)
