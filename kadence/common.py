"""Types shared by workflows, activities and the client (as temporalio.common)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum, IntEnum
from typing import Any, ClassVar, Protocol, Self

from kadence.exceptions import RetryState
from kadence.protocol.records import RetryPolicy as RetryPolicyRecord

UNSET: Any = object()  # an argument not given, None being a value (temporalio's common._arg_unset)


class ChildWorkflowCancellationType(IntEnum):
    """What cancelling the task awaiting a child workflow does (as temporalio.workflow's, its values
    too). ABANDON: do not ask the child; raise at once. TRY_CANCEL: ask it to cancel; raise at once.
    WAIT_CANCELLATION_COMPLETED: ask it, and wait for how it ends. WAIT_CANCELLATION_REQUESTED: ask
    it, and raise once its history recorded the request. Raised: ChildWorkflowError caused by
    CancelledError, as temporalio's."""

    ABANDON = 0
    TRY_CANCEL = 1
    WAIT_CANCELLATION_COMPLETED = 2
    WAIT_CANCELLATION_REQUESTED = 3


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


class ActivityIDReusePolicy(str, Enum):
    """Whether a standalone activity may start under the id of a closed one (as temporalio's)."""

    ALLOW_DUPLICATE = "ALLOW_DUPLICATE"
    ALLOW_DUPLICATE_FAILED_ONLY = "ALLOW_DUPLICATE_FAILED_ONLY"
    REJECT_DUPLICATE = "REJECT_DUPLICATE"


class ActivityIDConflictPolicy(str, Enum):
    """What a standalone activity's start does while one of its id runs (as temporalio's)."""

    FAIL = "FAIL"
    USE_EXISTING = "USE_EXISTING"


class NexusOperationIDReusePolicy(str, Enum):
    """Whether a standalone Nexus operation may start under the id of a closed one (as temporalio's)."""

    ALLOW_DUPLICATE = "ALLOW_DUPLICATE"
    ALLOW_DUPLICATE_FAILED_ONLY = "ALLOW_DUPLICATE_FAILED_ONLY"
    REJECT_DUPLICATE = "REJECT_DUPLICATE"


class NexusOperationIDConflictPolicy(str, Enum):
    """What a standalone Nexus operation's start does while one of its id runs (as temporalio's)."""

    FAIL = "FAIL"
    USE_EXISTING = "USE_EXISTING"


class NexusOperationExecutionStatus(IntEnum):
    """A standalone Nexus operation's status, as temporalio.common's (its values too)."""

    UNSPECIFIED = 0
    RUNNING = 1
    COMPLETED = 2
    FAILED = 3
    CANCELED = 4
    TERMINATED = 5
    TIMED_OUT = 6


class ParentClosePolicy(str, Enum):
    """What happens to a child workflow still running when its parent closes (as temporalio.workflow)."""

    TERMINATE = "TERMINATE"
    ABANDON = "ABANDON"
    REQUEST_CANCEL = "REQUEST_CANCEL"


class ActivityCancellationType(IntEnum):
    """What cancelling an activity's task in workflow code does (as temporalio.workflow's, its values
    too). TRY_CANCEL: ask the activity to cancel, and raise in the waiting code at once an
    ActivityError (retry state CANCEL_REQUESTED) caused by a CancelledError. WAIT_CANCELLATION_COMPLETED:
    ask it, and wait until history records how the activity ended (canceled raises that
    ActivityError, with the event ids and the identity of the worker that reported it; completed or
    failed gives the result or the activity's ActivityError). ABANDON: do not ask; raise the
    ActivityError at once. A task cancelled before it ran raises asyncio.CancelledError."""

    TRY_CANCEL = 0
    WAIT_CANCELLATION_COMPLETED = 1
    ABANDON = 2


