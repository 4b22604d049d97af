"""Histories in Temporal's JSON format (tests/temporal_histories: the proto3 JSON of
temporal.api.history.v1.History a Temporal server returns for the workflows of
tests/temporal_histories/workflows.py) read with `WorkflowHistory.from_json(workflow_id, history)`
and replayed with the Replayer, offline: each replays, and the workflow code returns what the
history recorded; code changed to decide otherwise fails with NondeterminismError; an event type
Kadence has no counterpart for is refused by name."""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kadence import workflow
from kadence._temporal_history import TemporalHistoryError, events_from_temporal
from kadence.client import WorkflowHistory
from kadence.converter import DataConverter
from kadence.protocol.names import EventType
from kadence.worker import (
    ExecuteWorkflowInput,
    Interceptor,
    Replayer,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)
from tests.temporal_histories.workflows import TEMPORAL_WORKFLOWS
from tests.workflows import always_fail, echo

REPO = Path(__file__).resolve().parents[1]
TEMPORAL = REPO / "tests" / "temporal_histories"
HISTORIES = sorted(TEMPORAL.glob("*.json"))
CLOSE_WITH_RESULT = {EventType.WorkflowExecutionCompleted}


def raw(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((TEMPORAL / name).read_text())
    return loaded


def load(path: Path) -> WorkflowHistory:
    """As temporalio's from_json: the workflow id given (here the one the start recorded), the history as JSON text."""
    text = path.read_text()
    workflow_id = json.loads(text)["events"][0]["workflowExecutionStartedEventAttributes"]["workflowId"]
    return WorkflowHistory.from_json(workflow_id, text)


class ResultsInterceptor(Interceptor):
    """Keeps what each replayed run's workflow code returned, by workflow id."""

    def __init__(self) -> None:
        self.results: dict[str, Any] = {}

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        results = self.results

        class KeepResult(WorkflowInboundInterceptor):
            async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
                results[workflow.info().workflow_id] = result = await super().execute_workflow(input)
                return result

        return KeepResult


def test_the_histories_cover_the_event_types_temporal_samples_record_in_both_enum_forms() -> None:
    found = {_short(e["eventType"]) for path in HISTORIES for e in json.loads(path.read_text())["events"]}
    assert found >= {
        "WorkflowExecutionStarted", "WorkflowExecutionCompleted", "WorkflowExecutionFailed", "WorkflowExecutionContinuedAsNew",
        "WorkflowExecutionCanceled", "WorkflowExecutionTerminated", "WorkflowExecutionCancelRequested", "WorkflowExecutionSignaled",
        "WorkflowTaskScheduled", "WorkflowTaskStarted", "WorkflowTaskCompleted", "WorkflowTaskFailed", "WorkflowTaskTimedOut",
        "ActivityTaskScheduled", "ActivityTaskStarted", "ActivityTaskCompleted", "ActivityTaskFailed", "ActivityTaskTimedOut",
        "ActivityTaskCancelRequested", "ActivityTaskCanceled", "TimerStarted", "TimerFired", "TimerCanceled", "MarkerRecorded",
        "StartChildWorkflowExecutionInitiated", "ChildWorkflowExecutionStarted", "ChildWorkflowExecutionCompleted",
        "ChildWorkflowExecutionFailed", "SignalExternalWorkflowExecutionInitiated", "ExternalWorkflowExecutionSignaled",
        "UpsertWorkflowSearchAttributes", "WorkflowExecutionUpdateAccepted", "WorkflowExecutionUpdateCompleted",
    }
    forms = {path.name: json.loads(path.read_text())["events"][0]["eventType"].startswith("EVENT_TYPE_") for path in HISTORIES}
    assert set(forms.values()) == {True, False}, forms


@pytest.mark.parametrize("path", HISTORIES, ids=lambda path: path.stem)
async def test_the_temporal_history_replays_and_the_code_returns_what_it_recorded(path: Path) -> None:
    history = load(path)
    kept = ResultsInterceptor()
    result = await Replayer(workflows=TEMPORAL_WORKFLOWS, interceptors=[kept]).replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"
    close_type, close = history.events[-1]["attributes"]
    if close_type in CLOSE_WITH_RESULT:
        assert kept.results[history.workflow_id] == DataConverter.default.payload_converter.from_payload(close["result"])


def test_temporal_events_read_as_kadence_records() -> None:
    events = {e["event_id"]: e for e in events_from_temporal(raw("activity_outcomes.json"))}
    assert events[2]["event_time_ms"] == 1795165200007  # 2026-11-20T09:00:00.007000123Z: below the millisecond dropped
    kind, started = events[1]["attributes"]
    assert (kind, started["workflow_type"], started["task_queue"], started["workflow_task_timeout_ms"]) == (
        "WorkflowExecutionStarted", "ActivityOutcomesWorkflow", "greetings", 10_000)
    assert started["input"] == [{"metadata": {"encoding": b"json/plain"}, "data": b'"ada"'}]
    assert events[4]["attributes"][1]["cause"] == "WORKFLOW_WORKER_UNHANDLED_FAILURE"
    assert events[7]["attributes"] == (
        "WorkflowTaskTimedOut", {"scheduled_event_id": 5, "started_event_id": 6, "timeout_type": "START_TO_CLOSE"})
    scheduled = events[17]["attributes"][1]
    assert scheduled["retry_policy"] == {"initial_interval_ms": 1000, "backoff_coefficient": 2.0, "maximum_interval_ms": 100_000,
                                         "maximum_attempts": 2, "non_retryable_error_types": []}
    kind, failed = events[19]["attributes"]
    assert (kind, failed["retry_state"], failed["failure"]["type"], failed["failure"]["message"]) == (
        "ActivityTaskFailed", "MAXIMUM_ATTEMPTS_REACHED", "Declined", "payment declined for ada")
    kind, timed_out = events[25]["attributes"]
    assert (kind, timed_out["failure"]["timeout_type"], timed_out["retry_state"]) == ("ActivityTaskTimedOut", "START_TO_CLOSE",
                                                                                      "MAXIMUM_ATTEMPTS_REACHED")


def test_an_accepted_update_is_admitted_before_its_workflow_task_and_the_events_renumbered() -> None:
    temporal = raw("updatable_cart.json")["events"]
    events = events_from_temporal({"events": temporal})
    assert len(events) == len(temporal) + 3  # one admission per update
    assert [e["event_id"] for e in events] == list(range(1, len(events) + 1))
    kinds = [e["attributes"][0] for e in events]
    first = kinds.index(EventType.WorkflowExecutionUpdateAdmitted)
    assert kinds[first:first + 5] == [
        EventType.WorkflowExecutionUpdateAdmitted, EventType.WorkflowTaskScheduled, EventType.WorkflowTaskStarted,
        EventType.WorkflowTaskCompleted, EventType.WorkflowExecutionUpdateAccepted,
    ]
    admitted = events[first]["attributes"][1]
    assert (admitted["update_id"], admitted["name"], admitted["args"]) == ("add-apple", "add_item", [
        {"metadata": {"encoding": b"json/plain"}, "data": b'"apple"'}])
    by_id = {e["event_id"]: e["attributes"] for e in events}
    for event in events:  # every id an event names is of the event it meant, after the renumbering
        attrs = event["attributes"][1]
        if "scheduled_event_id" in attrs and event["attributes"][0].startswith("WorkflowTask"):
            assert by_id[attrs["scheduled_event_id"]][0] == EventType.WorkflowTaskScheduled
        if "workflow_task_completed_event_id" in attrs:
            assert by_id[attrs["workflow_task_completed_event_id"]][0] == EventType.WorkflowTaskCompleted
        if event["attributes"][0] == EventType.ActivityTaskCompleted:
            assert by_id[attrs["scheduled_event_id"]][0] == EventType.ActivityTaskScheduled
            assert by_id[attrs["started_event_id"]][0] == EventType.ActivityTaskStarted


def test_patch_and_local_activity_markers_read_as_kadence_writes_them() -> None:
    events = events_from_temporal(raw("patched_greeting.json"))
    markers = [e["attributes"][1] for e in events if e["attributes"][0] == EventType.MarkerRecorded]
    payloads = DataConverter.default.payload_converter

    def details(marker: dict[str, Any]) -> dict[str, Any]:
        return {key: payloads.from_payload(values[0]) for key, values in marker["details"].items()}

    assert [(m["marker_name"], details(m)) for m in markers] == [
        ("core_patch", {"patch_id": "local-greeting", "deprecated": False}),
        ("core_local_activity", {"seq": 1, "activity_type": "echo", "result": "hi ada"}),
        ("core_patch", {"patch_id": "old-fix", "deprecated": True}),  # the older form: raw bytes
        ("core_local_activity", {"seq": 2, "activity_type": "always_fail", "failure": {
            "message": "payment declined for ada", "type": "Declined", "non_retryable": False, "retry_state": "NON_RETRYABLE_FAILURE"}}),
    ]
    # temporalio's TemporalChangeVersion upsert beside the patch is the SDK's, not the code's: left out.
    assert EventType.UpsertWorkflowSearchAttributes not in [e["attributes"][0] for e in events]


async def test_local_activities_are_counted_among_local_activities_only() -> None:
    """temporalio numbers local activities in one sequence with activities (say 3 and 7 after
    activities 1, 2, 4 ...); Kadence counts local activities alone, so their markers read 1 and 2."""
    history = copy.deepcopy(raw("patched_greeting.json"))
    for event, seq in zip([e for e in history["events"] if e.get("markerRecordedEventAttributes", {}).get("markerName")
                           == "core_local_activity"], (3, 7), strict=True):
        data = event["markerRecordedEventAttributes"]["details"]["data"]["payloads"][0]
        data["data"] = base64.b64encode(json.dumps({**json.loads(base64.b64decode(data["data"])), "seq": seq}).encode()).decode()
    replayed = WorkflowHistory.from_json("patched-greeting", history)
    seqs = [DataConverter.default.payload_converter.from_payload(attrs["details"]["seq"][0])
            for kind, attrs in (e["attributes"] for e in replayed.events) if kind == EventType.MarkerRecorded and "seq" in attrs["details"]]
    assert seqs == [1, 2]
    assert (await Replayer(workflows=TEMPORAL_WORKFLOWS).replay_workflow(replayed)).replay_failure is None


@workflow.defn(name="ActivityOutcomesWorkflow")
class ActivityOutcomesWorkflowChargingFirst:
    @workflow.run
    async def run(self, name: str) -> str:
        return str(await workflow.execute_activity(always_fail, name, start_to_close_timeout=timedelta(seconds=10)))


@workflow.defn(name="PatchedGreetingWorkflow")
class PatchedGreetingWorkflowWithoutItsPatch:
    @workflow.run
    async def run(self, name: str) -> str:
        return str(await workflow.execute_local_activity(echo, f"hi {name}", start_to_close_timeout=timedelta(seconds=5)))


@workflow.defn(name="UpdatableCartWorkflow")
class UpdatableCartWorkflowWithoutTheActivity:
    def __init__(self) -> None:
        self.items: list[str] = []

    @workflow.update
    def add_item(self, item: str) -> int:
        self.items.append(item)
        return len(self.items)

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.wait_condition(lambda: False)
        return self.items


@pytest.mark.parametrize(("history", "changed", "divergence"), [
    pytest.param("activity_outcomes", ActivityOutcomesWorkflowChargingFirst,
                 "ActivityTaskScheduled echo where the workflow code issued ScheduleActivityTask always_fail", id="another activity"),
    pytest.param("patched_greeting", PatchedGreetingWorkflowWithoutItsPatch,
                 "MarkerRecorded core_patch where the workflow code issued RecordMarker core_local_activity", id="a patch removed"),
    pytest.param("updatable_cart", UpdatableCartWorkflowWithoutTheActivity,
                 "ActivityTaskScheduled echo where the workflow code issued CompleteWorkflowUpdate add-apple",
                 id="an update handler changed"),
])
async def test_workflow_code_that_decides_otherwise_fails_the_temporal_replay(history: str, changed: type, divergence: str) -> None:
    with pytest.raises(workflow.NondeterminismError, match=divergence):
        await Replayer(workflows=[changed]).replay_workflow(load(TEMPORAL / f"{history}.json"))


@workflow.defn(name="MemoNotesWorkflow")
class TemporalMemoNotesWorkflow:
    @workflow.run
    async def run(self) -> dict[str, Any]:
        owner = workflow.memo_value("owner", type_hint=str)
        workflow.upsert_memo({"stage": "done", "owner": None})
        return {"owner": owner, "memo": dict(workflow.memo())}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _json_payload(value: Any) -> dict[str, Any]:
    return {"metadata": {"encoding": _b64(b"json/plain")}, "data": _b64(json.dumps(value).encode())}


def _memo_history() -> dict[str, Any]:
    """What temporalio records for TemporalMemoNotesWorkflow started with memo={"owner": "ada"}:
    its upsert_memo is a WorkflowPropertiesModified, the removed key's value the null payload."""
    time = "2026-11-20T09:05:00.{:03d}Z"
    return {"events": [
        {"eventId": "1", "eventTime": time.format(0), "eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED",
         "workflowExecutionStartedEventAttributes": {
             "workflowType": {"name": "MemoNotesWorkflow"}, "taskQueue": {"name": "notes"}, "workflowTaskTimeout": "10s",
             "originalExecutionRunId": "5c1d2e3f-0000-4000-8000-00000000memo", "workflowId": "memo-notes",
             "memo": {"fields": {"owner": _json_payload("ada")}}}},
        {"eventId": "2", "eventTime": time.format(1), "eventType": "EVENT_TYPE_WORKFLOW_TASK_SCHEDULED",
         "workflowTaskScheduledEventAttributes": {"taskQueue": {"name": "notes"}, "startToCloseTimeout": "10s", "attempt": 1}},
        {"eventId": "3", "eventTime": time.format(2), "eventType": "EVENT_TYPE_WORKFLOW_TASK_STARTED",
         "workflowTaskStartedEventAttributes": {"scheduledEventId": "2", "identity": "1@worker"}},
        {"eventId": "4", "eventTime": time.format(3), "eventType": "EVENT_TYPE_WORKFLOW_TASK_COMPLETED",
         "workflowTaskCompletedEventAttributes": {"scheduledEventId": "2", "startedEventId": "3", "identity": "1@worker"}},
        {"eventId": "5", "eventTime": time.format(4), "eventType": "EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED",
         "workflowPropertiesModifiedEventAttributes": {"workflowTaskCompletedEventId": "4", "upsertedMemo": {"fields": {
             "stage": _json_payload("done"), "owner": {"metadata": {"encoding": _b64(b"binary/null")}}}}}},
        {"eventId": "6", "eventTime": time.format(5), "eventType": "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED",
         "workflowExecutionCompletedEventAttributes": {"workflowTaskCompletedEventId": "4", "result": {"payloads": [
             _json_payload({"owner": "ada", "memo": {"stage": "done"}})]}}},
    ]}


async def test_temporal_memo_fields_and_workflow_properties_modified_read_and_replay() -> None:
    events = events_from_temporal(_memo_history())
    started = events[0]["attributes"][1]
    assert started["memo"] == {"owner": {"metadata": {"encoding": b"json/plain"}, "data": b'"ada"'}}
    assert events[4]["attributes"] == (EventType.WorkflowPropertiesModified, {
        "upserted_memo": {"stage": {"metadata": {"encoding": b"json/plain"}, "data": b'"done"'},
                          "owner": {"metadata": {"encoding": b"binary/null"}, "data": b""}},
        "workflow_task_completed_event_id": 4})
    kept = ResultsInterceptor()
    history = WorkflowHistory.from_json(_memo_history())
    result = await Replayer(workflows=[TemporalMemoNotesWorkflow], interceptors=[kept]).replay_workflow(history)
    assert result.replay_failure is None
    assert kept.results["memo-notes"] == {"owner": "ada", "memo": {"stage": "done"}}


def test_an_event_type_kadence_has_no_counterpart_for_is_refused_by_name() -> None:
    history = copy.deepcopy(raw("signals_and_timers.json"))
    event = history["events"][5]
    event.clear()
    event.update(eventId="6", eventTime="2026-11-20T09:05:01Z", eventType="EVENT_TYPE_NEXUS_OPERATION_CANCEL_REQUEST_COMPLETED",
                 nexusOperationCancelRequestCompletedEventAttributes={"scheduledEventId": "5"})
    with pytest.raises(TemporalHistoryError, match="event 6 is a NexusOperationCancelRequestCompleted, which Kadence has no counterpart"):
        WorkflowHistory.from_json("greeting-signals", history)


def test_a_temporal_event_missing_what_kadence_needs_is_refused_with_its_id() -> None:
    history = copy.deepcopy(raw("activity_outcomes.json"))
    del history["events"][10]["activityTaskScheduledEventAttributes"]["activityType"]
    with pytest.raises(TemporalHistoryError, match=r"event 11 \(ActivityTaskScheduled\) cannot be read: KeyError: 'activityType'"):
        WorkflowHistory.from_json("activity-outcomes", history)


def test_from_json_reads_kadence_exports_and_temporal_histories_apart() -> None:
    temporal = load(TEMPORAL / "continue_as_new.json")
    assert (temporal.workflow_id, temporal.run_id) == ("countdown", "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c07")
    exported = temporal.to_json()
    assert WorkflowHistory.from_json(exported) == temporal  # Kadence's export, alone
    assert WorkflowHistory.from_json("countdown", json.dumps(exported)) == temporal  # or after its workflow id, as JSON text
    assert WorkflowHistory.from_json(raw("continue_as_new.json")) == temporal  # its start records the workflow id
    older = raw("continue_as_new.json")
    del older["events"][0]["workflowExecutionStartedEventAttributes"]["workflowId"]  # as servers before it wrote
    with pytest.raises(ValueError, match="does not record its workflow id"):
        WorkflowHistory.from_json(older)
    assert WorkflowHistory.from_json("countdown", older) == temporal


def test_kadence_history_replay_reads_temporal_histories(tmp_path: Path) -> None:
    changed = tmp_path / "changed_cart.py"
    changed.write_text("from tests.test_temporal_replay import UpdatableCartWorkflowWithoutTheActivity\n")
    unreadable = tmp_path / "nexus.json"
    history = raw("signals_and_timers.json")
    history["events"][5] = {"eventId": "6", "eventTime": "2026-11-20T09:05:01Z", "eventType": "NexusOperationCancelRequestCompleted"}
    unreadable.write_text(json.dumps(history))

    def replay(module: str, *files: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "kadence.ops.cli", "history", "replay", *map(str, files), "--worker-module", module],
                              cwd=REPO, env={**os.environ, "PYTHONPATH": f"{tmp_path}:{REPO}"}, capture_output=True, text=True, timeout=120)

    replayed = replay("tests.temporal_histories.workflows", *HISTORIES)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert [line.split()[0] for line in replayed.stdout.splitlines()] == ["ok"] * len(HISTORIES), replayed.stdout
    diverged = replay("changed_cart", TEMPORAL / "updatable_cart.json")
    assert diverged.returncode == 1 and "FAILED" in diverged.stdout and "NondeterminismError" in diverged.stdout, diverged.stdout
    refused = replay("tests.temporal_histories.workflows", unreadable)
    assert refused.returncode == 1 and "event 6 is a NexusOperationCancelRequestCompleted" in refused.stderr, refused.stderr


def _short(event_type: str) -> str:
    return "".join(word.capitalize() for word in event_type.removeprefix("EVENT_TYPE_").split("_")) if "_" in event_type else event_type
