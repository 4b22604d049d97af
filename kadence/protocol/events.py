"""Facts about history events that every reader of the log shares."""

from __future__ import annotations

from typing import Any

# The events that close a run, and the execution status each one leaves.
CLOSE_STATUS = {
    "WorkflowExecutionCompleted": "Completed",
    "WorkflowExecutionFailed": "Failed",
    "WorkflowExecutionCanceled": "Canceled",
    "WorkflowExecutionTerminated": "Terminated",
    "WorkflowExecutionTimedOut": "TimedOut",
}


def failure_record(message: str, failure_type: str, source: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A Failure record (schemas/Failure.avsc) for failures the engine itself raises."""
    return {
        "message": message, "type": failure_type, "source": source, "stack_trace": "", "non_retryable": False,
        "timeout_type": None, "details": details or [], "activity_failure_info": None, "cause": None,
    }
