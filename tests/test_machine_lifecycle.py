"""The execution lifecycle (services/history/machine/lifecycle.py): starts, id policies, closes,
continue-as-new, terminations, and the history and record limits that end a run."""

from __future__ import annotations

import pytest

from services.history.machine import activity, limits
from services.history.machine.dispatch import decide
from services.history.machine.effects import TASK_REDISPATCH_MS
from services.history.machine.lifecycle import decide_signal_with_start, decide_start, decide_update_with_start
from services.history.machine.transition import Rejected
from services.history.partition import PartitionState
from tests.machine_steps import (
    BIG,
    LARGE,
    NOW,
    START,
    apply,
    command,
    complete_first_workflow_task,
    schedule_activities,
    started_workflow,
)


def test_start_writes_started_and_a_workflow_task_with_its_dispatch() -> None:
    state, run_id = started_workflow()
    ex = state.executions["order-1"]
    assert [e["attributes"][0] for e in ex.history] == ["WorkflowExecutionStarted", "WorkflowTaskScheduled"]
    assert ex.next_event_id == 3 and ex.workflow_task is not None
    with pytest.raises(Rejected, match="already started"):
        decide_start(ex, "order-1", START, "", NOW, 0, 9)


def test_a_repeated_start_request_is_answered_with_the_running_run() -> None:
    state, run_id = started_workflow()
    ex = state.executions["order-1"]
    again = START
    with pytest.raises(Rejected) as rejected:
        decide_start(ex, "order-1", {**again, "request_id": "other-request"}, "client", NOW, 0, 7)
    assert rejected.value.cause == "WORKFLOW_ALREADY_STARTED"
    ex.start_request_id = "request-1"
    retried = decide_start(ex, "order-1", {**again, "request_id": "request-1"}, "client", NOW, 0, 8)
    assert retried.events == [] and retried.batch(0, 8)["run_id"] == run_id


@pytest.mark.parametrize(("policy", "after", "allowed"), [
    ("ALLOW_DUPLICATE", "Completed", True),
    ("ALLOW_DUPLICATE_FAILED_ONLY", "Completed", False),
    ("ALLOW_DUPLICATE_FAILED_ONLY", "Terminated", True),
    ("REJECT_DUPLICATE", "Terminated", False),
])
def test_id_reuse_policy_decides_whether_a_closed_id_starts_again(policy: str, after: str, allowed: bool) -> None:
    state, run_id = started_workflow()
    if after == "Completed":
        complete_first_workflow_task(state, run_id)
    else:
        command(state, "TerminateWorkflowExecution", {"run_id": "", "reason": "test", "details": [], "request_id": ""}, 1)
    closed = state.executions["order-1"]
    assert closed.status == after
    start = {**START, "id_reuse_policy": policy}
    if allowed:
        assert decide_start(closed, "order-1", start, "client", NOW, 0, 5).execution.run_id != run_id
    else:
        with pytest.raises(Rejected, match=policy):
            decide_start(closed, "order-1", start, "client", NOW, 0, 5)


def test_use_existing_answers_a_start_with_the_running_run() -> None:
    state, run_id = started_workflow()
    running = state.executions["order-1"]
    answer = decide_start(running, "order-1", {**START, "id_conflict_policy": "USE_EXISTING"}, "client", NOW, 0, 3)
    assert answer.events == [] and answer.batch(0, 3)["run_id"] == run_id


def test_run_timeout_closes_the_run_and_drops_its_pending_work() -> None:
    state = PartitionState(0)
    start = apply(state, decide_start(None, "order-1", {**START, "run_timeout_ms": 5000}, "client", NOW, 0, 0), 0)
    assert [(k, e["kind"], e["fire_at_ms"]) for k, e in start["effects"] if k == "Timer"] == [
        ("Timer", "WORKFLOW_RUN_TIMEOUT", NOW + 5000), ("Timer", "WORKFLOW_TASK_RETRY", NOW + TASK_REDISPATCH_MS),
    ]
    run_id = start["run_id"]
    schedule_activities(state, run_id)
    timed_out = command(state, "TimeoutFired", {"run_id": run_id, "timer_id": "t", "kind": "WORKFLOW_RUN_TIMEOUT",
                                                "scheduled_event_id": 1, "attempt": 1}, 3)
    assert [e["attributes"][0] for e in timed_out["events"]] == ["WorkflowExecutionTimedOut"]
    assert state.executions["order-1"].status == "TimedOut" and not state.executions["order-1"].activities
    assert ("DropTimer", {"timer_id": f"{run_id}/ACTIVITY_START_TO_CLOSE/5/1"}) not in timed_out["effects"]  # never started


