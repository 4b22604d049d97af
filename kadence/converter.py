"""Converting user values to Payloads and exceptions to Failures, as temporalio.converter: a
DataConverter holds a payload converter (by default a composite of encoding converters, tried in
order), a failure converter and an optional payload codec."""

from __future__ import annotations

import abc
import collections
import collections.abc
import dataclasses
import datetime
import enum
import functools
import inspect
import json
import traceback
import types
import typing
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

# temporalio.converter's names for external storage, which kadence/_extstore.py defines.
from kadence._extstore import ExternalStorage as ExternalStorage
from kadence._extstore import StorageDriver as StorageDriver
from kadence._extstore import StorageDriverActivityInfo as StorageDriverActivityInfo
from kadence._extstore import StorageDriverClaim as StorageDriverClaim
from kadence._extstore import StorageDriverRetrieveContext as StorageDriverRetrieveContext
from kadence._extstore import StorageDriverSelectContext as StorageDriverSelectContext
from kadence._extstore import StorageDriverStoreContext as StorageDriverStoreContext
from kadence._extstore import StorageDriverWorkflowInfo as StorageDriverWorkflowInfo
from kadence.api.common.v1 import ActivityType, Payload, Payloads, WorkflowExecution, WorkflowType, replace_payloads
from kadence.api.failure import v1 as failure_v1
from kadence.common import RawValue, to_ms
from kadence.exceptions import (
    ActivityError,
    ApplicationError,
    ApplicationErrorCategory,
    CancelledError,
    ChildWorkflowError,
    FailureError,
    NexusOperationError,
    RetryState,
    ServerError,
    TerminatedError,
    TimeoutError,
    TimeoutType,
)
from kadence.protocol.events import FAILURE_INFO_RECORDS
from kadence.protocol.limits import iter_payloads
from kadence.protocol.names import EventType

try:  # the protobuf converters work where protobuf is installed, as in temporalio
    import google.protobuf.json_format as _proto_json
    import google.protobuf.message as _proto_message
    import google.protobuf.symbol_database as _proto_symbols
except ImportError:
    _proto_json = _proto_message = _proto_symbols = None  # type: ignore[assignment]

Failure = dict[str, Any]


class PayloadConverter(abc.ABC):
    """Values to payloads and back (temporalio.converter.PayloadConverter)."""

    @abc.abstractmethod
    def to_payloads(self, values: Sequence[Any]) -> list[Payload]: ...

    @abc.abstractmethod
    def from_payloads(self, payloads: Sequence[Any], type_hints: Sequence[Any] | None = None) -> list[Any]: ...

    def to_payload(self, value: Any) -> Payload:
        return self.to_payloads([value])[0]

    def from_payload(self, payload: Any, type_hint: Any = None) -> Any:
        """One value; a missing payload (a record's null, say a void result) is None."""
        return None if payload is None else self.from_payloads([payload], [type_hint])[0]


class EncodingPayloadConverter(abc.ABC):
    """One encoding of a CompositePayloadConverter: `to_payload` returns None for a value it does not take."""

    @property
    @abc.abstractmethod
    def encoding(self) -> str: ...

    @abc.abstractmethod
    def to_payload(self, value: Any) -> Payload | None: ...

    @abc.abstractmethod
    def from_payload(self, payload: Payload, type_hint: Any = None) -> Any: ...


class CompositePayloadConverter(PayloadConverter):
    """Encodes with the first converter that takes the value; decodes with the one the payload's
    `encoding` names."""

    def __init__(self, *converters: EncodingPayloadConverter) -> None:
        self.converters: dict[bytes, EncodingPayloadConverter] = {c.encoding.encode(): c for c in converters}

    def to_payloads(self, values: Sequence[Any]) -> list[Payload]:
        payloads = []
        for index, value in enumerate(values):
            if isinstance(value, RawValue):  # as temporalio: a payload passed through as it is
                payloads.append(Payload.of(value.payload))
                continue
            payload = next((p for p in (c.to_payload(value) for c in self.converters.values()) if p is not None), None)
            if payload is None:
                raise RuntimeError(f"Value at index {index} of type {type(value)} has no known converter")
            payloads.append(payload)
        return payloads

    def from_payloads(self, payloads: Sequence[Any], type_hints: Sequence[Any] | None = None) -> list[Any]:
        values = []
        for index, record in enumerate(payloads):
            payload = Payload.of(record)
            hint = type_hints[index] if type_hints is not None and index < len(type_hints) else None
            if hint is RawValue:  # as temporalio: the payload unconverted, whatever its encoding
                values.append(RawValue(payload))
                continue
            encoding = payload.metadata.get("encoding", b"<unknown>")
            converter = self.converters.get(encoding)
            if converter is None:
                raise KeyError(f"Unknown payload encoding {encoding.decode(errors='replace')}: register an EncodingPayloadConverter for it")
            try:
                values.append(converter.from_payload(payload, hint))
            except RuntimeError as err:
                name = encoding.decode(errors="replace")
                raise RuntimeError(f"Payload at index {index} with encoding {name} could not be converted") from err
        return values


