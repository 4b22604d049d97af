"""Facts about history events that every reader of the log shares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from kadence.protocol.names import CommandType, EventType, TaskCommandType
from kadence.protocol.records import Failure, Payload

# The names of the markers the SDK records, temporalio's: patched() records one (details: patch_id,
# deprecated), a local activity's outcome another (details: seq, activity_type, then result or failure).
PATCH_MARKER = "core_patch"
LOCAL_ACTIVITY_MARKER = "core_local_activity"

# The events that close a run, and the execution status each one leaves.
CLOSE_STATUS: dict[str, str] = {
    EventType.WorkflowExecutionCompleted: "Completed",
    EventType.WorkflowExecutionFailed: "Failed",
    EventType.WorkflowExecutionCanceled: "Canceled",
    EventType.WorkflowExecutionTerminated: "Terminated",
    EventType.WorkflowExecutionTimedOut: "TimedOut",
    EventType.WorkflowExecutionContinuedAsNew: "ContinuedAsNew",
}


def is_memo_removal(payload: Mapping[str, Any]) -> bool:
    """Whether an upserted memo value removes its key: the null payload (encoding binary/null), as
    Temporal's server reads temporalio's upsert_memo(key=None)."""
    return payload["metadata"].get("encoding") == b"binary/null"


# A payload as the reader holds it: a record's dict (kadence.protocol.records) or the SDK's Payload.
P = TypeVar("P", bound=Mapping[str, Any])


def memo_upserted(memo: Mapping[str, P], upserted: Mapping[str, P]) -> dict[str, P]:
    """The memo after a WorkflowPropertiesModified event that upserted `upserted`."""
    result = dict(memo)
    for key, payload in upserted.items():
        if is_memo_removal(payload):
            result.pop(key, None)
        else:
            result[key] = payload
    return result


# The events that end an activity for good (a failure or timeout whose retry_state is
# IN_PROGRESS only ends an attempt).
ACTIVITY_RESULTS = {
    EventType.ActivityTaskCompleted, EventType.ActivityTaskFailed, EventType.ActivityTaskTimedOut, EventType.ActivityTaskCanceled,
}

# The events that end a Nexus operation, and the one each close status of its handler workflow records.
NEXUS_RESULT_FOR_STATUS: dict[str, str] = {
    "Completed": EventType.NexusOperationCompleted,
    "Failed": EventType.NexusOperationFailed,
    "Canceled": EventType.NexusOperationCanceled,
    "TimedOut": EventType.NexusOperationFailed,
    "Terminated": EventType.NexusOperationFailed,
}
NEXUS_RESULTS = {*NEXUS_RESULT_FOR_STATUS.values(), EventType.NexusOperationTimedOut}

# The commands of a completed workflow task that close the run, and the event each one records.
CLOSE_COMMANDS: dict[str, str] = {
    TaskCommandType.CompleteWorkflowExecution: EventType.WorkflowExecutionCompleted,
    TaskCommandType.FailWorkflowExecution: EventType.WorkflowExecutionFailed,
    TaskCommandType.CancelWorkflowExecution: EventType.WorkflowExecutionCanceled,
    TaskCommandType.ContinueAsNewWorkflowExecution: EventType.WorkflowExecutionContinuedAsNew,
}

# The event each command of a completed workflow task records, in its order among them, after the
# task's WorkflowTaskCompleted: history records each command's event under this name, the SDK
# matches them on replay.
EVENT_FOR_COMMAND: dict[str, str] = {
    TaskCommandType.ScheduleActivityTask: EventType.ActivityTaskScheduled, TaskCommandType.StartTimer: EventType.TimerStarted,
    TaskCommandType.CancelTimer: EventType.TimerCanceled,
    TaskCommandType.RequestCancelActivityTask: EventType.ActivityTaskCancelRequested,
    TaskCommandType.UpsertWorkflowSearchAttributes: EventType.UpsertWorkflowSearchAttributes,
    TaskCommandType.ModifyWorkflowProperties: EventType.WorkflowPropertiesModified,
    TaskCommandType.RecordMarker: EventType.MarkerRecorded,
    TaskCommandType.StartChildWorkflowExecution: EventType.StartChildWorkflowExecutionInitiated,
    TaskCommandType.AcceptWorkflowUpdate: EventType.WorkflowExecutionUpdateAccepted,
    TaskCommandType.RejectWorkflowUpdate: EventType.WorkflowExecutionUpdateRejected,
    TaskCommandType.CompleteWorkflowUpdate: EventType.WorkflowExecutionUpdateCompleted,
    TaskCommandType.SignalExternalWorkflowExecution: EventType.SignalExternalWorkflowExecutionInitiated,
    TaskCommandType.RequestCancelExternalWorkflowExecution: EventType.RequestCancelExternalWorkflowExecutionInitiated,
    TaskCommandType.ScheduleNexusOperation: EventType.NexusOperationScheduled,
    TaskCommandType.RequestCancelNexusOperation: EventType.NexusOperationCancelRequested,
    **CLOSE_COMMANDS,
}

# The event a command may record right after its own: a cancel request for an activity no worker
# started, or a Nexus operation not started asynchronously, cancels it at once. Every other command
# records its one event and nothing more in its run.
FOLLOWING_EVENT: dict[str, str] = {
    TaskCommandType.RequestCancelActivityTask: EventType.ActivityTaskCanceled,
    TaskCommandType.RequestCancelNexusOperation: EventType.NexusOperationCanceled,
}

# The commands that each record exactly one event and leave the run open: a worker foresees the ids
# of the events after them (an eager activity's ActivityTaskScheduled).
ONE_EVENT_COMMANDS = frozenset(EVENT_FOR_COMMAND.keys() - FOLLOWING_EVENT.keys() - CLOSE_COMMANDS.keys())

# The event in a parent's history that tells how a child ended, by the child's close status.
CHILD_RESULT_FOR_STATUS: dict[str, str] = {
    "Completed": EventType.ChildWorkflowExecutionCompleted,
    "Failed": EventType.ChildWorkflowExecutionFailed,
    "Canceled": EventType.ChildWorkflowExecutionCanceled,
    "TimedOut": EventType.ChildWorkflowExecutionTimedOut,
    "Terminated": EventType.ChildWorkflowExecutionTerminated,
}
CHILD_RESULTS = set(CHILD_RESULT_FOR_STATUS.values())


@dataclass(frozen=True)
class Initiated:
    """A request a run sends another workflow (through an OutboundCommand), and the events that answer it."""

    command: str  # the command the target's history service receives
    applied: str  # the event that records the target took it
    failed: str  # the event that records it did not apply there


# What each *Initiated event sends, and what answers it.
INITIATED: dict[str, Initiated] = {
    EventType.StartChildWorkflowExecutionInitiated: Initiated(
        CommandType.StartWorkflowExecution, EventType.ChildWorkflowExecutionStarted, EventType.StartChildWorkflowExecutionFailed,
    ),
    EventType.SignalExternalWorkflowExecutionInitiated: Initiated(
        CommandType.SignalWorkflowExecution, EventType.ExternalWorkflowExecutionSignaled, EventType.SignalExternalWorkflowExecutionFailed,
    ),
    EventType.RequestCancelExternalWorkflowExecutionInitiated: Initiated(
        CommandType.RequestCancelWorkflowExecution, EventType.ExternalWorkflowExecutionCancelRequested,
        EventType.RequestCancelExternalWorkflowExecutionFailed,
    ),
}
# Each event answering an initiated request (a child's close too), and the event that initiated it.
INITIATED_BY_ANSWER: dict[str, str] = {
    **{answer: initiated for initiated, sent in INITIATED.items() for answer in (sent.applied, sent.failed)},
    **{result: EventType.StartChildWorkflowExecutionInitiated for result in CHILD_RESULTS},
}


@dataclass(frozen=True)
class RunSection:
    """The part of a HistoryBatch that belongs to one run."""

    run_id: str
    first_event_id: int
    events: list[dict[str, Any]]
    effects: list[tuple[str, dict[str, Any]]]


def run_sections(batch: Mapping[str, Any]) -> list[RunSection]:
    """A batch's runs: its own, and the run a continue-as-new starts in the same record."""
    sections = [RunSection(batch["run_id"], batch["first_event_id"], batch["events"], batch["effects"])]
    if batch.get("next_run") is not None:
        following = batch["next_run"]
        sections.append(RunSection(following["run_id"], 1, following["events"], following["effects"]))
    return sections


