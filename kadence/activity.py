"""Activity definitions and the context an activity runs in (as temporalio.activity)."""

from __future__ import annotations

import contextvars
import dataclasses
import logging
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NoReturn, Protocol, TypeVar, overload

from kadence.common import MetricMeter
from kadence.converter import PayloadConverter, default

CallableType = TypeVar("CallableType", bound=Callable[..., Any])

_DEFINITION_ATTR = "__kadence_activity_definition"


@dataclass(frozen=True)
class ActivityDefinition:
    name: str
    fn: Callable[..., Any]
    is_async: bool


@dataclass(frozen=True)
class Info:
    activity_id: str
    activity_type: str
    attempt: int
    scheduled_time: datetime
    task_queue: str
    workflow_id: str
    workflow_run_id: str
    workflow_type: str
    heartbeat_details: Sequence[Any] = field(default_factory=tuple)
    """What the last heartbeat of an earlier attempt carried, to resume from."""
    is_local: bool = False
    """A local activity: run by the workflow's worker within its workflow task (heartbeats are ignored)."""
    namespace: str = "default"
    task_token: bytes = b""
    """Names this attempt to client.get_async_activity_handle(task_token=...) (kadence/protocol/task_token.py)."""

    def _logger_details(self) -> dict[str, Any]:
        """What activity.logger adds to each record (temporalio's keys)."""
        return {
            "activity_id": self.activity_id, "activity_type": self.activity_type, "attempt": self.attempt,
            "namespace": self.namespace, "task_queue": self.task_queue, "workflow_id": self.workflow_id,
            "workflow_run_id": self.workflow_run_id, "workflow_type": self.workflow_type,
        }


class HeartbeatSender(Protocol):
    def __call__(self, *details: Any) -> None: ...


_current_info: contextvars.ContextVar[Info] = contextvars.ContextVar("kadence_activity_info")
_current_heartbeat: contextvars.ContextVar[HeartbeatSender] = contextvars.ContextVar("kadence_activity_heartbeat")
_current_payload_converter: contextvars.ContextVar[PayloadConverter] = contextvars.ContextVar("kadence_activity_payload_converter")
_current_metric_meter: contextvars.ContextVar[MetricMeter] = contextvars.ContextVar("kadence_activity_metric_meter")


@overload
def defn(fn: CallableType) -> CallableType: ...


@overload
def defn(*, name: str | None = None) -> Callable[[CallableType], CallableType]: ...


def defn(fn: CallableType | None = None, *, name: str | None = None) -> Any:
    """Mark a function as an activity; its type name is `name` or the function's name."""

    def register(f: CallableType) -> CallableType:
        import inspect

        setattr(f, _DEFINITION_ATTR, ActivityDefinition(name or f.__name__, f, inspect.iscoroutinefunction(f)))
        return f

    return register(fn) if fn is not None else register


def definition(fn: Callable[..., Any]) -> ActivityDefinition:
    """The activity `fn` is, called as given: a method of an instance (`activities=[obj.method]`)
    keeps its `self`, and is named as the method (as temporalio names it)."""
    found = getattr(fn, _DEFINITION_ATTR, None)
    if found is None:
        raise TypeError(f"{getattr(fn, '__name__', fn)!r} is not an activity; decorate it with @activity.defn")
    return dataclasses.replace(found, fn=fn)


def heartbeat(*details: Any) -> None:
    """Report progress; `details` reach the next attempt if this one fails or times out. Sends are
    throttled (at most one per 80% of the heartbeat timeout, capped at 30 s), the latest details win."""
    try:
        send = _current_heartbeat.get()
    except LookupError:
        raise RuntimeError("activity.heartbeat() called outside an activity") from None
    send(*details)


def info() -> Info:
    """The running activity's info (attempt, ids, ...). Only valid inside an activity."""
    try:
        return _current_info.get()
    except LookupError:
        raise RuntimeError("activity.info() called outside an activity") from None


def payload_converter() -> PayloadConverter:
    """The worker's payload converter (the default one in a process of a process pool). Only valid inside an activity."""
    info()
    return _current_payload_converter.get(default().payload_converter)


def metric_meter() -> MetricMeter:
    """A meter of the worker's runtime (kadence.runtime) whose metrics carry the activity's
    namespace, task_queue and activity_type. Only valid inside an activity, and not in a process
    of a process pool (the runtime's exporter is in the worker's process)."""
    info()
    try:
        return _current_metric_meter.get()
    except LookupError:
        raise RuntimeError(
            "activity.metric_meter() in a process of a process pool: the runtime's exporter is in the worker's process; "
            "record metrics from an async or threaded activity"
        ) from None


class LoggerAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger for activity code (as temporalio's): in an activity, each record gets the attempt's
    details appended to its message (`activity_info_on_message`) and as
    `extra["temporal_activity"]` (`activity_info_on_extra`), the whole Info as
    `extra["activity_info"]` if `full_activity_info_on_extra`."""

    def __init__(self, logger: logging.Logger, extra: Mapping[str, Any] | None) -> None:
        super().__init__(logger, extra or {})
        self.activity_info_on_message = True
        self.activity_info_on_extra = True
        self.full_activity_info_on_extra = False

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        current = _current_info.get(None)
        if current is None:
            return msg, kwargs
        details = current._logger_details()
        extra = dict(kwargs.get("extra") or {})  # a copy: the caller's dict stays as it was
        if self.activity_info_on_extra:
            extra["temporal_activity"] = details
        if self.full_activity_info_on_extra:
            extra["activity_info"] = current
        kwargs["extra"] = extra
        if self.activity_info_on_message:
            msg = f"{msg} ({details})"
        return msg, kwargs

    @property
    def base_logger(self) -> logging.Logger:
        """The logger underneath, to add handlers or formatters to."""
        return self.logger


logger = LoggerAdapter(logging.getLogger("kadence.activity"), None)
"""Logger for activity code: the attempt's details on every record."""


class _CompleteAsyncError(BaseException):
    """Raised by raise_complete_async(): a BaseException, so the activity's own `except Exception` lets it pass."""


def raise_complete_async() -> NoReturn:
    """End the activity function without completing the attempt: something else completes it later
    through client.get_async_activity_handle(task_token=activity.info().task_token) (as temporalio's).
    Its start-to-close and heartbeat timeouts still apply."""
    try:
        info = _current_info.get()
    except LookupError:
        raise RuntimeError("activity.raise_complete_async() called outside an activity") from None
    if info.is_local:
        raise RuntimeError("a local activity cannot complete asynchronously: run it as an activity")
    raise _CompleteAsyncError()
