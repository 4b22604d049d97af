"""A workflow task's start, held back while the task runs (docs/architecture.md, "Workflow task
start").

A worker records a workflow task's start with the task's answer rather than before running it: the
answer carries it (`started_time_ms`), so the history service writes both in one batch, where a
start sent first was a command and a batch of its own (more records in the log, one more step, and
the answer waiting behind it). A task that is still running after `HOLD_S` (workflow code
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
from dataclasses import dataclass
from typing import Literal

from confluent_kafka import Message

from kadence.protocol.records import RecordWorkflowTaskStarted

log = logging.getLogger("kadence.worker")

# Longer than a workflow task's activation takes (about a millisecond), far shorter than its
# start-to-close timeout (10 s by default): a start sent by the thread comes this late, or once the
# stuck code lets the thread run (it needs the GIL: code that spins in Python shares it in turns).
HOLD_S = 0.1

StartCommand = tuple[Literal["RecordWorkflowTaskStarted"], RecordWorkflowTaskStarted]
# (workflow id, commands, loop): produces the commands back to back; from another thread, on the loop's behalf.
SendCommands = Callable[[str, list[StartCommand], asyncio.AbstractEventLoop | None], list["asyncio.Future[Message]"]]


@dataclass(eq=False)
class HeldStart:
    """One task's start: the command, when the thread sends it, the context it was held in (its
    trace), and whether it is sent or to be sent with the answer."""

    workflow_id: str
    command: StartCommand
    due: float
    context: contextvars.Context
    taken: bool = False

    @property
    def started_time_ms(self) -> int:
        return self.command[1]["started_time_ms"]


class HeldStarts:
    """The starts held by one worker, and the thread that sends those held past their due time.

    A start is sent exactly once: with the task's answer, by the caller that `take`s it, or by the
    thread, which sends it while holding the lock, so a `take` that finds it sent comes after its
    produce and the answer follows the start on the workflow's partition."""

    def __init__(self, send: SendCommands, hold_s: float = HOLD_S) -> None:
        self._send = send
        self._hold_s = hold_s
        self._held: collections.deque[HeldStart] = collections.deque()  # in due order: every hold is as long
        self._lock = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def hold(self, workflow_id: str, command: StartCommand) -> HeldStart:
        if self._thread is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._send_due, name="kadence-workflow-task-starts", daemon=True)
            self._thread.start()
        start = HeldStart(workflow_id, command, time.monotonic() + self._hold_s, contextvars.copy_context())
        with self._lock:
            self._held.append(start)
            if len(self._held) == 1:
                self._lock.notify()
        return start

    def take(self, start: HeldStart) -> bool:
        """Whether the start is the caller's to send, with the task's answer: False if the thread sent it."""
        with self._lock:
            if start.taken:
                return False
            start.taken = True
            return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join()
        with self._lock:  # a worker run again holds starts again, on a thread of its own
            self._thread, self._closed = None, False

    def _send_due(self) -> None:
        with self._lock:
            while not self._closed:
                while self._held and self._held[0].taken:
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
                    sent = head.context.run(self._send, head.workflow_id, [head.command], self._loop)
                    head.taken = True
                    assert self._loop is not None
                    for future in sent:  # callbacks are the loop's to add
                        self._loop.call_soon_threadsafe(future.add_done_callback, log_unsent)
                except Exception as exc:  # left to take, which sends it with the task's answer
                    log.warning("event=workflow_task_start_not_sent workflow_id=%s error=%r", head.workflow_id, str(exc))


def log_unsent(start: asyncio.Future[Message]) -> None:
    """A start not delivered (the producer closed): the task's answer is refused, and history
    dispatches the task again by its re-dispatch timer."""
    if not start.cancelled() and start.exception() is not None:
        log.warning("event=workflow_task_start_not_sent error=%r", str(start.exception()))