def test_oversized_payloads_and_names_get_a_clear_answer() -> None:
    with pytest.raises(Rejected, match="exceeds the 2 MB limit"):
        decide_start(None, "order-1", {**START, "input": [BIG]}, "client", NOW, 0, 0)
    with pytest.raises(Rejected, match="workflow_id is 1001 bytes in UTF-8"):
        decide_start(None, "x" * 1001, START, "client", NOW, 0, 0)
    state, run_id = started_workflow()
    ex = state.executions["order-1"]
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    failed = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("CompleteWorkflowExecution", {"result": BIG}),
    ]}, 2)
    kind, attrs = failed["events"][0]["attributes"]
    assert (kind, attrs["cause"]) == ("WorkflowTaskFailed", "BAD_COMPLETE_WORKFLOW_EXECUTION_ATTRIBUTES")
    assert ex.status == "Running"


def test_history_and_pending_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(activity, "MAX_PENDING_ACTIVITIES", 1)
    state, run_id = started_workflow()
    schedule_activities(state, run_id, count=2)
    ex = state.executions["order-1"]
    failed = [attrs for kind, attrs in (e["attributes"] for e in ex.history) if kind == "WorkflowTaskFailed"]
    assert [f["cause"] for f in failed] == ["PENDING_ACTIVITIES_LIMIT_EXCEEDED"]

    # With the history at its limit, a command that adds an event ends the run instead: the retried
    # (transient) task's start adds none, its completion adds its WorkflowTaskScheduled and Started.
    monkeypatch.setattr(limits, "MAX_HISTORY_EVENTS", ex.next_event_id - 1)
    assert ex.workflow_task is not None and ex.workflow_task.transient
    retried = {"run_id": run_id, "scheduled_event_id": ex.workflow_task.scheduled_event_id, "attempt": 2}
    assert command(state, "RecordWorkflowTaskStarted", retried, 3)["events"] == []
    ended = command(state, "RespondWorkflowTaskCompleted", {**retried, "commands": []}, 4)
    assert [e["attributes"][0] for e in ended["events"]] == ["WorkflowTaskScheduled", "WorkflowTaskStarted", "WorkflowExecutionTerminated"]
    kind, attrs = ended["events"][-1]["attributes"]
    assert ex.status == "Terminated" and "event limit" in attrs["reason"]


def test_signal_with_start_signals_the_running_run_or_starts_one_with_the_signal_first() -> None:
    signal_with_start = {"start": START, "signal_name": "approve", "signal_input": []}
    started = decide_signal_with_start(None, "order-1", signal_with_start, "client", NOW, 0, 0)
    assert [e["attributes"][0] for e in started.events] == [
        "WorkflowExecutionStarted", "WorkflowExecutionSignaled", "WorkflowTaskScheduled",
    ]
    state, run_id = started_workflow()
    signaled = decide_signal_with_start(state.executions["order-1"], "order-1", signal_with_start, "client", NOW, 0, 1)
    assert signaled.execution.run_id == run_id
    assert [e["attributes"][0] for e in signaled.buffered] == ["WorkflowExecutionSignaled"]


def test_signal_with_start_sent_again_with_its_request_id_signals_once() -> None:
    """A retry, or a forward repeated after a restart of history, carries the same request id."""
    request = {"start": {**START, "request_id": "req-1"}, "signal_name": "approve", "signal_input": []}
    state = PartitionState(0)
    apply(state, decide_signal_with_start(None, "order-1", request, "client", NOW, 0, 0), 0)
    again = decide_signal_with_start(state.executions["order-1"], "order-1", request, "client", NOW, 0, 1)
    assert again.events == [] and again.buffered == [], "the request started the run with its signal already"
    other = {**request, "start": {**START, "request_id": "req-2"}}
    signaled = apply(state, decide_signal_with_start(state.executions["order-1"], "order-1", other, "client", NOW, 0, 2), 2)
    assert [e["attributes"][0] for e in signaled["buffered"]] == ["WorkflowExecutionSignaled"]
    repeated = decide_signal_with_start(state.executions["order-1"], "order-1", other, "client", NOW, 0, 3)
    assert repeated.events == [] and repeated.buffered == []


