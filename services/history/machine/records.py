"""The records the history machine builds and reads (schemas/*.avsc), as Python values."""

from __future__ import annotations

from kadence.protocol.codec import Record

Effect = tuple[str, Record]  # (record name, fields): a union branch of HistoryBatch.effects


def event_type(event: Record) -> str:
    return event["attributes"][0]


def attributes(event: Record) -> Record:
    return event["attributes"][1]


def history_batch(
    workflow_id: str, run_id: str, first_event_id: int, source_partition: int, source_offset: int, *,
    events: list[Record] | None = None, buffered: list[Record] | None = None, effects: list[Effect] | None = None,
    heartbeats: list[Record] | None = None, next_run: Record | None = None, request_ids: list[str] | None = None,
    rejection: Record | None = None,
) -> Record:
    """A HistoryBatch record (schemas/HistoryBatch.avsc): every batch the history service writes is made here."""
    return {
        "workflow_id": workflow_id, "run_id": run_id, "first_event_id": first_event_id,
        "events": events or [], "buffered": buffered or [], "effects": effects or [], "heartbeats": heartbeats or [],
        "next_run": next_run, "request_ids": request_ids or [], "rejection": rejection,
        "source_partition": source_partition, "source_offset": source_offset,
    }