@dataclass(frozen=True)
class Priority:
    """How a workflow's or activity's tasks rank under a backlog (as temporalio.common.Priority):
    `priority_key` 1 (first) to 5, `fairness_key` and `fairness_weight` to share a queue between
    tenants. Kadence does not take a priority yet (issue 52), so every run and attempt has
    `Priority.default`, which is what workflow.info() and activity.info() report."""

    priority_key: int | None = None
    fairness_key: str | None = None
    fairness_weight: float | None = None

    default: ClassVar[Priority]


Priority.default = Priority()


@dataclass(frozen=True)
class RetryPolicy:
    """How an activity is retried. Defaults are Temporal's: 1 s, x2.0, capped at 100 x initial, unlimited attempts."""

    initial_interval: timedelta = timedelta(seconds=1)
    backoff_coefficient: float = 2.0
    maximum_interval: timedelta | None = None
    maximum_attempts: int = 0
    non_retryable_error_types: Sequence[str] | None = None

    def to_record(self) -> RetryPolicyRecord:
        return {
            "initial_interval_ms": to_ms(self.initial_interval),
            "backoff_coefficient": self.backoff_coefficient,
            "maximum_interval_ms": to_ms(self.maximum_interval),
            "maximum_attempts": self.maximum_attempts,
            "non_retryable_error_types": list(self.non_retryable_error_types or ()),
        }

    @classmethod
    def from_record(cls, record: RetryPolicyRecord) -> RetryPolicy:
        return cls(
            initial_interval=timedelta(milliseconds=record["initial_interval_ms"]), backoff_coefficient=record["backoff_coefficient"],
            maximum_interval=timedelta(milliseconds=record["maximum_interval_ms"]) if record["maximum_interval_ms"] else None,
            maximum_attempts=record["maximum_attempts"], non_retryable_error_types=list(record["non_retryable_error_types"]) or None,
        )


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


# Metrics (as temporalio.common's MetricMeter): a runtime's exporter records what they measure,
# and a meter without one (MetricMeter.noop) records nothing.

MetricAttributes = Mapping[str, str | int | float | bool]


class MetricKind(str, Enum):
    COUNTER = "counter"
    HISTOGRAM = "histogram"
    DURATION = "duration"  # a histogram of durations, recorded in ms: an exporter may write seconds instead
    GAUGE = "gauge"


class MetricSink(Protocol):
    """Where a runtime's metrics go (its Prometheus endpoint, its OpenTelemetry exporter)."""

    def record(
        self, kind: MetricKind, name: str, description: str | None, unit: str | None, value: float, attributes: MetricAttributes,
    ) -> None: ...


class MetricCommon:
    """A metric of a meter: its name, description and unit, and the attributes it records with."""

    def __init__(
        self, sink: MetricSink | None, name: str, description: str | None, unit: str | None, attributes: MetricAttributes,
    ) -> None:
        self._sink = sink
        self._name = name
        self._description = description
        self._unit = unit
        self._attributes = attributes

    kind: ClassVar[MetricKind]

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str | None:
        return self._description

    @property
    def unit(self) -> str | None:
        return self._unit

    def with_additional_attributes(self, additional_attributes: MetricAttributes) -> Self:
        """The same metric, recording with these attributes too."""
        return type(self)(self._sink, self._name, self._description, self._unit, {**self._attributes, **additional_attributes})

    def _record(self, value: float, additional_attributes: MetricAttributes | None) -> None:
        if self._sink is not None:
            attributes = {**self._attributes, **additional_attributes} if additional_attributes else self._attributes
            self._sink.record(self.kind, self._name, self._description, self._unit, value, attributes)


class MetricCounter(MetricCommon):
    kind = MetricKind.COUNTER

    def add(self, value: int, additional_attributes: MetricAttributes | None = None) -> None:
        if value < 0:
            raise ValueError(f"counter {self.name}: a counter only grows, so {value} cannot be added")
        self._record(value, additional_attributes)