def test_update_with_start_starts_a_run_with_the_update_first_or_admits_it_per_the_conflict_policy() -> None:
    update = {"update_id": "u1", "name": "add", "args": [], "header": {}}
    request = {"start": {**START, "request_id": "req-1", "id_conflict_policy": "USE_EXISTING"}, "update": update}
    state = PartitionState(0)
    started = apply(state, decide_update_with_start(None, "order-1", request, "client", NOW, 0, 0), 0)
    assert [e["attributes"][0] for e in started["events"]] == [
        "WorkflowExecutionStarted", "WorkflowExecutionUpdateAdmitted", "WorkflowTaskScheduled",
    ]
    running = state.executions["order-1"]
    assert running.updates == {"u1": "admitted"}
    again = decide_update_with_start(running, "order-1", request, "client", NOW, 0, 1)
    assert again.repeat and again.events == [] and again.buffered == [], "the request started the run with its update already"

    second = {"start": {**request["start"], "request_id": "req-2"}, "update": {**update, "update_id": "u2"}}
    admitted = apply(state, decide_update_with_start(running, "order-1", second, "client", NOW, 0, 2), 2)
    assert admitted["run_id"] == started["run_id"] and admitted["next_run"] is None
    assert [e["attributes"][0] for e in admitted["buffered"]] == ["WorkflowExecutionUpdateAdmitted"]  # a workflow task is pending
    with pytest.raises(Rejected) as refused:
        decide_update_with_start(running, "order-1", {**second, "start": {**second["start"], "id_conflict_policy": "FAIL"}},
                                 "client", NOW, 0, 3)
    assert refused.value.cause == "WORKFLOW_ALREADY_STARTED"
    with pytest.raises(Rejected, match="no cron schedule nor start delay"):
        decide_update_with_start(None, "order-2", {**request, "start": {**request["start"], "start_delay_ms": 1000}}, "client", NOW, 0, 4)


def test_continue_as_new_carries_the_memo_as_upserted_unless_it_gives_one() -> None:
    def payload(value: bytes) -> dict[str, object]:
        return {"metadata": {"encoding": b"json/plain"}, "data": value}

    removed = {"metadata": {"encoding": b"binary/null"}, "data": b""}

    def continued(memo: dict[str, object] | None) -> dict[str, object]:
        state = PartitionState(0)
        start = {**START, "memo": {"owner": payload(b'"ada"'), "ticket": payload(b"42")}}
        run_id = apply(state, decide_start(None, "order-1", start, "client", NOW, 0, 0), 0)["run_id"]
        ex = state.executions["order-1"]
        apply(state, decide(ex, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, "worker", NOW), 1)
        batch = apply(state, decide(ex, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
            ("ModifyWorkflowProperties", {"upserted_memo": {"stage": payload(b'"2"'), "ticket": removed}}),
            ("ContinueAsNewWorkflowExecution", {"workflow_type": "", "task_queue": "", "input": [], "workflow_task_timeout_ms": 0,
                                                "run_timeout_ms": 0, "memo": memo}),
        ]}, "worker", NOW), 2)
        assert batch["events"][-2]["attributes"][0] == "WorkflowPropertiesModified"
        assert batch["events"][-1]["attributes"][1]["memo"] == batch["next_run"]["events"][0]["attributes"][1]["memo"]
        return batch["next_run"]["events"][0]["attributes"][1]["memo"]

    assert continued(None) == {"owner": payload(b'"ada"'), "stage": payload(b'"2"')}
    assert continued({"fresh": payload(b"1")}) == {"fresh": payload(b"1")}


