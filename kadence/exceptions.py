"""Errors that cross the engine, as in temporalio.exceptions."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from enum import Enum, IntEnum
from typing import Any

from kadence.api.failure.v1 import Failure


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
    CANCEL_REQUESTED = "CANCEL_REQUESTED"


class KadenceError(Exception):
    """Base of every Kadence error."""


class CommandTooLargeError(KadenceError):
    """The command's record would pass the Kafka record limit: it was not sent."""


TemporalError = KadenceError  # temporalio's name for the base of its errors


class FailureError(KadenceError):
    """An error that is recorded as a Failure in history. Raising one from a workflow fails the
    workflow; any other exception fails only the workflow task, which is retried. `failure` is the
    recorded Failure it was made from, with temporalio's attributes (kadence.api.failure.v1: message,
    stack_trace, cause, application_failure_info ...), None for one raised in this process (as
    temporalio.exceptions.FailureError)."""

    def __init__(self, message: str, *, failure: Failure | None = None, exc_args: tuple[Any, ...] | None = None) -> None:
        super().__init__(*(exc_args if exc_args is not None else (message,)))
        self.message = message
        self.failure = failure

    @property
    def cause(self) -> BaseException | None:
        return self.__cause__


class ApplicationErrorCategory(IntEnum):
    """How an application error is reported (as temporalio's): a BENIGN one is logged at DEBUG, not as a failure."""

    UNSPECIFIED = 0
    BENIGN = 1


class ApplicationError(FailureError):
    """An error of the application. Raised in an activity, `next_retry_delay` is the backoff before
    the next attempt, instead of the retry policy's (its maximum attempts and schedule-to-close
    timeout still apply)."""

    def __init__(
        self, message: str, *details: Any, type: str | None = None, non_retryable: bool = False,
        next_retry_delay: timedelta | None = None, category: ApplicationErrorCategory = ApplicationErrorCategory.UNSPECIFIED,
    ) -> None:
        super().__init__(message, exc_args=(f"{type}: {message}" if type else message,))
        self.details = details
        self.type = type
        self.non_retryable = non_retryable
        self.next_retry_delay = next_retry_delay
        self.category = category


