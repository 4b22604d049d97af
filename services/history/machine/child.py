"""Child workflows, and the signals and cancel requests a run sends other workflows: each an
*Initiated event whose OutboundCommand the target's history answers (kadence.protocol.events.INITIATED)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import cast

from kadence.protocol.events import CHILD_RESULT_FOR_STATUS, CHILD_RESULTS, CLOSE_STATUS, INITIATED, INITIATED_BY_ANSWER, RESET_CAUSE
from kadence.protocol.limits import MAX_PENDING_CHILDREN, MAX_PENDING_EXTERNAL_REQUESTS
from kadence.protocol.names import CommandType, EventType, TaskCommandType
from kadence.protocol.records import (
    ChildWorkflowExecutionStarted,
    RecordChildExecutionClosed,
    RecordChildExecutionStarted,
    RecordExternalRequestOutcome,
    StartChildWorkflowExecution,
    StartChildWorkflowExecutionFailed,
    StartChildWorkflowExecutionInitiated,
)
from services.history.machine import clock
from services.history.machine.effects import outbound
from services.history.machine.execution import RUNNING, ChildState, Execution, ExternalRequest, Pending
from services.history.machine.records import Effect, EventAttributes, HistoryEvent, Record, attributes, event_type
from services.history.machine.tables import Apply, Decide, EffectsOf, TaskCommand, recorded_as_given
from services.history.machine.transition import Rejected, Transition

_START_CHILD = EventType.StartChildWorkflowExecutionInitiated

# ---- apply


def _child_initiated(ex: Execution, event: HistoryEvent) -> None:
    attrs = attributes(event)
    ex.children[event["event_id"]] = ChildState(
        event["event_id"], attrs["workflow_id"], attrs["workflow_type"], attrs["parent_close_policy"],
    )


def _child_started(ex: Execution, event: HistoryEvent) -> None:
    attrs = attributes(event)
    if (child := ex.children.get(attrs["initiated_event_id"])) is not None:
        child.run_id = attrs["run_id"]
        child.started_event_id = event["event_id"]


def _child_ended(ex: Execution, event: HistoryEvent) -> None:
    ex.children.pop(attributes(event)["initiated_event_id"], None)


def _external_initiated(ex: Execution, event: HistoryEvent) -> None:
    attrs = attributes(event)
    ex.external_requests[event["event_id"]] = ExternalRequest(event_type(event), attrs["workflow_id"], attrs["run_id"])


def _external_answered(ex: Execution, event: HistoryEvent) -> None:
    ex.external_requests.pop(attributes(event)["initiated_event_id"], None)


_EXTERNAL = {kind: sent for kind, sent in INITIATED.items() if kind != _START_CHILD}

APPLY: dict[str, Apply] = {
    _START_CHILD: _child_initiated,
    INITIATED[_START_CHILD].applied: _child_started,
    INITIATED[_START_CHILD].failed: _child_ended,
    **{result: _child_ended for result in CHILD_RESULTS},
    **{kind: _external_initiated for kind in _EXTERNAL},
    **{answer: _external_answered for sent in _EXTERNAL.values() for answer in (sent.applied, sent.failed)},
}

# ---- the workflow task's commands


def pending_limit(ex: Execution, counts: Counter[str]) -> tuple[str, str] | None:
    if len(ex.children) + counts[TaskCommandType.StartChildWorkflowExecution] > MAX_PENDING_CHILDREN:
        return "PENDING_CHILD_WORKFLOWS_LIMIT_EXCEEDED", f"at most {MAX_PENDING_CHILDREN} child workflows may be pending"
    external = counts[TaskCommandType.SignalExternalWorkflowExecution] + counts[TaskCommandType.RequestCancelExternalWorkflowExecution]
    if len(ex.external_requests) + external > MAX_PENDING_EXTERNAL_REQUESTS:
        return "PENDING_SIGNALS_LIMIT_EXCEEDED", (
            f"at most {MAX_PENDING_EXTERNAL_REQUESTS} signals and cancel requests to other workflows may await their answer"
        )
    return None


def _start_child_event(
    t: Transition, attrs: StartChildWorkflowExecution, completed_id: int, identity: str,
) -> StartChildWorkflowExecutionInitiated:
    return {
        "workflow_id": attrs["workflow_id"], "workflow_type": attrs["workflow_type"],
        "task_queue": attrs["task_queue"] or t.execution.task_queue, "input": attrs["input"],
        "workflow_execution_timeout_ms": attrs["execution_timeout_ms"], "workflow_run_timeout_ms": attrs["run_timeout_ms"],
        "workflow_task_timeout_ms": attrs["workflow_task_timeout_ms"], "id_reuse_policy": attrs["id_reuse_policy"],
        "parent_close_policy": attrs["parent_close_policy"], "search_attributes": attrs["search_attributes"],
        "workflow_task_completed_event_id": completed_id, "header": attrs.get("header", {}), "memo": attrs.get("memo", {}),
    }


TASK_COMMANDS: dict[str, TaskCommand] = {
    TaskCommandType.StartChildWorkflowExecution: TaskCommand(
        "BAD_START_CHILD_EXECUTION_ATTRIBUTES", _start_child_event, required=("workflow_id", "workflow_type"),
    ),
    TaskCommandType.SignalExternalWorkflowExecution: recorded_as_given(
        "BAD_SIGNAL_WORKFLOW_EXECUTION_ATTRIBUTES", ("workflow_id", "signal_name"),
    ),
    TaskCommandType.RequestCancelExternalWorkflowExecution: recorded_as_given(
        "BAD_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_ATTRIBUTES",
        ("workflow_id",),
    ),
}

# ---- commands: the targets' answers


def _start_recorded(ex: Execution, cmd: RecordChildExecutionStarted, identity: str, now_ms: int) -> Transition:
    child = ex.children.get(cmd["initiated_event_id"])
    if child is None or child.run_id:
        raise Rejected(f"no child workflow awaits its start with initiated_event_id={cmd['initiated_event_id']}")
    t = Transition(ex, now_ms)
    _record_child_started(t, child, cmd["child_run_id"])
    return t


def _record_child_started(t: Transition, child: ChildState, run_id: str) -> None:
    t.add_workflow_visible(INITIATED[_START_CHILD].applied, ChildWorkflowExecutionStarted(
        workflow_id=child.workflow_id, run_id=run_id, workflow_type=child.workflow_type, initiated_event_id=child.initiated_event_id,
    ))


# What a child's close event carries besides the child's ids, by its close status.
_CLOSE_FIELDS = {"Completed": ("result",), "Failed": ("failure", "retry_state"), "Canceled": ("details",), "TimedOut": ("retry_state",)}


def _close_recorded(ex: Execution, cmd: RecordChildExecutionClosed, identity: str, now_ms: int) -> Transition:
    child = ex.children.get(cmd["initiated_event_id"])
    if child is None:
        raise Rejected(f"no pending child workflow with initiated_event_id={cmd['initiated_event_id']}")
    status = cmd["status"]
    if status not in CHILD_RESULT_FOR_STATUS or (status == "Failed" and cmd.get("failure") is None):
        raise Rejected(f"child close status {status!r}: expected one of {sorted(CHILD_RESULT_FOR_STATUS)}, Failed with its failure")
    t = Transition(ex, now_ms)
    clock.catch_up(t, cmd.get("clock_offset_ms", 0))
    if not child.run_id:  # the start's answer is missing: the close implies it
        _record_child_started(t, child, cmd["child_run_id"])
    # The ids every child result event has, and the fields of the status's own (_CLOSE_FIELDS).
    t.add_workflow_visible(CHILD_RESULT_FOR_STATUS[status], cast(EventAttributes, {
        "workflow_id": child.workflow_id, "run_id": cmd["child_run_id"], "workflow_type": child.workflow_type,
        "initiated_event_id": child.initiated_event_id, "started_event_id": child.started_event_id,
        **{name: cmd.get(name) for name in _CLOSE_FIELDS.get(status, ())},
    }))
    return t


# The cause a parent records when its command did not apply at the target.
_START_CHILD_FAILED_CAUSE = {"WORKFLOW_ALREADY_STARTED": "WORKFLOW_ALREADY_EXISTS"}
_EXTERNAL_FAILED_CAUSE = {
    "WORKFLOW_NOT_FOUND": "EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND", "WORKFLOW_CLOSED": "EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND",
}


def _outcome_recorded(ex: Execution, cmd: RecordExternalRequestOutcome, identity: str, now_ms: int) -> Transition:
    initiated, cause = cmd["initiated_event_id"], cmd.get("cause", "")
    t = Transition(ex, now_ms)
    child = ex.children.get(initiated)
    if child is not None and not child.run_id and cause:
        t.add_workflow_visible(INITIATED[_START_CHILD].failed, StartChildWorkflowExecutionFailed(
            workflow_id=child.workflow_id, workflow_type=child.workflow_type,
            cause=_START_CHILD_FAILED_CAUSE.get(cause, cause), initiated_event_id=initiated,
        ))
        return t
    request = ex.external_requests.get(initiated)
    if request is None:
        raise Rejected(f"no request awaits an answer with initiated_event_id={initiated}")
    answered: Record = {"workflow_id": request.workflow_id, "run_id": request.run_id, "initiated_event_id": initiated}
    if cause:
        answered["cause"] = _EXTERNAL_FAILED_CAUSE.get(cause, cause)
    sent = INITIATED[request.initiated]
    # An External*Signaled or *CancelRequested, or with the cause the request's *Failed.
    t.add_workflow_visible(sent.failed if cause else sent.applied, cast(EventAttributes, answered))
    return t


COMMANDS: dict[str, Decide] = {
    CommandType.RecordChildExecutionStarted: _start_recorded,
    CommandType.RecordChildExecutionClosed: _close_recorded,
    CommandType.RecordExternalRequestOutcome: _outcome_recorded,
}


def answers_a_reset_run(ex: Execution, kind: str, cmd: Record) -> bool:
    """Whether an answer addressed to another run is this run's: the run that initiated the request
    was reset, and this run, whose history copied the initiated event, still awaits the answer (as
    Temporal delivers a child's completion to its parent's reset run)."""
    if kind not in COMMANDS:
        return False
    initiated = cmd["initiated_event_id"]
    awaited = initiated in ex.children or initiated in ex.external_requests
    return awaited and bool(cmd["run_id"]) and writer_of(ex, initiated) == cmd["run_id"]


def writer_of(ex: Execution, event_id: int) -> str:
    """The run that wrote event `event_id` of this run's history, where it initiated a request. A
    reset copies its base run's history up to the reset's WorkflowTaskFailed, which names the new
    run, so the event was written by the new run of the last reset before it; before any, by the
    first run of the resets' line, which wrote the start (`original_execution_run_id`, set by a
    reset only)."""
    writer = ""
    for event in ex.history:
        if event["event_id"] >= event_id:
            break
        if event_type(event) == EventType.WorkflowTaskFailed and attributes(event)["cause"] == RESET_CAUSE:
            writer = cast(str, attributes(event)["new_run_id"])
    if writer:
        return writer
    started = attributes(ex.history[0]) if ex.history else {}
    return cast(str, started.get("original_execution_run_id") or ex.run_id)


def is_answer(event: HistoryEvent, initiated: set[int]) -> bool:
    """Whether the event answers one of the requests initiated at `initiated` (a child's start or
    result, a signal's or cancel request's outcome)."""
    return event_type(event) in INITIATED_BY_ANSWER and attributes(event)["initiated_event_id"] in initiated


def ended(events: list[HistoryEvent], initiated: set[int]) -> set[int]:
    """Which of the requests initiated at `initiated` these events end (all answers but a child's start)."""
    return {attributes(e)["initiated_event_id"] for e in events
            if is_answer(e, initiated) and event_type(e) != INITIATED[_START_CHILD].applied}

# ---- effects


def _initiator(ex: Execution, event: HistoryEvent) -> Record:
    """Who sent the command: where the target's answer goes."""
    return {"workflow_id": ex.workflow_id, "run_id": ex.run_id, "initiated_event_id": event["event_id"]}


def _start_child(ex: Execution, event: HistoryEvent) -> Record:
    attrs = attributes(event)
    root_workflow_id, root_run_id = ex.root
    return {
        "workflow_type": attrs["workflow_type"], "task_queue": attrs["task_queue"], "input": attrs["input"],
        "execution_timeout_ms": attrs["workflow_execution_timeout_ms"], "run_timeout_ms": attrs["workflow_run_timeout_ms"],
        "workflow_task_timeout_ms": attrs["workflow_task_timeout_ms"], "id_reuse_policy": attrs["id_reuse_policy"],
        "id_conflict_policy": "FAIL", "search_attributes": attrs["search_attributes"],
        "initiated_by": {**_initiator(ex, event), "root_workflow_id": root_workflow_id, "root_run_id": root_run_id},
        "header": attrs.get("header", {}), "memo": attrs.get("memo", {}), **ex.clock_for_started_run(),
    }


def _signal(ex: Execution, event: HistoryEvent) -> Record:
    attrs = attributes(event)
    return {"run_id": attrs["run_id"], "signal_name": attrs["signal_name"], "input": attrs["input"], "initiated_by": _initiator(ex, event),
            "header": attrs.get("header", {})}


def _request_cancel(ex: Execution, event: HistoryEvent) -> Record:
    attrs = attributes(event)
    return {"run_id": attrs["run_id"], "reason": attrs["reason"], "initiated_by": _initiator(ex, event)}


# The body of the command each *Initiated event sends, less its request id.
_COMMAND_BODY: dict[str, Callable[[Execution, HistoryEvent], Record]] = {
    _START_CHILD: _start_child,
    EventType.SignalExternalWorkflowExecutionInitiated: _signal,
    EventType.RequestCancelExternalWorkflowExecutionInitiated: _request_cancel,
}


def _send(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    """The command an *Initiated event sends to its target; its request id makes a redelivery apply once."""
    kind = event_type(event)
    body = {**_COMMAND_BODY[kind](ex, event), "request_id": f"{ex.run_id}/{event['event_id']}"}
    return [outbound(attributes(event)["workflow_id"], INITIATED[kind].command, body)]


EFFECTS: dict[str, EffectsOf] = {kind: _send for kind in INITIATED}


def close_report(ex: Execution, kind: str, attrs: Record) -> Effect:
    """A child run's close, told to its parent (a continue-as-new passes the duty to the next run)."""
    assert ex.parent is not None
    status = CLOSE_STATUS[kind]
    return outbound(ex.parent["workflow_id"], CommandType.RecordChildExecutionClosed, {
        "run_id": ex.parent["run_id"], "initiated_event_id": ex.parent["initiated_event_id"], "child_run_id": ex.run_id,
        "status": status, "result": attrs.get("result"), "failure": attrs.get("failure"),
        "details": attrs["details"] if status == "Canceled" else [], "retry_state": attrs.get("retry_state", "RETRY_POLICY_NOT_SET"),
        "clock_offset_ms": ex.clock_offset_ms,
    })


def released_effects(ex: Execution, t: Transition, before: Pending) -> list[Effect]:
    """A closing parent's children still running get its parent close policy, but those the run
    that follows in the same record holds pending: a reset's new run copied them, and they report to it."""
    if ex.status == RUNNING:
        return []
    answered = {attributes(e)["initiated_event_id"] for e in t.events if event_type(e) in CHILD_RESULTS}
    carried = _children_pending_in(t.next_run.events) if t.next_run is not None else set()
    return [effect for child in before.children.values() if child.initiated_event_id not in answered | carried
            for effect in _parent_close_policy(ex, child)]


def _children_pending_in(events: list[HistoryEvent]) -> set[int]:
    """The initiated event ids of the children these events start and leave unanswered."""
    initiated = {e["event_id"] for e in events if event_type(e) == _START_CHILD}
    ended = {attributes(e)["initiated_event_id"] for e in events
             if event_type(e) in CHILD_RESULTS or event_type(e) == INITIATED[_START_CHILD].failed}
    return initiated - ended


def _parent_close_policy(ex: Execution, child: ChildState) -> list[Effect]:
    """What a closing parent does to a child still running. The current run of the child's id is
    addressed (run_id empty): a child that continued as new is still the parent's child."""
    reason = f"parent {ex.workflow_id} (run {ex.run_id}) closed as {ex.status}; parent close policy {child.parent_close_policy}"
    if child.parent_close_policy == "TERMINATE":
        return [outbound(child.workflow_id, CommandType.TerminateWorkflowExecution, {
            "run_id": "", "reason": reason, "details": [], "request_id": "",
        })]
    if child.parent_close_policy == "REQUEST_CANCEL":
        return [outbound(child.workflow_id, CommandType.RequestCancelWorkflowExecution, {
            "run_id": "", "reason": reason, "request_id": "", "initiated_by": None,
        })]
    return []
