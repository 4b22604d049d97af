"""One run as the UI shows it, derived from its events: the timeline's bars, the pending
activities, the failure chain, and payloads decoded for reading."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kadence.api.common.v1 import Payload
from kadence.converter import NOT_ENCODED, DataConverter
from kadence.exceptions import RetryState
from kadence.protocol.events import ACTIVITY_RESULTS, CHILD_RESULTS, CLOSE_STATUS, NEXUS_RESULTS, RESET_CAUSE
from kadence.protocol.limits import iter_payloads
from kadence.protocol.names import EventType

Record = dict[str, Any]

WORKFLOW_TASK_CLOSES = (EventType.WorkflowTaskCompleted, EventType.WorkflowTaskFailed, EventType.WorkflowTaskTimedOut)
# Events shown as points on the timeline's first row.
MARKED = (EventType.WorkflowExecutionSignaled, EventType.WorkflowExecutionCancelRequested, EventType.WorkflowExecutionUpdateAdmitted,
          EventType.MarkerRecorded, EventType.UpsertWorkflowSearchAttributes, EventType.WorkflowPropertiesModified)


@dataclass
class Segment:
    """A stretch of a bar: `state` is what the CSS colours (scheduled, running, completed, failed,
    timed-out, canceled, backoff, pending); `end_ms` None while it lasts."""

    start_ms: int
    end_ms: int | None
    state: str
    label: str
    event_ids: list[int] = field(default_factory=list)


@dataclass
class Bar:
    kind: str  # workflow task, activity, timer, child workflow
    title: str
    segments: list[Segment] = field(default_factory=list)


@dataclass
class PendingActivity:
    scheduled_event_id: int
    activity_id: str
    activity_type: str
    task_queue: str
    state: str  # SCHEDULED (waiting for a worker) or STARTED
    attempt: int
    maximum_attempts: int
    last_failure: Record | None
    last_started_ms: int | None


@dataclass
class Point:
    at_ms: int
    event_id: int
    label: str


@dataclass
class Timeline:
    start_ms: int
    end_ms: int
    bars: list[Bar]
    points: list[Point]


def timeline(events: list[Record], now_ms: int) -> Timeline:
    """The run's work as bars over time: each workflow task, each activity (one segment per attempt,
    a failed attempt red, the wait before a retry grey), each timer and child workflow."""
    bars: dict[tuple[str, int], Bar] = {}
    points: list[Point] = []
    open_segments: dict[tuple[str, int], Segment] = {}

    def begin(key: tuple[str, int], at: int, state: str, label: str, event_id: int) -> None:
        segment = Segment(at, None, state, label, [event_id])
        bars[key].segments.append(segment)
        open_segments[key] = segment

    def end(key: tuple[str, int], at: int, state: str, event_id: int, label: str | None = None) -> None:
        segment = open_segments.pop(key, None)
        if segment is None:
            return
        segment.end_ms, segment.state = at, state
        segment.event_ids.append(event_id)
        if label:
            segment.label = label

    for event in events:
        at, event_id = event["event_time_ms"], event["event_id"]
        kind, attrs = event["attributes"]
        if kind == EventType.WorkflowTaskScheduled:
            bars[("wft", event_id)] = Bar("workflow task", f"workflow task {event_id}" + (
                f" (attempt {attrs['attempt']})" if attrs["attempt"] > 1 else ""))
            begin(("wft", event_id), at, "scheduled", "scheduled", event_id)
        elif kind == EventType.WorkflowTaskStarted:
            key = ("wft", attrs["scheduled_event_id"])
            end(key, at, "scheduled", event_id)
            if key in bars:
                begin(key, at, "running", "started", event_id)
        elif kind in WORKFLOW_TASK_CLOSES:
            state = {EventType.WorkflowTaskCompleted: "completed", EventType.WorkflowTaskFailed: "failed"}.get(kind, "timed-out")
            label = attrs.get("cause") or state
            end(("wft", attrs["scheduled_event_id"]), at, state, event_id, label)
        elif kind == EventType.ActivityTaskScheduled:
            bars[("activity", event_id)] = Bar("activity", f"{attrs['activity_type']} (activity {attrs['activity_id']})")
            begin(("activity", event_id), at, "scheduled", "scheduled", event_id)
        elif kind == EventType.ActivityTaskStarted:
            key = ("activity", attrs["scheduled_event_id"])
            end(key, at, open_segments[key].state if key in open_segments else "scheduled", event_id)
            if key in bars:
                begin(key, at, "running", f"attempt {attrs['attempt']}", event_id)
        elif kind in ACTIVITY_RESULTS:
            key = ("activity", attrs["scheduled_event_id"])
            state = {EventType.ActivityTaskCompleted: "completed", EventType.ActivityTaskFailed: "failed",
                     EventType.ActivityTaskTimedOut: "timed-out"}.get(kind, "canceled")
            segment = open_segments.get(key)
            label = segment.label if segment else state
            if attrs.get("failure"):
                label = f"{label}: {attrs['failure']['message']}"
            end(key, at, state, event_id, label)
            if attrs.get("retry_state") == RetryState.IN_PROGRESS and key in bars:
                begin(key, at, "backoff", "waiting to retry", event_id)
        elif kind == EventType.TimerStarted:
            key = ("timer", event_id)
            bars[key] = Bar("timer", f"timer {attrs['timer_id']} ({attrs['start_to_fire_timeout_ms'] / 1000:g} s)")
            begin(key, at, "running", "waiting", event_id)
        elif kind in (EventType.TimerFired, EventType.TimerCanceled):
            end(("timer", attrs["started_event_id"]), at, "completed" if kind == EventType.TimerFired else "canceled", event_id,
                "fired" if kind == EventType.TimerFired else "canceled")
        elif kind == EventType.StartChildWorkflowExecutionInitiated:
            key = ("child", event_id)
            bars[key] = Bar("child workflow", f"child {attrs['workflow_type']} {attrs['workflow_id']}")
            begin(key, at, "scheduled", "initiated", event_id)
        elif kind == EventType.ChildWorkflowExecutionStarted:
            key = ("child", attrs["initiated_event_id"])
            end(key, at, "scheduled", event_id)
            if key in bars:
                begin(key, at, "running", "running", event_id)
        elif kind in CHILD_RESULTS or kind == EventType.StartChildWorkflowExecutionFailed:
            state = {EventType.ChildWorkflowExecutionCompleted: "completed", EventType.ChildWorkflowExecutionCanceled: "canceled",
                     EventType.ChildWorkflowExecutionTimedOut: "timed-out"}.get(kind, "failed")
            end(("child", attrs["initiated_event_id"]), at, state, event_id, kind.removeprefix("ChildWorkflowExecution").lower())
        elif kind == EventType.NexusOperationScheduled:
            key = ("nexus", event_id)
            bars[key] = Bar("nexus operation", f"{attrs['service']}.{attrs['operation']} (endpoint {attrs['endpoint']})")
            begin(key, at, "scheduled", "scheduled", event_id)
        elif kind == EventType.NexusOperationStarted:
            key = ("nexus", attrs["scheduled_event_id"])
            end(key, at, "scheduled", event_id)
            if key in bars:
                begin(key, at, "running", "started", event_id)
        elif kind in NEXUS_RESULTS:
            state = {EventType.NexusOperationCompleted: "completed", EventType.NexusOperationCanceled: "canceled",
                     EventType.NexusOperationTimedOut: "timed-out"}.get(kind, "failed")
            end(("nexus", attrs["scheduled_event_id"]), at, state, event_id, state)
        elif kind in MARKED:
            label = attrs.get("signal_name") or attrs.get("name") or attrs.get("marker_name") or kind
            points.append(Point(at, event_id, f"{kind}: {label}" if label != kind else kind))
        elif kind in CLOSE_STATUS:  # work still open (terminated while an activity waited to retry) ends with the run
            for key in list(open_segments):
                end(key, at, "canceled", event_id, f"dropped: the run {CLOSE_STATUS[kind].lower()}")
    start = events[0]["event_time_ms"] if events else now_ms
    last = events[-1]["event_time_ms"] if events else now_ms
    end_ms = now_ms if open_segments else last
    for segment in open_segments.values():
        segment.state = "pending" if segment.state == "running" else segment.state
    return Timeline(start, max(end_ms, start + 1), list(bars.values()), points)


def pending_activities(events: list[Record]) -> list[PendingActivity]:
    """Activities scheduled and not yet closed for good, with the attempt they are on and the
    failure of the last attempt."""
    pending: dict[int, PendingActivity] = {}
    for event in events:
        kind, attrs = event["attributes"]
        if kind == EventType.ActivityTaskScheduled:
            policy = attrs.get("retry_policy") or {}
            pending[event["event_id"]] = PendingActivity(
                event["event_id"], attrs["activity_id"], attrs["activity_type"], attrs["task_queue"], "SCHEDULED", 1,
                policy.get("maximum_attempts", 0), None, None,
            )
        elif kind == EventType.ActivityTaskStarted and attrs["scheduled_event_id"] in pending:
            activity = pending[attrs["scheduled_event_id"]]
            activity.state, activity.attempt, activity.last_started_ms = "STARTED", attrs["attempt"], event["event_time_ms"]
        elif kind in ACTIVITY_RESULTS and attrs["scheduled_event_id"] in pending:
            if attrs.get("retry_state") == RetryState.IN_PROGRESS:
                activity = pending[attrs["scheduled_event_id"]]
                activity.state, activity.attempt, activity.last_failure = "SCHEDULED", activity.attempt + 1, attrs["failure"]
            else:
                del pending[attrs["scheduled_event_id"]]
    return list(pending.values())


@dataclass(frozen=True)
class ResetPoint:
    """A workflow task's end, where a reset may take the run back to (docs/decisions/0005-reset.md)."""

    event_id: int
    event_type: str
    at_ms: int


