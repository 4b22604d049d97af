"""An activity attempt's heartbeats (as temporalio's): throttled sends of the latest details,
and the attempt's cancellation, which its next heartbeat raises."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from confluent_kafka import Message

from kadence import activity as activity_module
from kadence.exceptions import CancelledError
from kadence.protocol.names import CommandType
from kadence.protocol.records import RecordActivityTaskHeartbeat, Task
from kadence.worker._context import WorkerContext, activity_task
from kadence.worker._workflow_instance import payload_records

log = logging.getLogger("kadence.worker")



class Heartbeater:
    """Throttled heartbeats of one activity attempt, as temporalio: at most one send per 80% of the
    heartbeat timeout (30 s without one); between sends the latest details win. Callable from the
    activity's thread when the activity is sync."""

    def __init__(self, context: WorkerContext, task: Task) -> None:
        at = activity_task(task)
        self._context = context
        self._workflow_id = task["workflow_id"]
        self._reply: RecordActivityTaskHeartbeat = {
            "run_id": task["run_id"], "scheduled_event_id": at["scheduled_event_id"], "attempt": at["attempt"],
        }
        timeout_s = at["heartbeat_timeout_ms"] / 1000
        self._interval = min(timeout_s * 0.8, 30.0) if timeout_s else 30.0
        self._loop = asyncio.get_running_loop()
        self._last_sent = -self._interval
        self._pending: tuple[Any, ...] | None = None
        self._scheduled: asyncio.TimerHandle | None = None
        self._shared_cancel: threading.Event | None = None  # the attempt runs in another process
        self.cancellation = activity_module._Cancellation()  # what activity.is_cancelled() and the like read

    @property
    def cancel_requested(self) -> bool:
        return self.cancellation.is_set()

    def request_cancel(self, details: activity_module.ActivityCancellationDetails) -> None:
        """The attempt is cancelled (`details` say why): its next heartbeat raises CancelledError."""
        self.cancellation.request(details)
        if self._shared_cancel is not None:
            self._shared_cancel.set()

    def share_cancellation(self, cancelled: threading.Event) -> None:
        """Set `cancelled` (an event of the attempt's process) when the attempt is cancelled."""
        self._shared_cancel = cancelled
        if self.cancel_requested:
            cancelled.set()

    def relay_from_thread(self, *details: Any) -> None:
        """A heartbeat the shared state manager's reader received from the attempt's process."""
        self._loop.call_soon_threadsafe(self._heartbeat, details)

    def __call__(self, *details: Any) -> None:
        if self.cancel_requested:
            raise CancelledError("activity cancelled: the workflow requested it")
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._heartbeat(details)
        else:
            self._loop.call_soon_threadsafe(self._heartbeat, details)

    def _heartbeat(self, details: tuple[Any, ...]) -> None:
        self._pending = details
        due = self._last_sent + self._interval
        if self._loop.time() >= due:
            self._send()
        elif self._scheduled is None:
            self._scheduled = self._loop.call_at(due, self._send)

    def _send(self) -> None:
        self._scheduled = None
        if self._pending is None:
            return
        details, self._pending = self._pending, None
        self._last_sent = self._loop.time()
        payloads = self._context.client.data_converter.payload_converter.to_payloads(details)
        heartbeat: RecordActivityTaskHeartbeat = {**self._reply, "details": payload_records(payloads)}
        # Not tried again: a late heartbeat could overwrite newer details.
        sent = self._context.send(self._workflow_id, CommandType.RecordActivityTaskHeartbeat, heartbeat, until_delivered=False)
        sent.add_done_callback(_log_failed_heartbeat)

    def close(self) -> None:
        if self._scheduled is not None:
            self._scheduled.cancel()


def ignore_heartbeat(*details: Any) -> None:
    """Heartbeats of a local activity are ignored (as temporalio)."""


def _log_failed_heartbeat(sent: asyncio.Future[Message]) -> None:
    if not sent.cancelled() and sent.exception() is not None:
        log.warning("event=heartbeat_not_sent error=%r", str(sent.exception()))
