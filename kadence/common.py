"""Types shared by workflows, activities and the client (as temporalio.common)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any

from kadence.exceptions import RetryState

UNSET: Any = object()  # an argument not given, None being a value (temporalio's common._arg_unset)


@dataclass(frozen=True)
class RawValue:
    """A payload not converted (as temporalio.common.RawValue): what a dynamic handler gets for its
    arguments; `workflow.payload_converter().from_payload(value.payload, SomeType)` converts one."""

    payload: dict[str, Any]


class WorkflowIDReusePolicy(str, Enum):
    """Whether a start may reuse the id of a closed run (as temporalio.common)."""

    ALLOW_DUPLICATE = "ALLOW_DUPLICATE"
    ALLOW_DUPLICATE_FAILED_ONLY = "ALLOW_DUPLICATE_FAILED_ONLY"
    REJECT_DUPLICATE = "REJECT_DUPLICATE"


class WorkflowIDConflictPolicy(str, Enum):
    """What a start does while a run with its id is running (as temporalio.common)."""

    FAIL = "FAIL"
    USE_EXISTING = "USE_EXISTING"
    TERMINATE_EXISTING = "TERMINATE_EXISTING"


class ParentClosePolicy(str, Enum):
    """What happens to a child workflow still running when its parent closes (as temporalio.workflow)."""

    TERMINATE = "TERMINATE"
    ABANDON = "ABANDON"
    REQUEST_CANCEL = "REQUEST_CANCEL"


@dataclass(frozen=True)
class RetryPolicy:
    """How an activity is retried. Defaults are Temporal's: 1 s, x2.0, capped at 100 x initial, unlimited attempts."""

    initial_interval: timedelta = timedelta(seconds=1)
    backoff_coefficient: float = 2.0
    maximum_interval: timedelta | None = None
    maximum_attempts: int = 0
    non_retryable_error_types: Sequence[str] | None = None

    def to_record(self) -> dict[str, Any]:
        return {
            "initial_interval_ms": to_ms(self.initial_interval),
            "backoff_coefficient": self.backoff_coefficient,
            "maximum_interval_ms": to_ms(self.maximum_interval),
            "maximum_attempts": self.maximum_attempts,
            "non_retryable_error_types": list(self.non_retryable_error_types or ()),
        }


def to_ms(duration: timedelta | None) -> int:
    return 0 if duration is None else int(duration.total_seconds() * 1000)


def attempt_timeout_ms(activity: Mapping[str, Any]) -> int:
    """How long one attempt of an activity (a ScheduleActivityTask's attributes) may run: its
    start-to-close timeout, else, as Temporal, the whole schedule-to-close."""
    return int(activity["start_to_close_timeout_ms"] or activity["schedule_to_close_timeout_ms"])


DEFAULT_INITIAL_INTERVAL_MS = 1000
DEFAULT_BACKOFF_COEFFICIENT = 2.0


def retry_backoff_ms(policy: dict[str, Any] | None, attempt: int) -> int:
    """Delay before attempt `attempt + 1`, with Temporal's defaults for unset fields."""
    policy = policy or {}
    initial = policy.get("initial_interval_ms") or DEFAULT_INITIAL_INTERVAL_MS
    coefficient = policy.get("backoff_coefficient") or DEFAULT_BACKOFF_COEFFICIENT
    maximum = policy.get("maximum_interval_ms") or 100 * initial
    return int(min(initial * coefficient ** (attempt - 1), maximum))


# A workflow task that failed or timed out is retried after 1 s, doubled at each attempt, at most a minute.
WORKFLOW_TASK_RETRY_POLICY = {"maximum_interval_ms": 60_000}


def workflow_task_backoff_ms(attempt: int) -> int:
    """How long a failed workflow task waits before attempt `attempt` (2 and on)."""
    return retry_backoff_ms(WORKFLOW_TASK_RETRY_POLICY, attempt - 1)


def next_attempt_backoff_ms(policy: dict[str, Any] | None, attempt: int, failure: Mapping[str, Any]) -> int:
    """The wait before the attempt after `attempt` failed with `failure`: the delay its
    ApplicationError(next_retry_delay=...) asked for, else the retry policy's backoff."""
    asked = failure.get("next_retry_delay_ms")
    return max(0, asked) if asked is not None else retry_backoff_ms(policy, attempt)


def retry_state(policy: dict[str, Any] | None, attempt: int, failure: Mapping[str, Any], time_left_ms: float | None) -> RetryState:
    """Whether attempt `attempt`, failed with `failure`, is followed by another (IN_PROGRESS) or why
    not: the activity's (or local activity's) retry policy, and the time left before its deadline
    (None: no deadline), which the backoff before the next attempt must stay within."""
    policy = policy or {}
    if failure["non_retryable"] or failure["type"] in policy.get("non_retryable_error_types", ()):
        return RetryState.NON_RETRYABLE_FAILURE
    maximum_attempts = policy.get("maximum_attempts") or 0
    if maximum_attempts and attempt >= maximum_attempts:
        return RetryState.MAXIMUM_ATTEMPTS_REACHED
    if time_left_ms is not None and next_attempt_backoff_ms(policy, attempt, failure) >= time_left_ms:
        return RetryState.TIMEOUT
    return RetryState.IN_PROGRESS
