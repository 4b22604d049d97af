"""Activity definitions and the context an activity runs in (as temporalio.activity)."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, Protocol, TypeVar, overload

from kadence.common import MetricMeter, Priority, RetryPolicy
from kadence.converter import PayloadConverter, default

CallableType = TypeVar("CallableType", bound=Callable[..., Any])
_T = TypeVar("_T")

_DEFINITION_ATTR = "__kadence_activity_definition"
_EPOCH = datetime.fromtimestamp(0, UTC)


@dataclass(frozen=True)
class ActivityDefinition:
    name: str
    fn: Callable[..., Any]
    is_async: bool
    no_thread_cancel_exception: bool = False
    """A sync activity whose thread ActivityEnvironment.cancel() does not raise CancelledError in."""


@dataclass(frozen=True)
class Info:
    activity_id: str
    activity_type: str
    attempt: int
    scheduled_time: datetime
    task_queue: str
    workflow_id: str | None
    """None for a standalone activity (started by a client, outside any workflow), as the next two."""
    workflow_run_id: str | None
    workflow_type: str | None
    heartbeat_details: Sequence[Any] = field(default_factory=tuple)
    """What the last heartbeat of an earlier attempt carried, to resume from."""
    is_local: bool = False
    """A local activity: run by the workflow's worker within its workflow task (heartbeats are ignored)."""
    namespace: str = "default"
    task_token: bytes = b""
    """Names this attempt to client.get_async_activity_handle(task_token=...) (kadence/protocol/task_token.py)."""
    current_attempt_scheduled_time: datetime = _EPOCH
    """When this attempt was due to a worker: the activity's scheduling, or the end of the retry backoff before it."""
    started_time: datetime = _EPOCH
    """When this attempt started (on the run's clock, which time skipping may move)."""
    heartbeat_timeout: timedelta | None = None
    schedule_to_close_timeout: timedelta | None = None
    start_to_close_timeout: timedelta | None = None
    retry_policy: RetryPolicy | None = None
    workflow_namespace: str | None = "default"
    activity_run_id: str | None = None
    """A standalone activity's run id (temporalio's); None for an activity a workflow scheduled."""
    priority: Priority = Priority.default
    """Activities take no priority yet."""

    def _logger_details(self) -> dict[str, Any]:
        """What activity.logger adds to each record (temporalio's keys)."""
        return {
            "activity_id": self.activity_id, "activity_type": self.activity_type, "attempt": self.attempt,
            "namespace": self.namespace, "task_queue": self.task_queue, "workflow_id": self.workflow_id,
            "workflow_run_id": self.workflow_run_id, "workflow_type": self.workflow_type,
        }


@dataclass(frozen=True)
class ActivityCancellationDetails:
    """Why the activity was cancelled (temporalio's): set with its cancellation, never changed after."""

    not_found: bool = False
    cancel_requested: bool = False
    paused: bool = False
    reset: bool = False
    timed_out: bool = False
    worker_shutdown: bool = False


class HeartbeatSender(Protocol):
    def __call__(self, *details: Any) -> None: ...


