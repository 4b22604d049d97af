"""The workflow's side of a stream: an append-only log of published items, which outside
publishers add to by signal and subscribers read by a polling update (or, once the run is closed,
by query).

Make one WorkflowStream in the workflow's `@workflow.init` method: it registers its handlers
there, before the run's first signal or update is delivered. A workflow that continues as new
carries the stream on through a `WorkflowStreamState | None` field of its input (`prior_state`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, NoReturn, TypeVar, overload

from kadence import workflow
from kadence.api.common.v1 import Payload
from kadence.contrib.workflow_streams._topic_handle import WorkflowTopicHandle, check_topic_type
from kadence.contrib.workflow_streams._types import (
    OFFSET_QUERY,
    POLL,
    PUBLISH_SIGNAL,
    STREAM_DRAINING_ERROR_TYPE,
    TRUNCATE_OUT_OF_RANGE_ERROR_TYPE,
    TRUNCATED_OFFSET_ERROR_TYPE,
    PollInput,
    PollResult,
    PublisherState,
    PublishInput,
    WireItem,
    WorkflowStreamItem,
    WorkflowStreamState,
    decode_payload,
    encode_payload,
)
from kadence.exceptions import ApplicationError

T = TypeVar("T")

# The most item bytes (in wire form) one poll answers with, well under the 2 MiB payload limit
# once the envelope's JSON is added; the rest is read by the next poll at once (more_ready).
MAX_POLL_RESPONSE_BYTES = 1_000_000
DEFAULT_PUBLISHER_TTL = timedelta(minutes=15)


class WorkflowStream:
    """A workflow's stream (as temporalio.contrib.workflow_streams.WorkflowStream). Its handlers:
    - signal `__temporal_workflow_stream_publish`: a batch from an outside publisher, its
      duplicates dropped;
    - update `__temporal_workflow_stream_poll`: waits for items past an offset and returns them;
    - query `__temporal_workflow_stream_poll`: the items past an offset, at once;
    - query `__temporal_workflow_stream_offset`: the offset the next item will take.
    """

    def __init__(self, prior_state: WorkflowStreamState | None = None) -> None:
        """Registers the stream's handlers on the running workflow; `prior_state` is what
        get_state() returned in the run before a continue-as-new (None in a first run).
        Raises RuntimeError when not called from the workflow's `__init__`, or called twice."""
        caller = sys._getframe(1).f_code.co_name
        if caller != "__init__":
            raise RuntimeError(
                f"WorkflowStream() was called from {caller!r}: make it in the workflow's @workflow.init __init__, "
                "so its update and signal handlers exist before the run's first update or signal arrives"
            )
        if workflow.get_signal_handler(PUBLISH_SIGNAL) is not None:
            raise RuntimeError("this workflow already has a WorkflowStream: make one, in @workflow.init, and keep it")
        state = prior_state or WorkflowStreamState()
        self._log = [WorkflowStreamItem(item.topic, decode_payload(item.data)) for item in state.log]
        self._base_offset = state.base_offset
        self._publishers = dict(state.publishers)
        self._detaching = False
        self._topic_types: dict[str, Any] = {}
        workflow.set_signal_handler(PUBLISH_SIGNAL, self._on_publish)
        workflow.set_update_handler(POLL, self._on_poll, validator=self._validate_poll)
        workflow.set_query_handler(POLL, self._read)
        workflow.set_query_handler(OFFSET_QUERY, self._end_offset)

    @overload
    def topic(self, name: str) -> WorkflowTopicHandle[Any]: ...

    @overload
    def topic(self, name: str, *, type: type[T]) -> WorkflowTopicHandle[T]: ...

    def topic(self, name: str, *, type: type[T] | None = None) -> WorkflowTopicHandle[T] | WorkflowTopicHandle[Any]:
        """A handle to publish values of `type` to topic `name` (any value without a type). A topic
        is bound to one type per stream: another type for the same name raises RuntimeError."""
        bound: Any = Any if type is None else type
        check_topic_type(name, bound, self._topic_types.get(name), "workflow stream")
        self._topic_types[name] = bound
        return WorkflowTopicHandle(self, name, bound)

    def _publish_to_topic(self, topic: str, value: Any) -> None:
        payload = value if isinstance(value, Payload) else workflow.payload_converter().to_payload(value)
        self._log.append(WorkflowStreamItem(topic, payload))

    def get_state(self, *, publisher_ttl: timedelta = DEFAULT_PUBLISHER_TTL) -> WorkflowStreamState:
        """The stream's state for the next run (continue-as-new). Publishers not heard from for
        `publisher_ttl` are forgotten: keep it above the `max_retry_duration` of any publisher
        that may still be retrying a batch, or that batch could be taken twice."""
        now = workflow.now()
        return WorkflowStreamState(
            log=[WireItem(item.topic, encode_payload(item.data)) for item in self._log],
            base_offset=self._base_offset,
            publishers={pid: seen for pid, seen in self._publishers.items() if now - seen.last_seen < publisher_ttl},
        )

    def detach_pollers(self) -> None:
        """Answer the waiting polls now (with what they have, often nothing) and refuse new ones as
        `StreamDraining`, which subscribers retry until they reach the next run. Publishes still
        land. Call it before waiting for all handlers to finish and continuing as new."""
        self._detaching = True

    async def continue_as_new(
        self, build_args: Callable[[WorkflowStreamState], Sequence[Any]], *, publisher_ttl: timedelta = DEFAULT_PUBLISHER_TTL,
    ) -> NoReturn:
        """Detach the pollers, wait for every handler to finish, and continue as new with the
        arguments `build_args` makes of the stream's state. For other continue-as-new options, do
        the three steps yourself: detach_pollers(), wait_condition(all_handlers_finished),
        workflow.continue_as_new(...)."""
        self.detach_pollers()
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(args=build_args(self.get_state(publisher_ttl=publisher_ttl)))

    def truncate(self, up_to_offset: int) -> None:
        """Drop the items before `up_to_offset`; offsets stay as they were. A poll update from a
        dropped offset then fails as `TruncatedOffset` (the subscriber starts again at the oldest
        item kept). An offset past the end raises ApplicationError, which fails an update handler
        that calls it rather than the workflow task."""
        dropped = up_to_offset - self._base_offset
        if dropped <= 0:
            return
        if dropped > len(self._log):
            raise ApplicationError(
                f"cannot truncate to offset {up_to_offset}: the stream holds offsets {self._base_offset} to {self._end_offset()}",
                type=TRUNCATE_OUT_OF_RANGE_ERROR_TYPE,
            )
        del self._log[:dropped]
        self._base_offset = up_to_offset

    def _end_offset(self) -> int:
        return self._base_offset + len(self._log)

    def _on_publish(self, batch: PublishInput) -> None:
        if batch.publisher_id:
            seen = self._publishers.get(batch.publisher_id)
            if seen is not None and batch.sequence <= seen.sequence:
                return  # a flush retried after it landed
            self._publishers[batch.publisher_id] = PublisherState(batch.sequence, workflow.now())
        self._log.extend(WorkflowStreamItem(entry.topic, decode_payload(entry.data)) for entry in batch.items)

    def _validate_poll(self, poll: PollInput) -> None:
        if self._detaching:
            raise ApplicationError("this run's stream has detached its pollers (it is about to continue as new, or to end): "
                                   "poll again to reach the next run", type=STREAM_DRAINING_ERROR_TYPE)

    async def _on_poll(self, poll: PollInput) -> PollResult:
        # The condition reads the base offset each time: a truncate() while the poll waits moves it.
        await workflow.wait_condition(
            lambda: poll.from_offset < self._base_offset or poll.from_offset < self._end_offset() or self._detaching,
        )
        if 0 < poll.from_offset < self._base_offset:
            raise ApplicationError(  # fails this update only; the workflow goes on
                f"offset {poll.from_offset} was truncated: the oldest offset kept is {self._base_offset}",
                type=TRUNCATED_OFFSET_ERROR_TYPE,
            )
        return self._read(poll)

    def _read(self, poll: PollInput) -> PollResult:
        """The items of the topics asked for from the offset asked (or the oldest kept), up to
        MAX_POLL_RESPONSE_BYTES; changes nothing, so the query answers with it too."""
        wanted = set(poll.topics)
        items: list[WireItem] = []
        size = 0
        for offset in range(max(poll.from_offset, self._base_offset), self._end_offset()):
            item = self._log[offset - self._base_offset]
            if wanted and item.topic not in wanted:
                continue
            wire = WireItem(item.topic, encode_payload(item.data), offset)
            item_size = len(wire.topic) + len(wire.data)
            if items and size + item_size > MAX_POLL_RESPONSE_BYTES:
                return PollResult(items, next_offset=offset, more_ready=True)
            size += item_size
            items.append(wire)
        return PollResult(items, next_offset=self._end_offset())

