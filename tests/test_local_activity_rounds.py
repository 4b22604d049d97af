"""A workflow task's local-activity rounds, driven on the workflow instance as the worker drives it
(activate, then resolve each round's local activities), without a broker or Postgres:
- a run that ends while a local activity it started is pending abandons it, as temporalio's: the
  task's commands end with the close and nothing is left to run, and the closed history replays;
- a later round's code cancelling an activity or a timer an earlier round of the same task issued
  withdraws the command, which was never sent (as temporalio's core does), so it is not sent at all.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from kadence.client import WorkflowHistory
from kadence.converter import DataConverter
from kadence.protocol.records import HistoryEvent
from kadence.worker import Replayer
from kadence.worker._workflow_instance import Command, WorkflowInstance
from kadence.workflow._definition import WorkflowDefinition, definition
from kadence.workflow._runtime import WorkflowInfo
from tests.workflows import CancelsInALaterRound, ReturnsAfterARoundWithALocalActivityPending, ReturnsWithALocalActivityPending

WORKFLOW_ID = "rounds"
RUN_ID = "7d1f4c2e-0000-4000-8000-000000000001"


def _payload(value: Any) -> dict[str, Any]:
    return {"metadata": {"encoding": base64.b64encode(b"json/plain").decode()},
            "data": base64.b64encode(json.dumps(value).encode()).decode()}


def _history(workflow_type: str, *later: tuple[str, dict[str, Any]]) -> list[HistoryEvent]:
    """The run's events as the read model exports them: its start and first workflow task, then `later`."""
    started = {
        "workflow_type": workflow_type, "task_queue": "rounds", "input": [], "request_id": "r", "identity": "test",
        "workflow_task_timeout_ms": 10000, "workflow_execution_timeout_ms": 0, "workflow_run_timeout_ms": 0,
        "continued_execution_run_id": "", "search_attributes": {}, "parent_workflow_id": "", "parent_run_id": "",
        "parent_initiated_event_id": 0, "first_workflow_task_backoff_ms": 0, "cron_schedule": "", "initiator": "",
        "first_execution_run_id": RUN_ID, "root_workflow_id": WORKFLOW_ID, "root_run_id": RUN_ID, "header": {},
    }
    events = [("WorkflowExecutionStarted", started), ("WorkflowTaskScheduled", {"task_queue": "rounds", "attempt": 1}), *later]
    exported = [{"event_id": event_id, "event_time_ms": 1_000 + event_id, "event_type": kind, "attributes": attrs}
                for event_id, (kind, attrs) in enumerate(events, start=1)]
    return WorkflowHistory.from_json({"workflow_id": WORKFLOW_ID, "run_id": RUN_ID, "events": exported}).events


def _definition(cls: type) -> WorkflowDefinition:
    found = definition(cls)
    assert isinstance(found, WorkflowDefinition)
    return found


def _first_task(cls: type) -> tuple[WorkflowInstance, list[Command]]:
    defined = _definition(cls)
    info = WorkflowInfo(WORKFLOW_ID, RUN_ID, defined.name, "rounds")
    instance = WorkflowInstance(defined, info, DataConverter.default)  # type: ignore[abstract]
    return instance, instance.activate(_history(defined.name), 2, 1_003)


def _outcome(seq: int, result: str) -> dict[int, dict[str, list[Any]]]:
    """A local activity's outcome as the worker gives it: its marker's details."""
    payloads = DataConverter.default.payload_converter
    return {seq: {"seq": payloads.to_payloads([seq]), "activity_type": payloads.to_payloads(["echo"]),
                  "result": payloads.to_payloads([result])}}


def test_a_run_returning_with_a_local_activity_pending_abandons_it() -> None:
    instance, commands = _first_task(ReturnsWithALocalActivityPending)
    assert [kind for kind, _ in commands] == ["CompleteWorkflowExecution"]
    assert instance.local_activities_to_run() == []


def test_a_run_returning_in_a_later_round_abandons_the_local_activity_it_left_pending() -> None:
    instance, _ = _first_task(ReturnsAfterARoundWithALocalActivityPending)
    assert [local.seq for local in instance.local_activities_to_run()] == [1]
    commands = instance.resolve_local_activities(_outcome(1, "first"))
    assert [kind for kind, _ in commands] == ["RecordMarker", "CompleteWorkflowExecution"]
    assert instance.local_activities_to_run() == []


async def test_the_closed_history_of_a_run_that_abandoned_a_local_activity_replays() -> None:
    name = _definition(ReturnsWithALocalActivityPending).name
    closed = _history(
        name, ("WorkflowTaskStarted", {"scheduled_event_id": 2, "identity": "test"}),
        ("WorkflowTaskCompleted", {"scheduled_event_id": 2, "started_event_id": 3, "identity": "test"}),
        ("WorkflowExecutionCompleted", {"result": _payload("done"), "workflow_task_completed_event_id": 4, "new_execution_run_id": ""}),
    )
    history = WorkflowHistory(WORKFLOW_ID, RUN_ID, closed)
    result = await Replayer(workflows=[ReturnsWithALocalActivityPending]).replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, repr(result.replay_failure)


def test_a_later_round_withdraws_the_activity_and_timer_an_earlier_round_issued() -> None:
    instance, commands = _first_task(CancelsInALaterRound)
    assert [kind for kind, _ in commands] == ["ScheduleActivityTask", "StartTimer"]
    commands = instance.resolve_local_activities(_outcome(1, "local"))
    assert [kind for kind, _ in commands] == ["RecordMarker", "CompleteWorkflowExecution"]
