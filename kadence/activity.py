"""Activity definitions and the context an activity runs in (as temporalio.activity)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar, overload

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


class HeartbeatSender(Protocol):
    def __call__(self, *details: Any) -> None: ...


_current_info: contextvars.ContextVar[Info] = contextvars.ContextVar("kadence_activity_info")
_current_heartbeat: contextvars.ContextVar[HeartbeatSender] = contextvars.ContextVar("kadence_activity_heartbeat")


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
    found = getattr(fn, _DEFINITION_ATTR, None)
    if found is None:
        raise TypeError(f"{getattr(fn, '__name__', fn)!r} is not an activity; decorate it with @activity.defn")
    return found


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
