"""The deterministic asyncio event loop a run's workflow code runs on.

Callbacks run only when the run drives the loop (an activation, at a workflow task boundary),
never on a clock: time is the workflow task's start time, and timers are durable (WorkflowRun
issues a StartTimer command for each). Once callbacks run dry, the conditions workflow code waits
on are checked.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import inspect
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVarTuple, Unpack

_Ts = TypeVarTuple("_Ts")


class WorkflowTaskError(Exception):
    """The workflow code raised something other than a FailureError: fail the task, not the workflow."""


class WorkflowLoop(asyncio.AbstractEventLoop):
    """The subset of asyncio.AbstractEventLoop workflow code may use; typeshed marks the rest
    abstract (at run time it raises NotImplementedError), hence the type: ignore[abstract] where a
    run is made."""

    def __init__(self) -> None:
        self.ready: collections.deque[asyncio.Handle] = collections.deque()
        self.time_ms = 0
        self.read_only = False  # in a query handler or update validator
        self._conditions: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.time_ms / 1000, UTC)

    def time(self) -> float:
        return self.time_ms / 1000

    def call_soon(
        self, callback: Callable[[Unpack[_Ts]], object], *args: Unpack[_Ts], context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        handle = asyncio.Handle(callback, args, self, context)
        self.ready.append(handle)
        return handle

    def call_at(
        self, when: float, callback: Callable[[Unpack[_Ts]], object], *args: Unpack[_Ts], context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        return self.call_later(when - self.time(), callback, *args, context=context)

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(self, coro: Any, *, name: str | None = None, context: contextvars.Context | None = None) -> asyncio.Task[Any]:
        return asyncio.Task(coro, loop=self, name=name, context=context)

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return asyncio.events._get_running_loop() is self

    def is_closed(self) -> bool:
        return False

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if exc is not None and not isinstance(exc, asyncio.CancelledError):
            raise WorkflowTaskError(context.get("message", "workflow callback failed")) from exc

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.call_exception_handler(context)

    def add_condition(self, condition: Callable[[], bool]) -> asyncio.Future[None]:
        """A future that resolves once `condition()` holds."""
        future = self.create_future()
        self._conditions.append((condition, future))
        return future

    def run_ready(self) -> None:
        """Run callbacks until none is ready and no condition newly holds."""
        with self.running():
            while self.ready or self._resolve_conditions():
                handle = self.ready.popleft()
                if not handle._cancelled:
                    handle._run()

    def _resolve_conditions(self) -> bool:
        """Once callbacks ran dry, wake the waiters whose condition now holds; True if any woke."""
        woke = False
        for entry in list(self._conditions):
            condition, future = entry
            if future.done():
                self._conditions.remove(entry)
            elif condition():
                self._conditions.remove(entry)
                future.set_result(None)
                woke = True
        return woke

    @contextlib.contextmanager
    def running(self, read_only: bool = False) -> Iterator[None]:
        """Workflow code runs with this loop as the running loop (what the workflow API looks up);
        a query handler or update validator runs read-only."""
        previous = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(self)
        self.read_only = read_only
        try:
            yield
        finally:
            self.read_only = False
            asyncio.events._set_running_loop(previous)

    def close_unstarted_tasks(self) -> None:
        """A run whose activation failed is dropped: the tasks it created and never ran (a signal's
        handler, say, when a later event did not match the code) have their coroutines closed, so
        none is collected unawaited (Python's "coroutine ... was never awaited" warning)."""
        for task in asyncio.all_tasks(self):  # first: a task's step in the ready queue is what holds it
            coro = task.get_coro()
            if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                coro.close()
        while self.ready:
            self.ready.popleft().cancel()
