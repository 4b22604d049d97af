"""What each history event does to a run (as temporalio's _WorkflowInstance._apply by activation
job): the table _APPLY names, for each event type, the function that applies it. Events resolve
what the workflow code waits on (an activity's result, a timer) in history order, before the
activation that sees them; an event that records a command matches it (WorkflowRun.match).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from kadence.exceptions import ApplicationError, RetryState, WorkflowAlreadyStartedError
from kadence.protocol.events import RESET_CAUSE
from kadence.protocol.limits import payload_bytes
from kadence.protocol.names import EventType
from kadence.protocol.records import (
    ActivityTaskCanceled,
    ActivityTaskCancelRequested,
    ActivityTaskCompleted,
    ActivityTaskFailed,
    ActivityTaskScheduled,
    ActivityTaskTimedOut,
    ChildWorkflowExecutionCanceled,
    ChildWorkflowExecutionCompleted,
    ChildWorkflowExecutionFailed,
    ChildWorkflowExecutionStarted,
    ChildWorkflowExecutionTerminated,
    ChildWorkflowExecutionTimedOut,
    ExternalWorkflowExecutionCancelRequested,
    ExternalWorkflowExecutionSignaled,
    HistoryEvent,
    MarkerRecorded,
    NexusOperationCanceled,
    NexusOperationCancelRequested,
    NexusOperationCompleted,
    NexusOperationFailed,
    NexusOperationScheduled,
    NexusOperationStarted,
    NexusOperationTimedOut,
    RequestCancelExternalWorkflowExecutionFailed,
    RequestCancelExternalWorkflowExecutionInitiated,
    SignalExternalWorkflowExecutionFailed,
    SignalExternalWorkflowExecutionInitiated,
    StartChildWorkflowExecutionFailed,
    StartChildWorkflowExecutionInitiated,
    TimerCanceled,
    TimerFired,
    TimerStarted,
    UpsertWorkflowSearchAttributesHistoryEvent,
    WorkflowExecutionCanceled,
    WorkflowExecutionCancelRequested,
    WorkflowExecutionCompleted,
    WorkflowExecutionContinuedAsNew,
    WorkflowExecutionFailed,
    WorkflowExecutionSignaled,
    WorkflowExecutionStarted,
    WorkflowExecutionUpdateAccepted,
    WorkflowExecutionUpdateAdmitted,
    WorkflowExecutionUpdateCompleted,
    WorkflowExecutionUpdateRejected,
    WorkflowPropertiesModified,
    WorkflowTaskCompleted,
    WorkflowTaskFailed,
    WorkflowTaskStarted,
    WorkflowTaskTimedOut,
)
from kadence.worker._workflow_instance._commands import (
    InitiatedCommand,
    PendingCommand,
    RecordMarkerCommand,
    RequestCancelActivityCommand,
    RequestCancelNexusCommand,
    ScheduleActivityCommand,
    ScheduleNexusCommand,
    StartChildWorkflowCommand,
    UpdateResponseCommand,
)
from kadence.worker._workflow_instance._handlers import WorkflowHandlers
from kadence.worker._workflow_instance._run import set_exception_unless_done, set_result_unless_done

# The attributes of the events one _apply_<event> applies for several event types.
_WorkflowTaskEnded = WorkflowTaskFailed | WorkflowTaskTimedOut
_TimerCommandRecorded = TimerStarted | TimerCanceled
_UpdateResponseRecorded = WorkflowExecutionUpdateAccepted | WorkflowExecutionUpdateRejected | WorkflowExecutionUpdateCompleted
_Initiated = (
    StartChildWorkflowExecutionInitiated | SignalExternalWorkflowExecutionInitiated | RequestCancelExternalWorkflowExecutionInitiated
)
_ChildClosed = (
    ChildWorkflowExecutionFailed | ChildWorkflowExecutionCanceled | ChildWorkflowExecutionTimedOut | ChildWorkflowExecutionTerminated
)
_ExternalRequestApplied = ExternalWorkflowExecutionSignaled | ExternalWorkflowExecutionCancelRequested
_ExternalRequestFailed = SignalExternalWorkflowExecutionFailed | RequestCancelExternalWorkflowExecutionFailed
_ActivityAttemptEnded = ActivityTaskFailed | ActivityTaskTimedOut
_Upserted = UpsertWorkflowSearchAttributesHistoryEvent | WorkflowPropertiesModified
_NexusOperationEnded = NexusOperationFailed | NexusOperationCanceled | NexusOperationTimedOut
_WorkflowClosed = WorkflowExecutionCompleted | WorkflowExecutionFailed | WorkflowExecutionCanceled | WorkflowExecutionContinuedAsNew


class CacheInvalid(Exception):
    """This cached run acted on a task that history says failed; rebuild it from history."""


def apply_event(run: WorkflowHandlers, event: HistoryEvent) -> None:
    kind, attrs = event["attributes"]
    run.history_bytes += payload_bytes(attrs)
    apply = _APPLY.get(kind)
    if apply is not None:  # the rest (WorkflowTaskScheduled, ActivityTaskStarted ...) change nothing the code sees
        apply(run, kind, attrs, event)


# Each _apply_<event> takes the run, the event's type, its attributes and the event.


def _apply_workflow_execution_started(run: WorkflowHandlers, kind: str, attrs: WorkflowExecutionStarted, event: HistoryEvent) -> None:
    run.time_ms = event["event_time_ms"]
    run.info = run.started_info(attrs, event["event_time_ms"])
    if attrs.get("original_execution_run_id"):  # a reset run's past was written by another run
        run.reseed(attrs["original_execution_run_id"])
    run.start(attrs["input"])


def _apply_workflow_task_started(run: WorkflowHandlers, kind: str, attrs: WorkflowTaskStarted, event: HistoryEvent) -> None:
    run.time_ms = event["event_time_ms"]
    run.history_length = event["event_id"]


def _apply_workflow_task_completed(run: WorkflowHandlers, kind: str, attrs: WorkflowTaskCompleted, event: HistoryEvent) -> None:
    if attrs["scheduled_event_id"] != run.last_activated_task:
        run.replaying = True  # a past task: replay it
        try:
            run.run_activation()
        finally:
            run.replaying = False


def _apply_workflow_task_failed(run: WorkflowHandlers, kind: str, attrs: _WorkflowTaskEnded, event: HistoryEvent) -> None:
    """A WorkflowTaskFailed or WorkflowTaskTimedOut. A reset's (cause RESET_WORKFLOW) ends the
    copied past: what runs after it draws from the new run."""
    new_run_id = cast(Mapping[str, Any], attrs).get("new_run_id") if attrs.get("cause") == RESET_CAUSE else None
    if new_run_id:
        run.reseed(new_run_id)
    if attrs["scheduled_event_id"] == run.last_activated_task:
        raise CacheInvalid(f"workflow task {attrs['scheduled_event_id']}: {kind}")


def _apply_workflow_execution_cancel_requested(
    run: WorkflowHandlers, kind: str, attrs: WorkflowExecutionCancelRequested, event: HistoryEvent,
) -> None:
    run.cancel_requested = True
    if run.main is not None and not run.main.done():
        run.main.cancel()  # reaches the workflow as asyncio.CancelledError where it awaits


def _apply_workflow_execution_signaled(run: WorkflowHandlers, kind: str, attrs: WorkflowExecutionSignaled, event: HistoryEvent) -> None:
    run.deliver_signal(attrs["signal_name"], attrs["input"], attrs.get("header") or {})


def _apply_timer_command(run: WorkflowHandlers, kind: str, attrs: _TimerCommandRecorded, event: HistoryEvent) -> None:
    """A TimerStarted or TimerCanceled: the StartTimer or CancelTimer the code issued."""
    run.match(kind, attrs["timer_id"], PendingCommand)


def _apply_timer_fired(run: WorkflowHandlers, kind: str, attrs: TimerFired, event: HistoryEvent) -> None:
    handle = run.timers.pop(attrs["timer_id"], None)
    if handle is not None and not handle.cancelled():
        run.ready.append(handle)


def _apply_activity_task_scheduled(run: WorkflowHandlers, kind: str, attrs: ActivityTaskScheduled, event: HistoryEvent) -> None:
    pending = run.match(kind, attrs["activity_type"], ScheduleActivityCommand)
    pending.scheduled = attrs
    pending.scheduled_event_id = event["event_id"]
    run.activities[event["event_id"]] = pending


def _apply_activity_task_cancel_requested(
    run: WorkflowHandlers, kind: str, attrs: ActivityTaskCancelRequested, event: HistoryEvent,
) -> None:
    run.match(kind, str(attrs["scheduled_event_id"]), RequestCancelActivityCommand)


def _apply_upsert(run: WorkflowHandlers, kind: str, attrs: _Upserted, event: HistoryEvent) -> None:
    """An upsert of search attributes or of the memo: matched by kind alone, as it carries no id."""
    run.match(kind, "", PendingCommand)


def _apply_marker_recorded(run: WorkflowHandlers, kind: str, attrs: MarkerRecorded, event: HistoryEvent) -> None:
    run.match(kind, attrs["marker_name"], RecordMarkerCommand)


def _apply_workflow_execution_update_admitted(
    run: WorkflowHandlers, kind: str, attrs: WorkflowExecutionUpdateAdmitted, event: HistoryEvent,
) -> None:
    run.call_soon(run.admit_update, attrs)  # runs in the activation, like a signal handler


def _apply_update_command(run: WorkflowHandlers, kind: str, attrs: _UpdateResponseRecorded, event: HistoryEvent) -> None:
    """An update's WorkflowExecutionUpdateAccepted, Rejected or Completed: the command the code issued."""
    run.match(kind, attrs["update_id"], UpdateResponseCommand)