class BinaryNullPayloadConverter(EncodingPayloadConverter):
    encoding = "binary/null"

    def to_payload(self, value: Any) -> Payload | None:
        return Payload(metadata={"encoding": b"binary/null"}) if value is None else None

    def from_payload(self, payload: Payload, type_hint: Any = None) -> Any:
        if payload.data:
            raise RuntimeError("Expected empty data set for binary/null")
        return None


class BinaryPlainPayloadConverter(EncodingPayloadConverter):
    encoding = "binary/plain"

    def to_payload(self, value: Any) -> Payload | None:
        return Payload(metadata={"encoding": b"binary/plain"}, data=value) if isinstance(value, bytes) else None

    def from_payload(self, payload: Payload, type_hint: Any = None) -> Any:
        return payload.data


def _is_proto_message(value: Any) -> bool:
    return _proto_message is not None and isinstance(value, _proto_message.Message) and value.DESCRIPTOR is not None


def _proto_instance(payload: Payload) -> Any:
    message_type = payload.metadata.get("messageType", b"<unknown>").decode()
    if _proto_symbols is None:
        raise RuntimeError(f"A {message_type} protobuf payload needs the protobuf package: pip install protobuf")
    try:
        return _proto_symbols.Default().GetSymbol(message_type)()
    except KeyError as err:
        raise RuntimeError(f"Unknown Protobuf type {message_type}: import its generated module in this process") from err


class JSONProtoPayloadConverter(EncodingPayloadConverter):
    encoding = "json/protobuf"

    def to_payload(self, value: Any) -> Payload | None:
        if not _is_proto_message(value):
            return None
        data = json.dumps(_proto_json.MessageToDict(value), separators=(",", ":"), sort_keys=True).encode()
        return Payload(metadata={"encoding": b"json/protobuf", "messageType": value.DESCRIPTOR.full_name.encode()}, data=data)

    def from_payload(self, payload: Payload, type_hint: Any = None) -> Any:
        message = _proto_instance(payload)
        try:
            return _proto_json.Parse(payload.data, message)
        except _proto_json.ParseError as err:
            raise RuntimeError("Failed parsing") from err


class BinaryProtoPayloadConverter(EncodingPayloadConverter):
    encoding = "binary/protobuf"

    def to_payload(self, value: Any) -> Payload | None:
        if not _is_proto_message(value):
            return None
        return Payload(metadata={"encoding": b"binary/protobuf", "messageType": value.DESCRIPTOR.full_name.encode()},
                       data=value.SerializeToString())

    def from_payload(self, payload: Payload, type_hint: Any = None) -> Any:
        message = _proto_instance(payload)
        try:
            message.ParseFromString(payload.data)
        except _proto_message.DecodeError as err:
            raise RuntimeError("Failed parsing") from err
        return message


class AdvancedJSONEncoder(json.JSONEncoder):
    """JSON for dataclasses, pydantic models, datetimes, UUIDs, enums and any iterable."""

    def default(self, o: Any) -> Any:
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return dataclasses.asdict(o)
        if isinstance(o, (datetime.datetime, datetime.date, datetime.time)):
            return o.isoformat()
        if isinstance(o, uuid.UUID):
            return str(o)
        if isinstance(o, enum.Enum):
            return o.value
        if callable(getattr(o, "model_dump", None)):  # pydantic 2
            return o.model_dump(mode="json")
        if callable(getattr(o, "dict", None)):  # pydantic 1 and the like
            return o.dict()
        if isinstance(o, (set, frozenset)):  # in a replayable order: a set's order changes between processes
            try:
                return sorted(o)
            except TypeError:
                return list(o)
        if isinstance(o, collections.abc.Iterable):
            return list(o)
        return super().default(o)


class JSONTypeConverter(abc.ABC):
    """Rebuilds a type from decoded JSON where the defaults cannot (temporalio's custom_type_converters)."""

    Unhandled: ClassVar[Any] = object()

    @abc.abstractmethod
    def to_typed_value(self, hint: Any, value: Any) -> Any:
        """The value as `hint`, or `JSONTypeConverter.Unhandled`."""


class JSONPlainPayloadConverter(EncodingPayloadConverter):
    """Anything JSON carries, plus what `encoder` adds; decoded values are rebuilt from the type hint."""

    def __init__(
        self, *, encoder: type[json.JSONEncoder] | None = AdvancedJSONEncoder, decoder: type[json.JSONDecoder] | None = None,
        encoding: str = "json/plain", custom_type_converters: Sequence[JSONTypeConverter] = (),
    ) -> None:
        self._encoder = encoder
        self._decoder = decoder
        self._encoding = encoding
        self._custom_type_converters = list(custom_type_converters)

    @property
    def encoding(self) -> str:
        return self._encoding

    def to_payload(self, value: Any) -> Payload | None:
        try:
            data = json.dumps(value, cls=self._encoder, separators=(",", ":"), sort_keys=True).encode()
        except TypeError as err:
            raise TypeError(
                f"{err}; use JSON types, a dataclass, a pydantic model, datetime, UUID, an Enum, or a converter of your own"
            ) from err
        return Payload(metadata={"encoding": self._encoding.encode()}, data=data)

    def from_payload(self, payload: Payload, type_hint: Any = None) -> Any:
        try:
            value = json.loads(payload.data, cls=self._decoder)
        except json.JSONDecodeError as err:
            raise RuntimeError("Failed parsing") from err
        return value_to_type(type_hint, value, self._custom_type_converters) if type_hint is not None else value


