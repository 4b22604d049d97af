"""ActivityEnvironment (temporalio.testing's): activity code run in a test's own thread or loop,
with the context a worker gives an attempt, and its heartbeats, cancellation and worker shutdown
in the test's hands."""

from __future__ import annotations

import asyncio
import contextvars
import ctypes
import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar, cast

from kadence import activity
from kadence.client import Client
from kadence.common import MetricMeter
from kadence.converter import PayloadConverter, default
from kadence.exceptions import CancelledError

_Params = ParamSpec("_Params")
_Return = TypeVar("_Return")

_CANCEL_REQUESTED = activity.ActivityCancellationDetails(cancel_requested=True)


class ActivityEnvironment:
    """Runs activity code (any function, an @activity.defn or not) with kadence.activity's functions
    answering as in a worker. Set before run(): `info` (what activity.info() gives; start from
    default_info() and dataclasses.replace), `payload_converter` and `metric_meter` (a no-op meter
    unless set); and at any time `on_heartbeat`, called with each heartbeat's details."""

    def __init__(self, client: Client | None = None) -> None:
        """`client`: what activity.client() gives an async activity."""
        self.info = ActivityEnvironment.default_info()
        self.on_heartbeat: Callable[..., None] = lambda *details: None
        self.payload_converter: PayloadConverter = default().payload_converter
        self.metric_meter = MetricMeter.noop
        self._client = client
        # One of each for every run: a run started after cancel() starts cancelled.
        self._cancellation = activity._Cancellation()
        self._worker_shutdown = activity._Event()
        self._cancel_running: set[Callable[[], object]] = set()  # how cancel() reaches each run in progress

    @staticmethod
    def default_info() -> activity.Info:
        """A new copy of the info a run gets unless `info` is set."""
        epoch = datetime.fromtimestamp(0, UTC)
        return activity.Info(
            activity_id="test", activity_type="unknown", attempt=1, scheduled_time=epoch, task_queue="test", workflow_id="test",
            workflow_run_id="test-run", workflow_type="test", task_token=b"test", current_attempt_scheduled_time=epoch,
            started_time=epoch, schedule_to_close_timeout=timedelta(seconds=1), start_to_close_timeout=timedelta(seconds=1),
        )

    def cancel(self, cancellation_details: activity.ActivityCancellationDetails = _CANCEL_REQUESTED) -> None:
        """Cancel the activity (the first call only): activity.is_cancelled() turns true and
        activity.cancellation_details() gives `cancellation_details`; an async activity's task is
        cancelled, and a sync activity's thread gets CancelledError unless its @activity.defn says
        no_thread_cancel_exception."""
        if not self._cancellation.request(cancellation_details):
            return
        for cancel in list(self._cancel_running):  # a copy: a run may end meanwhile, on its own thread
            cancel()

    def worker_shutdown(self) -> None:
        """Tell the activity its worker shuts down: activity.is_worker_shutdown() turns true."""
        self._worker_shutdown.set()

    def run(self, fn: Callable[_Params, _Return], *args: _Params.args, **kwargs: _Params.kwargs) -> _Return:
        """Call `fn` in an activity context: a sync function here, its result returned; for an async
        one, the awaitable that runs it in a task of its own (what cancel() cancels)."""
        if _is_async(fn):
            return cast(_Return, self._run_async(fn, *args, **kwargs))
        return self._run_sync(fn, *args, **kwargs)

    def _run_sync(self, fn: Callable[_Params, _Return], *args: _Params.args, **kwargs: _Params.kwargs) -> _Return:
        if not _raises_in_thread(fn):
            return self._context(client=None, thread_cancel_shield=None).run(fn, *args, **kwargs)
        raiser = _ThreadCancelRaiser(threading.get_ident())
        context = self._context(client=None, thread_cancel_shield=raiser.shielded)
        self._cancel_running.add(raiser.raise_cancelled)
        try:
            return context.run(fn, *args, **kwargs)
        finally:
            self._cancel_running.discard(raiser.raise_cancelled)
            raiser.stop()

    async def _run_async(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        task = asyncio.create_task(fn(*args, **kwargs), context=self._context(client=self._client, thread_cancel_shield=None))
        if self._cancellation.is_set():
            task.cancel()
        self._cancel_running.add(task.cancel)
        try:
            return await task
        finally:
            self._cancel_running.discard(task.cancel)

    def _context(self, *, client: Client | None, thread_cancel_shield: activity._ThreadCancelShield | None) -> contextvars.Context:
        """A copy of the caller's context, filled as a worker fills an attempt's."""
        context = contextvars.copy_context()
        info = self.info
        activity._fill_context(
            context, info=info, heartbeat=self._heartbeat, payload_converter=self.payload_converter,
            # The attributes a worker's meter adds for an attempt.
            metric_meter=self.metric_meter.with_additional_attributes(
                {"namespace": info.namespace, "task_queue": info.task_queue, "activity_type": info.activity_type}),
            cancellation=self._cancellation, worker_shutdown=self._worker_shutdown, client=client,
            thread_cancel_shield=thread_cancel_shield,
        )
        return context

    def _heartbeat(self, *details: Any) -> None:
        self.on_heartbeat(*details)  # looked up at each heartbeat: a test may set it while the activity runs


def _is_async(fn: Callable[..., Any]) -> bool:
    """A coroutine function, or an object whose __call__ is one (as temporalio's environment tells)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _raises_in_thread(fn: Callable[..., Any]) -> bool:
    try:
        return not activity.definition(fn).no_thread_cancel_exception
    except TypeError:  # not an @activity.defn: nothing opted out
        return True


class _ThreadCancelRaiser:
    """Raises CancelledError in the thread a sync activity runs in, as temporalio does: at once, or
    at the end of the outermost activity.shield_thread_cancel_exception() block it is in. A blocking
    call (time.sleep, a lock) gets it when it returns."""

    def __init__(self, thread_id: int) -> None:
        self._lock = threading.Lock()
        self._thread_id: int | None = thread_id
        self._pending = False
        self._shields = 0

    def raise_cancelled(self) -> None:
        with self._lock:
            self._pending = True
            self._raise_if_due()

    @contextmanager
    def shielded(self) -> Iterator[None]:
        with self._lock:
            self._shields += 1
        try:
            yield
        finally:
            with self._lock:
                self._shields -= 1
                self._raise_if_due()

    def stop(self) -> None:
        """The activity returned (called in its thread): nothing is raised in the thread after. A
        raise that raced the return comes out of run() or is dropped here, never out of the code
        that called run()."""
        with self._lock:
            self._thread_id = None
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), None)  # None: clear

    def _raise_if_due(self) -> None:
        if self._thread_id is None or self._shields or not self._pending:
            return
        self._pending = False
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id), ctypes.py_object(CancelledError))
