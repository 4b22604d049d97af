"""The outside side of a stream: publishing to a workflow's stream (from an activity, a starter,
any process with a client) and subscribing to it.

Published values are batched and sent by the publish signal, each batch numbered so the workflow
drops one sent twice. A subscriber polls by update, which waits in the workflow until items come;
it follows the workflow through continue-as-new, and reads what a closed run still holds by query.
Each value becomes a Payload through the client's payload converter; the codec runs once over the
signal, update or query that carries the batch, not per item.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Self, TypeVar, overload

from kadence import activity
from kadence.api.common.v1 import Payload
from kadence.client import Client, WorkflowExecutionStatus, WorkflowHandle, WorkflowUpdateStage
from kadence.contrib.workflow_streams._topic_handle import TopicHandle, check_topic_type
from kadence.contrib.workflow_streams._types import (
    OFFSET_QUERY,
    POLL,
    PUBLISH_SIGNAL,
    STREAM_DRAINING_ERROR_TYPE,
    TRUNCATED_OFFSET_ERROR_TYPE,
    PollInput,
    PollResult,
    PublishEntry,
    PublishInput,
    WorkflowStreamItem,
    decode_payload,
    encode_payload,
)
from kadence.converter import PayloadConverter
from kadence.exceptions import CommandRejectedError, WorkflowNotFoundError, WorkflowUpdateFailedError

T = TypeVar("T")

# A closed run's retained items are read by query; a continued one's successor is polled.
_CLOSED = frozenset({
    WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED, WorkflowExecutionStatus.CANCELED,
    WorkflowExecutionStatus.TERMINATED, WorkflowExecutionStatus.TIMED_OUT,
})


@dataclass(frozen=True)
class _Batch:
    """A batch sent (or being sent) and not yet confirmed: sent again as it is, under its sequence."""

    entries: list[PublishEntry]
    sequence: int
    first_sent: float  # time.monotonic()


class WorkflowStreamClient:
    """Publishes to and subscribes to a workflow's stream (as
    temporalio.contrib.workflow_streams.WorkflowStreamClient). Make one with `create(client,
    workflow_id)`, `from_within_activity()` or from a workflow handle.

    Publishing, batched, as an async context manager (the rest is flushed on exit):

        stream = WorkflowStreamClient.create(client, workflow_id)
        async with stream:
            stream.topic("events", type=MyEvent).publish(event)

    Subscribing:

        async for item in stream.subscribe(["events"], result_type=MyEvent):
            handle(item.data)
    """

    def __init__(
        self, handle: WorkflowHandle[Any, Any], *, client: Client | None = None, batch_interval: timedelta = timedelta(seconds=2),
        max_batch_size: int | None = None, max_retry_duration: timedelta = timedelta(seconds=600),
    ) -> None:
        """A stream client on the workflow of `handle`. With `client` (as `create` makes it),
        subscriptions follow the workflow's continue-as-new. Values are converted by the payload
        converter of `client`, else of the handle's client.
        `batch_interval`: how often buffered values are sent; `max_batch_size`: send at once when
        that many are buffered. `max_retry_duration`: how long a batch may take to send (the client
        retries delivery itself while the broker is away) before TimeoutError; keep it below the
        workflow's `publisher_ttl` (15 minutes), after which a late duplicate is no longer known."""
        self._handle = handle
        self._client = client
        self._workflow_id = handle.id
        self._batch_interval = batch_interval
        self._max_batch_size = max_batch_size
        self._max_retry_duration = max_retry_duration
        self._buffer: list[tuple[str, Any]] = []
        self._flush_wanted = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._flush_lock = asyncio.Lock()
        self._publisher_id = uuid.uuid4().hex[:16]
        self._sequence = 0  # the last sequence the workflow confirmed (or may have taken)
        self._pending: _Batch | None = None
        self._topic_types: dict[str, Any] = {}

    @classmethod
    def create(
        cls, client: Client, workflow_id: str, *, batch_interval: timedelta = timedelta(seconds=2), max_batch_size: int | None = None,
        max_retry_duration: timedelta = timedelta(seconds=600),
    ) -> WorkflowStreamClient:
        """A stream client on workflow `workflow_id`'s current run, following it through continue-as-new."""
        return cls(client.get_workflow_handle(workflow_id), client=client, batch_interval=batch_interval,
                   max_batch_size=max_batch_size, max_retry_duration=max_retry_duration)

    @classmethod
    def from_within_activity(
        cls, *, batch_interval: timedelta = timedelta(seconds=2), max_batch_size: int | None = None,
        max_retry_duration: timedelta = timedelta(seconds=600),
    ) -> WorkflowStreamClient:
        """A stream client on the workflow that scheduled the running activity, with the worker's client."""
        workflow_id = activity.info().workflow_id
        if workflow_id is None:
            raise RuntimeError(
                "WorkflowStreamClient.from_within_activity() needs an activity a workflow scheduled, and this one is standalone: "
                "use WorkflowStreamClient.create(activity.client(), workflow_id) with the workflow id passed in its input"
            )
        return cls.create(activity.client(), workflow_id, batch_interval=batch_interval, max_batch_size=max_batch_size,
                          max_retry_duration=max_retry_duration)

    async def __aenter__(self) -> Self:
        self._flusher = asyncio.create_task(self._run_flusher(), name=f"workflow stream flusher ({self._workflow_id})")
        return self

    async def __aexit__(self, *_exc: object) -> None:
        """Stop the flusher and send what is left; raises what stopped the flusher, if anything did."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.cancel()
            await asyncio.wait([flusher])
            if not flusher.cancelled() and (error := flusher.exception()) is not None:
                raise error
        await self.flush()

    @overload
    def topic(self, name: str) -> TopicHandle[Any]: ...

    @overload
    def topic(self, name: str, *, type: type[T]) -> TopicHandle[T]: ...

    def topic(self, name: str, *, type: type[T] | None = None) -> TopicHandle[T] | TopicHandle[Any]:
        """A handle to publish values of `type` to topic `name` and subscribe to them (any value
        without a type). A topic is bound to one type per client: another type for the same name
        raises RuntimeError."""
        bound: Any = Any if type is None else type
        check_topic_type(name, bound, self._topic_types.get(name), "client")
        self._topic_types[name] = bound
        return TopicHandle(self, name, bound)

    def _publish_to_topic(self, topic: str, value: Any, *, force_flush: bool = False) -> None:
        self._buffer.append((topic, value))
        if force_flush or (self._max_batch_size is not None and len(self._buffer) >= self._max_batch_size):
            self._flush_wanted.set()

    async def flush(self) -> None:
        """Send what is buffered (and a batch not yet confirmed) and return once the workflow's
        history holds it. Raises TimeoutError when a batch took longer than `max_retry_duration`:
        that batch is dropped (it may have landed), and later ones take new sequence numbers."""
        while self._pending is not None or self._buffer:
            await self._flush()

    def _payload_converter(self) -> PayloadConverter:
        return (self._client or self._handle.client).data_converter.payload_converter

    async def _flush(self) -> None:
        async with self._flush_lock:
            if self._pending is None:
                if not self._buffer:
                    return
                entries = self._encode(self._buffer)  # before clearing: a value the converter refuses stays buffered
                self._buffer = []
                self._pending = _Batch(entries, self._sequence + 1, time.monotonic())
            batch = self._pending
            left = self._max_retry_duration.total_seconds() - (time.monotonic() - batch.first_sent)
            try:
                async with asyncio.timeout(max(left, 0)):
                    await self._handle.signal(
                        PUBLISH_SIGNAL, PublishInput(batch.entries, self._publisher_id, batch.sequence),
                        request_id=f"workflow-stream/{self._publisher_id}/{batch.sequence}",
                    )
            except TimeoutError:
                self._sequence, self._pending = batch.sequence, None
                raise TimeoutError(
                    f"a batch of {len(batch.entries)} items to workflow {self._workflow_id}'s stream was not confirmed within "
                    f"max_retry_duration ({self._max_retry_duration}) and is dropped: it is in the stream if it landed, lost if not"
                ) from None
            self._sequence, self._pending = batch.sequence, None

    def _encode(self, values: list[tuple[str, Any]]) -> list[PublishEntry]:
        converter = self._payload_converter()
        return [PublishEntry(topic, encode_payload(value if isinstance(value, Payload) else converter.to_payload(value)))
                for topic, value in values]

    async def _run_flusher(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._flush_wanted.wait(), self._batch_interval.total_seconds())
            except TimeoutError:
                pass
            self._flush_wanted.clear()
            await self._flush()

    @overload
    def subscribe(
        self, topics: str | list[str] | None = ..., from_offset: int = ..., *, result_type: type[T], poll_cooldown: timedelta = ...,
    ) -> AsyncIterator[WorkflowStreamItem[T]]: ...

    @overload
    def subscribe(
        self, topics: str | list[str] | None = ..., from_offset: int = ..., *, result_type: None = None, poll_cooldown: timedelta = ...,
    ) -> AsyncIterator[WorkflowStreamItem[Any]]: ...

    def subscribe(
        self, topics: str | list[str] | None = None, from_offset: int = 0, *, result_type: type | None = None,
        poll_cooldown: timedelta = timedelta(milliseconds=100),
    ) -> AsyncIterator[WorkflowStreamItem[Any]]:
        """The stream's items of `topics` (a name, a list, or None or [] for all) from `from_offset`
        on, each decoded as `result_type` (RawValue: the Payload as it is; None: the converter's
        default). Follows the workflow through continue-as-new (made by `create`); once the run is
        closed, yields what it still holds (read by query, which needs a worker of its task queue)
        and ends. A subscriber behind a truncate() goes on from the oldest item kept.
        `poll_cooldown`: the least time between polls once caught up; each poll is an update in the
        workflow's history, so 0 (busy polling) is for tests only."""
        if result_type is Payload:
            raise RuntimeError("subscribe(result_type=Payload) cannot decode: pass result_type=RawValue to receive each Payload")
        wanted = [] if topics is None else [topics] if isinstance(topics, str) else list(topics)
        return self._subscribe_as(wanted, from_offset, result_type, poll_cooldown)

    async def _subscribe_as(
        self, topics: list[str], from_offset: int, result_type: Any, poll_cooldown: timedelta,
    ) -> AsyncIterator[WorkflowStreamItem[Any]]:
        cooldown = poll_cooldown.total_seconds()
        offset, handle, closed = from_offset, self._handle, False
        while True:
            poll = PollInput(topics, offset)
            if closed:
                result = await handle.query(POLL, poll, result_type=PollResult)
            else:
                polled_run_id: str | None = None
                try:
                    update = await handle.start_update(POLL, poll, wait_for_stage=WorkflowUpdateStage.ACCEPTED, result_type=PollResult)
                    polled_run_id = update.workflow_run_id
                    result = await update.result()
                except (WorkflowUpdateFailedError, CommandRejectedError) as error:
                    failure_type = getattr(error.cause, "type", None) if isinstance(error, WorkflowUpdateFailedError) else None
                    if failure_type == TRUNCATED_OFFSET_ERROR_TYPE:
                        offset = 0  # from the oldest item kept
                    elif failure_type == STREAM_DRAINING_ERROR_TYPE:
                        await asyncio.sleep(cooldown)  # the run is handing over to the next: poll until it has
                    else:
                        handle, closed = await self._where_next(handle, polled_run_id, error)
                    continue
            converter = self._payload_converter()
            for item in result.items:
                yield WorkflowStreamItem(item.topic, converter.from_payload(decode_payload(item.data), result_type), item.offset)
            offset = result.next_offset
            if result.more_ready:
                continue
            if closed:
                return
            await asyncio.sleep(cooldown)

    async def _where_next(
        self, handle: WorkflowHandle[Any, Any], polled_run_id: str | None, error: Exception,
    ) -> tuple[WorkflowHandle[Any, Any], bool]:
        """After a poll failed otherwise than the stream said: the run polled (or the one the
        handle names) continued as new (the workflow's current run, to poll) or closed (that run,
        to read by query, True); else the failure is the caller's to hear."""
        polled = WorkflowHandle(handle.client, self._workflow_id, run_id=polled_run_id) if polled_run_id else handle
        try:
            run = await polled.describe()
        except WorkflowNotFoundError:
            raise error from None
        if run.status == WorkflowExecutionStatus.CONTINUED_AS_NEW and self._client is not None:
            return self._client.get_workflow_handle(self._workflow_id), False
        if run.status in _CLOSED:
            return WorkflowHandle(handle.client, self._workflow_id, run_id=run.run_id), True
        raise error

    async def get_offset(self) -> int:
        """The offset the stream's next item will take (the number of items ever published)."""
        offset: int = await self._handle.query(OFFSET_QUERY, result_type=int)
        return offset