class DefaultPayloadConverter(CompositePayloadConverter):
    """None, bytes, protobuf messages and JSON, as every Temporal SDK encodes them."""

    default_encoding_payload_converters: ClassVar[tuple[EncodingPayloadConverter, ...]] = (
        BinaryNullPayloadConverter(), BinaryPlainPayloadConverter(), JSONProtoPayloadConverter(), BinaryProtoPayloadConverter(),
        JSONPlainPayloadConverter(),
    )

    def __init__(self) -> None:
        super().__init__(*self.default_encoding_payload_converters)


def type_hints(target: Any) -> dict[str, Any]:
    """typing.get_type_hints of a function, method or class, resolved once: it evaluates string
    annotations on every call, which cost a worker about 8 % of its CPU under load when every
    activity attempt and activation asked again. The dict is shared: read it, never change it."""
    target = getattr(target, "__func__", target)  # a bound method's are its function's
    try:
        return _resolved_type_hints(target)
    except TypeError:  # unhashable (a callable instance): resolved each time
        return typing.get_type_hints(target)


@functools.lru_cache(maxsize=4096)
def _resolved_type_hints(target: Any) -> dict[str, Any]:
    return typing.get_type_hints(target)


def callable_arg_types(fn: Any) -> list[Any]:
    """Type hints of a callable's parameters (a bound method's without self), for decoding payloads."""
    function = getattr(fn, "__func__", None)
    if function is not None:
        return list(_parameter_types(function)[1:])
    try:
        return list(_parameter_types(fn))
    except TypeError:  # unhashable
        return list(_parameter_types.__wrapped__(fn))


@functools.lru_cache(maxsize=4096)
def _parameter_types(fn: Any) -> tuple[Any, ...]:
    hints = type_hints(fn)
    return tuple(hints.get(p.name) for p in inspect.signature(fn).parameters.values())


def value_to_type(hint: Any, value: Any, custom_converters: Sequence[JSONTypeConverter] = ()) -> Any:
    """`value` (decoded JSON) as the type `hint` asks for, or TypeError saying why it is not one."""
    for converter in custom_converters:
        converted = converter.to_typed_value(hint, value)
        if converted is not JSONTypeConverter.Unhandled:
            return converted
    if hint is None or hint is Any or isinstance(hint, typing.TypeVar):
        return value
    if hint is type(None):
        if value is not None:
            raise TypeError(f"Expected None, got {type(value).__name__}")
        return None
    supertype = getattr(hint, "__supertype__", None)  # a NewType
    if supertype is not None:
        return value_to_type(supertype, value, custom_converters)
    origin, args = typing.get_origin(hint) or hint, typing.get_args(hint)
    if origin is Literal:
        if value not in args:
            raise TypeError(f"Value {value!r} not in literal values {args}")
        return value
    if origin in (typing.Union, types.UnionType):
        return _to_union_member(hint, args, value, custom_converters)
    if not inspect.isclass(origin):
        return value
    return _to_class(hint, origin, args, value, custom_converters)


def _to_union_member(hint: Any, members: tuple[Any, ...], value: Any, custom_converters: Sequence[JSONTypeConverter]) -> Any:
    """The first member the value converts to (None first, so Optional[X] keeps a None)."""
    errors = []
    for member in sorted(members, key=lambda m: m is not type(None)):
        try:
            return value_to_type(member, value, custom_converters)
        except (TypeError, ValueError, KeyError) as err:
            errors.append(f"{getattr(member, '__name__', member)}: {err}")
    raise TypeError(f"Failed converting to {hint} from {value!r} ({'; '.join(errors)})")


_SCALARS: dict[type, tuple[type, ...]] = {bool: (bool,), int: (int, float), float: (int, float), str: (str,)}