def _apply_initiated(run: WorkflowHandlers, kind: str, attrs: _Initiated, event: HistoryEvent) -> None:
    """A request to another workflow (kadence.protocol.events.INITIATED): answered later by the
    events INITIATED_BY_ANSWER names, which carry this event's id."""
    run.initiated[event["event_id"]] = run.match(kind, attrs["workflow_id"], InitiatedCommand)


def _apply_child_workflow_execution_started(
    run: WorkflowHandlers, kind: str, attrs: ChildWorkflowExecutionStarted, event: HistoryEvent,
) -> None:
    set_result_unless_done(_child_start(run, attrs["initiated_event_id"]).started, attrs["run_id"])


def _apply_start_child_workflow_execution_failed(
    run: WorkflowHandlers, kind: str, attrs: StartChildWorkflowExecutionFailed, event: HistoryEvent,
) -> None:
    pending = _child_start(run, attrs["initiated_event_id"])
    del run.initiated[attrs["initiated_event_id"]]
    set_exception_unless_done(pending.started, WorkflowAlreadyStartedError(
        attrs["workflow_id"], attrs["workflow_type"], reason="child workflow already started", cause=attrs["cause"],
    ))


def _apply_child_workflow_execution_completed(
    run: WorkflowHandlers, kind: str, attrs: ChildWorkflowExecutionCompleted, event: HistoryEvent,
) -> None:
    set_result_unless_done(run.initiated.pop(attrs["initiated_event_id"]).future, attrs["result"])


