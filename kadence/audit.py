"""Reading kadence.history back and checking the invariants every history must keep.

The log is folded with the shared fencing rule, so zombie duplicates are counted, not applied.
Read from the start, every run is checked from its first event; read from an offset or a time,
runs that began earlier are checked from where the read found them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kadence.protocol import topics
from kadence.protocol.codec import NewerSchemaVersion, UndecodableRecord, history_batch_codec
from kadence.protocol.events import ACTIVITY_RESULTS, CHILD_RESULTS, CLOSE_STATUS, run_sections
from kadence.protocol.fence import LogFence
from kadence.protocol.kafka import read_to_end
from kadence.protocol.settings import KafkaSettings

Record = dict[str, Any]
RunKey = tuple[str, str]

# Events answering a request the run initiated (a child start, an external signal or cancel), and
# the event that must have initiated it. Each answer comes once per initiated event.
_INITIATED_BY_ANSWER = {
    "ChildWorkflowExecutionStarted": "StartChildWorkflowExecutionInitiated",
    "StartChildWorkflowExecutionFailed": "StartChildWorkflowExecutionInitiated",
    **{result: "StartChildWorkflowExecutionInitiated" for result in CHILD_RESULTS},
    "ExternalWorkflowExecutionSignaled": "SignalExternalWorkflowExecutionInitiated",
    "SignalExternalWorkflowExecutionFailed": "SignalExternalWorkflowExecutionInitiated",
    "ExternalWorkflowExecutionCancelRequested": "RequestCancelExternalWorkflowExecutionInitiated",
    "RequestCancelExternalWorkflowExecutionFailed": "RequestCancelExternalWorkflowExecutionInitiated",
}

@dataclass
class RunAudit:
    """What the checks remember of one run."""

    first_event_id: int
    event_count: int = 0
    events: list[Record] | None = None  # every event, when the caller asked to keep them
    activity_attempts: dict[int, int] = field(default_factory=dict)  # scheduled id -> attempt now due
    finished_activities: dict[int, int] = field(default_factory=dict)  # scheduled id -> final result event id
    fired_timers: set[str] = field(default_factory=set)
    initiated: dict[int, str] = field(default_factory=dict)  # initiated event id -> its type
    answered: dict[tuple[int, bool], int] = field(default_factory=dict)  # (initiated id, final?) -> answer event id
    closed: bool = False

    @property
    def next_event_id(self) -> int:
        return self.first_event_id + self.event_count

    def release(self) -> None:
        """Once closed, a run needs only its next event id and `closed` (to catch a later event):
        memory then grows with the open runs' state, not with the whole history."""
        for remembered in (self.activity_attempts, self.finished_activities, self.fired_timers, self.initiated, self.answered):
            remembered.clear()


@dataclass
class AuditReport:
    records: int = 0
    zombie_batches: int = 0
    runs: dict[RunKey, RunAudit] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def history(self, workflow_id: str, run_id: str) -> list[Record]:
        events = self.runs[(workflow_id, run_id)].events
        if events is None:
            raise ValueError("this audit did not keep events: call audit_history(..., keep_events=True)")
        return events

    def event_types(self, workflow_id: str, run_id: str) -> list[str]:
        return [e["attributes"][0] for e in self.history(workflow_id, run_id)]

    def summary(self) -> dict[str, Any]:
        return {
            "records": self.records, "runs": len(self.runs), "events": sum(r.event_count for r in self.runs.values()),
            "zombie_batches_skipped": self.zombie_batches, "violations": self.violations,
        }


