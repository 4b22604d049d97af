"""Errors that cross the engine, as in temporalio.exceptions."""

from __future__ import annotations

from enum import Enum
from typing import Any


class TimeoutType(str, Enum):
    START_TO_CLOSE = "START_TO_CLOSE"
    SCHEDULE_TO_START = "SCHEDULE_TO_START"
    SCHEDULE_TO_CLOSE = "SCHEDULE_TO_CLOSE"
    HEARTBEAT = "HEARTBEAT"


class RetryState(str, Enum):
    IN_PROGRESS = "IN_PROGRESS"
    NON_RETRYABLE_FAILURE = "NON_RETRYABLE_FAILURE"
    TIMEOUT = "TIMEOUT"
    MAXIMUM_ATTEMPTS_REACHED = "MAXIMUM_ATTEMPTS_REACHED"
    RETRY_POLICY_NOT_SET = "RETRY_POLICY_NOT_SET"


class KadenceError(Exception):
    """Base of every Kadence error."""


class CommandTooLargeError(KadenceError):
    """The command's record would pass the Kafka record limit: it was not sent."""


class FailureError(KadenceError):
    """An error that is recorded as a Failure in history. Raising one from a workflow fails the
    workflow; any other exception fails only the workflow task, which is retried."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ApplicationError(FailureError):
    def __init__(self, message: str, *details: Any, type: str | None = None, non_retryable: bool = False) -> None:
        super().__init__(message)
        self.details = details
        self.type = type
        self.non_retryable = non_retryable


class TimeoutError(FailureError):
    def __init__(self, message: str, *, type: TimeoutType | None) -> None:
        super().__init__(message)
        self.type = type


class CancelledError(FailureError):
    """The workflow (or activity) was cancelled."""


class TerminatedError(FailureError):
    """The workflow was terminated; the message is the reason."""


class ActivityError(FailureError):
    """An activity failed for good; the reason is `__cause__` (ApplicationError, TimeoutError...)."""

    def __init__(
        self, message: str, *, scheduled_event_id: int, started_event_id: int, activity_type: str,
        activity_id: str, retry_state: RetryState | None,
    ) -> None:
        super().__init__(message)
        self.scheduled_event_id = scheduled_event_id
        self.started_event_id = started_event_id
        self.activity_type = activity_type
        self.activity_id = activity_id
        self.retry_state = retry_state

    @property
    def cause(self) -> BaseException | None:
        return self.__cause__


class ChildWorkflowError(FailureError):
    """A child workflow ended other than completed; the reason is `__cause__` (ApplicationError,
    CancelledError, TerminatedError, TimeoutError)."""

    def __init__(
        self, message: str, *, workflow_id: str, run_id: str, workflow_type: str, initiated_event_id: int,
        started_event_id: int, retry_state: RetryState | None,
    ) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.workflow_type = workflow_type
        self.initiated_event_id = initiated_event_id
        self.started_event_id = started_event_id
        self.retry_state = retry_state

    @property
    def cause(self) -> BaseException | None:
        return self.__cause__


class WorkflowFailureError(KadenceError):
    """Raised by the client when the workflow it waits on failed; the reason is `cause`."""

    def __init__(self, *, cause: BaseException) -> None:
        super().__init__("Workflow execution failed")
        self.__cause__ = cause

    @property
    def cause(self) -> BaseException:
        assert self.__cause__ is not None
        return self.__cause__


class CommandRejectedError(KadenceError):
    """The history service turned the command down; `cause` says why in one word:
    WORKFLOW_ALREADY_STARTED, WORKFLOW_NOT_FOUND, WORKFLOW_CLOSED or INVALID_ARGUMENT."""

    def __init__(self, workflow_id: str, cause: str, reason: str) -> None:
        super().__init__(f"workflow {workflow_id}: {reason}")
        self.workflow_id = workflow_id
        self.cause = cause
        self.reason = reason


class WorkflowAlreadyStartedError(CommandRejectedError):
    """A run with this workflow id is already running (as temporalio.exceptions.WorkflowAlreadyStartedError)."""


class WorkflowUpdateFailedError(KadenceError):
    """The update was rejected by its validator or its handler failed; the reason is `__cause__`
    (as temporalio.client.WorkflowUpdateFailedError)."""


class WorkflowQueryFailedError(KadenceError):
    """The query reached the workflow and failed (unknown query, the handler raised); the reason
    is `__cause__` (as temporalio.client.WorkflowQueryFailedError)."""


class WorkflowQueryTimeoutError(KadenceError):
    """No worker answered the query in time: is a worker polling the workflow's task queue?"""


class WorkflowNotFoundError(KadenceError):
    """The read model has no such workflow execution."""


class NondeterminismError(KadenceError):
    """Replaying workflow code produced other commands than its history recorded."""