def _apply_child_workflow_execution_closed(run: WorkflowHandlers, kind: str, attrs: _ChildClosed, event: HistoryEvent) -> None:
    """A child that failed, was canceled, timed out or was terminated."""
    pending = run.initiated.pop(attrs["initiated_event_id"])
    error = run.converter.failure_converter.child_workflow_error(kind, attrs, run.converter.payload_converter)
    set_exception_unless_done(pending.future, error)


def _apply_external_request_applied(run: WorkflowHandlers, kind: str, attrs: _ExternalRequestApplied, event: HistoryEvent) -> None:
    """An ExternalWorkflowExecutionSignaled or ExternalWorkflowExecutionCancelRequested."""
    set_result_unless_done(run.initiated.pop(attrs["initiated_event_id"]).future, None)


def _apply_signal_external_workflow_execution_failed(
    run: WorkflowHandlers, kind: str, attrs: SignalExternalWorkflowExecutionFailed, event: HistoryEvent,
) -> None:
    _fail_external_request(run, "signal", attrs)


def _apply_request_cancel_external_workflow_execution_failed(
    run: WorkflowHandlers, kind: str, attrs: RequestCancelExternalWorkflowExecutionFailed, event: HistoryEvent,
) -> None:
    _fail_external_request(run, "cancel", attrs)


def _apply_activity_task_canceled(run: WorkflowHandlers, kind: str, attrs: ActivityTaskCanceled, event: HistoryEvent) -> None:
    """An activity cancelled with WAIT_CANCELLATION_COMPLETED is resolved now, with the ActivityError
    (caused by CancelledError) temporalio's core makes of this event; the others were when cancelled."""
    pending = run.activities.pop(attrs["scheduled_event_id"], None)
    if pending is not None and not pending.future.done():
        assert pending.scheduled is not None, "run.activities holds recorded activities"
        pending.future.set_exception(run.converter.failure_converter.activity_error(
            kind, pending.scheduled, attrs, run.converter.payload_converter))


