"""What a sync activity running in another process shares with its worker (as temporalio.worker's
SharedStateManager): its heartbeats, sent over a multiprocessing queue, and its cancellation, an
event set across processes. A worker whose activity_executor is not a ThreadPoolExecutor needs
one: a ProcessPoolExecutor cannot carry the worker's contextvars or its heartbeat callable."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import multiprocessing.managers
import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from kadence import activity as activity_module
from kadence.exceptions import CancelledError

__all__ = ["SharedHeartbeatSender", "SharedStateManager"]

log = logging.getLogger("kadence.worker")

_UNREGISTERED = ("__kadence_heartbeater_unregistered__",)  # the queue item after an attempt's last heartbeat
QUEUE_CAPACITY = 1000  # heartbeats in flight from every process of the pool
POLL_S = 0.5  # how long the queue reader waits before it checks whether anyone is still registered


class SharedHeartbeatSender(ABC):
    """Sends heartbeats from an activity's process to its worker; picklable."""

    @abstractmethod
    def send_heartbeat(self, task_token: bytes, *details: Any) -> None: ...


class SharedStateManager(ABC):
    """Cross-process events and heartbeat senders for activities run by a process pool. One
    manager may serve many workers."""

    @staticmethod
    def create_from_multiprocessing(
        mgr: multiprocessing.managers.SyncManager, queue_poller_executor: concurrent.futures.Executor | None = None,
    ) -> SharedStateManager:
        """A manager whose events and heartbeat queue live in `mgr` (usually multiprocessing.Manager()).
        The queue is read by a thread of `queue_poller_executor` (a one-thread pool by default)."""
        return _MultiprocessingSharedStateManager(mgr, queue_poller_executor or concurrent.futures.ThreadPoolExecutor(1))

    @abstractmethod
    def new_event(self) -> threading.Event:
        """An event usable in any process."""

    @abstractmethod
    async def register_heartbeater(self, task_token: bytes, heartbeat: Callable[..., None]) -> SharedHeartbeatSender:
        """Call `heartbeat` with the details of each heartbeat sent for `task_token` through the
        returned (picklable) sender."""

    @abstractmethod
    async def unregister_heartbeater(self, task_token: bytes) -> None:
        """Stop relaying `task_token`'s heartbeats, once those already sent are relayed."""


class _MultiprocessingSharedStateManager(SharedStateManager):
    def __init__(self, mgr: multiprocessing.managers.SyncManager, queue_poller_executor: concurrent.futures.Executor) -> None:
        self._mgr = mgr
        self._poller = queue_poller_executor
        self._queue: queue.Queue[tuple[bytes, Sequence[Any]]] = mgr.Queue(QUEUE_CAPACITY)
        self._heartbeaters: dict[bytes, Callable[..., None]] = {}
        self._unregistered: dict[bytes, Callable[[], object]] = {}
        self._lock = threading.Lock()
        self._reading = False

    def new_event(self) -> threading.Event:
        return self._mgr.Event()

    async def register_heartbeater(self, task_token: bytes, heartbeat: Callable[..., None]) -> SharedHeartbeatSender:
        with self._lock:
            self._heartbeaters[task_token] = heartbeat
            start = not self._reading
            self._reading = True
        if start:
            self._poller.submit(self._relay)
        return _QueueHeartbeatSender(self._queue)

    async def unregister_heartbeater(self, task_token: bytes) -> None:
        """Queued after the attempt's heartbeats, so they are relayed first."""
        loop = asyncio.get_running_loop()
        relayed = asyncio.Event()
        self._unregistered[task_token] = lambda: loop.call_soon_threadsafe(relayed.set)
        try:
            await loop.run_in_executor(None, lambda: self._queue.put((task_token, _UNREGISTERED), True, 5))
            await relayed.wait()
        finally:
            self._unregistered.pop(task_token, None)

    def _relay(self) -> None:
        """Read the queue while any attempt is registered; each heartbeat goes to its attempt's callable."""
        while True:
            with self._lock:
                if not self._heartbeaters:
                    self._reading = False
                    return
            try:
                task_token, details = self._queue.get(True, POLL_S)
            except queue.Empty:
                continue
            except Exception:  # the manager's process is gone: heartbeats from the pool stop
                log.exception("event=shared_heartbeat_queue_failed")
                with self._lock:
                    self._reading = False
                return
            if tuple(details) == _UNREGISTERED:
                with self._lock:
                    self._heartbeaters.pop(task_token, None)
                done = self._unregistered.get(task_token)
                if done is not None:
                    done()
                continue
            heartbeat = self._heartbeaters.get(task_token)
            if heartbeat is not None:
                heartbeat(*details)


class _QueueHeartbeatSender(SharedHeartbeatSender):
    def __init__(self, heartbeats: queue.Queue[tuple[bytes, Sequence[Any]]]) -> None:
        self._queue = heartbeats

    def send_heartbeat(self, task_token: bytes, *details: Any) -> None:
        self._queue.put((task_token, details), True, 30)  # waits while the queue is full, not for ever


class ProcessHeartbeat:
    """activity.heartbeat() in the activity's process: raises CancelledError once the workflow
    asked to cancel the attempt (as in a thread), else sends the details to the worker."""

    def __init__(self, task_token: bytes, sender: SharedHeartbeatSender, cancelled: threading.Event) -> None:
        self._task_token = task_token
        self._sender = sender
        self._cancelled = cancelled

    def __call__(self, *details: Any) -> None:
        if self._cancelled.is_set():
            raise CancelledError("activity cancelled: the workflow requested it")
        self._sender.send_heartbeat(self._task_token, *details)


def run_sync_activity(info: activity_module.Info, heartbeat: ProcessHeartbeat, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a sync activity in a process of the pool, with its info and heartbeat (module level: pickled by name)."""
    context = contextvars.copy_context()
    context.run(activity_module._current_info.set, info)
    context.run(activity_module._current_heartbeat.set, heartbeat)
    return context.run(fn, *args)
