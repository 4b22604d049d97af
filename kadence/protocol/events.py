"""Facts about history events that every reader of the log shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The events that close a run, and the execution status each one leaves.
CLOSE_STATUS = {
    "WorkflowExecutionCompleted": "Completed",
    "WorkflowExecutionFailed": "Failed",
    "WorkflowExecutionCanceled": "Canceled",
    "WorkflowExecutionTerminated": "Terminated",
    "WorkflowExecutionTimedOut": "TimedOut",
    "WorkflowExecutionContinuedAsNew": "ContinuedAsNew",
}

# The events that end an activity for good (a failure or timeout whose retry_state is
# IN_PROGRESS only ends an attempt).
ACTIVITY_RESULTS = {"ActivityTaskCompleted", "ActivityTaskFailed", "ActivityTaskTimedOut", "ActivityTaskCanceled"}

# The commands of a completed workflow task that close the run, and the event each one records.
CLOSE_COMMANDS = {
    "CompleteWorkflowExecution": "WorkflowExecutionCompleted",
    "FailWorkflowExecution": "WorkflowExecutionFailed",
    "CancelWorkflowExecution": "WorkflowExecutionCanceled",
    "ContinueAsNewWorkflowExecution": "WorkflowExecutionContinuedAsNew",
}

# The event each command of a completed workflow task records (the SDK matches them on replay).
EVENT_FOR_COMMAND = {
    "ScheduleActivityTask": "ActivityTaskScheduled", "StartTimer": "TimerStarted", "CancelTimer": "TimerCanceled",
    "RequestCancelActivityTask": "ActivityTaskCancelRequested", "UpsertWorkflowSearchAttributes": "UpsertWorkflowSearchAttributes",
    "RecordMarker": "MarkerRecorded", "StartChildWorkflowExecution": "StartChildWorkflowExecutionInitiated",
    "AcceptWorkflowUpdate": "WorkflowExecutionUpdateAccepted", "RejectWorkflowUpdate": "WorkflowExecutionUpdateRejected",
    "CompleteWorkflowUpdate": "WorkflowExecutionUpdateCompleted",
    "SignalExternalWorkflowExecution": "SignalExternalWorkflowExecutionInitiated",
    "RequestCancelExternalWorkflowExecution": "RequestCancelExternalWorkflowExecutionInitiated",
    **CLOSE_COMMANDS,
}

# The event in a parent's history that tells how a child ended, by the child's close status.
CHILD_RESULT_FOR_STATUS = {
    "Completed": "ChildWorkflowExecutionCompleted",
    "Failed": "ChildWorkflowExecutionFailed",
    "Canceled": "ChildWorkflowExecutionCanceled",
    "TimedOut": "ChildWorkflowExecutionTimedOut",
    "Terminated": "ChildWorkflowExecutionTerminated",
}
CHILD_RESULTS = set(CHILD_RESULT_FOR_STATUS.values())


@dataclass(frozen=True)
class Initiated:
    """A request a run sends another workflow (through an OutboundCommand), and the events that answer it."""

    command: str  # the command the target's history service receives
    applied: str  # the event that records the target took it
    failed: str  # the event that records it did not apply there


# What each *Initiated event sends, and what answers it.
INITIATED = {
    "StartChildWorkflowExecutionInitiated": Initiated(
        "StartWorkflowExecution", "ChildWorkflowExecutionStarted", "StartChildWorkflowExecutionFailed",
    ),
    "SignalExternalWorkflowExecutionInitiated": Initiated(
        "SignalWorkflowExecution", "ExternalWorkflowExecutionSignaled", "SignalExternalWorkflowExecutionFailed",
    ),
    "RequestCancelExternalWorkflowExecutionInitiated": Initiated(
        "RequestCancelWorkflowExecution", "ExternalWorkflowExecutionCancelRequested", "RequestCancelExternalWorkflowExecutionFailed",
    ),
}
# Each event answering an initiated request (a child's close too), and the event that initiated it.
INITIATED_BY_ANSWER = {
    **{answer: initiated for initiated, sent in INITIATED.items() for answer in (sent.applied, sent.failed)},
    **{result: "StartChildWorkflowExecutionInitiated" for result in CHILD_RESULTS},
}


@dataclass(frozen=True)
class RunSection:
    """The part of a HistoryBatch that belongs to one run."""

    run_id: str
    first_event_id: int
    events: list[dict[str, Any]]
    effects: list[tuple[str, dict[str, Any]]]


def run_sections(batch: dict[str, Any]) -> list[RunSection]:
    """A batch's runs: its own, and the run a continue-as-new starts in the same record."""
    sections = [RunSection(batch["run_id"], batch["first_event_id"], batch["events"], batch["effects"])]
    if batch.get("next_run") is not None:
        following = batch["next_run"]
        sections.append(RunSection(following["run_id"], 1, following["events"], following["effects"]))
    return sections


def failure_record(message: str, failure_type: str, source: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A Failure record (schemas/Failure.avsc) for failures the engine itself raises."""
    return {
        "message": message, "type": failure_type, "source": source, "stack_trace": "", "non_retryable": False,
        "timeout_type": None, "details": details or [], "activity_failure_info": None, "cause": None,
    }


# The cause of a workflow task failed because its completion does not fit in a record (Temporal's
# WORKFLOW_TASK_FAILED_CAUSE_REQUEST_TOO_LARGE): the history service terminates the run.
WORKFLOW_TASK_TOO_LARGE = "REQUEST_TOO_LARGE"
