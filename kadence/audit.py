"""Reading kadence.history back and checking the invariants every history must keep.

The log is folded with the shared fencing rule, so zombie duplicates are counted, not applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kadence.protocol import topics
from kadence.protocol.events import CLOSE_STATUS
from kadence.protocol.codec import UndecodableRecord, history_batch_codec
from kadence.protocol.fence import LogFence
from kadence.protocol.kafka import read_to_end
from kadence.protocol.settings import KafkaSettings

Record = dict[str, Any]

ACTIVITY_RESULTS = {"ActivityTaskCompleted", "ActivityTaskFailed", "ActivityTaskTimedOut"}


@dataclass
class AuditReport:
    batches: int = 0
    zombie_batches: int = 0
    histories: dict[tuple[str, str], list[Record]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def history(self, workflow_id: str, run_id: str) -> list[Record]:
        return self.histories[(workflow_id, run_id)]

    def event_types(self, workflow_id: str, run_id: str) -> list[str]:
        return [e["attributes"][0] for e in self.history(workflow_id, run_id)]


def audit_history(settings: KafkaSettings) -> AuditReport:
    report = AuditReport()
    fence = LogFence(strict=True)
    codec = history_batch_codec()
    for msg in read_to_end(settings, topics.HISTORY, {p: 0 for p in range(settings.partitions)}):
        report.batches += 1
        where = f"partition {msg.partition()} offset {msg.offset()}"
        try:
            batch = codec.decode(msg.value(), msg.headers())
        except UndecodableRecord as exc:
            report.violations.append(f"{where}: undecodable history record: {exc}")
            continue
        if not fence.admit(msg.partition(), batch):
            report.zombie_batches += 1
            continue
        key = (batch["workflow_id"], batch["run_id"])
        events = report.histories.setdefault(key, [])
        for event in batch["events"]:
            problem = _check_event(events, event)
            if problem:
                report.violations.append(f"{where} workflow_id={key[0]} run_id={key[1]} event_id={event['event_id']}: {problem}")
            events.append(event)
    return report


def _check_event(history: list[Record], event: Record) -> str | None:
    kind, attrs = event["attributes"]
    if event["event_id"] != len(history) + 1:
        return f"event id {event['event_id']} where {len(history) + 1} was due"
    if not history and kind != "WorkflowExecutionStarted":
        return f"history starts with {kind}"
    if history and history[-1]["attributes"][0] in CLOSE_STATUS:
        return f"{kind} after the run closed"
    if kind in ACTIVITY_RESULTS:
        scheduled_id = attrs["scheduled_event_id"]
        if not any(e["event_id"] == scheduled_id and e["attributes"][0] == "ActivityTaskScheduled" for e in history):
            return f"{kind} for scheduled_event_id {scheduled_id}, which is not an ActivityTaskScheduled event"
        final = [e for e in history if e["attributes"][0] in ACTIVITY_RESULTS
                 and e["attributes"][1]["scheduled_event_id"] == scheduled_id
                 and e["attributes"][1].get("retry_state", "") != "IN_PROGRESS"]
        if final:
            return f"second final result for activity {scheduled_id} (first at event {final[0]['event_id']})"
    return None