class MetricHistogram(MetricCommon):
    kind = MetricKind.HISTOGRAM

    def record(self, value: int, additional_attributes: MetricAttributes | None = None) -> None:
        if value < 0:
            raise ValueError(f"histogram {self.name}: values are not negative, {value} is")
        self._record(value, additional_attributes)


class MetricHistogramFloat(MetricCommon):
    kind = MetricKind.HISTOGRAM

    def record(self, value: float, additional_attributes: MetricAttributes | None = None) -> None:
        if value < 0:
            raise ValueError(f"histogram {self.name}: values are not negative, {value} is")
        self._record(value, additional_attributes)


class MetricHistogramTimedelta(MetricCommon):
    """Durations, in milliseconds, or in seconds where the runtime's config says `durations_as_seconds`."""

    kind = MetricKind.DURATION

    def record(self, value: timedelta, additional_attributes: MetricAttributes | None = None) -> None:
        if value < timedelta():
            raise ValueError(f"histogram {self.name}: durations are not negative, {value} is")
        self._record(value / timedelta(milliseconds=1), additional_attributes)


class MetricGauge(MetricCommon):
    kind = MetricKind.GAUGE

    def set(self, value: int, additional_attributes: MetricAttributes | None = None) -> None:
        self._record(value, additional_attributes)


class MetricGaugeFloat(MetricCommon):
    kind = MetricKind.GAUGE

    def set(self, value: float, additional_attributes: MetricAttributes | None = None) -> None:
        self._record(value, additional_attributes)


class MetricMeter:
    """Makes metrics that record into a runtime's exporter (`Runtime.metric_meter`,
    `activity.metric_meter()`, `workflow.metric_meter()`), with the meter's attributes."""

    noop: ClassVar[MetricMeter]

    def __init__(self, sink: MetricSink | None, attributes: MetricAttributes | None = None) -> None:
        self._sink = sink
        self._attributes: MetricAttributes = dict(attributes or {})

    def create_counter(self, name: str, description: str | None = None, unit: str | None = None) -> MetricCounter:
        return MetricCounter(self._sink, name, description, unit, self._attributes)

    def create_histogram(self, name: str, description: str | None = None, unit: str | None = None) -> MetricHistogram:
        return MetricHistogram(self._sink, name, description, unit, self._attributes)

    def create_histogram_float(self, name: str, description: str | None = None, unit: str | None = None) -> MetricHistogramFloat:
        return MetricHistogramFloat(self._sink, name, description, unit, self._attributes)

    def create_histogram_timedelta(self, name: str, description: str | None = None, unit: str | None = None) -> MetricHistogramTimedelta:
        return MetricHistogramTimedelta(self._sink, name, description, unit, self._attributes)

    def create_gauge(self, name: str, description: str | None = None, unit: str | None = None) -> MetricGauge:
        return MetricGauge(self._sink, name, description, unit, self._attributes)

    def create_gauge_float(self, name: str, description: str | None = None, unit: str | None = None) -> MetricGaugeFloat:
        return MetricGaugeFloat(self._sink, name, description, unit, self._attributes)

    def with_additional_attributes(self, additional_attributes: MetricAttributes) -> MetricMeter:
        return MetricMeter(self._sink, {**self._attributes, **additional_attributes})

    def recording_only_when(self, condition: Callable[[], bool]) -> MetricMeter:
        """This meter, whose metrics record only while `condition()` holds (a workflow's: not on replay)."""
        return MetricMeter(None if self._sink is None else _SinkWhen(self._sink, condition), self._attributes)


@dataclass(frozen=True)
class _SinkWhen:
    sink: MetricSink
    condition: Callable[[], bool]

    def record(
        self, kind: MetricKind, name: str, description: str | None, unit: str | None, value: float, attributes: MetricAttributes,
    ) -> None:
        if self.condition():
            self.sink.record(kind, name, description, unit, value, attributes)


MetricMeter.noop = MetricMeter(None)
