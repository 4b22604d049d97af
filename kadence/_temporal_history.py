"""Temporal's JSON history read as Kadence's history events, so the Replayer replays runs recorded
on Temporal (docs/temporal-differences.md, "Temporal's JSON histories").

The input is the proto3 JSON of temporal.api.history.v1.History, as `temporal workflow show
--output json` and temporalio's `WorkflowHistory.to_json()` write it: camelCase fields, int64s as
strings, durations as "1.5s", times in RFC 3339, payload bytes in base64, and enums either as
Temporal's full names (`EVENT_TYPE_TIMER_FIRED`, `RETRY_STATE_TIMEOUT`) or shorthand (`TimerFired`,
`Timeout`). Each event becomes the HistoryEvent record of schemas/HistoryEvent.avsc, checked by
its codec, which also fills the fields Temporal does not have with their defaults.

Where the two record the same run differently, the events are rewritten to Kadence's form:
- an update Temporal accepted carries its request; Kadence records the request first, as
  WorkflowExecutionUpdateAdmitted before the workflow task that ran it, so one is inserted there;
- a patch marker holds the patch as `patch-data` JSON (older cores: raw `patch_id` and
  `deprecated` bytes), a local activity marker its seq and type as `data` JSON and its failure on
  the event; both become the details Kadence's markers hold, a local activity's seq counted
  among local activities only, as Kadence counts them;
- the upsert of `TemporalChangeVersion` that temporalio issues beside a patch marker is the SDK's
  own, not the workflow code's: it is left out.
Events are numbered again when one is inserted or left out, and the ids events refer to with them.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from kadence.protocol.codec import UndecodableRecord, codec
from kadence.protocol.events import LOCAL_ACTIVITY_MARKER, PATCH_MARKER
from kadence.protocol.names import EventType

Json = dict[str, Any]

_CHANGE_VERSION = "TemporalChangeVersion"  # the search attribute temporalio upserts beside a patch marker
_JSON_PLAIN = b"json/plain"

# The fields that hold the id of another event of the same history: renumbered with the events.
_EVENT_REFERENCES = ("scheduled_event_id", "started_event_id", "initiated_event_id", "workflow_task_completed_event_id",
                     "latest_cancel_requested_event_id")


class TemporalHistoryError(ValueError):
    """A Temporal JSON history Kadence cannot read: the message names the event and what is missing."""


def is_temporal_history(history: Mapping[str, Any]) -> bool:
    """Whether `history` is in Temporal's JSON form (its events have `eventType`), not Kadence's export."""
    events = history.get("events")
    return isinstance(events, list) and bool(events) and isinstance(events[0], Mapping) and "eventType" in events[0]


def run_id_of(history: Mapping[str, Any]) -> str:
    """The run id a Temporal history records (its start's originalExecutionRunId, as temporalio reads it)."""
    return str(_start(history).get("originalExecutionRunId") or "")


def workflow_id_of(history: Mapping[str, Any]) -> str:
    """The workflow id a Temporal history's start records ("" from older servers, which do not write it)."""
    return str(_start(history).get("workflowId") or "")


def _start(history: Mapping[str, Any]) -> Json:
    return dict(history["events"][0].get("workflowExecutionStartedEventAttributes") or {})


def events_from_temporal(history: Mapping[str, Any]) -> list[Json]:
    """Kadence's history events for a Temporal JSON history; raises TemporalHistoryError naming the
    first event it cannot read (of a type Kadence has no counterpart for, or without what Kadence needs)."""
    raw = history.get("events")
    if not isinstance(raw, list) or not raw:
        raise TemporalHistoryError("a Temporal JSON history is an object with a non-empty `events` list")
    return _Reader([_typed(index, event) for index, event in enumerate(raw)]).events()


def _typed(index: int, event: Any) -> tuple[str, int, int, Json]:
    """(Kadence's event type name, id, time in ms, attributes) of a Temporal event."""
    if not isinstance(event, Mapping) or "eventType" not in event or "eventId" not in event:
        raise TemporalHistoryError(f"event #{index + 1} of the history is not a Temporal HistoryEvent with eventId and eventType")
    event_type = _pascal(str(event["eventType"]), "EVENT_TYPE_")
    key = event_type[0].lower() + event_type[1:] + "EventAttributes"
    try:
        return event_type, int(event["eventId"]), _time_ms(event.get("eventTime")), dict(event.get(key) or {})
    except (TypeError, ValueError) as exc:
        raise TemporalHistoryError(f"event #{index + 1} ({event_type}) cannot be read: {type(exc).__name__}: {exc}") from exc


class _Reader:
    def __init__(self, events: list[tuple[str, int, int, Json]]) -> None:
        self.temporal = events
        self.by_id = {event_id: (event_type, attrs) for event_type, event_id, _, attrs in events}
        self.admitted = {_update_id(attrs) for event_type, _, _, attrs in events if event_type == EventType.WorkflowExecutionUpdateAdmitted}
        # temporalio numbers local activities in one sequence with activities, Kadence in one of their own: the nth
        # local activity started has the nth smallest seq of the markers.
        seqs = sorted(_local_activity_seq(event_id, attrs) for event_type, event_id, _, attrs in events
                      if event_type == EventType.MarkerRecorded and attrs.get("markerName") == LOCAL_ACTIVITY_MARKER)
        self.local_activity_seqs = {seq: index for index, seq in enumerate(seqs, 1)}
        self.last_task_completed = 0  # the Temporal id of the latest WorkflowTaskCompleted read

    def events(self) -> list[Json]:
        read: list[tuple[int, str, int, Json]] = []  # (Temporal id, event type, time, Kadence attributes)
        admissions: dict[int, list[Json]] = {}  # by the Temporal id of the WorkflowTaskScheduled they precede
        for event_type, event_id, time_ms, attrs in self.temporal:
            convert = _CONVERT.get(event_type)
            if convert is None:
                raise TemporalHistoryError(
                    f"event {event_id} is a {event_type}, which Kadence has no counterpart for: this history cannot be replayed "
                    f"by Kadence (the event types read are listed in docs/temporal-differences.md)"
                )
            if event_type == EventType.WorkflowTaskCompleted:
                self.last_task_completed = event_id
            if event_type == EventType.UpsertWorkflowSearchAttributes and _only_change_version(attrs):
                continue
            try:
                converted = convert(self, attrs)
            except (KeyError, TypeError, ValueError) as exc:
                raise TemporalHistoryError(f"event {event_id} ({event_type}) cannot be read: {type(exc).__name__}: {exc}") from exc
            if event_type == EventType.WorkflowExecutionUpdateAccepted and converted["update_id"] not in self.admitted:
                admissions.setdefault(self._accepting_task_scheduled(event_id), []).append(_admission(attrs, converted["update_id"]))
            read.append((event_id, event_type, time_ms, converted))
        return self._numbered(read, admissions)

    def _accepting_task_scheduled(self, accepted_id: int) -> int:
        """The WorkflowTaskScheduled of the task whose completion accepted an update."""
        completed = self.by_id.get(self.last_task_completed)
        if completed is None:
            raise TemporalHistoryError(f"event {accepted_id} (WorkflowExecutionUpdateAccepted) follows no WorkflowTaskCompleted")
        return int(completed[1]["scheduledEventId"])

    def _numbered(self, read: list[tuple[int, str, int, Json]], admissions: dict[int, list[Json]]) -> list[Json]:
        ordered: list[tuple[int | None, str, int, Json]] = []  # the Temporal id is None for an inserted event
        for event_id, event_type, time_ms, attrs in read:
            ordered += [(None, EventType.WorkflowExecutionUpdateAdmitted, time_ms, a) for a in admissions.get(event_id, [])]
            ordered.append((event_id, event_type, time_ms, attrs))
        new_id = {old: index for index, (old, *_) in enumerate(ordered, 1) if old is not None}
        records = codec("HistoryEvent")
        events = []
        for index, (old, event_type, time_ms, attrs) in enumerate(ordered, 1):
            for name in _EVENT_REFERENCES:
                if attrs.get(name):
                    attrs[name] = new_id.get(attrs[name], attrs[name])
            event = {"event_id": index, "event_time_ms": time_ms, "attributes": (event_type, attrs)}
            try:
                events.append(records.decode(records.encode(event)))  # checks it, and fills the defaults
            except (UndecodableRecord, ValueError, TypeError) as exc:
                where = f"event {old}" if old is not None else "the update admission inserted before a workflow task"
                raise TemporalHistoryError(f"{where} ({event_type}) does not make a Kadence event: {type(exc).__name__}: {exc}") from exc
        return events

    def task_completed(self, attrs: Json) -> int:
        """The workflowTaskCompletedEventId an event gives, else that of the latest task completed
        (Temporal's update events do not say; Kadence's do)."""
        return int(attrs.get("workflowTaskCompletedEventId") or self.last_task_completed)


# ---- values ------------------------------------------------------------------------------------


def _pascal(value: str, prefix: str) -> str:
    """`EVENT_TYPE_TIMER_FIRED` or `TimerFired` as `TimerFired`."""
    if value.startswith(prefix):
        return "".join(word.capitalize() for word in value[len(prefix):].split("_"))
    return value


def _enum(value: Any, prefix: str, default: str = "") -> str:
    """A Temporal enum in Kadence's form: `RETRY_STATE_TIMEOUT` or `Timeout` as `TIMEOUT`."""
    if value in (None, "", 0):
        return default
    text = str(value)
    if text.startswith(prefix):
        return text[len(prefix):]
    if re.fullmatch(r"[A-Z][A-Za-z0-9]*", text):
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", text).upper()
    raise ValueError(f"{text!r} is not a value of Temporal's {prefix.rstrip('_')} enum")


def _int(value: Any) -> int:
    return int(value or 0)


def _ms(duration: Any) -> int:
    """A proto3 JSON duration ("10s", "0.500s") in milliseconds."""
    if not duration:
        return 0
    text = str(duration)
    if not text.endswith("s"):
        raise ValueError(f"{text!r} is not a proto3 JSON duration (seconds ending in 's')")
    return round(float(text[:-1]) * 1000)


def _time_ms(value: Any) -> int:
    """An RFC 3339 time (nanoseconds allowed) in milliseconds since the epoch."""
    if not value:
        return 0
    text = re.sub(r"(\.\d{6})\d+", r"\1", str(value)).replace("Z", "+00:00")
    return round(datetime.fromisoformat(text).timestamp() * 1000)


def _bytes(text: str) -> bytes:
    """proto3 JSON bytes: base64, standard or URL-safe, padded or not (as protobuf reads them)."""
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_")


def _payload(value: Mapping[str, Any]) -> Json:
    """A Payload (proto3 JSON leaves out empty data)."""
    return {"metadata": {key: _bytes(data) for key, data in (value.get("metadata") or {}).items()}, "data": _bytes(value.get("data") or "")}


def _payloads(value: Any) -> list[Json]:
    """A Payloads message ({"payloads": [...]}) as a list."""
    return [_payload(p) for p in ((value or {}).get("payloads") or [])]


def _first_payload(value: Any) -> Json | None:
    """A result: the first of its Payloads (temporalio writes one), or None."""
    found = _payloads(value)
    return found[0] if found else None


def _header(value: Any) -> dict[str, Json]:
    return {name: _payload(p) for name, p in ((value or {}).get("fields") or {}).items()}


def _memo(value: Any) -> dict[str, Json]:
    """A Memo ({"fields": {...}}, as a Header): its payloads by key."""
    return {key: _payload(p) for key, p in ((value or {}).get("fields") or {}).items()}


def _search_attributes(value: Any) -> dict[str, Json]:
    return {name: _payload(p) for name, p in ((value or {}).get("indexedFields") or {}).items()}


def _name(value: Any) -> str:
    """A WorkflowType, ActivityType or TaskQueue: its name."""
    return str((value or {}).get("name") or "")


def _json_payload(value: Any) -> Json:
    return {"metadata": {"encoding": _JSON_PLAIN}, "data": json.dumps(value, separators=(",", ":")).encode()}


def _json_of(payload: Json) -> Any:
    return json.loads(payload["data"])


def _retry_policy(value: Any) -> Json | None:
    if not value:
        return None
    return {
        "initial_interval_ms": _ms(value.get("initialInterval")), "backoff_coefficient": float(value.get("backoffCoefficient") or 0),
        "maximum_interval_ms": _ms(value.get("maximumInterval")), "maximum_attempts": _int(value.get("maximumAttempts")),
        "non_retryable_error_types": list(value.get("nonRetryableErrorTypes") or []),
    }


def _failure(value: Any) -> Json | None:
    """A temporal.api.failure.v1.Failure as Kadence's Failure: its kind in `type` (the application
    error's type, or the error class Kadence raises for a timeout, cancellation ...)."""
    if not value:
        return None
    failure: Json = {
        "message": str(value.get("message") or ""), "source": str(value.get("source") or ""),
        "stack_trace": str(value.get("stackTrace") or ""), "cause": _failure(value.get("cause")),
    }
    if "applicationFailureInfo" in value:
        info = value["applicationFailureInfo"] or {}
        delay = info.get("nextRetryDelay")
        failure.update(type=str(info.get("type") or ""), non_retryable=bool(info.get("nonRetryable")),
                       details=_payloads(info.get("details")),
                       category=_enum(info.get("category"), "APPLICATION_ERROR_CATEGORY_", "UNSPECIFIED"),
                       next_retry_delay_ms=_ms(delay) if delay else None)
    elif "timeoutFailureInfo" in value:
        info = value["timeoutFailureInfo"] or {}
        failure.update(type="TimeoutError", timeout_type=_enum(info.get("timeoutType"), "TIMEOUT_TYPE_", "START_TO_CLOSE"),
                       details=_payloads(info.get("lastHeartbeatDetails")))
    elif "activityFailureInfo" in value:
        info = value["activityFailureInfo"] or {}
        failure.update(type="ActivityError", activity_failure_info={
            "scheduled_event_id": _int(info.get("scheduledEventId")), "started_event_id": _int(info.get("startedEventId")),
            "identity": str(info.get("identity") or ""), "activity_type": _name(info.get("activityType")),
            "activity_id": str(info.get("activityId") or ""),
            "retry_state": _enum(info.get("retryState"), "RETRY_STATE_", "RETRY_POLICY_NOT_SET"),
        })
    else:
        kinds = {"canceledFailureInfo": "CancelledError", "terminatedFailureInfo": "TerminatedError", "serverFailureInfo": "ServerError",
                 "childWorkflowExecutionFailureInfo": "ChildWorkflowError", "resetWorkflowFailureInfo": "ResetWorkflowError"}
        kind = next((name for key, name in kinds.items() if key in value), "")
        info = value.get("canceledFailureInfo") or value.get("resetWorkflowFailureInfo") or {}
        failure.update(type=kind, details=_payloads(info.get("details") or info.get("lastHeartbeatDetails")))
    return failure


def _execution(attrs: Json) -> tuple[str, str]:
    execution = attrs.get("workflowExecution") or {}
    return str(execution.get("workflowId") or ""), str(execution.get("runId") or "")


def _update_id(attrs: Json) -> str:
    """The update an update event is about (its meta, or the request's meta)."""
    for holder in (attrs, attrs.get("acceptedRequest") or {}, attrs.get("request") or {}):
        meta = holder.get("meta") or {}
        if meta.get("updateId"):
            return str(meta["updateId"])
    return str(attrs.get("protocolInstanceId") or "")


def _admission(accepted: Json, update_id: str) -> Json:
    """The WorkflowExecutionUpdateAdmitted Kadence records for an update Temporal accepted."""
    request = accepted.get("acceptedRequest") or {}
    update_input = request.get("input") or {}
    return {"update_id": update_id, "name": str(update_input.get("name") or ""), "args": _payloads(update_input.get("args")),
            "identity": str((request.get("meta") or {}).get("identity") or ""), "header": _header(update_input.get("header"))}


def _only_change_version(attrs: Json) -> bool:
    return set((attrs.get("searchAttributes") or {}).get("indexedFields") or {}) == {_CHANGE_VERSION}


# ---- the events --------------------------------------------------------------------------------


def _workflow_execution_started(reader: _Reader, a: Json) -> Json:
    parent_id, parent_run = _execution({"workflowExecution": a.get("parentWorkflowExecution")})
    root_id, root_run = _execution({"workflowExecution": a.get("rootWorkflowExecution")})
    return {
        "workflow_type": _name(a.get("workflowType")), "task_queue": _name(a.get("taskQueue")), "input": _payloads(a.get("input")),
        "identity": str(a.get("identity") or ""), "workflow_task_timeout_ms": _ms(a.get("workflowTaskTimeout")),
        "workflow_execution_timeout_ms": _ms(a.get("workflowExecutionTimeout")),
        "workflow_run_timeout_ms": _ms(a.get("workflowRunTimeout")),
        "continued_execution_run_id": str(a.get("continuedExecutionRunId") or ""),
        "search_attributes": _search_attributes(a.get("searchAttributes")),
        "parent_workflow_id": parent_id, "parent_run_id": parent_run, "parent_initiated_event_id": _int(a.get("parentInitiatedEventId")),
        "first_workflow_task_backoff_ms": _ms(a.get("firstWorkflowTaskBackoff")), "cron_schedule": str(a.get("cronSchedule") or ""),
        "first_execution_run_id": str(a.get("firstExecutionRunId") or ""), "root_workflow_id": root_id, "root_run_id": root_run,
        "header": _header(a.get("header")), "memo": _memo(a.get("memo")),
    }


def _workflow_execution_signaled(reader: _Reader, a: Json) -> Json:
    external_id, external_run = _execution({"workflowExecution": a.get("externalWorkflowExecution")})
    return {"signal_name": str(a["signalName"]), "input": _payloads(a.get("input")), "identity": str(a.get("identity") or ""),
            "external_workflow_id": external_id, "external_run_id": external_run, "header": _header(a.get("header"))}


def _workflow_execution_cancel_requested(reader: _Reader, a: Json) -> Json:
    external_id, external_run = _execution({"workflowExecution": a.get("externalWorkflowExecution")})
    return {"cause": str(a.get("cause") or ""), "identity": str(a.get("identity") or ""), "external_workflow_id": external_id,
            "external_run_id": external_run, "external_initiated_event_id": _int(a.get("externalInitiatedEventId"))}


def _workflow_task_scheduled(reader: _Reader, a: Json) -> Json:
    return {"task_queue": _name(a.get("taskQueue")), "attempt": _int(a.get("attempt")) or 1}


def _workflow_task_started(reader: _Reader, a: Json) -> Json:
    return {"scheduled_event_id": _int(a["scheduledEventId"]), "identity": str(a.get("identity") or "")}


def _workflow_task_completed(reader: _Reader, a: Json) -> Json:
    return {"scheduled_event_id": _int(a["scheduledEventId"]), "started_event_id": _int(a["startedEventId"]),
            "identity": str(a.get("identity") or "")}


def _workflow_task_failed(reader: _Reader, a: Json) -> Json:
    return {"scheduled_event_id": _int(a["scheduledEventId"]), "started_event_id": _int(a["startedEventId"]),
            "cause": _enum(a.get("cause"), "WORKFLOW_TASK_FAILED_CAUSE_", "UNSPECIFIED"), "failure": _failure(a.get("failure")),
            "identity": str(a.get("identity") or "")}


def _workflow_task_timed_out(reader: _Reader, a: Json) -> Json:
    return {"scheduled_event_id": _int(a["scheduledEventId"]), "started_event_id": _int(a.get("startedEventId")),
            "timeout_type": _enum(a.get("timeoutType"), "TIMEOUT_TYPE_", "START_TO_CLOSE")}


def _activity_task_scheduled(reader: _Reader, a: Json) -> Json:
    return {
        "activity_id": str(a["activityId"]), "activity_type": _name(a["activityType"]), "task_queue": _name(a.get("taskQueue")),
        "input": _payloads(a.get("input")), "schedule_to_close_timeout_ms": _ms(a.get("scheduleToCloseTimeout")),
        "schedule_to_start_timeout_ms": _ms(a.get("scheduleToStartTimeout")),
        "start_to_close_timeout_ms": _ms(a.get("startToCloseTimeout")),
        "heartbeat_timeout_ms": _ms(a.get("heartbeatTimeout")), "retry_policy": _retry_policy(a.get("retryPolicy")),
        "workflow_task_completed_event_id": reader.task_completed(a), "header": _header(a.get("header")),
    }


def _activity_task_started(reader: _Reader, a: Json) -> Json:
    return {"scheduled_event_id": _int(a["scheduledEventId"]), "attempt": _int(a.get("attempt")) or 1,
            "identity": str(a.get("identity") or "")}


def _activity_task_completed(reader: _Reader, a: Json) -> Json:
    return {"scheduled_event_id": _int(a["scheduledEventId"]), "started_event_id": _int(a.get("startedEventId")),
            "result": _first_payload(a.get("result")), "identity": str(a.get("identity") or "")}


def _activity_task_failed(reader: _Reader, a: Json) -> Json:
    """An ActivityTaskFailed or ActivityTaskTimedOut: Temporal records only an activity's last attempt."""
    return {"scheduled_event_id": _int(a["scheduledEventId"]), "started_event_id": _int(a.get("startedEventId")),
            "failure": _failure(a.get("failure")) or {"message": ""},
            "retry_state": _enum(a.get("retryState"), "RETRY_STATE_", "RETRY_POLICY_NOT_SET"), "identity": str(a.get("identity") or "")}


def _activity_task_cancel_requested(reader: _Reader, a: Json) -> Json:
    return {"scheduled_event_id": _int(a["scheduledEventId"]), "workflow_task_completed_event_id": reader.task_completed(a)}


def _activity_task_canceled(reader: _Reader, a: Json) -> Json:
    return {"scheduled_event_id": _int(a["scheduledEventId"]), "started_event_id": _int(a.get("startedEventId")),
            "latest_cancel_requested_event_id": _int(a.get("latestCancelRequestedEventId")), "details": _payloads(a.get("details")),
            "identity": str(a.get("identity") or "")}


def _timer_started(reader: _Reader, a: Json) -> Json:
    return {"timer_id": str(a["timerId"]), "start_to_fire_timeout_ms": _ms(a.get("startToFireTimeout")),
            "workflow_task_completed_event_id": reader.task_completed(a)}


def _timer_fired(reader: _Reader, a: Json) -> Json:
    return {"timer_id": str(a["timerId"]), "started_event_id": _int(a["startedEventId"])}


def _timer_canceled(reader: _Reader, a: Json) -> Json:
    return {"timer_id": str(a["timerId"]), "started_event_id": _int(a["startedEventId"]),
            "workflow_task_completed_event_id": reader.task_completed(a)}


def _workflow_execution_completed(reader: _Reader, a: Json) -> Json:
    return {"result": _first_payload(a.get("result")), "workflow_task_completed_event_id": reader.task_completed(a),
            "new_execution_run_id": str(a.get("newExecutionRunId") or "")}


def _workflow_execution_failed(reader: _Reader, a: Json) -> Json:
    return {"failure": _failure(a.get("failure")) or {"message": ""}, "workflow_task_completed_event_id": reader.task_completed(a),
            "new_execution_run_id": str(a.get("newExecutionRunId") or "")}


def _workflow_execution_canceled(reader: _Reader, a: Json) -> Json:
    return {"details": _payloads(a.get("details")), "workflow_task_completed_event_id": reader.task_completed(a)}


def _workflow_execution_terminated(reader: _Reader, a: Json) -> Json:
    return {"reason": str(a.get("reason") or ""), "details": _payloads(a.get("details")), "identity": str(a.get("identity") or "")}


def _workflow_execution_timed_out(reader: _Reader, a: Json) -> Json:
    return {"retry_state": _enum(a.get("retryState"), "RETRY_STATE_", "TIMEOUT"),
            "new_execution_run_id": str(a.get("newExecutionRunId") or "")}


def _workflow_execution_continued_as_new(reader: _Reader, a: Json) -> Json:
    return {
        "new_execution_run_id": str(a.get("newExecutionRunId") or ""), "workflow_type": _name(a.get("workflowType")),
        "task_queue": _name(a.get("taskQueue")), "input": _payloads(a.get("input")),
        "workflow_task_timeout_ms": _ms(a.get("workflowTaskTimeout")),
        "run_timeout_ms": _ms(a.get("workflowRunTimeout")), "workflow_task_completed_event_id": reader.task_completed(a),
        "header": _header(a.get("header")), "memo": _memo(a.get("memo")),
    }


def _marker_recorded(reader: _Reader, a: Json) -> Json:
    name = str(a["markerName"])
    details = {key: _payloads(value) for key, value in (a.get("details") or {}).items()}
    if name == PATCH_MARKER:
        details = _patch_details(details)
    elif name == LOCAL_ACTIVITY_MARKER:
        details = _local_activity_details(details, reader.local_activity_seqs, _failure(a.get("failure")))
    return {"marker_name": name, "details": details, "workflow_task_completed_event_id": reader.task_completed(a)}


def _patch_details(details: dict[str, list[Json]]) -> dict[str, list[Json]]:
    """A patch marker's details as Kadence writes them: the patch id and whether it is deprecated, as JSON."""
    if "patch-data" in details:
        data = _json_of(details["patch-data"][0])
        patch_id, deprecated = str(data["id"]), bool(data.get("deprecated"))
    else:  # as cores before the JSON form wrote it: the id's bytes, and one byte for deprecated
        patch_id, deprecated = details["patch_id"][0]["data"].decode(), details["deprecated"][0]["data"][:1] not in (b"", b"\x00")
    return {"patch_id": [_json_payload(patch_id)], "deprecated": [_json_payload(deprecated)]}


def _local_activity_seq(event_id: int, attrs: Json) -> int:
    """The seq a local activity marker's `data` gives its activity."""
    try:
        return int(_json_of(_payloads(attrs["details"]["data"])[0])["seq"])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise TemporalHistoryError(f"event {event_id} (MarkerRecorded {LOCAL_ACTIVITY_MARKER}) has no seq in its data: {exc!r}") from exc


def _local_activity_details(details: dict[str, list[Json]], seqs: Mapping[int, int], failure: Json | None) -> dict[str, list[Json]]:
    """A local activity marker's details as Kadence writes them: seq (Kadence's), type, and the result or failure."""
    data = _json_of(details["data"][0])
    kadence = {"seq": [_json_payload(seqs[int(data["seq"])])], "activity_type": [_json_payload(str(data["activity_type"]))]}
    if failure is None:
        return {**kadence, "result": details.get("result") or [_json_payload(None)]}
    # temporalio records the ActivityError, caused by the activity's own error; Kadence keeps the latter and the retry state.
    info = failure.get("activity_failure_info") or {}
    cause = failure["cause"] if info and failure.get("cause") else failure
    recorded = {"message": cause["message"], "type": cause.get("type", ""), "non_retryable": bool(cause.get("non_retryable")),
                "retry_state": info.get("retry_state") or "NON_RETRYABLE_FAILURE"}
    return {**kadence, "failure": [_json_payload(recorded)]}


def _start_child_workflow_execution_initiated(reader: _Reader, a: Json) -> Json:
    return {
        "workflow_id": str(a["workflowId"]), "workflow_type": _name(a.get("workflowType")), "task_queue": _name(a.get("taskQueue")),
        "input": _payloads(a.get("input")), "workflow_execution_timeout_ms": _ms(a.get("workflowExecutionTimeout")),
        "workflow_run_timeout_ms": _ms(a.get("workflowRunTimeout")), "workflow_task_timeout_ms": _ms(a.get("workflowTaskTimeout")),
        "id_reuse_policy": _enum(a.get("workflowIdReusePolicy"), "WORKFLOW_ID_REUSE_POLICY_", "ALLOW_DUPLICATE"),
        "parent_close_policy": _enum(a.get("parentClosePolicy"), "PARENT_CLOSE_POLICY_", "TERMINATE"),
        "search_attributes": _search_attributes(a.get("searchAttributes")), "workflow_task_completed_event_id": reader.task_completed(a),
        "header": _header(a.get("header")), "memo": _memo(a.get("memo")),
    }


def _start_child_workflow_execution_failed(reader: _Reader, a: Json) -> Json:
    return {"workflow_id": str(a["workflowId"]), "workflow_type": _name(a.get("workflowType")),
            "cause": _enum(a.get("cause"), "START_CHILD_WORKFLOW_EXECUTION_FAILED_CAUSE_", "WORKFLOW_ALREADY_EXISTS"),
            "initiated_event_id": _int(a["initiatedEventId"])}


def _child(a: Json) -> Json:
    """What every child workflow event after its start says: which child, and the events of its start."""
    workflow_id, run_id = _execution(a)
    child = {"workflow_id": workflow_id, "run_id": run_id, "workflow_type": _name(a.get("workflowType")),
             "initiated_event_id": _int(a["initiatedEventId"])}
    if "startedEventId" in a:
        child["started_event_id"] = _int(a["startedEventId"])
    return child


def _child_workflow_execution_started(reader: _Reader, a: Json) -> Json:
    return _child(a)


def _child_workflow_execution_completed(reader: _Reader, a: Json) -> Json:
    return {**_child(a), "result": _first_payload(a.get("result"))}


def _child_workflow_execution_failed(reader: _Reader, a: Json) -> Json:
    return {**_child(a), "failure": _failure(a.get("failure")) or {"message": ""},
            "retry_state": _enum(a.get("retryState"), "RETRY_STATE_", "RETRY_POLICY_NOT_SET")}


def _child_workflow_execution_canceled(reader: _Reader, a: Json) -> Json:
    return {**_child(a), "details": _payloads(a.get("details"))}


def _child_workflow_execution_timed_out(reader: _Reader, a: Json) -> Json:
    return {**_child(a), "retry_state": _enum(a.get("retryState"), "RETRY_STATE_", "TIMEOUT")}


def _child_workflow_execution_terminated(reader: _Reader, a: Json) -> Json:
    return _child(a)


def _signal_external_workflow_execution_initiated(reader: _Reader, a: Json) -> Json:
    workflow_id, run_id = _execution(a)
    return {"workflow_id": workflow_id, "run_id": run_id, "signal_name": str(a["signalName"]), "input": _payloads(a.get("input")),
            "child_workflow_only": bool(a.get("childWorkflowOnly")), "workflow_task_completed_event_id": reader.task_completed(a),
            "header": _header(a.get("header"))}


def _external_request_failed(prefix: str) -> Callable[[_Reader, Json], Json]:
    """A SignalExternalWorkflowExecutionFailed or RequestCancelExternalWorkflowExecutionFailed (its cause's enum prefix)."""
    def convert(reader: _Reader, a: Json) -> Json:
        workflow_id, run_id = _execution(a)
        cause = _enum(a.get("cause"), prefix, "EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND")
        return {"workflow_id": workflow_id, "run_id": run_id, "cause": cause, "initiated_event_id": _int(a["initiatedEventId"])}
    return convert


def _external_request_applied(reader: _Reader, a: Json) -> Json:
    """An ExternalWorkflowExecutionSignaled or ExternalWorkflowExecutionCancelRequested."""
    workflow_id, run_id = _execution(a)
    return {"workflow_id": workflow_id, "run_id": run_id, "initiated_event_id": _int(a["initiatedEventId"])}


def _request_cancel_external_workflow_execution_initiated(reader: _Reader, a: Json) -> Json:
    workflow_id, run_id = _execution(a)
    return {"workflow_id": workflow_id, "run_id": run_id, "child_workflow_only": bool(a.get("childWorkflowOnly")),
            "reason": str(a.get("reason") or ""), "workflow_task_completed_event_id": reader.task_completed(a)}


def _upsert_workflow_search_attributes(reader: _Reader, a: Json) -> Json:
    return {"search_attributes": _search_attributes(a.get("searchAttributes")),
            "workflow_task_completed_event_id": reader.task_completed(a)}


def _workflow_properties_modified(reader: _Reader, a: Json) -> Json:
    """temporalio's upsert_memo: a removed key's value is the null payload in both."""
    return {"upserted_memo": _memo(a.get("upsertedMemo")), "workflow_task_completed_event_id": reader.task_completed(a)}


def _workflow_execution_update_admitted(reader: _Reader, a: Json) -> Json:
    request = a.get("request") or {}
    return _admission({"acceptedRequest": request}, _update_id(a))


def _workflow_execution_update_accepted(reader: _Reader, a: Json) -> Json:
    return {"update_id": _update_id(a), "workflow_task_completed_event_id": reader.task_completed(a)}


def _workflow_execution_update_completed(reader: _Reader, a: Json) -> Json:
    outcome = a.get("outcome") or {}
    return {"update_id": _update_id(a), "result": _first_payload(outcome.get("success")), "failure": _failure(outcome.get("failure")),
            "workflow_task_completed_event_id": reader.task_completed(a)}


def _nexus_operation_scheduled(reader: _Reader, a: Json) -> Json:
    return {"endpoint": str(a.get("endpoint") or ""), "service": str(a.get("service") or ""), "operation": str(a.get("operation") or ""),
            "input": _payload(a["input"]) if a.get("input") else None,
            "schedule_to_close_timeout_ms": _ms(a.get("scheduleToCloseTimeout")), "nexus_header": dict(a.get("nexusHeader") or {}),
            "workflow_task_completed_event_id": reader.task_completed(a), "request_id": str(a.get("requestId") or ""), "task_queue": ""}


def _nexus_operation(a: Json) -> Json:
    return {"scheduled_event_id": _int(a["scheduledEventId"]), "request_id": str(a.get("requestId") or "")}


def _nexus_operation_started(reader: _Reader, a: Json) -> Json:
    return {**_nexus_operation(a), "operation_token": str(a.get("operationToken") or a.get("operationId") or "")}


def _nexus_operation_completed(reader: _Reader, a: Json) -> Json:
    return {**_nexus_operation(a), "result": _payload(a["result"]) if a.get("result") else None}


def _nexus_operation_ended(reader: _Reader, a: Json) -> Json:
    """A NexusOperationFailed, Canceled or TimedOut."""
    return {**_nexus_operation(a), "failure": _failure(a.get("failure")) or {"message": ""}}


def _nexus_operation_cancel_requested(reader: _Reader, a: Json) -> Json:
    return {"scheduled_event_id": _int(a["scheduledEventId"]), "workflow_task_completed_event_id": reader.task_completed(a)}


# Each Temporal event type Kadence reads, and how its attributes become Kadence's.
_CONVERT: dict[str, Callable[[_Reader, Json], Json]] = {
    EventType.WorkflowExecutionStarted: _workflow_execution_started,
    EventType.WorkflowExecutionSignaled: _workflow_execution_signaled,
    EventType.WorkflowExecutionCancelRequested: _workflow_execution_cancel_requested,
    EventType.WorkflowTaskScheduled: _workflow_task_scheduled,
    EventType.WorkflowTaskStarted: _workflow_task_started,
    EventType.WorkflowTaskCompleted: _workflow_task_completed,
    EventType.WorkflowTaskFailed: _workflow_task_failed,
    EventType.WorkflowTaskTimedOut: _workflow_task_timed_out,
    EventType.ActivityTaskScheduled: _activity_task_scheduled,
    EventType.ActivityTaskStarted: _activity_task_started,
    EventType.ActivityTaskCompleted: _activity_task_completed,
    EventType.ActivityTaskFailed: _activity_task_failed,
    EventType.ActivityTaskTimedOut: _activity_task_failed,
    EventType.ActivityTaskCancelRequested: _activity_task_cancel_requested,
    EventType.ActivityTaskCanceled: _activity_task_canceled,
    EventType.WorkflowExecutionCompleted: _workflow_execution_completed,
    EventType.WorkflowExecutionFailed: _workflow_execution_failed,
    EventType.UpsertWorkflowSearchAttributes: _upsert_workflow_search_attributes,
    EventType.WorkflowPropertiesModified: _workflow_properties_modified,
    EventType.TimerStarted: _timer_started,
    EventType.TimerFired: _timer_fired,
    EventType.TimerCanceled: _timer_canceled,
    EventType.WorkflowExecutionCanceled: _workflow_execution_canceled,
    EventType.WorkflowExecutionTerminated: _workflow_execution_terminated,
    EventType.WorkflowExecutionTimedOut: _workflow_execution_timed_out,
    EventType.WorkflowExecutionContinuedAsNew: _workflow_execution_continued_as_new,
    EventType.MarkerRecorded: _marker_recorded,
    EventType.StartChildWorkflowExecutionInitiated: _start_child_workflow_execution_initiated,
    EventType.StartChildWorkflowExecutionFailed: _start_child_workflow_execution_failed,
    EventType.ChildWorkflowExecutionStarted: _child_workflow_execution_started,
    EventType.ChildWorkflowExecutionCompleted: _child_workflow_execution_completed,
    EventType.ChildWorkflowExecutionFailed: _child_workflow_execution_failed,
    EventType.ChildWorkflowExecutionCanceled: _child_workflow_execution_canceled,
    EventType.ChildWorkflowExecutionTimedOut: _child_workflow_execution_timed_out,
    EventType.ChildWorkflowExecutionTerminated: _child_workflow_execution_terminated,
    EventType.SignalExternalWorkflowExecutionInitiated: _signal_external_workflow_execution_initiated,
    EventType.SignalExternalWorkflowExecutionFailed: _external_request_failed("SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE_"),
    EventType.ExternalWorkflowExecutionSignaled: _external_request_applied,
    EventType.RequestCancelExternalWorkflowExecutionInitiated: _request_cancel_external_workflow_execution_initiated,
    EventType.RequestCancelExternalWorkflowExecutionFailed: _external_request_failed("CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED_CAUSE_"),
    EventType.ExternalWorkflowExecutionCancelRequested: _external_request_applied,
    EventType.WorkflowExecutionUpdateAdmitted: _workflow_execution_update_admitted,
    EventType.WorkflowExecutionUpdateAccepted: _workflow_execution_update_accepted,
    EventType.WorkflowExecutionUpdateCompleted: _workflow_execution_update_completed,
    EventType.NexusOperationScheduled: _nexus_operation_scheduled,
    EventType.NexusOperationStarted: _nexus_operation_started,
    EventType.NexusOperationCompleted: _nexus_operation_completed,
    EventType.NexusOperationFailed: _nexus_operation_ended,
    EventType.NexusOperationCanceled: _nexus_operation_ended,
    EventType.NexusOperationTimedOut: _nexus_operation_ended,
    EventType.NexusOperationCancelRequested: _nexus_operation_cancel_requested,
}