def _to_class(hint: Any, origin: type, args: tuple[Any, ...], value: Any, custom_converters: Sequence[JSONTypeConverter]) -> Any:
    if origin in _SCALARS:
        if not isinstance(value, _SCALARS[origin]):
            raise TypeError(f"Expected {origin.__name__}, was {type(value).__name__}")
        return origin(value)
    if origin is bytes:
        if not isinstance(value, (str, bytes, list)):
            raise TypeError(f"Expected bytes, was {type(value).__name__}")
        return value.encode() if isinstance(value, str) else bytes(value)
    if issubclass(origin, enum.Enum):
        return origin(value)
    if issubclass(origin, (datetime.date, datetime.time)):
        return origin.fromisoformat(_expect(str, value, hint))
    if issubclass(origin, uuid.UUID):
        return origin(_expect(str, value, hint))
    if dataclasses.is_dataclass(origin):
        fields = _expect(dict, value, hint)
        hints = type_hints(origin)
        return origin(**{f.name: _field_value(hint, f.name, hints.get(f.name), fields[f.name], custom_converters)
                         for f in dataclasses.fields(origin) if f.name in fields})
    if callable(model_validate := getattr(origin, "model_validate", None)):  # pydantic 2
        return model_validate(value)
    if isinstance(inspect.getattr_static(origin, "parse_obj", None), (classmethod, staticmethod)):  # pydantic 1
        return origin.parse_obj(value)  # type: ignore[attr-defined]
    if issubclass(origin, collections.abc.Mapping):
        return _to_mapping(hint, origin, args, _expect(dict, value, hint), custom_converters)
    if issubclass(origin, collections.abc.Iterable) and not isinstance(value, (str, bytes, dict)):
        return _to_collection(hint, origin, args, _expect(list, value, hint), custom_converters)
    if isinstance(value, origin):
        return value
    raise TypeError(f"Cannot convert {type(value).__name__} to {hint}")


def _expect(kind: type, value: Any, hint: Any) -> Any:
    if not isinstance(value, kind):
        raise TypeError(f"Cannot convert {type(value).__name__} to {hint}: expected a JSON {kind.__name__}")
    return value


def _field_value(owner: Any, name: str, hint: Any, value: Any, custom_converters: Sequence[JSONTypeConverter]) -> Any:
    try:
        return value_to_type(hint, value, custom_converters)
    except (TypeError, ValueError) as err:
        raise TypeError(f"Failed converting field {name} of {getattr(owner, '__name__', owner)}: {err}") from err


def _to_mapping(hint: Any, origin: type, args: tuple[Any, ...], value: dict[Any, Any],
                custom_converters: Sequence[JSONTypeConverter]) -> Any:
    if typing.is_typeddict(origin):
        hints = type_hints(origin)
        return {key: _field_value(hint, key, hints.get(key), item, custom_converters) for key, item in value.items()}
    key_hint, value_hint = (args + (None, None))[:2]
    converted = {_to_key(key_hint, key, custom_converters): value_to_type(value_hint, item, custom_converters)
                 for key, item in value.items()}
    return converted if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping) else origin(converted)


def _to_key(hint: Any, key: str, custom_converters: Sequence[JSONTypeConverter]) -> Any:
    """A JSON object's key (always a string) as the mapping's key type."""
    if hint in (int, float) and isinstance(key, str):
        return hint(key)
    return value_to_type(hint, key, custom_converters)


def _to_collection(hint: Any, origin: type, args: tuple[Any, ...], value: list[Any],
                   custom_converters: Sequence[JSONTypeConverter]) -> Any:
    if origin is tuple and args and args[-1] is not Ellipsis:
        if len(args) != len(value):
            raise TypeError(f"Expected {len(args)} values for {hint}, got {len(value)}")
        items = [value_to_type(arg, item, custom_converters) for arg, item in zip(args, value, strict=True)]
    else:
        item_hint = args[0] if args else None
        items = [value_to_type(item_hint, item, custom_converters) for item in value]
    if origin in (list, collections.abc.Sequence, collections.abc.MutableSequence, collections.abc.Iterable,
                  collections.abc.Collection):
        return items
    if origin in (collections.abc.Set, collections.abc.MutableSet):
        return set(items)
    return origin(items)


def failure_info_of(failure: Mapping[str, Any]) -> str:
    """Which of temporalio's failure infos a failure record stands for, by its field name
    (`failure.WhichOneof("failure_info")`): the info record set, else `timeout_failure_info` when
    the flat timeout_type is set, else `application_failure_info` (the flat type, non_retryable,
    details, category and next_retry_delay_ms), as every record written before the info records
    existed reads."""
    for name in FAILURE_INFO_RECORDS:
        if failure.get(name) is not None:
            return name
    return "timeout_failure_info" if failure.get("timeout_type") else "application_failure_info"


def _retry_state(value: str | None) -> RetryState | None:
    return RetryState(value) if value else None


