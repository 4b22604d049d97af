"""A process's stop, as the operations that wait for Postgres or the broker see it: once the process
is asked to stop (SIGTERM), an operation that finds its system still away gives up instead of
waiting on, so the stop is not held up past its grace period. What it was doing is done again
after a restart, as after a kill."""

from __future__ import annotations

import asyncio
import threading
import time

_stopping = threading.Event()


class StoppedWaiting(BaseException):
    """The process was asked to stop while an operation waited for Postgres or the broker. A
    BaseException, as a cancellation is: no handler of an operation's errors may take it for the
    fault of the record it was storing."""


def stop_waiting() -> None:
    """The process is stopping: operations that wait for an outside system give up (StoppedWaiting)."""
    _stopping.set()


def give_up_if_stopping(operation: str, why: str) -> None:
    """Raise StoppedWaiting if the process is stopping; `why` says what the operation waits for."""
    if _stopping.is_set():
        raise StoppedWaiting(f"{operation}: stopping while {why}")


async def sleep_unless_stopping(operation: str, seconds: float, why: str) -> None:
    """Sleep between two tries of an operation, giving up (StoppedWaiting) once the process stops."""
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        give_up_if_stopping(operation, why)
        await asyncio.sleep(min(left, STOP_CHECK_S))
    give_up_if_stopping(operation, why)


STOP_CHECK_S = 0.2  # how soon a wait notices the stop
