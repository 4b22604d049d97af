"""Converting user values to Payloads and exceptions to Failures (as temporalio.converter)."""

from __future__ import annotations

import abc
import dataclasses
import datetime
import enum
import json
import traceback
import types
import typing
import uuid
from collections.abc import Sequence
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
from kadence.protocol.limits import iter_payloads

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
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if hasattr(value, "model_dump"):  # a pydantic model
        return value.model_dump(mode="json")
    raise TypeError(
        f"{type(value).__name__} is not JSON serializable; use JSON types, a dataclass, a pydantic model, datetime, UUID or an Enum"
    )


def _to_type(value: Any, hint: Any) -> Any:
    """`value` (decoded JSON) as the type `hint` asks for, where JSON lost it."""
    if hint is None or value is None or hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # Optional[X], X | None: the first type that is not None
        return _to_type(value, next((a for a in args if a is not type(None)), None))
    if origin is list and isinstance(value, list):
        return [_to_type(v, args[0] if args else None) for v in value]
    if origin is dict and isinstance(value, dict):
        return {k: _to_type(v, args[1] if len(args) == 2 else None) for k, v in value.items()}
    if not isinstance(hint, type):
        return value
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        hints = typing.get_type_hints(hint)
        return hint(**{f.name: _to_type(value[f.name], hints.get(f.name)) for f in dataclasses.fields(hint) if f.name in value})
    if hasattr(hint, "model_validate"):  # a pydantic model
        return hint.model_validate(value)
    if issubclass(hint, datetime.datetime) and isinstance(value, str):
        return datetime.datetime.fromisoformat(value)
    if issubclass(hint, datetime.date) and isinstance(value, str):
        return datetime.date.fromisoformat(value)
    if issubclass(hint, uuid.UUID) and isinstance(value, str):
        return uuid.UUID(value)
    if issubclass(hint, enum.Enum):
        return hint(value)
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


class PayloadCodec(abc.ABC):
    """Transforms payloads on their way out of and into the client and workers, say to compress or
    encrypt them (as temporalio.converter.PayloadCodec). Workflow code and the services see only
    what it produces; search attributes are left alone (the read model indexes them)."""

    @abc.abstractmethod
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]: ...

    @abc.abstractmethod
    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]: ...


_NOT_ENCODED = frozenset({"search_attributes"})


@dataclass(frozen=True)
class DataConverter:
    payload_converter: JSONPayloadConverter = field(default_factory=JSONPayloadConverter)
    failure_converter: FailureConverter = field(default_factory=FailureConverter)
    payload_codec: PayloadCodec | None = None

    def to_failure(self, exc: BaseException) -> Failure:
        return self.failure_converter.to_failure(exc, self.payload_converter)

    def from_failure(self, failure: Failure) -> FailureError:
        return self.failure_converter.from_failure(failure, self.payload_converter)

    async def encode_payloads(self, record: Any) -> None:
        """Run the codec's encode over every payload in `record` (a command, an answer), in place."""
        if self.payload_codec is not None:
            found = list(iter_payloads(record, _NOT_ENCODED))
            _replace_all(found, await self.payload_codec.encode(found))

    async def decode_payloads(self, record: Any) -> None:
        """Run the codec's decode over every payload in `record` (a task, a history, a result), in place."""
        if self.payload_codec is not None:
            found = list(iter_payloads(record, _NOT_ENCODED))
            _replace_all(found, await self.payload_codec.decode(found))


def _replace_all(targets: list[Payload], replacements: list[Payload]) -> None:
    if len(targets) != len(replacements):
        raise ValueError(f"the payload codec returned {len(replacements)} payloads for {len(targets)}")
    for target, replacement in zip(targets, replacements, strict=True):
        target.clear()
        target.update(replacement)


default = DataConverter