def refused(batch: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The requests a batch refuses: the command's (its rejection, the batch eventless), and those
    the command carried that did not apply though it did (its refusals: eager activity starts)."""
    rejection = batch["rejection"]
    return [*([rejection] if rejection is not None else []), *batch.get("refusals", [])]


# The info records of a Failure (schemas/Failure.avsc), each naming its kind as Temporal's failure_info
# oneof does; a record with none of them is a timeout when its timeout_type is set, else an application failure.
FAILURE_INFO_RECORDS = (
    "activity_failure_info", "child_workflow_execution_failure_info", "canceled_failure_info", "terminated_failure_info",
    "server_failure_info", "reset_workflow_failure_info", "nexus_operation_execution_failure_info",
)


def failure_record(message: str, failure_type: str, source: str, details: list[Payload] | None = None) -> Failure:
    """A Failure record (schemas/Failure.avsc) for failures the engine itself raises, every field
    set as the codec gives it back (so a state built from it compares equal to one recovered from the log)."""
    return {
        "message": message, "type": failure_type, "source": source, "stack_trace": "", "non_retryable": False,
        "timeout_type": None, "details": details or [], "cause": None, "category": "UNSPECIFIED", "next_retry_delay_ms": None,
        "activity_failure_info": None, "child_workflow_execution_failure_info": None, "canceled_failure_info": None,
        "terminated_failure_info": None, "server_failure_info": None, "reset_workflow_failure_info": None,
        "nexus_operation_execution_failure_info": None,
    }


def close_failure(kind: str, attrs: Mapping[str, Any]) -> Failure:
    """Why a run closed without a result: its failure, or the cancellation or termination as one
    (what the read model records, and what a client's result() raises from)."""
    if kind == EventType.WorkflowExecutionCanceled:
        return {**failure_record("Workflow cancelled", "CancelledError", "kadence-visibility", attrs["details"]),
                "canceled_failure_info": {"identity": ""}}
    if kind == EventType.WorkflowExecutionContinuedAsNew:
        return failure_record(f"Continued as new run {attrs['new_execution_run_id']}", "ContinuedAsNew", "kadence-visibility")
    if kind == EventType.WorkflowExecutionTimedOut:
        recorded: Failure | None = attrs.get("failure")  # a standalone activity's: the timeout that ended it
        if recorded is not None:
            return recorded
        return {**failure_record("Workflow timed out", "TimeoutError", "kadence-visibility"), "timeout_type": "START_TO_CLOSE"}
    if kind == EventType.WorkflowExecutionTerminated:
        return {**failure_record(attrs["reason"] or "Workflow terminated", "TerminatedError", "kadence-visibility", attrs["details"]),
                "terminated_failure_info": {"identity": attrs.get("identity", "")}}
    return attrs["failure"]


# The cause of a workflow task failed because its completion does not fit in a record (Temporal's
# WORKFLOW_TASK_FAILED_CAUSE_REQUEST_TOO_LARGE): the history service terminates the run.
WORKFLOW_TASK_TOO_LARGE = "REQUEST_TOO_LARGE"


# The WorkflowTaskFailed cause a reset records: the new run's copied past ends there (its
# base_run_id and new_run_id name the runs; the SDK reseeds from new_run_id).
RESET_CAUSE = "RESET_WORKFLOW"

# A schedule's events (docs/decisions/0004-schedules-in-the-history-service.md): each carries the
# schedule and its info as its transition leaves them.
SCHEDULE_EVENTS = frozenset({
    EventType.ScheduleCreated, EventType.ScheduleUpdated, EventType.SchedulePatched, EventType.ScheduleActionsTaken,
    EventType.ScheduledRunStarted, EventType.ScheduledRunClosed, EventType.ScheduleDeleted, EventType.ScheduleTimeSkipped,
})