class FailureConverter:
    def to_failure(self, exc: BaseException, payloads: PayloadConverter) -> Failure:
        """The failure record of an error and its causes, each with its own stack trace and the info
        of its kind (temporalio's DefaultFailureConverter: an ActivityError's activity info, a
        ChildWorkflowError's child workflow info, a CancelledError's canceled info ...; any other
        exception an application failure of its class name). An error read from a recorded failure
        keeps the stack trace and source recorded where it was raised (an activity's, say, when the
        workflow fails with the ActivityError), as temporalio's."""
        recorded = exc.failure if isinstance(exc, FailureError) else None
        failure: Failure = {
            "message": str(exc) if not isinstance(exc, FailureError) else exc.message,
            "type": type(exc).__name__, "source": recorded.source if recorded else "kadence-python-sdk",
            "stack_trace": recorded.stack_trace if recorded else "".join(traceback.format_exception(exc, chain=False)),
            "non_retryable": False, "timeout_type": None, "details": [], "cause": None,
            "category": ApplicationErrorCategory.UNSPECIFIED.name, "next_retry_delay_ms": None,
            **dict.fromkeys(FAILURE_INFO_RECORDS),
        }
        if isinstance(exc, ActivityError):
            failure["activity_failure_info"] = {
                "scheduled_event_id": exc.scheduled_event_id, "started_event_id": exc.started_event_id, "identity": exc.identity,
                "activity_type": exc.activity_type, "activity_id": exc.activity_id,
                "retry_state": RetryState(exc.retry_state).value if exc.retry_state else RetryState.RETRY_POLICY_NOT_SET.value,
            }
        elif isinstance(exc, ChildWorkflowError):
            failure["child_workflow_execution_failure_info"] = {
                "namespace": exc.namespace, "workflow_id": exc.workflow_id, "run_id": exc.run_id, "workflow_type": exc.workflow_type,
                "initiated_event_id": exc.initiated_event_id, "started_event_id": exc.started_event_id,
                "retry_state": RetryState(exc.retry_state).value if exc.retry_state else None,
            }
        elif isinstance(exc, NexusOperationError):
            failure["nexus_operation_execution_failure_info"] = {
                "scheduled_event_id": exc.scheduled_event_id, "endpoint": exc.endpoint, "service": exc.service,
                "operation": exc.operation, "operation_id": "", "operation_token": exc.operation_token,
            }
        elif isinstance(exc, ApplicationError):
            failure["type"] = exc.type or ""
            failure["non_retryable"] = exc.non_retryable
            failure["details"] = payloads.to_payloads(exc.details)
            failure["category"] = ApplicationErrorCategory(exc.category).name
            if exc.next_retry_delay is not None:
                failure["next_retry_delay_ms"] = to_ms(exc.next_retry_delay)
        elif isinstance(exc, TimeoutError):
            failure["timeout_type"] = TimeoutType(exc.type).value if exc.type else None
            failure["details"] = payloads.to_payloads(exc.last_heartbeat_details)
        elif isinstance(exc, CancelledError):
            identity = recorded.canceled_failure_info.identity if recorded and recorded.canceled_failure_info else ""
            failure["canceled_failure_info"] = {"identity": identity}
            failure["details"] = payloads.to_payloads(exc.details)
        elif isinstance(exc, TerminatedError):
            identity = recorded.terminated_failure_info.identity if recorded and recorded.terminated_failure_info else ""
            failure["terminated_failure_info"] = {"identity": identity}
            failure["details"] = payloads.to_payloads(exc.details)
        elif isinstance(exc, ServerError):
            failure["server_failure_info"] = {}
            failure["non_retryable"] = exc.non_retryable
        elif recorded is not None and recorded.reset_workflow_failure_info is not None:
            failure["reset_workflow_failure_info"] = {}
            failure["details"] = list(recorded.reset_workflow_failure_info.last_heartbeat_details.payloads)
        if exc.__cause__ is not None:
            failure["cause"] = self.to_failure(exc.__cause__, payloads)
        return failure

    def from_failure(self, failure: Failure, payloads: PayloadConverter) -> FailureError:
        """The error a recorded failure stands for, by its failure info (temporalio's
        DefaultFailureConverter.from_failure: ActivityError, ChildWorkflowError, CancelledError,
        TerminatedError, ServerError, TimeoutError, NexusOperationError, ApplicationError, and a
        plain FailureError for a reset's), its `failure` the record read as temporalio's Failure
        message (kadence.api.failure.v1), and its causes likewise."""
        exc: FailureError
        message = failure["message"]
        details = failure.get("details") or []
        match failure_info_of(failure):
            case "activity_failure_info":
                info = failure["activity_failure_info"]
                exc = ActivityError(
                    message or "Activity error", scheduled_event_id=info["scheduled_event_id"],
                    started_event_id=info["started_event_id"], identity=info.get("identity", ""),
                    activity_type=info["activity_type"], activity_id=info["activity_id"], retry_state=_retry_state(info["retry_state"]),
                )
            case "child_workflow_execution_failure_info":
                child = failure["child_workflow_execution_failure_info"]
                exc = ChildWorkflowError(
                    message or "Child workflow error", namespace=child["namespace"], workflow_id=child["workflow_id"],
                    run_id=child["run_id"], workflow_type=child["workflow_type"], initiated_event_id=child["initiated_event_id"],
                    started_event_id=child["started_event_id"], retry_state=_retry_state(child["retry_state"]),
                )
            case "nexus_operation_execution_failure_info":
                nexus = failure["nexus_operation_execution_failure_info"]
                exc = NexusOperationError(
                    message or "Nexus operation error", scheduled_event_id=nexus["scheduled_event_id"], endpoint=nexus["endpoint"],
                    service=nexus["service"], operation=nexus["operation"], operation_token=nexus["operation_token"],
                )
            case "canceled_failure_info":
                exc = CancelledError(message or "Cancelled", *payloads.from_payloads(details))
            case "terminated_failure_info":
                exc = TerminatedError(message or "Terminated", *payloads.from_payloads(details))
            case "server_failure_info":
                exc = ServerError(message or "Server error", non_retryable=failure.get("non_retryable", False))
            case "reset_workflow_failure_info":
                exc = FailureError(message or "Failure error")
            case "timeout_failure_info":
                exc = TimeoutError(
                    message or "Timeout", type=TimeoutType(failure["timeout_type"]), last_heartbeat_details=payloads.from_payloads(details),
                )
            case _:
                delay_ms = failure.get("next_retry_delay_ms")
                exc = ApplicationError(
                    message or "Application error", *payloads.from_payloads(details),
                    type=failure.get("type") or None, non_retryable=failure.get("non_retryable", False),
                    next_retry_delay=datetime.timedelta(milliseconds=delay_ms) if delay_ms is not None else None,
                    category=ApplicationErrorCategory[failure.get("category") or "UNSPECIFIED"],
                )
        exc.failure = _failure_message(failure)
        if failure.get("cause"):
            exc.__cause__ = self.from_failure(failure["cause"], payloads)
        return exc

    def activity_error(
        self, event_type: str, scheduled: Mapping[str, Any], attrs: Mapping[str, Any], payloads: PayloadConverter,
    ) -> ActivityError:
        """The ActivityError a workflow sees when an activity fails for good (ActivityTaskFailed or
        ActivityTaskTimedOut, caused by its last failure) or ends canceled (ActivityTaskCanceled,
        caused by a CancelledError with the activity's details), with the messages temporalio's
        core gives them."""
        if event_type == EventType.ActivityTaskCanceled:
            message, retry_state = "Activity cancelled", RetryState.CANCEL_REQUESTED.value
            cause: Failure = {  # core's has no message: the error's reads "Cancelled", its failure's ""
                "message": "", "type": CancelledError.__name__, "source": "", "stack_trace": "",
                "details": list(attrs.get("details", [])), "canceled_failure_info": {"identity": attrs.get("identity", "")},
            }
        else:
            message = "Activity task timed out" if event_type == EventType.ActivityTaskTimedOut else "Activity task failed"
            retry_state, cause = attrs["retry_state"], attrs["failure"]
        error = self.from_failure({
            "message": message, "type": ActivityError.__name__, "source": "", "stack_trace": "", "cause": cause,
            "activity_failure_info": {
                "scheduled_event_id": attrs["scheduled_event_id"], "started_event_id": attrs["started_event_id"],
                "identity": attrs.get("identity", ""), "activity_type": scheduled["activity_type"],
                "activity_id": scheduled["activity_id"], "retry_state": retry_state,
            },
        }, payloads)
        assert isinstance(error, ActivityError)
        return error

    def nexus_operation_error(
        self, event_type: str, scheduled: Mapping[str, Any], attrs: Mapping[str, Any], operation_token: str, payloads: PayloadConverter,
    ) -> NexusOperationError:
        """The NexusOperationError a caller sees when its operation fails, is canceled or times
        out, caused by why (the recorded failure: the handler's error, the cancellation, the timeout)."""
        failure = attrs.get("failure")
        cause: Failure
        if event_type == EventType.NexusOperationCanceled and (failure is None or failure.get("type") == "CancelledError"):
            cause = {"message": failure["message"] if failure else "Nexus operation canceled", "type": CancelledError.__name__,
                     "canceled_failure_info": {"identity": ""}, "details": []}
        else:
            assert failure is not None, f"{event_type} records its failure"
            cause = failure
        error = self.from_failure({
            "message": "nexus operation completed unsuccessfully", "type": NexusOperationError.__name__, "cause": cause,
            "nexus_operation_execution_failure_info": {
                "scheduled_event_id": attrs["scheduled_event_id"], "endpoint": scheduled["endpoint"], "service": scheduled["service"],
                "operation": scheduled["operation"], "operation_id": "", "operation_token": operation_token,
            },
        }, payloads)
        assert isinstance(error, NexusOperationError)
        return error

    def child_workflow_error(self, event_type: str, attrs: Mapping[str, Any], payloads: PayloadConverter) -> ChildWorkflowError:
        """The ChildWorkflowError a parent sees when its child ends other than completed, caused by
        why (the child's failure, a CancelledError, TerminatedError or TimeoutError), with the
        messages and retry states temporalio's core gives them."""
        retry_state = attrs.get("retry_state")
        cause: Failure
        if event_type == EventType.ChildWorkflowExecutionFailed:
            message, cause = "Child Workflow execution failed", attrs["failure"]
        elif event_type == EventType.ChildWorkflowExecutionCanceled:
            message, retry_state = "Child Workflow execution cancelled", RetryState.NON_RETRYABLE_FAILURE.value
            cause = {"message": message, "type": CancelledError.__name__, "details": list(attrs.get("details", [])),
                     "canceled_failure_info": {"identity": ""}}
        elif event_type == EventType.ChildWorkflowExecutionTerminated:
            message, retry_state = "Child Workflow execution terminated", RetryState.NON_RETRYABLE_FAILURE.value
            cause = {"message": "Terminated", "type": TerminatedError.__name__, "terminated_failure_info": {"identity": ""}}
        else:
            message = "Child Workflow execution timed out"
            cause = {"message": "Timed out", "type": TimeoutError.__name__, "timeout_type": TimeoutType.START_TO_CLOSE.value}
        error = self.from_failure({
            "message": message, "type": ChildWorkflowError.__name__, "cause": cause,
            "child_workflow_execution_failure_info": {
                "namespace": "default", "workflow_id": attrs["workflow_id"], "run_id": attrs["run_id"],
                "workflow_type": attrs["workflow_type"], "initiated_event_id": attrs["initiated_event_id"],
                "started_event_id": attrs["started_event_id"], "retry_state": retry_state,
            },
        }, payloads)
        assert isinstance(error, ChildWorkflowError)
        return error


