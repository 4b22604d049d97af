"""Converting user values to Payloads and exceptions to Failures (as temporalio.converter)."""

from __future__ import annotations

import dataclasses
import json
import traceback
import typing
from dataclasses import dataclass, field
from typing import Any

from kadence.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
    RetryState,
    TerminatedError,
    TimeoutError,
    TimeoutType,
)

Payload = dict[str, Any]
Failure = dict[str, Any]

ENCODING_NULL = b"binary/null"
ENCODING_BYTES = b"binary/plain"
ENCODING_JSON = b"json/plain"


class JSONPayloadConverter:
    """None, bytes, and anything JSON can carry, with dataclasses rebuilt from type hints."""

    def to_payload(self, value: Any) -> Payload:
        if value is None:
            return {"metadata": {"encoding": ENCODING_NULL}, "data": b""}
        if isinstance(value, bytes):
            return {"metadata": {"encoding": ENCODING_BYTES}, "data": value}
        data = json.dumps(value, default=_json_default, separators=(",", ":"), sort_keys=True).encode()
        return {"metadata": {"encoding": ENCODING_JSON}, "data": data}

    def from_payload(self, payload: Payload | None, type_hint: Any = None) -> Any:
        if payload is None:
            return None
        encoding = payload["metadata"].get("encoding")
        if encoding == ENCODING_NULL:
            return None
        if encoding == ENCODING_BYTES:
            return payload["data"]
        if encoding != ENCODING_JSON:
            raise ValueError(f"unknown payload encoding {encoding!r}; register a payload converter for it")
        return _to_type(json.loads(payload["data"]), type_hint)

    def to_payloads(self, values: typing.Sequence[Any]) -> list[Payload]:
        return [self.to_payload(v) for v in values]

    def from_payloads(self, payloads: list[Payload], type_hints: typing.Sequence[Any] | None = None) -> list[Any]:
        hints = list(type_hints or [])
        return [self.from_payload(p, hints[i] if i < len(hints) else None) for i, p in enumerate(payloads)]


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable; use a dataclass or JSON types")


def _to_type(value: Any, hint: Any) -> Any:
    if hint is None or value is None:
        return value
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        hints = typing.get_type_hints(hint)
        return hint(**{f.name: _to_type(value[f.name], hints.get(f.name)) for f in dataclasses.fields(hint) if f.name in value})
    origin = typing.get_origin(hint)
    if origin is list and isinstance(value, list):
        (item,) = typing.get_args(hint) or (None,)
        return [_to_type(v, item) for v in value]
    return value


class FailureConverter:
    def to_failure(self, exc: BaseException, payloads: JSONPayloadConverter) -> Failure:
        failure: Failure = {
            "message": str(exc) if not isinstance(exc, FailureError) else exc.message,
            "type": type(exc).__name__, "source": "kadence-python-sdk",
            "stack_trace": "".join(traceback.format_exception(exc)),
            "non_retryable": False, "timeout_type": None, "details": [], "activity_failure_info": None, "cause": None,
        }
        if isinstance(exc, ActivityError):
            failure["activity_failure_info"] = {
                "scheduled_event_id": exc.scheduled_event_id, "started_event_id": exc.started_event_id,
                "activity_type": exc.activity_type, "activity_id": exc.activity_id,
                "retry_state": exc.retry_state.value if exc.retry_state else "RETRY_POLICY_NOT_SET",
            }
        elif isinstance(exc, ApplicationError):
            failure["type"] = exc.type or ""
            failure["non_retryable"] = exc.non_retryable
            failure["details"] = payloads.to_payloads(exc.details)
        elif isinstance(exc, TimeoutError):
            failure["timeout_type"] = exc.type.value if exc.type else None
        if exc.__cause__ is not None:
            failure["cause"] = self.to_failure(exc.__cause__, payloads)
        return failure

    def from_failure(self, failure: Failure, payloads: JSONPayloadConverter) -> FailureError:
        exc: FailureError
        info = failure.get("activity_failure_info")
        if info:
            exc = ActivityError(
                failure["message"], scheduled_event_id=info["scheduled_event_id"], started_event_id=info["started_event_id"],
                activity_type=info["activity_type"], activity_id=info["activity_id"], retry_state=RetryState(info["retry_state"]),
            )
        elif failure.get("timeout_type"):
            exc = TimeoutError(failure["message"], type=TimeoutType(failure["timeout_type"]))
        else:
            exc = ApplicationError(
                failure["message"], *payloads.from_payloads(failure["details"]),
                type=failure["type"] or None, non_retryable=failure["non_retryable"],
            )
        if failure.get("cause"):
            exc.__cause__ = self.from_failure(failure["cause"], payloads)
        return exc

    def activity_error(
        self, event_type: str, scheduled: dict[str, Any], attrs: dict[str, Any], payloads: JSONPayloadConverter,
    ) -> ActivityError:
        """The ActivityError a workflow sees when an activity fails for good, caused by its last failure."""
        error = ActivityError(
            "Activity task timed out" if event_type == "ActivityTaskTimedOut" else "Activity task failed",
            scheduled_event_id=attrs["scheduled_event_id"], started_event_id=attrs["started_event_id"],
            activity_type=scheduled["activity_type"], activity_id=scheduled["activity_id"],
            retry_state=RetryState(attrs["retry_state"]),
        )
        error.__cause__ = self.from_failure(attrs["failure"], payloads)
        return error

    def child_workflow_error(self, event_type: str, attrs: dict[str, Any], payloads: JSONPayloadConverter) -> ChildWorkflowError:
        """The ChildWorkflowError a parent sees when its child ends other than completed, caused by why."""
        error = ChildWorkflowError(
            "Child workflow execution failed", workflow_id=attrs["workflow_id"], run_id=attrs["run_id"],
            workflow_type=attrs["workflow_type"], initiated_event_id=attrs["initiated_event_id"],
            started_event_id=attrs["started_event_id"], retry_state=RetryState(attrs["retry_state"]) if "retry_state" in attrs else None,
        )
        cause: FailureError
        if event_type == "ChildWorkflowExecutionFailed":
            cause = self.from_failure(attrs["failure"], payloads)
        elif event_type == "ChildWorkflowExecutionCanceled":
            cause = CancelledError("Workflow cancelled")
        elif event_type == "ChildWorkflowExecutionTerminated":
            cause = TerminatedError("Workflow terminated")
        else:
            cause = TimeoutError("Workflow timed out", type=TimeoutType.START_TO_CLOSE)
        error.__cause__ = cause
        return error


@dataclass(frozen=True)
class DataConverter:
    payload_converter: JSONPayloadConverter = field(default_factory=JSONPayloadConverter)
    failure_converter: FailureConverter = field(default_factory=FailureConverter)

    def to_failure(self, exc: BaseException) -> Failure:
        return self.failure_converter.to_failure(exc, self.payload_converter)

    def from_failure(self, failure: Failure) -> FailureError:
        return self.failure_converter.from_failure(failure, self.payload_converter)


default = DataConverter