def test_continue_as_new_closes_the_run_and_starts_the_next_in_one_record() -> None:
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    batch = command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("ContinueAsNewWorkflowExecution", {"workflow_type": "", "task_queue": "", "input": [], "workflow_task_timeout_ms": 0,
                                            "run_timeout_ms": 0}),
    ]}, 2)
    assert batch["events"][-1]["attributes"][0] == "WorkflowExecutionContinuedAsNew"
    following = batch["next_run"]
    assert [e["attributes"][0] for e in following["events"]] == ["WorkflowExecutionStarted", "WorkflowTaskScheduled"]
    current = state.executions["order-1"]
    assert current.run_id == following["run_id"] != run_id and current.status == "Running"
    assert current.workflow_task is not None and current.workflow_type == "OrderWorkflow"

    replayed, _ = started_workflow()
    command(replayed, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    replayed.apply(batch)
    assert replayed.executions["order-1"] == current


def test_a_continued_run_keeps_the_run_timeout_search_attributes_and_what_is_left_of_the_execution_timeout() -> None:
    """As Temporal: what the continue-as-new command leaves unset is the current run's."""
    state = PartitionState(0)
    color = {"metadata": {"encoding": b"json/plain"}, "data": b'"red"'}
    start = {**START, "run_timeout_ms": 60_000, "execution_timeout_ms": 600_000, "search_attributes": {"Color": color}}
    run_id = apply(state, decide_start(None, "order-1", start, "client", NOW, 0, 0), 0)["run_id"]
    ex = state.executions["order-1"]
    apply(state, decide(ex, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, "worker", NOW), 1)
    size = {"metadata": {"encoding": b"json/plain"}, "data": b'"XL"'}
    later = NOW + 100_000
    batch = apply(state, decide(ex, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("UpsertWorkflowSearchAttributes", {"search_attributes": {"Size": size}}),
        ("ContinueAsNewWorkflowExecution", {"workflow_type": "", "task_queue": "", "input": [], "workflow_task_timeout_ms": 0,
                                            "run_timeout_ms": 0}),
    ]}, "worker", later), 2)
    started = batch["next_run"]["events"][0]["attributes"][1]
    assert started["workflow_run_timeout_ms"] == 60_000
    assert started["workflow_execution_timeout_ms"] == 500_000
    assert started["search_attributes"] == {"Color": color, "Size": size}


def test_terminate_existing_ends_the_running_run_and_starts_the_new_one_in_one_record() -> None:
    state, run_id = started_workflow()
    running = state.executions["order-1"]
    t = decide_start(running, "order-1", {**START, "id_conflict_policy": "TERMINATE_EXISTING"}, "client", NOW, 0, 5)
    batch = apply(state, t, 5)
    assert batch["run_id"] == run_id and batch["events"][-1]["attributes"][0] == "WorkflowExecutionTerminated"
    assert batch["next_run"]["events"][0]["attributes"][0] == "WorkflowExecutionStarted"
    assert state.executions["order-1"].run_id == batch["next_run"]["run_id"] != run_id


def test_a_history_past_50_mb_terminates_its_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_HISTORY_BYTES", 1000)
    state, run_id = started_workflow()
    command(state, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}, 1)
    command(state, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": []}, 2)
    ended = command(state, "SignalWorkflowExecution", {"run_id": "", "signal_name": "s", "request_id": "",
                                                       "input": [{"metadata": {}, "data": b"x" * 1500}]}, 3)
    _, attrs = ended["events"][-1]["attributes"]
    assert state.executions["order-1"].status == "Terminated" and "MB limit" in attrs["reason"]


def test_a_client_command_whose_history_record_would_not_fit_is_refused() -> None:
    state, run_id = started_workflow()
    ex = state.executions["order-1"]
    signal = {"run_id": "", "signal_name": "add", "input": [LARGE] * 7, "request_id": ""}
    with pytest.raises(Rejected, match="would write a history record of up to"):
        limits.within_record_limit(decide(ex, "SignalWorkflowExecution", signal, "client", NOW), "SignalWorkflowExecution")
    small = decide(ex, "SignalWorkflowExecution", {**signal, "input": [LARGE]}, "client", NOW)
    assert limits.within_record_limit(small, "SignalWorkflowExecution") is small