def _failure_message(failure: Failure) -> failure_v1.Failure:
    """A recorded failure (schemas/Failure.avsc) and its causes as temporalio's Failure message
    reads, with the one failure info `failure_info_of` names."""
    details = Payloads(payloads=failure.get("details", []))
    cause = failure.get("cause")
    message = failure_v1.Failure(
        message=failure["message"], source=failure.get("source", ""), stack_trace=failure.get("stack_trace", ""),
        cause=_failure_message(cause) if cause else None,
    )
    info: Any
    kind = failure_info_of(failure)
    match kind:
        case "activity_failure_info":
            activity = failure["activity_failure_info"]
            info = failure_v1.ActivityFailureInfo(
                scheduled_event_id=activity["scheduled_event_id"], started_event_id=activity["started_event_id"],
                identity=activity.get("identity", ""), activity_type=ActivityType(activity["activity_type"]),
                activity_id=activity["activity_id"], retry_state=activity["retry_state"] or "",
            )
        case "child_workflow_execution_failure_info":
            child = failure["child_workflow_execution_failure_info"]
            info = failure_v1.ChildWorkflowExecutionFailureInfo(
                namespace=child["namespace"], workflow_execution=WorkflowExecution(child["workflow_id"], child["run_id"]),
                workflow_type=WorkflowType(child["workflow_type"]), initiated_event_id=child["initiated_event_id"],
                started_event_id=child["started_event_id"], retry_state=child["retry_state"] or "",
            )
        case "nexus_operation_execution_failure_info":
            nexus = failure["nexus_operation_execution_failure_info"]
            info = failure_v1.NexusOperationFailureInfo(
                scheduled_event_id=nexus["scheduled_event_id"], endpoint=nexus["endpoint"], service=nexus["service"],
                operation=nexus["operation"], operation_id=nexus["operation_id"], operation_token=nexus["operation_token"],
            )
        case "canceled_failure_info":
            info = failure_v1.CanceledFailureInfo(details, failure["canceled_failure_info"]["identity"])
        case "terminated_failure_info":
            info = failure_v1.TerminatedFailureInfo(failure["terminated_failure_info"]["identity"])
        case "server_failure_info":
            info = failure_v1.ServerFailureInfo(failure.get("non_retryable", False))
        case "reset_workflow_failure_info":
            info = failure_v1.ResetWorkflowFailureInfo(details)
        case "timeout_failure_info":
            info = failure_v1.TimeoutFailureInfo(failure["timeout_type"], details)
        case _:
            delay_ms = failure.get("next_retry_delay_ms")
            info = failure_v1.ApplicationFailureInfo(
                type=failure.get("type", ""), non_retryable=failure.get("non_retryable", False), details=details,
                next_retry_delay=datetime.timedelta(milliseconds=delay_ms) if delay_ms is not None else None,
                category=ApplicationErrorCategory[failure.get("category") or "UNSPECIFIED"].value,
            )
    return dataclasses.replace(message, **{kind: info})


