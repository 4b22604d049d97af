"""The records the history machine builds and reads (schemas/*.avsc), typed by the generated
kadence/protocol/records.py."""

from __future__ import annotations

from typing import Any, TypedDict, cast

from kadence.protocol.codec import Record as Record  # re-exported: the machine's modules import it from here
from kadence.protocol.records import ActivityHeartbeat as ActivityHeartbeat
from kadence.protocol.records import CommandRejection, HistoryEventAttributesRecord
from kadence.protocol.records import HistoryEvent as HistoryEvent
from kadence.protocol.records import TransientWorkflowTask as TransientWorkflowTask

EventAttributes = HistoryEventAttributesRecord  # the attributes of any event
Rejection = CommandRejection

# (record name, fields): a branch of HistoryBatch.effects, named by an EffectType (the generated
# HistoryBatchEffects tags its branches with their names as Literal strings, which mypy does not
# match with EffectType members).
Effect = tuple[str, Record]


class NextRun(TypedDict):
    """The run a continue-as-new or a cron schedule starts in the same record (schemas/HistoryBatch.avsc)."""

    run_id: str
    events: list[HistoryEvent]
    effects: list[Effect]


class HistoryBatch(TypedDict):
    """schemas/HistoryBatch.avsc as the machine writes it: every field set, its effects as `Effect`s."""

    workflow_id: str
    run_id: str
    first_event_id: int
    events: list[HistoryEvent]
    buffered: list[HistoryEvent]
    effects: list[Effect]
    heartbeats: list[ActivityHeartbeat]
    next_run: NextRun | None
    request_ids: list[str]
    rejection: Rejection | None
    refusals: list[Rejection]
    workflow_task: TransientWorkflowTask | None
    source_partition: int
    source_offset: int


def event_type(event: HistoryEvent) -> str:
    return event["attributes"][0]


def attributes(event: HistoryEvent) -> Record:
    """An event's attributes, whatever its type: a reader knows which fields its event type has."""
    return cast(Record, event["attributes"][1])


def history_event(event_id: int, event_time_ms: int, event_type: str, attributes: EventAttributes) -> HistoryEvent:
    """A HistoryEvent: the caller names the type `attributes` are of (cast: the generated union tags
    each branch with its name as a Literal string, which mypy does not match with an EventType member)."""
    return {"event_id": event_id, "event_time_ms": event_time_ms, "attributes": cast(Any, (event_type, attributes))}


def history_batch(
    workflow_id: str, run_id: str, first_event_id: int, source_partition: int, source_offset: int, *,
    events: list[HistoryEvent] | None = None, buffered: list[HistoryEvent] | None = None, effects: list[Effect] | None = None,
    heartbeats: list[ActivityHeartbeat] | None = None, next_run: NextRun | None = None, request_ids: list[str] | None = None,
    rejection: Rejection | None = None, refusals: list[Rejection] | None = None, workflow_task: TransientWorkflowTask | None = None,
) -> HistoryBatch:
    """A HistoryBatch record (schemas/HistoryBatch.avsc): every batch the history service writes is made here."""
    return {
        "workflow_id": workflow_id, "run_id": run_id, "first_event_id": first_event_id,
        "events": events or [], "buffered": buffered or [], "effects": effects or [], "heartbeats": heartbeats or [],
        "next_run": next_run, "request_ids": request_ids or [], "rejection": rejection,
        "refusals": refusals or [], "workflow_task": workflow_task, "source_partition": source_partition, "source_offset": source_offset,
    }