def _apply_activity_task_completed(run: WorkflowHandlers, kind: str, attrs: ActivityTaskCompleted, event: HistoryEvent) -> None:
    pending = run.activities.pop(attrs["scheduled_event_id"])
    if not pending.future.done():
        pending.future.set_result(attrs["result"])


def _apply_activity_task_failed(run: WorkflowHandlers, kind: str, attrs: _ActivityAttemptEnded, event: HistoryEvent) -> None:
    """An ActivityTaskFailed or ActivityTaskTimedOut: the activity's error unless only an attempt ended."""
    if attrs["retry_state"] == RetryState.IN_PROGRESS:
        return
    pending = run.activities.pop(attrs["scheduled_event_id"])
    assert pending.scheduled is not None, "run.activities holds recorded activities"
    if not pending.future.done():
        pending.future.set_exception(run.converter.failure_converter.activity_error(
            kind, pending.scheduled, attrs, run.converter.payload_converter))


def _apply_nexus_operation_scheduled(run: WorkflowHandlers, kind: str, attrs: NexusOperationScheduled, event: HistoryEvent) -> None:
    pending = run.match(kind, attrs["operation"], ScheduleNexusCommand)
    pending.scheduled = attrs
    pending.scheduled_event_id = event["event_id"]
    run.nexus_operations[event["event_id"]] = pending


def _apply_nexus_operation_started(run: WorkflowHandlers, kind: str, attrs: NexusOperationStarted, event: HistoryEvent) -> None:
    pending = run.nexus_operations[attrs["scheduled_event_id"]]
    pending.operation_token = attrs["operation_token"]
    set_result_unless_done(pending.started, attrs["operation_token"])


def _apply_nexus_operation_completed(run: WorkflowHandlers, kind: str, attrs: NexusOperationCompleted, event: HistoryEvent) -> None:
    pending = run.nexus_operations.pop(attrs["scheduled_event_id"])
    set_result_unless_done(pending.started, "")
    set_result_unless_done(pending.future, attrs["result"])


def _apply_nexus_operation_ended(run: WorkflowHandlers, kind: str, attrs: _NexusOperationEnded, event: HistoryEvent) -> None:
    """A Nexus operation that failed, was canceled or timed out: its NexusOperationError, raised
    where the code waits for its start (it ended before it started) or for its result."""
    pending = run.nexus_operations.pop(attrs["scheduled_event_id"])
    assert pending.scheduled is not None, "run.nexus_operations holds recorded operations"
    error = run.converter.failure_converter.nexus_operation_error(
        kind, pending.scheduled, attrs, pending.operation_token, run.converter.payload_converter,
    )
    if not pending.started.done():  # it ended before it started: start_operation raises it, and no handle was made
        pending.started.set_exception(error)
    else:
        set_exception_unless_done(pending.future, error)


def _apply_nexus_operation_cancel_requested(
    run: WorkflowHandlers, kind: str, attrs: NexusOperationCancelRequested, event: HistoryEvent,
) -> None:
    """The cancel request the code issued; a WAIT_REQUESTED cancellation resolves the operation now."""
    run.match(kind, str(attrs["scheduled_event_id"]), RequestCancelNexusCommand)
    pending = run.nexus_operations.get(attrs["scheduled_event_id"])
    if pending is not None and pending.cancel_requested is not None:
        set_exception_unless_done(pending.future, run.nexus_canceled_error(pending))


def _apply_workflow_execution_closed(run: WorkflowHandlers, kind: str, attrs: _WorkflowClosed, event: HistoryEvent) -> None:
    """The event of a command that closed the run (kadence.protocol.events.CLOSE_COMMANDS)."""
    run.match(kind, "", PendingCommand)
    run.closed = True


def _fail_external_request(run: WorkflowHandlers, verb: str, attrs: _ExternalRequestFailed) -> None:
    set_exception_unless_done(run.initiated.pop(attrs["initiated_event_id"]).future, ApplicationError(
        f"unable to {verb} external workflow {attrs['workflow_id']}: {attrs['cause']}", type=attrs["cause"], non_retryable=True,
    ))


def _child_start(run: WorkflowHandlers, initiated_event_id: int) -> StartChildWorkflowCommand:
    pending = run.initiated[initiated_event_id]
    assert isinstance(pending, StartChildWorkflowCommand), f"event {initiated_event_id} did not start a child"
    return pending


# The attributes an _apply_<event> takes are its event type's TypedDict, which its row's key names:
# a type mypy cannot tie to the key, so the table takes them as Any.
_Apply = Callable[[WorkflowHandlers, str, Any, HistoryEvent], None]