class PayloadCodec(abc.ABC):
    """Transforms payloads on their way out of and into the client and workers, say to compress or
    encrypt them (as temporalio.converter.PayloadCodec: it gets and returns `Payload`s). Workflow
    code and the services see only what it produces; search attributes are left alone (the read
    model indexes them)."""

    @abc.abstractmethod
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]: ...

    @abc.abstractmethod
    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]: ...

    async def encode_wrapper(self, payloads: Payloads) -> None:
        """`encode` over the payloads of a `Payloads` message, replacing them."""
        replace_payloads(payloads, await self.encode([Payload.of(p) for p in payloads.payloads]))

    async def decode_wrapper(self, payloads: Payloads) -> None:
        """`decode` over the payloads of a `Payloads` message, replacing them."""
        replace_payloads(payloads, await self.decode([Payload.of(p) for p in payloads.payloads]))


# Payloads no codec encodes: search attributes (the read model indexes them), headers (temporalio's default).
NOT_ENCODED = frozenset({"search_attributes", "header"})


@dataclass(frozen=True)
class DataConverter:
    """As temporalio's: `dataclasses.replace(DataConverter.default, payload_codec=...)` or
    `DataConverter(payload_converter_class=...)`."""

    payload_converter_class: type[PayloadConverter] = DefaultPayloadConverter
    payload_codec: PayloadCodec | None = None
    failure_converter_class: type[FailureConverter] = FailureConverter
    external_storage: ExternalStorage | None = None  # large payloads kept outside the log (kadence/_extstore.py)
    payload_converter: PayloadConverter = field(init=False)
    failure_converter: FailureConverter = field(init=False)

    default: ClassVar[DataConverter]

    def __post_init__(self) -> None:
        object.__setattr__(self, "payload_converter", self.payload_converter_class())
        object.__setattr__(self, "failure_converter", self.failure_converter_class())

    @property
    def transforms_payloads(self) -> bool:
        """Whether payloads change on their way out and back (a codec, external storage)."""
        return self.payload_codec is not None or self.external_storage is not None

    async def encode(self, values: Sequence[Any]) -> list[Payload]:
        """The values as payloads, through the codec and the external storage."""
        return await self._encoded(self.payload_converter.to_payloads(values))

    async def decode(self, payloads: Sequence[Any], type_hints: Sequence[Any] | None = None) -> list[Any]:
        """Payloads as values, through the external storage and the codec."""
        return self.payload_converter.from_payloads(await self._decoded([Payload.of(p) for p in payloads]), type_hints)

    async def _encoded(self, payloads: list[Payload], target: StorageDriverWorkflowInfo | None = None) -> list[Payload]:
        if self.payload_codec is not None:
            payloads = [Payload.of(p) for p in await self.payload_codec.encode(payloads)]
        if self.external_storage is not None:
            payloads = await self.external_storage.store(payloads, target)
        return payloads

    async def _decoded(self, payloads: list[Payload]) -> list[Payload]:
        if self.external_storage is not None:
            payloads = await self.external_storage.retrieve(payloads)
        return await self.payload_codec.decode(payloads) if self.payload_codec is not None else payloads

    async def encode_wrapper(self, values: Sequence[Any]) -> Payloads:
        """`encode`, wrapped in a `Payloads` message."""
        return Payloads(payloads=await self.encode(values))

    async def decode_wrapper(self, payloads: Payloads | None, type_hints: Sequence[Any] | None = None) -> list[Any]:
        """`decode` of a `Payloads` message's payloads (none for None)."""
        return await self.decode(payloads.payloads, type_hints) if payloads is not None and payloads.payloads else []

    def to_failure(self, exc: BaseException) -> Failure:
        return self.failure_converter.to_failure(exc, self.payload_converter)

    def from_failure(self, failure: Failure) -> FailureError:
        return self.failure_converter.from_failure(failure, self.payload_converter)

    async def encode_payloads(self, record: Any) -> None:
        """Run the codec's encode, then the external storage, over every payload in `record` (a
        command, an answer), in place. A command's payloads are stored for its workflow."""
        if self.transforms_payloads:
            found = list(iter_payloads(record, NOT_ENCODED))
            _replace_all(found, await self._encoded([Payload.of(p) for p in found], _store_target(record)))

    async def decode_payloads(self, record: Any) -> None:
        """Run the external storage's retrieval, then the codec's decode, over every payload in
        `record` (a task, a history, a result), in place."""
        if self.transforms_payloads:
            found = list(iter_payloads(record, NOT_ENCODED))
            _replace_all(found, await self._decoded([Payload.of(p) for p in found]))