class TimeoutError(FailureError):
    def __init__(self, message: str, *, type: TimeoutType | None, last_heartbeat_details: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.type = type
        self.last_heartbeat_details = last_heartbeat_details


class CancelledError(FailureError):
    """The workflow (or activity) was cancelled."""

    def __init__(self, message: str = "Cancelled", *details: Any) -> None:
        super().__init__(message)
        self.details = details


class TerminatedError(FailureError):
    """The workflow was terminated; the message is the reason."""

    def __init__(self, message: str, *details: Any) -> None:
        super().__init__(message)
        self.details = details


class ServerError(FailureError):
    """An error of the engine itself (temporalio's, read from a failure with `server_failure_info`);
    Kadence's services record none yet."""

    def __init__(self, message: str, *, non_retryable: bool = False) -> None:
        super().__init__(message)
        self.non_retryable = non_retryable


class ActivityError(FailureError):
    """An activity failed for good; the reason is `__cause__` (ApplicationError, TimeoutError...)."""

    def __init__(
        self, message: str, *, scheduled_event_id: int, started_event_id: int, identity: str, activity_type: str,
        activity_id: str, retry_state: RetryState | None,
    ) -> None:
        super().__init__(message)
        self.scheduled_event_id = scheduled_event_id
        self.started_event_id = started_event_id
        self.identity = identity
        self.activity_type = activity_type
        self.activity_id = activity_id
        self.retry_state = retry_state


class ChildWorkflowError(FailureError):
    """A child workflow ended other than completed; the reason is `__cause__` (ApplicationError,
    CancelledError, TerminatedError, TimeoutError)."""

    def __init__(
        self, message: str, *, namespace: str, workflow_id: str, run_id: str, workflow_type: str, initiated_event_id: int,
        started_event_id: int, retry_state: RetryState | None,
    ) -> None:
        super().__init__(message)
        self.namespace = namespace
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.workflow_type = workflow_type
        self.initiated_event_id = initiated_event_id
        self.started_event_id = started_event_id
        self.retry_state = retry_state


class NexusOperationError(FailureError):
    """A Nexus operation ended other than completed (failed, canceled, timed out); the reason is
    `__cause__` (ApplicationError, CancelledError, TimeoutError), as temporalio's."""

    def __init__(
        self, message: str, *, scheduled_event_id: int, endpoint: str, service: str, operation: str, operation_token: str,
    ) -> None:
        super().__init__(message)
        self.scheduled_event_id = scheduled_event_id
        self.endpoint = endpoint
        self.service = service
        self.operation = operation
        self.operation_token = operation_token


def is_cancelled_exception(exception: BaseException) -> bool:
    """Whether `exception` is a cancellation as temporalio's `is_cancelled_exception` has it: an
    `asyncio.CancelledError`, a `CancelledError`, or an `ActivityError`, `ChildWorkflowError` or
    `NexusOperationError` caused by a `CancelledError` (what awaiting a cancelled activity, child
    or operation raises). A workflow whose cancellation was requested and that ends with one ends
    canceled rather than failed."""
    return isinstance(exception, (asyncio.CancelledError, CancelledError)) or (
        isinstance(exception, (ActivityError, ChildWorkflowError, NexusOperationError))
        and isinstance(exception.cause, CancelledError)
    )


class _ExecutionFailureError(KadenceError):
    """What the client raises when the run it waits on did not complete; the reason is `cause`."""

    failed = "Workflow execution failed"

    def __init__(self, *, cause: BaseException) -> None:
        super().__init__(self.failed)
        self.__cause__ = cause

    @property
    def cause(self) -> BaseException:
        assert self.__cause__ is not None
        return self.__cause__


class WorkflowFailureError(_ExecutionFailureError):
    """Raised by the client when the workflow it waits on failed; the reason is `cause`."""


class ActivityFailureError(_ExecutionFailureError):
    """Raised by a standalone activity's handle when the activity did not complete (as
    temporalio.client's): failed for good, timed out, canceled or terminated; the reason is `cause`."""

    failed = "Activity execution failed"


class NexusOperationFailureError(_ExecutionFailureError):
    """Raised by a standalone Nexus operation's handle when the operation did not complete (as
    temporalio.client's): failed, timed out, canceled or terminated; the reason is `cause`."""

    failed = "Nexus operation execution failed"


class CommandRejectedError(KadenceError):
    """The history service turned the command down; `cause` says why in one word:
    WORKFLOW_ALREADY_STARTED, WORKFLOW_NOT_FOUND, WORKFLOW_CLOSED or INVALID_ARGUMENT."""

    def __init__(self, workflow_id: str, cause: str, reason: str) -> None:
        super().__init__(f"workflow {workflow_id}: {reason}")
        self.workflow_id = workflow_id
        self.cause = cause
        self.reason = reason


class WorkflowAlreadyStartedError(CommandRejectedError):
    """A run with this workflow id is already running (as temporalio.exceptions.WorkflowAlreadyStartedError):
    `workflow_type` is the type asked for, `run_id` the running run's when the client raised it.
    `reason` says which policy refused the start; `cause` is history's word for it."""

    def __init__(
        self, workflow_id: str, workflow_type: str, *, run_id: str | None = None, reason: str = "Workflow execution already started",
        cause: str = "WORKFLOW_ALREADY_STARTED",
    ) -> None:
        super().__init__(workflow_id, cause, reason)
        self.workflow_type = workflow_type
        self.run_id = run_id


class WorkflowUpdateFailedError(KadenceError):
    """The update was rejected by its validator, its handler failed, or the run closed before it
    completed; the reason is `cause` (as temporalio.client.WorkflowUpdateFailedError)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__("Workflow update failed")
        self.__cause__ = cause

    @property
    def cause(self) -> BaseException:
        assert self.__cause__ is not None
        return self.__cause__


class AsyncActivityCancelledError(KadenceError):
    """An async activity handle's heartbeat found that the workflow asked to cancel the activity
    (as temporalio.client.AsyncActivityCancelledError): report_cancellation() ends it."""

    def __init__(self, details: Any = None) -> None:
        super().__init__("Activity cancelled")
        self.details = details


class WorkflowQueryFailedError(KadenceError):
    """The query reached the workflow and failed (unknown query, the handler raised); the reason
    is `__cause__` (as temporalio.client.WorkflowQueryFailedError)."""


class WorkflowQueryTimeoutError(KadenceError):
    """No worker answered the query in time: is a worker polling the workflow's task queue?"""


class WorkflowNotFoundError(KadenceError):
    """The read model has no such workflow execution."""


class ClientClosedError(KadenceError):
    """A call on a Client after its close(): nothing could send the command or hear the answer."""

    def __init__(self, call: str) -> None:
        super().__init__(f"{call}: this Client was closed; connect a new one (Client.connect) for further calls")


class ReadOnlyContextError(KadenceError):
    """Workflow code in a query handler or update validator tried to change the run (issue a
    command, wait, set a handler), as temporalio's."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NondeterminismError(KadenceError):
    """Replaying workflow code produced other commands than its history recorded."""