class _Event:
    """What happens once to a running activity (its cancellation, its worker's shutdown): set from
    any thread, read or waited for from the activity's threads, awaited on any loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._set = threading.Event()
        self._waiters: set[asyncio.Future[None]] = set()

    def set(self) -> None:
        with self._lock:
            self._set.set()
            waiters, self._waiters = self._waiters, set()
        for waiter in waiters:  # each on its own loop, which may be another thread's
            waiter.get_loop().call_soon_threadsafe(_wake, waiter)

    def is_set(self) -> bool:
        return self._set.is_set()

    def wait_sync(self, timeout: float | None) -> None:
        self._set.wait(timeout)

    async def wait(self) -> None:
        with self._lock:
            if self._set.is_set():
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.add(waiter)
        try:
            await waiter
        finally:  # a waiter cancelled is forgotten, not kept until the event is set
            with self._lock:
                self._waiters.discard(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():  # else cancelled meanwhile
        waiter.set_result(None)


class _Cancellation(_Event):
    """An activity's cancellation, and why: the first request's details stay."""

    def __init__(self) -> None:
        super().__init__()
        self.details: ActivityCancellationDetails | None = None

    def request(self, details: ActivityCancellationDetails) -> bool:
        """Cancel, saying why; False if cancelled already."""
        with self._lock:
            if self.details is not None:
                return False
            self.details = details
        self.set()
        return True


_current_info: contextvars.ContextVar[Info] = contextvars.ContextVar("kadence_activity_info")
_current_heartbeat: contextvars.ContextVar[HeartbeatSender] = contextvars.ContextVar("kadence_activity_heartbeat")
_current_payload_converter: contextvars.ContextVar[PayloadConverter] = contextvars.ContextVar("kadence_activity_payload_converter")
_current_metric_meter: contextvars.ContextVar[MetricMeter] = contextvars.ContextVar("kadence_activity_metric_meter")
_current_cancellation: contextvars.ContextVar[_Cancellation] = contextvars.ContextVar("kadence_activity_cancellation")
_current_worker_shutdown: contextvars.ContextVar[_Event] = contextvars.ContextVar("kadence_activity_worker_shutdown")
# The worker's kadence.client.Client for an async activity, None for a sync one; typed Any as
# client() is: kadence.client imports this module, which may not import it back (tests/test_packages.py).
_current_client: contextvars.ContextVar[Any] = contextvars.ContextVar("kadence_activity_client")
# What shield_thread_cancel_exception() enters where CancelledError is raised in a sync activity's
# thread (ActivityEnvironment's runs), None elsewhere.
_ThreadCancelShield = Callable[[], AbstractContextManager[None]]
_current_thread_cancel_shield: contextvars.ContextVar[_ThreadCancelShield | None] = contextvars.ContextVar(
    "kadence_activity_thread_cancel_shield")


def _fill_context(
    context: contextvars.Context, *, info: Info, heartbeat: HeartbeatSender, payload_converter: PayloadConverter,
    metric_meter: MetricMeter, cancellation: _Cancellation, worker_shutdown: _Event, client: Any,
    thread_cancel_shield: _ThreadCancelShield | None,
) -> None:
    """Set in `context` what this module's functions read in an activity: a worker's attempt and an
    ActivityEnvironment's run fill it here alike (a process of a process pool gets its info and
    heartbeat only: kadence/worker/_shared_state.py)."""
    context.run(_current_info.set, info)
    context.run(_current_heartbeat.set, heartbeat)
    context.run(_current_payload_converter.set, payload_converter)
    context.run(_current_metric_meter.set, metric_meter)
    context.run(_current_cancellation.set, cancellation)
    context.run(_current_worker_shutdown.set, worker_shutdown)
    context.run(_current_client.set, client)
    context.run(_current_thread_cancel_shield.set, thread_cancel_shield)


@overload
def defn(fn: CallableType) -> CallableType: ...


@overload
def defn(*, name: str | None = None, no_thread_cancel_exception: bool = False) -> Callable[[CallableType], CallableType]: ...


def defn(fn: CallableType | None = None, *, name: str | None = None, no_thread_cancel_exception: bool = False) -> Any:
    """Mark a function as an activity; its type name is `name` or the function's name.
    `no_thread_cancel_exception`: ActivityEnvironment.cancel() does not raise CancelledError in
    this sync activity's thread (it reads activity.is_cancelled() instead); a worker raises it at
    the activity's next heartbeat either way (docs/testing.md)."""

    def register(f: CallableType) -> CallableType:
        import inspect

        setattr(f, _DEFINITION_ATTR, ActivityDefinition(name or f.__name__, f, inspect.iscoroutinefunction(f), no_thread_cancel_exception))
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


def in_activity() -> bool:
    """Whether the code runs in an activity."""
    return _current_info.get(None) is not None


def client() -> Any:
    """The worker's client (a kadence.client.Client), in an `async def` activity; in a test, the
    one given to ActivityEnvironment(client=...)."""
    info()
    found = _current_client.get(None)
    if found is None:
        raise RuntimeError(
            "No client available: activity.client() is given to `async def` activities only, not to `def` ones; "
            "in a test, pass one to ActivityEnvironment(client=...)"
        )
    return found


def _provided(var: contextvars.ContextVar[_T], function: str) -> _T:
    """What `var` holds in this activity, which a process of a process pool lacks (docs/temporal-differences.md)."""
    info()
    try:
        return var.get()
    except LookupError:
        raise RuntimeError(
            f"activity.{function}() is not provided in a process of a process pool (activity.heartbeat() raises its cancellation)"
        ) from None


def cancellation_details() -> ActivityCancellationDetails | None:
    """Why the activity was cancelled; None while it is not."""
    return _provided(_current_cancellation, "cancellation_details").details


def is_cancelled() -> bool:
    """Whether the activity's cancellation was requested."""
    return _provided(_current_cancellation, "is_cancelled").is_set()


async def wait_for_cancelled() -> None:
    """Until the activity's cancellation is requested."""
    await _provided(_current_cancellation, "wait_for_cancelled").wait()


def wait_for_cancelled_sync(timeout: timedelta | float | None = None) -> None:
    """Block until the activity's cancellation is requested, or `timeout` passed."""
    _provided(_current_cancellation, "wait_for_cancelled_sync").wait_sync(_seconds(timeout))


def is_worker_shutdown() -> bool:
    """Whether the worker running the activity is shutting down."""
    return _provided(_current_worker_shutdown, "is_worker_shutdown").is_set()


async def wait_for_worker_shutdown() -> None:
    """Until the worker running the activity shuts down."""
    await _provided(_current_worker_shutdown, "wait_for_worker_shutdown").wait()


def wait_for_worker_shutdown_sync(timeout: timedelta | float | None = None) -> None:
    """Block until the worker running the activity shuts down, or `timeout` passed."""
    _provided(_current_worker_shutdown, "wait_for_worker_shutdown_sync").wait_sync(_seconds(timeout))


def _seconds(timeout: timedelta | float | None) -> float | None:
    return timeout.total_seconds() if isinstance(timeout, timedelta) else timeout


@contextmanager
def shield_thread_cancel_exception() -> Iterator[None]:
    """A block of a sync activity that a CancelledError raised in its thread does not interrupt: it
    is raised at the block's end instead (the outermost block's, when nested). Where nothing raises
    in the thread (an async activity, a worker's attempt, which sees its cancellation at its next
    heartbeat), the block just runs."""
    info()
    shield = _current_thread_cancel_shield.get(None)
    if shield is None:
        yield
        return
    with shield():
        yield


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
