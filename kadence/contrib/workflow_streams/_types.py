"""The values a workflow stream carries, and their wire form.

A published value becomes a Payload through the payload converter where it is published (the
workflow's, or the publishing client's); the codec is not run on it there, because the signal,
update or query that carries the batch runs the codec once over the whole envelope. Inside the
envelope each Payload travels as the base64 of its protobuf bytes (temporalio's wire form): the
JSON converter rebuilds dataclasses, not a Payload nested in one.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, TypeVar

from kadence.api.common.v1 import Payload

T = TypeVar("T")

# The names of the handlers a WorkflowStream registers (temporalio's, so a subscriber or tool that
# names them works on either). The poll is both an update (waits for items) and a query (answers at
# once, for a closed run).
PUBLISH_SIGNAL = "__temporal_workflow_stream_publish"
POLL = "__temporal_workflow_stream_poll"
OFFSET_QUERY = "__temporal_workflow_stream_offset"

# ApplicationError types the workflow side raises and the subscriber acts on.
STREAM_DRAINING_ERROR_TYPE = "StreamDraining"
TRUNCATED_OFFSET_ERROR_TYPE = "TruncatedOffset"
TRUNCATE_OUT_OF_RANGE_ERROR_TYPE = "TruncateOutOfRange"


def encode_payload(payload: Payload) -> str:
    return base64.b64encode(payload.SerializeToString()).decode("ascii")


def decode_payload(wire: str) -> Payload:
    return Payload.FromString(base64.b64decode(wire))


@dataclass
class WorkflowStreamItem(Generic[T]):
    """One item of a stream: its topic, its value (decoded as `subscribe(result_type=T)` asked; a
    Payload in the workflow's own log) and its offset in the stream (as temporalio's)."""

    topic: str
    data: T
    offset: int = 0


@dataclass
class PublishEntry:
    """One published value on the wire: its topic and its Payload (encode_payload's form)."""

    topic: str
    data: str


@dataclass
class PublishInput:
    """The publish signal's argument: a batch of entries, applied all or nothing. A batch whose
    `sequence` is not above the last the workflow took from `publisher_id` is a duplicate (a retried
    flush) and is dropped."""

    items: list[PublishEntry] = field(default_factory=list)
    publisher_id: str = ""
    sequence: int = 0


@dataclass
class PollInput:
    """The poll's argument: the topics wanted (all when empty) and the offset to read from. The poll
    update waits for items and refuses a nonzero offset already truncated; the poll query answers at
    once and reads from the oldest item kept instead."""

    topics: list[str] = field(default_factory=list)
    from_offset: int = 0


@dataclass
class WireItem:
    """An item on the wire: as WorkflowStreamItem, its Payload in encode_payload's form."""

    topic: str
    data: str
    offset: int = 0


@dataclass
class PollResult:
    """The poll's answer: items in offset order and the offset to poll from next. `more_ready`: the
    answer stopped at its size cap, so more items are there to read at once."""

    items: list[WireItem] = field(default_factory=list)
    next_offset: int = 0
    more_ready: bool = False


@dataclass
class PublisherState:
    """What the workflow remembers of a publisher to drop its duplicates: the last sequence taken,
    and when (workflow time), so get_state() can forget publishers idle past a TTL."""

    sequence: int
    last_seen: datetime


@dataclass
class WorkflowStreamState:
    """A stream's state, carried to the next run by continue-as-new. Type the workflow input's
    field as `WorkflowStreamState | None`, not `Any`: the converter rebuilds the dataclass only
    from its type hint, and a plain dict would reach WorkflowStream."""

    log: list[WireItem] = field(default_factory=list)
    base_offset: int = 0
    publishers: dict[str, PublisherState] = field(default_factory=dict)
