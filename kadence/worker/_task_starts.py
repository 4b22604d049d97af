"""A workflow task's start, held back while the task runs (docs/architecture.md, "Workflow task
start").

A worker records `RecordWorkflowTaskStarted` with the task's answer rather than before running it:
the two commands leave together, so the history service reads them in one poll and writes them as
one batch, where a start sent first was a batch of its own (one more record in the log, one more
step, and the answer waiting behind it). A task that is still running after `HOLD_S` (workflow code
that blocks the event loop, a read of earlier events from the read model, local activities) has its
start sent then, by a thread of this module's own, so history records the start, and times the
task out, however the task is stuck.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Message

log = logging.getLogger("kadence.worker")

# Longer than a workflow task's activation takes (about a millisecond), far shorter than its
# start-to-close timeout (10 s by default): a start sent by the thread comes at most this late.
HOLD_S = 0.1

SendStart = Callable[[asyncio.AbstractEventLoop | None], "asyncio.Future[Message]"]


@dataclass(eq=False)
class HeldStart:
    """One task's start: how to send it (in the context it was held in: its trace), when the
    thread sends it, and its delivery once sent."""

    send: SendStart
    due: float
    context: contextvars.Context
    sent: asyncio.Future[Message] | None = field(default=None)


class HeldStarts:
    """The starts held by one worker, and the thread that sends those held past their due time.

    A start is sent exactly once: by `release` (with the task's answer, which the caller produces
    right after, so the start comes first on the workflow's partition) or by the thread, which
    produces it while holding the lock, so a `release` that finds it sent comes after its produce."""

    def __init__(self, hold_s: float = HOLD_S) -> None:
        self._hold_s = hold_s
        self._held: collections.deque[HeldStart] = collections.deque()  # in due order: every hold is as long
        self._lock = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def hold(self, send: SendStart) -> HeldStart:
        """Hold a start; `send(loop)` produces it, from the event loop (loop None) or from the
        thread (on behalf of `loop`, whose future it returns)."""
        if self._thread is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._send_due, name="kadence-workflow-task-starts", daemon=True)
            self._thread.start()
        start = HeldStart(send, time.monotonic() + self._hold_s, contextvars.copy_context())
        with self._lock:
            self._held.append(start)
            if len(self._held) == 1:
                self._lock.notify()
        return start

    def release(self, start: HeldStart) -> asyncio.Future[Message]:
        """The start's delivery: sent now, unless the thread sent it already."""
        with self._lock:
            if start.sent is None:
                start.sent = start.send(None)
            return start.sent

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join()

    def _send_due(self) -> None:
        with self._lock:
            while not self._closed:
                while self._held and self._held[0].sent is not None:
                    self._held.popleft()
                if not self._held:
                    self._lock.wait()
                    continue
                head, wait = self._held[0], self._held[0].due - time.monotonic()
                if wait > 0:
                    self._lock.wait(wait)
                    continue
                self._held.popleft()
                try:
                    head.sent = head.context.run(head.send, self._loop)
                except Exception as exc:  # left to release, which sends it with the task's answer
                    log.warning("event=workflow_task_start_not_sent error=%r", str(exc))