def audit_history(
    settings: KafkaSettings, start_offsets: dict[int, int] | None = None, on_record: Callable[[int], None] | None = None,
    *, keep_events: bool = True,
) -> AuditReport:
    """Audit kadence.history from `start_offsets` (default: every partition from 0). With
    `keep_events`, the report holds every run's events (for tests and tools); without, the audit's
    memory grows with open runs, not events (the nightly audit)."""
    from_start = start_offsets is None
    offsets = start_offsets if start_offsets is not None else {p: 0 for p in range(settings.partitions)}
    report = AuditReport()
    fence = LogFence(strict=from_start)
    codec = history_batch_codec()
    for msg in read_to_end(settings, topics.HISTORY, offsets):
        report.records += 1
        if on_record is not None:
            on_record(report.records)
        where = f"partition {msg.partition()} offset {msg.offset()}"
        try:
            batch = codec.decode(msg.value(), msg.headers())
        except NewerSchemaVersion:
            raise
        except UndecodableRecord as exc:
            report.violations.append(f"{where}: undecodable history record: {exc}")
            continue
        if not fence.admit(msg.partition(), batch):
            report.zombie_batches += 1
            continue
        for section in run_sections(batch):
            if not section.events:
                continue
            key = (batch["workflow_id"], section.run_id)
            run = report.runs.setdefault(key, RunAudit(first_event_id=section.first_event_id, events=[] if keep_events else None))
            for event in section.events:
                problem = _check_event(run, event, from_start)
                if problem:
                    report.violations.append(f"{where} workflow_id={key[0]} run_id={key[1]} event_id={event['event_id']}: {problem}")
                run.event_count += 1
                if run.events is not None:
                    run.events.append(event)
            if run.closed and not keep_events:
                run.release()
    return report


def _check_event(run: RunAudit, event: Record, from_start: bool) -> str | None:
    kind, attrs = event["attributes"]
    if event["event_id"] != run.next_event_id:
        return f"event id {event['event_id']} where {run.next_event_id} was due"
    if run.closed:
        return f"{kind} after the run closed"
    if from_start and run.event_count == 0 and kind != "WorkflowExecutionStarted":
        return f"history starts with {kind}"
    run.closed = kind in CLOSE_STATUS
    if kind == "ActivityTaskScheduled":
        run.activity_attempts[event["event_id"]] = 1
    elif kind == "ActivityTaskStarted":
        due = run.activity_attempts.get(attrs["scheduled_event_id"])
        if due is not None and attrs["attempt"] != due:
            return f"attempt {attrs['attempt']} of activity {attrs['scheduled_event_id']} started where attempt {due} was due"
    elif kind in ACTIVITY_RESULTS:
        return _check_activity_result(run, event, kind, attrs)
    elif kind in _INITIATED_BY_ANSWER.values():
        run.initiated[event["event_id"]] = kind
    elif kind in _INITIATED_BY_ANSWER:
        return _check_answer(run, event, kind, attrs)
    elif kind == "TimerFired":
        if attrs["timer_id"] in run.fired_timers:
            return f"timer {attrs['timer_id']} fired twice"
        run.fired_timers.add(attrs["timer_id"])
    return None


def _check_activity_result(run: RunAudit, event: Record, kind: str, attrs: Record) -> str | None:
    scheduled_id = attrs["scheduled_event_id"]
    if scheduled_id in run.finished_activities:
        return f"second final result for activity {scheduled_id} (first at event {run.finished_activities[scheduled_id]})"
    if scheduled_id not in run.activity_attempts and scheduled_id >= run.first_event_id:
        return f"{kind} for scheduled_event_id {scheduled_id}, which is not an ActivityTaskScheduled event"
    if attrs.get("retry_state") == "IN_PROGRESS":
        run.activity_attempts[scheduled_id] = run.activity_attempts.get(scheduled_id, 1) + 1
    else:
        run.finished_activities[scheduled_id] = event["event_id"]
    return None


def _check_answer(run: RunAudit, event: Record, kind: str, attrs: Record) -> str | None:
    initiated_id = attrs["initiated_event_id"]
    expected = _INITIATED_BY_ANSWER[kind]
    if run.initiated.get(initiated_id) != expected and initiated_id >= run.first_event_id:
        return f"{kind} for initiated_event_id {initiated_id}, which is not a {expected} event"
    answer = (initiated_id, kind != "ChildWorkflowExecutionStarted")
    if answer in run.answered:
        return f"second answer {kind} to initiated event {initiated_id} (first at event {run.answered[answer]})"
    run.answered[answer] = event["event_id"]
    return None
