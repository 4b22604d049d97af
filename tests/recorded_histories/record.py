"""Writes tests/recorded_histories/*.json from the scenarios below, with today's state machine.

    .venv/bin/python -m tests.recorded_histories.record

Run it only when a change is meant to change what the machine writes, and review the diff.
"""

from __future__ import annotations

import json
from typing import Any

from kadence.protocol.codec import command_codec
from services.history.partition import PartitionState
from tests.recorded_histories import HERE, Record, from_json, step, to_json

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def payload(text: str) -> Record:
    return {"metadata": {"encoding": b"json/plain"}, "data": json.dumps(text).encode()}


def failure(message: str, **fields: Any) -> Record:
    return {"message": message, "type": "Boom", **fields}


class Scenario:
    def __init__(self, name: str, description: str) -> None:
        self.name, self.description = name, description
        self.state = PartitionState(0)
        self.steps: list[Record] = []
        self.now = T0

    def send(self, workflow_id: str, kind: str, body: Record, *, identity: str = "worker-1", after_ms: int = 100) -> Record:
        self.now += after_ms
        command = {"workflow_id": workflow_id, "identity": identity, "command": (kind, body)}
        offset = len(self.steps)
        result = step(self.state, command, self.now, offset)
        self.steps.append({"offset": offset, "now_ms": self.now, "command": to_json(command), **result})
        return result

    def run_id(self, workflow_id: str) -> str:
        return self.state.executions[workflow_id].run_id

    def task(self, workflow_id: str, scheduled_event_id: int, *commands: tuple[str, Record], after_ms: int = 100) -> None:
        """A worker starts the workflow task and completes it with `commands`."""
        run_id = self.run_id(workflow_id)
        self.send(workflow_id, "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": scheduled_event_id,
                                                            "started_time_ms": self.now + after_ms}, after_ms=after_ms)
        self.send(workflow_id, "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": scheduled_event_id,
                                                               "commands": list(commands)}, after_ms=20)

    def write(self) -> None:
        (HERE / f"{self.name}.json").write_text(json.dumps({"description": self.description, "steps": self.steps}, indent=1) + "\n")


def activity(activity_id: str, **fields: Any) -> tuple[str, Record]:
    return ("ScheduleActivityTask", {"activity_id": activity_id, "activity_type": "charge", "task_queue": "",
                                     "input": [payload("order-1")], "start_to_close_timeout_ms": 10_000, **fields})


def complete(text: str) -> tuple[str, Record]:
    return ("CompleteWorkflowExecution", {"result": payload(text)})