def reset_points(events: list[Record]) -> list[ResetPoint]:
    """Every WorkflowTaskCompleted, WorkflowTaskFailed and WorkflowTaskTimedOut of the run, oldest first."""
    return [ResetPoint(e["event_id"], e["attributes"][0], e["event_time_ms"]) for e in events
            if e["attributes"][0] in WORKFLOW_TASK_CLOSES]


def reset_links(events: list[Record], run_id: str) -> tuple[str | None, str | None]:
    """(the run this one was reset from, the run this one was reset as), from the reset's
    WorkflowTaskFailed (cause RESET_WORKFLOW naming this run as its new run; a run reset twice
    carries the first reset's too, copied) and the termination that names the new run."""
    reset_from = reset_as = None
    for event in events:
        kind, attrs = event["attributes"]
        if kind == EventType.WorkflowTaskFailed and attrs.get("cause") == RESET_CAUSE and attrs.get("new_run_id") == run_id:
            reset_from = attrs.get("base_run_id") or None
        elif kind == EventType.WorkflowExecutionTerminated and attrs.get("new_execution_run_id"):
            reset_as = attrs["new_execution_run_id"]
    return reset_from, reset_as


def failure_chain(failure: Record | None) -> list[Record]:
    """The failure and each cause under it, outermost first."""
    chain = []
    while failure is not None:
        chain.append(failure)
        failure = failure.get("cause")
    return chain


