"""Topic handles: a topic's name and value type bound once, so a publish or subscribe does not
repeat them. Each is typed against the small protocol it calls (the stream client, the workflow's
stream), so this module sits below the modules that make handles."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar

from kadence.api.common.v1 import Payload
from kadence.contrib.workflow_streams._types import WorkflowStreamItem

T = TypeVar("T")


class _ClientSide(Protocol):
    """A WorkflowStreamClient, as its topic handles call it."""

    def _publish_to_topic(self, topic: str, value: Any, *, force_flush: bool = False) -> None: ...

    def _subscribe_as(
        self, topics: list[str], from_offset: int, result_type: Any, poll_cooldown: timedelta,
    ) -> AsyncIterator[WorkflowStreamItem[Any]]: ...


class _WorkflowSide(Protocol):
    """A WorkflowStream, as its topic handles call it."""

    def _publish_to_topic(self, topic: str, value: Any) -> None: ...


class TopicHandle(Generic[T]):
    """A topic of a WorkflowStreamClient, to publish values of type T to and subscribe to them
    (`WorkflowStreamClient.topic(name, type=T)` makes one). Publishes join the client's batches."""

    def __init__(self, client: _ClientSide, name: str, type: type[T]) -> None:
        self._client = client
        self._name = name
        self._type = type

    @property
    def name(self) -> str:
        return self._name

    @property
    def type(self) -> type[T]:
        return self._type

    def publish(self, value: T | Payload, *, force_flush: bool = False) -> None:
        """Buffer `value` for the client's next flush; `force_flush` wakes the flusher now (without
        waiting for it). A Payload is sent as it is, whatever the handle's type."""
        self._client._publish_to_topic(self._name, value, force_flush=force_flush)

    async def subscribe(
        self, from_offset: int = 0, *, poll_cooldown: timedelta = timedelta(milliseconds=100),
    ) -> AsyncIterator[WorkflowStreamItem[T]]:
        """The topic's items from `from_offset` on, decoded as T (for another type, RawValue say, use
        WorkflowStreamClient.subscribe with its result_type)."""
        async for item in self._client._subscribe_as([self._name], from_offset, self._type, poll_cooldown):
            yield item


class WorkflowTopicHandle(Generic[T]):
    """A topic of a workflow's WorkflowStream, to publish values of type T to
    (`WorkflowStream.topic(name, type=T)` makes one). A workflow does not subscribe to its own stream."""

    def __init__(self, stream: _WorkflowSide, name: str, type: type[T]) -> None:
        self._stream = stream
        self._name = name
        self._type = type

    @property
    def name(self) -> str:
        return self._name

    @property
    def type(self) -> type[T]:
        return self._type

    def publish(self, value: T | Payload) -> None:
        """Append `value` to the stream under this topic (through the workflow's payload converter;
        a Payload as it is)."""
        self._stream._publish_to_topic(self._name, value)


def check_topic_type(name: str, bound: Any, existing: Any, owner: str) -> None:
    """A topic takes one type per publisher, and never Payload (a Payload is published as it is on
    any topic; a subscriber that wants payloads asks for RawValue)."""
    if bound is Payload:
        raise RuntimeError(
            f"topic {name!r}: a topic cannot be bound to type=Payload; publish a Payload on a topic of any type "
            "(it is sent as it is), and subscribe with result_type=RawValue to receive payloads"
        )
    if existing is not None and existing != bound:
        raise RuntimeError(
            f"topic {name!r} is bound to {existing!r} on this {owner}, not {bound!r}: use one type per topic, "
            "or no type (typing.Any) for a topic of mixed values"
        )
