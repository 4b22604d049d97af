"""The records the history machine builds and reads (schemas/*.avsc), typed as the codec gives them."""

from __future__ import annotations

from typing import TypedDict

from kadence.protocol.codec import Record as Record  # re-exported: the machine's modules import it from here

Effect = tuple[str, Record]  # (record name, fields): a branch of HistoryBatch.effects


class HistoryEvent(TypedDict):
    event_id: int  # 0 while buffered
    event_time_ms: int
    attributes: tuple[str, Record]  # (event type, its attributes): a branch of HistoryEvent.attributes


class ActivityHeartbeat(TypedDict):
    scheduled_event_id: int
    attempt: int
    details: list[Record]
    recorded_at_ms: int


class NextRun(TypedDict):
    """The run a continue-as-new or a cron schedule starts in the same record."""

    run_id: str
    events: list[HistoryEvent]
    effects: list[Effect]


class Rejection(TypedDict):
    request_id: str
    command: str
    cause: str
    reason: str


class TransientWorkflowTask(TypedDict):
    """A workflow task retried after a failure or timeout, which no event records yet (schemas/TransientWorkflowTask.avsc)."""

    scheduled_event_id: int
    attempt: int
    scheduled_time_ms: int
    started_time_ms: int
    started_identity: str
    last_cause: str
    last_failure: Record | None


class HistoryBatch(TypedDict):
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
    return event["attributes"][1]


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