def children(events: list[Record]) -> list[tuple[str, str, str]]:
    """(workflow id, run id or "", workflow type) of each child the run started or tried to."""
    found: dict[int, list[str]] = {}
    for event in events:
        kind, attrs = event["attributes"]
        if kind == EventType.StartChildWorkflowExecutionInitiated:
            found[event["event_id"]] = [attrs["workflow_id"], "", attrs["workflow_type"]]
        elif kind == EventType.ChildWorkflowExecutionStarted and attrs["initiated_event_id"] in found:
            found[attrs["initiated_event_id"]][1] = attrs["run_id"]
    return [(w, r, t) for w, r, t in found.values()]


class PayloadReader:
    """Payloads as the reader should see them: decoded by the data converter (after the codec
    endpoint's decode, when the UI has one); a payload no converter can read (a codec encrypted it
    and the UI has no endpoint) is shown as encoded, with its encoding and size."""

    def __init__(self, converter: DataConverter) -> None:
        self.converter = converter

    async def readable(self, record: Any) -> Any:
        """`record` (event attributes, failures, payloads, in dicts and lists) as JSON values, each
        payload replaced by its decoded value, or by {"encoded": encoding, "bytes": size}; all of
        them decoded in one codec call."""
        found = [Payload.of(p) for p in iter_payloads(record, NOT_ENCODED)]
        decoded, problem = found, None
        if self.converter.payload_codec is not None and found:
            try:
                decoded = [Payload.of(p) for p in await self.converter.payload_codec.decode(found)]
            except Exception as exc:  # the endpoint is down or refused: show them encoded, saying why
                problem = str(exc)
        shown = iter([self.value(p, problem) for p in decoded])
        return self._replace_payloads(record, shown, encoded=True)

    def value(self, payload: Payload, problem: str | None = None) -> Any:
        try:
            return _jsonable(self.converter.payload_converter.from_payload(payload))
        except Exception:
            encoding = payload.metadata.get("encoding", b"").decode(errors="replace") or "unknown"
            return {"encoded": encoding, "bytes": len(payload.data), **({"codec_error": problem} if problem else {})}


    def _replace_payloads(self, value: Any, shown: Iterator[Any], encoded: bool) -> Any:
        """A copy of `value` with its payloads replaced, in iter_payloads's order, by the next of
        `shown`; search attributes, which no codec encodes, are converted where they are."""
        if isinstance(value, dict):
            if "data" in value and "metadata" in value and isinstance(value["data"], bytes):
                return next(shown) if encoded else self.value(Payload.of(value))
            return {key: self._replace_payloads(item, shown, encoded and key not in NOT_ENCODED) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._replace_payloads(item, shown, encoded) for item in value]
        return _jsonable(value)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=_bytes_as_base64))


def _bytes_as_base64(value: Any) -> Any:
    """Bytes as base64; any other value JSON lacks (a protobuf message, a dataclass) as its str."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return str(value)