def one_activity() -> Scenario:
    s = Scenario("one_activity", "A start, an activity that completes, the workflow's completion; a late stale completion is refused.")
    s.send("order-1", "StartWorkflowExecution", {"workflow_type": "Order", "task_queue": "orders", "input": [payload("order-1")],
                                                 "request_id": "start-1"}, identity="client")
    s.task("order-1", 2, activity("1"))
    run_id = s.run_id("order-1")
    s.send("order-1", "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "request_id": "a-1"})
    s.send("order-1", "RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1,
                                                      "result": payload("charged")})
    s.task("order-1", 8, complete("shipped"))
    s.send("order-1", "RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "result": None})
    return s


def activity_retries() -> Scenario:
    s = Scenario("activity_retries", "An activity that fails, backs off through its retry timer, and completes on attempt 2; "
                 "a heartbeat timeout; a workflow task that times out and is retried.")
    s.send("order-2", "StartWorkflowExecution", {"workflow_type": "Order", "task_queue": "orders", "request_id": "start-2"},
           identity="client")
    run_id = s.run_id("order-2")
    s.send("order-2", "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2})
    s.send("order-2", "TimeoutFired", {"run_id": run_id, "timer_id": f"{run_id}/WORKFLOW_TASK_START_TO_CLOSE/2/1",
                                       "kind": "WORKFLOW_TASK_START_TO_CLOSE", "scheduled_event_id": 2, "attempt": 1},
           identity="timer", after_ms=10_000)
    s.send("order-2", "TimeoutFired", {"run_id": run_id, "timer_id": f"{run_id}/WORKFLOW_TASK_RETRY/5/2",
                                       "kind": "WORKFLOW_TASK_RETRY", "scheduled_event_id": 5, "attempt": 2},
           identity="timer", after_ms=1_000)
    s.task("order-2", 5, activity("1", heartbeat_timeout_ms=2_000,
                                  retry_policy={"initial_interval_ms": 500, "backoff_coefficient": 2.0, "maximum_attempts": 3}))
    s.send("order-2", "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 8, "attempt": 1, "request_id": "a-1"})
    s.send("order-2", "RespondActivityTaskFailed", {"run_id": run_id, "scheduled_event_id": 8, "attempt": 1,
                                                   "failure": failure("card declined")})
    s.send("order-2", "TimeoutFired", {"run_id": run_id, "timer_id": f"{run_id}/ACTIVITY_RETRY/8/2", "kind": "ACTIVITY_RETRY",
                                       "scheduled_event_id": 8, "attempt": 2}, identity="timer", after_ms=500)
    s.send("order-2", "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 8, "attempt": 2, "request_id": "a-2"})
    s.send("order-2", "TimeoutFired", {"run_id": run_id, "timer_id": f"{run_id}/ACTIVITY_HEARTBEAT/8/2", "kind": "ACTIVITY_HEARTBEAT",
                                       "scheduled_event_id": 8, "attempt": 2}, identity="timer", after_ms=2_000)
    s.send("order-2", "TimeoutFired", {"run_id": run_id, "timer_id": f"{run_id}/ACTIVITY_RETRY/8/3", "kind": "ACTIVITY_RETRY",
                                       "scheduled_event_id": 8, "attempt": 3}, identity="timer", after_ms=1_000)
    s.send("order-2", "RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 8, "attempt": 3, "request_id": "a-3"})
    s.send("order-2", "RecordActivityTaskHeartbeat", {"run_id": run_id, "scheduled_event_id": 8, "attempt": 3,
                                                     "details": [payload("half")]})
    s.send("order-2", "RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 8, "attempt": 3,
                                                      "result": payload("charged")})
    last = s.state.executions["order-2"].workflow_task
    assert last is not None
    s.task("order-2", last.scheduled_event_id, complete("shipped"))
    return s


def timers_signals_and_cancel() -> Scenario:
    s = Scenario("timers_signals_and_cancel", "A timer, a signal buffered during a workflow task, a second timer canceled, "
                 "an update admitted, accepted and completed, then a cancel request the workflow honours.")
    s.send("order-3", "StartWorkflowExecution", {"workflow_type": "Approval", "task_queue": "orders", "request_id": "start-3"},
           identity="client")
    run_id = s.run_id("order-3")
    s.send("order-3", "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2})
    s.send("order-3", "SignalWorkflowExecution", {"signal_name": "approve", "input": [payload("erin")], "request_id": "sig-1"},
           identity="client")
    s.send("order-3", "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [
        ("StartTimer", {"timer_id": "reminder", "start_to_fire_timeout_ms": 60_000}),
        ("StartTimer", {"timer_id": "deadline", "start_to_fire_timeout_ms": 3_600_000})]})
    scheduled = s.state.executions["order-3"].workflow_task
    assert scheduled is not None
    s.task("order-3", scheduled.scheduled_event_id, ("CancelTimer", {"timer_id": "deadline"}))
    started = s.state.executions["order-3"].timers["reminder"]
    s.send("order-3", "TimeoutFired", {"run_id": run_id, "timer_id": f"{run_id}/USER_TIMER/{started}/1", "kind": "USER_TIMER",
                                       "scheduled_event_id": started, "attempt": 1}, identity="timer", after_ms=60_000)
    scheduled = s.state.executions["order-3"].workflow_task
    assert scheduled is not None
    s.task("order-3", scheduled.scheduled_event_id)
    s.send("order-3", "UpdateWorkflowExecution", {"update_id": "u-1", "name": "add_note", "args": [payload("fragile")],
                                                  "request_id": "upd-1"}, identity="client")
    scheduled = s.state.executions["order-3"].workflow_task
    assert scheduled is not None
    s.task("order-3", scheduled.scheduled_event_id, ("AcceptWorkflowUpdate", {"update_id": "u-1"}),
           ("CompleteWorkflowUpdate", {"update_id": "u-1", "result": payload("noted")}))
    s.send("order-3", "RequestCancelWorkflowExecution", {"reason": "customer left", "request_id": "cancel-1"}, identity="client")
    scheduled = s.state.executions["order-3"].workflow_task
    assert scheduled is not None
    s.task("order-3", scheduled.scheduled_event_id, ("CancelWorkflowExecution", {"details": []}))
    s.send("order-3", "SignalWorkflowExecution", {"signal_name": "approve", "input": [], "request_id": "sig-2"}, identity="client")
    return s


def children_and_continue_as_new() -> Scenario:
    s = Scenario("children_and_continue_as_new", "A parent with a memo starts a child with one (the child's start relayed to its own "
                 "history), hears it started and completed, upserts its memo (a key set, a key removed), then continues as new "
                 "with the memo as upserted; a terminate ends the new run.")
    s.send("parent", "StartWorkflowExecution", {"workflow_type": "Parent", "task_queue": "orders", "request_id": "start-p",
                                                "memo": {"owner": payload("ada")}}, identity="client")
    parent_run = s.run_id("parent")
    s.task("parent", 2, ("StartChildWorkflowExecution", {"workflow_id": "child", "workflow_type": "Child", "input": [payload("x")],
                                                         "memo": {"for": payload("parent")}}))
    s.send("child", "StartWorkflowExecution", {"workflow_type": "Child", "task_queue": "orders", "input": [payload("x")],
                                               "initiated_by": {"workflow_id": "parent", "run_id": parent_run, "initiated_event_id": 5},
                                               "memo": {"for": payload("parent")}},
           identity="kadence-history")
    child_run = s.run_id("child")
    s.send("parent", "RecordChildExecutionStarted", {"run_id": parent_run, "initiated_event_id": 5, "child_run_id": child_run},
           identity="kadence-history")
    scheduled = s.state.executions["parent"].workflow_task
    assert scheduled is not None
    s.task("parent", scheduled.scheduled_event_id)
    s.task("child", 2, complete("child done"))
    s.send("parent", "RecordChildExecutionClosed", {"run_id": parent_run, "initiated_event_id": 5, "child_run_id": child_run,
                                                    "status": "Completed", "result": payload("child done")}, identity="kadence-history")
    scheduled = s.state.executions["parent"].workflow_task
    assert scheduled is not None
    s.task("parent", scheduled.scheduled_event_id,
           ("ModifyWorkflowProperties", {"upserted_memo": {"stage": payload("2"), "owner": {"metadata": {"encoding": b"binary/null"},
                                                                                              "data": b""}}}),
           ("ContinueAsNewWorkflowExecution", {"workflow_type": "Parent", "task_queue": "orders", "input": [payload("round 2")]}))
    s.send("parent", "TerminateWorkflowExecution", {"reason": "enough", "request_id": "term-1"}, identity="client")
    return s


def cron() -> Scenario:
    s = Scenario("cron", "A cron workflow: the first run waits for its time, each completed or failed run starts the next.")
    s.send("report", "StartWorkflowExecution", {"workflow_type": "Report", "task_queue": "reports", "request_id": "start-r",
                                                "cron_schedule": "*/15 * * * *"}, identity="client")
    first = s.run_id("report")
    s.send("report", "TimeoutFired", {"run_id": first, "timer_id": f"{first}/WORKFLOW_TASK_RETRY/2/1", "kind": "WORKFLOW_TASK_RETRY",
                                      "scheduled_event_id": 2, "attempt": 1}, identity="timer", after_ms=15 * 60_000)
    s.task("report", 2, ("FailWorkflowExecution", {"failure": failure("no data yet")}))
    second = s.run_id("report")
    s.send("report", "TimeoutFired", {"run_id": second, "timer_id": f"{second}/WORKFLOW_TASK_RETRY/2/1",
                                      "kind": "WORKFLOW_TASK_RETRY", "scheduled_event_id": 2, "attempt": 1},
           identity="timer", after_ms=15 * 60_000)
    s.task("report", 2, complete("report sent"))
    return s


def failing_workflow_task() -> Scenario:
    s = Scenario("failing_workflow_task", "A workflow task that keeps failing: its first failure is recorded, the retries after it "
                 "(a failure, a timeout, a late answer refused) only counted, a signal that arrived meanwhile written before the "
                 "next attempt, and the attempt that completes recorded with its WorkflowTaskScheduled and Started.")
    s.send("order-4", "StartWorkflowExecution", {"workflow_type": "Order", "task_queue": "orders", "request_id": "start-4"},
           identity="client")
    run_id = s.run_id("order-4")

    def retry_due(scheduled_event_id: int, attempt: int, after_ms: int) -> None:
        s.send("order-4", "TimeoutFired", {"run_id": run_id, "timer_id": f"{run_id}/WORKFLOW_TASK_RETRY/{scheduled_event_id}/{attempt}",
                                           "kind": "WORKFLOW_TASK_RETRY", "scheduled_event_id": scheduled_event_id, "attempt": attempt},
               identity="timer", after_ms=after_ms)

    def fails(scheduled_event_id: int, attempt: int) -> None:
        s.send("order-4", "RespondWorkflowTaskFailed", {
            "run_id": run_id, "scheduled_event_id": scheduled_event_id, "attempt": attempt, "started_time_ms": s.now + 50,
            "cause": "WORKFLOW_WORKER_UNHANDLED_FAILURE", "failure": failure(f"bug, attempt {attempt}")})

    fails(2, 1)
    retry_due(5, 2, after_ms=1_000)
    fails(5, 2)
    s.send("order-4", "SignalWorkflowExecution", {"signal_name": "approve", "input": [], "request_id": "sig-4"}, identity="client")
    retry_due(5, 3, after_ms=2_000)
    s.send("order-4", "RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 3, "started_time_ms": s.now + 50})
    s.send("order-4", "TimeoutFired", {"run_id": run_id, "timer_id": f"{run_id}/WORKFLOW_TASK_START_TO_CLOSE/5/3",
                                       "kind": "WORKFLOW_TASK_START_TO_CLOSE", "scheduled_event_id": 5, "attempt": 3},
           identity="timer", after_ms=10_000)
    retry_due(6, 4, after_ms=4_000)
    fails(5, 3)  # the timed-out attempt answers late
    s.send("order-4", "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 6, "attempt": 4,
                                                      "started_time_ms": s.now + 50, "commands": [complete("fixed")]})
    return s


def update_with_start() -> Scenario:
    s = Scenario("update_with_start", "An update-with-start starts the run with its update before the first workflow task; a second "
                 "(USE_EXISTING) only admits its update to the running run, a third (FAIL) is refused; the first task completes "
                 "the first update, and the second, buffered meanwhile, is written after it with the next task.")

    def update_with_start(request_id: str, update_id: str, policy: str) -> None:
        s.send("tally-1", "UpdateWithStartWorkflowExecution", {
            "start": {"workflow_type": "Tally", "task_queue": "orders", "request_id": request_id,
                      "id_conflict_policy": policy},
            "update": {"update_id": update_id, "name": "add", "args": [payload("5")]},
        }, identity="client")

    update_with_start("uws-1", "u1", "USE_EXISTING")
    update_with_start("uws-2", "u2", "USE_EXISTING")
    update_with_start("uws-3", "u3", "FAIL")
    s.task("tally-1", 3, ("AcceptWorkflowUpdate", {"update_id": "u1"}),
           ("CompleteWorkflowUpdate", {"update_id": "u1", "result": payload("5")}))
    return s


def schedules() -> Scenario:
    s = Scenario("schedules", "A schedule every minute with jitter and BUFFER_ONE: its first firing starts a run, which reports its "
                 "start; the next firing buffers, the one after skips; the run's close releases the buffered start; a firing "
                 "fired again is refused as stale; a pause drops the timer; the schedule is deleted.")
    key = "kadence-schedule:nightly"
    schedule = {
        "spec": {"intervals": [{"every_ms": 60_000}], "jitter_ms": 10_000},
        "action": {"workflow_id": "report", "workflow_type": "Report", "task_queue": "reports", "input": [payload("eu")]},
        "policy": {"overlap": "BUFFER_ONE"}, "state": {},
    }
    s.send(key, "CreateSchedule", {"request_id": "create-1", "schedule": schedule, "patch": {}}, identity="client")

    def fire(after_ms: int) -> None:
        info = s.state.executions[key].schedule_info
        assert info is not None
        timer_event_id = info["timer_event_id"]
        s.send(key, "TimeoutFired", {"run_id": s.run_id(key), "timer_id": f"{s.run_id(key)}/SCHEDULE_ACTION/{timer_event_id}/1",
                                     "kind": "SCHEDULE_ACTION", "scheduled_event_id": timer_event_id, "attempt": 1},
               identity="timer", after_ms=after_ms)

    def relay(written: Record) -> None:
        for kind, effect in from_json(written["batch"])["effects"]:
            if kind == "OutboundCommand":
                command = command_codec().decode(effect["command"])
                relay(s.send(command["workflow_id"], *command["command"], identity="kadence-history", after_ms=5))

    fire(after_ms=65_000)
    relay(s.steps[-1])
    started = s.state.executions[key].schedule_info["running"][0]["workflow_id"]  # type: ignore[index]
    fire(after_ms=60_000)
    stale = s.steps[-1]["command"]
    fire(after_ms=60_000)
    s.send(key, "TimeoutFired", from_json(stale)["command"][1], identity="timer")
    relay(s.send(started, "TerminateWorkflowExecution", {"reason": "done", "request_id": "stop-1"}, identity="client"))
    s.send(key, "PatchSchedule", {"request_id": "pause-1", "patch": {"pause": True, "note": "maintenance"}}, identity="client")
    s.send(key, "DeleteSchedule", {"request_id": "delete-1"}, identity="client")
    return s


def nexus_operations() -> Scenario:
    s = Scenario("nexus_operations", "A sync Nexus operation retried after a retryable handler error and answered; a "
                 "workflow-run operation started by its handler, whose handler workflow's close completes it; a third "
                 "canceled before it started.")
    s.send("caller-1", "StartWorkflowExecution", {"workflow_type": "Caller", "task_queue": "callers", "request_id": "start-c1"},
           identity="client")
    run_id = s.run_id("caller-1")
    operation = {"endpoint": "greeter", "service": "Greeter", "input": payload("ada"), "task_queue": "greeters"}
    s.task("caller-1", 2, ("ScheduleNexusOperation", {**operation, "operation": "greet"}),
           ("ScheduleNexusOperation", {**operation, "operation": "greet_by_workflow", "schedule_to_close_timeout_ms": 600_000}))
    s.send("caller-1", "RespondNexusTaskFailed", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1,
                                                  "failure": failure("busy"), "retryable": True}, identity="handler-1")
    s.send("caller-1", "TimeoutFired", {"run_id": run_id, "timer_id": f"{run_id}/NEXUS_RETRY/5/2", "kind": "NEXUS_RETRY",
                                        "scheduled_event_id": 5, "attempt": 2}, identity="timer", after_ms=1_000)
    s.send("caller-1", "RespondNexusTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 2,
                                                     "result": payload("hello ada")}, identity="handler-1")
    token = "eyJ0IjoxLCJucyI6ImRlZmF1bHQiLCJ3aWQiOiJncmVldGluZy1hZGEifQ"  # workflow_run_token("greeting-ada")
    s.send("greeting-ada", "StartWorkflowExecution", {
        "workflow_type": "Greeting", "task_queue": "greeters", "input": [payload("ada")], "request_id": f"nexus/caller-1/{run_id}/6",
        "nexus_caller": {"workflow_id": "caller-1", "run_id": run_id, "scheduled_event_id": 6, "operation_token": token},
    }, identity="handler-1")
    s.send("caller-1", "RespondNexusTaskCompleted", {"run_id": run_id, "scheduled_event_id": 6, "attempt": 1,
                                                     "operation_token": token}, identity="handler-1")
    s.task("greeting-ada", 2, complete("hello from a workflow"))
    s.send("caller-1", "RecordNexusOperationClosed", {"run_id": run_id, "scheduled_event_id": 6, "operation_token": token,
                                                      "status": "Completed", "result": payload("hello from a workflow")},
           identity="matching")
    last = s.state.executions["caller-1"].workflow_task
    assert last is not None
    s.task("caller-1", last.scheduled_event_id, ("ScheduleNexusOperation", {**operation, "operation": "greet"}))
    (scheduled,) = s.state.executions["caller-1"].nexus_operations
    s.send("caller-1", "SignalWorkflowExecution", {"signal_name": "stop", "input": [], "request_id": "sig-c1"}, identity="client")
    last = s.state.executions["caller-1"].workflow_task
    assert last is not None
    s.task("caller-1", last.scheduled_event_id, ("RequestCancelNexusOperation", {"scheduled_event_id": scheduled}))
    last = s.state.executions["caller-1"].workflow_task
    assert last is not None
    s.task("caller-1", last.scheduled_event_id, complete("done"))
    return s


def eager_start() -> Scenario:
    s = Scenario("eager_start", "Eager workflow starts: the first workflow task recorded started by the worker the start names, "
                 "in the start's batch, and dispatched to no queue; the worker completes it without a start of its own. A "
                 "second run's eager task, never answered, times out and its retry goes through the queue.")
    start = {"workflow_type": "Order", "task_queue": "orders", "input": [payload("order-5")], "eager_worker_identity": "worker-1"}
    s.send("order-5", "StartWorkflowExecution", {**start, "request_id": "start-5"}, identity="client")
    s.send("order-5", "RespondWorkflowTaskCompleted", {"run_id": s.run_id("order-5"), "scheduled_event_id": 2, "attempt": 1,
                                                      "commands": [complete("shipped")]}, after_ms=20)
    s.send("order-6", "StartWorkflowExecution", {**start, "request_id": "start-6"}, identity="client")
    run_id = s.run_id("order-6")
    s.send("order-6", "TimeoutFired", {"run_id": run_id, "timer_id": f"{run_id}/WORKFLOW_TASK_START_TO_CLOSE/2/1",
                                       "kind": "WORKFLOW_TASK_START_TO_CLOSE", "scheduled_event_id": 2, "attempt": 1},
           identity="timer", after_ms=10_000)
    s.send("order-6", "TimeoutFired", {"run_id": run_id, "timer_id": f"{run_id}/WORKFLOW_TASK_RETRY/5/2", "kind": "WORKFLOW_TASK_RETRY",
                                       "scheduled_event_id": 5, "attempt": 2}, identity="timer", after_ms=1_000)
    s.send("order-6", "RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 2,
                                                      "started_time_ms": s.now + 50, "commands": [complete("shipped")]},
           identity="worker-2")
    return s


SCENARIOS = [one_activity, activity_retries, timers_signals_and_cancel, children_and_continue_as_new, cron, failing_workflow_task,
             update_with_start, schedules, nexus_operations, eager_start]


def main() -> None:
    for build in SCENARIOS:
        scenario = build()
        scenario.write()
        rejected = sum("rejected" in s for s in scenario.steps)
        print(f"{scenario.name}: {len(scenario.steps)} commands, {rejected} rejected")


if __name__ == "__main__":
    main()
