"""The latest heartbeat of each pending activity attempt. Heartbeats are not history events (as in
Temporal): the history service carries them in its batches on kadence.history, so they are read
from the log, on the run's partition, from the time its oldest running attempt started."""

from __future__ import annotations

from typing import Any

from kadence.protocol import topics
from kadence.protocol.codec import UndecodableRecord, codec
from kadence.protocol.kafka import offsets_for_time, partition_for_key, read_to_end, topic_partitions
from kadence.protocol.settings import KafkaSettings

MAX_RECORDS = 50_000  # records of the partition read at most for one page: a busy partition's heartbeats show as unknown past it


def latest_heartbeats(settings: KafkaSettings, workflow_id: str, run_id: str, attempts: dict[int, tuple[int, int]]) -> dict[int, Any]:
    """For each scheduled event id in `attempts` (its attempt and the time it started), the details
    (payload records) of that attempt's latest heartbeat, where it sent one."""
    if not attempts:
        return {}
    partition = partition_for_key(workflow_id.encode(), topic_partitions(settings, topics.HISTORY))
    since = min(started_ms for _, started_ms in attempts.values())
    start = offsets_for_time(settings, topics.HISTORY, [partition], since)
    batches = codec("HistoryBatch")
    key = workflow_id.encode()
    found: dict[int, Any] = {}
    for read, msg in enumerate(read_to_end(settings, topics.HISTORY, start)):
        if read >= MAX_RECORDS:
            break
        if msg.key() != key:
            continue
        try:
            batch = batches.decode(msg.value(), msg.headers())
        except UndecodableRecord:
            continue
        if batch["run_id"] != run_id:
            continue
        for heartbeat in batch["heartbeats"]:
            wanted = attempts.get(heartbeat["scheduled_event_id"])
            if wanted is not None and wanted[0] == heartbeat["attempt"]:
                found[heartbeat["scheduled_event_id"]] = heartbeat["details"]
    return found