DataConverter.default = DataConverter()


def default() -> DataConverter:
    """The default data converter (temporalio.converter.default())."""
    return DataConverter.default


def _store_target(record: Any) -> StorageDriverWorkflowInfo | None:
    """The workflow a command's payloads are stored for: its id, with the run id and the workflow
    type where the command names them (a start names no run; an activity's completion no type).
    A driver may key payloads by them (kadence.contrib.aws.s3driver does)."""
    if not isinstance(record, Mapping) or not isinstance(record.get("workflow_id"), str):
        return None
    command = record.get("command")
    attributes = command[1] if isinstance(command, tuple) and isinstance(command[1], Mapping) else {}
    return StorageDriverWorkflowInfo(namespace="default", id=record["workflow_id"], run_id=attributes.get("run_id") or None,
                                     type=attributes.get("workflow_type") or None)


def _replace_all(targets: list[dict[str, Any]], replacements: Sequence[Any]) -> None:
    if len(targets) != len(replacements):
        raise ValueError(f"the payload codec returned {len(replacements)} payloads for {len(targets)}")
    for target, replacement in zip(targets, replacements, strict=True):
        payload = Payload.of(replacement)
        metadata, data = dict(payload.metadata), payload.data  # read first: a codec may return the very payload it was given
        target.clear()
        target.update(metadata=metadata, data=data)