# What each history event does to a run, as temporalio's _WorkflowInstance._apply by activation
# job. Every event a command records (kadence.protocol.events.EVENT_FOR_COMMAND) and every answer
# to an initiated request (INITIATED_BY_ANSWER) has its row: tests/test_names.py checks.
_APPLY: dict[str, _Apply] = {
    EventType.WorkflowExecutionStarted: _apply_workflow_execution_started,
    EventType.WorkflowExecutionSignaled: _apply_workflow_execution_signaled,
    EventType.WorkflowExecutionCancelRequested: _apply_workflow_execution_cancel_requested,
    EventType.WorkflowTaskStarted: _apply_workflow_task_started,
    EventType.WorkflowTaskCompleted: _apply_workflow_task_completed,
    EventType.WorkflowTaskFailed: _apply_workflow_task_failed,
    EventType.WorkflowTaskTimedOut: _apply_workflow_task_failed,
    EventType.ActivityTaskScheduled: _apply_activity_task_scheduled,
    EventType.ActivityTaskCompleted: _apply_activity_task_completed,
    EventType.ActivityTaskFailed: _apply_activity_task_failed,
    EventType.ActivityTaskTimedOut: _apply_activity_task_failed,
    EventType.ActivityTaskCancelRequested: _apply_activity_task_cancel_requested,
    EventType.ActivityTaskCanceled: _apply_activity_task_canceled,
    EventType.WorkflowExecutionCompleted: _apply_workflow_execution_closed,
    EventType.WorkflowExecutionFailed: _apply_workflow_execution_closed,
    EventType.UpsertWorkflowSearchAttributes: _apply_upsert,
    EventType.WorkflowPropertiesModified: _apply_upsert,
    EventType.TimerStarted: _apply_timer_command,
    EventType.TimerFired: _apply_timer_fired,
    EventType.TimerCanceled: _apply_timer_command,
    EventType.WorkflowExecutionCanceled: _apply_workflow_execution_closed,
    EventType.WorkflowExecutionContinuedAsNew: _apply_workflow_execution_closed,
    EventType.MarkerRecorded: _apply_marker_recorded,
    EventType.StartChildWorkflowExecutionInitiated: _apply_initiated,
    EventType.StartChildWorkflowExecutionFailed: _apply_start_child_workflow_execution_failed,
    EventType.ChildWorkflowExecutionStarted: _apply_child_workflow_execution_started,
    EventType.ChildWorkflowExecutionCompleted: _apply_child_workflow_execution_completed,
    EventType.ChildWorkflowExecutionFailed: _apply_child_workflow_execution_closed,
    EventType.ChildWorkflowExecutionCanceled: _apply_child_workflow_execution_closed,
    EventType.ChildWorkflowExecutionTimedOut: _apply_child_workflow_execution_closed,
    EventType.ChildWorkflowExecutionTerminated: _apply_child_workflow_execution_closed,
    EventType.SignalExternalWorkflowExecutionInitiated: _apply_initiated,
    EventType.SignalExternalWorkflowExecutionFailed: _apply_signal_external_workflow_execution_failed,
    EventType.ExternalWorkflowExecutionSignaled: _apply_external_request_applied,
    EventType.RequestCancelExternalWorkflowExecutionInitiated: _apply_initiated,
    EventType.RequestCancelExternalWorkflowExecutionFailed: _apply_request_cancel_external_workflow_execution_failed,
    EventType.ExternalWorkflowExecutionCancelRequested: _apply_external_request_applied,
    EventType.WorkflowExecutionUpdateAdmitted: _apply_workflow_execution_update_admitted,
    EventType.WorkflowExecutionUpdateAccepted: _apply_update_command,
    EventType.WorkflowExecutionUpdateRejected: _apply_update_command,
    EventType.WorkflowExecutionUpdateCompleted: _apply_update_command,
    EventType.NexusOperationScheduled: _apply_nexus_operation_scheduled,
    EventType.NexusOperationStarted: _apply_nexus_operation_started,
    EventType.NexusOperationCompleted: _apply_nexus_operation_completed,
    EventType.NexusOperationFailed: _apply_nexus_operation_ended,
    EventType.NexusOperationCanceled: _apply_nexus_operation_ended,
    EventType.NexusOperationTimedOut: _apply_nexus_operation_ended,
    EventType.NexusOperationCancelRequested: _apply_nexus_operation_cancel_requested,
}
