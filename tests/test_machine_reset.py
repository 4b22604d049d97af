"""Reset in the history machine (services/history/machine/reset.py, decision 0005): the new run's
copied past, its reset WorkflowTaskFailed, the signals reapplied after the point, the base run
terminated in the same batch (a closed one, within the reset retention, left as it closed), what
was pending at the point set going again, and nothing of the copied past sent again."""

from __future__ import annotations

from typing import Any

from kadence.protocol.codec import command_codec
from kadence.protocol.events import failure_record
from services.history.machine.execution import closed_execution
from services.history.machine.reset import reset_retention_ms
from services.history.partition import PartitionState
from services.history.snapshot import RunRow
from services.history.step import Step, step
from tests.machine_steps import decode_outbound

NOW = 1_767_225_600_000
WORKFLOW = "order-9"


class Run:
    """One workflow id on a partition, driven through the live step."""

    def __init__(self) -> None:
        self.state = PartitionState(0)
        self.offset = 0
        self.now = NOW
        self.log: list[dict[str, Any]] = []

    def send(self, kind: str, body: dict[str, Any], after_ms: int = 100) -> Step:
        self.offset += 1
        self.now += after_ms
        wire = command_codec()  # every field as a record read from the topic has it
        command = wire.decode(wire.encode({"workflow_id": WORKFLOW, "identity": "test", "command": (kind, body)}))
        written = step(self.state, command, self.now, 0, self.offset)
        if written.batch is not None:
            self.log.append(dict(written.batch))
        return written

    @property
    def run_id(self) -> str:
        return self.state.executions[WORKFLOW].run_id

    def task(self, *commands: tuple[str, dict[str, Any]]) -> None:
        scheduled = self.state.executions[WORKFLOW].workflow_task
        assert scheduled is not None
        self.send("RecordWorkflowTaskStarted", {"run_id": self.run_id, "scheduled_event_id": scheduled.scheduled_event_id})
        self.send("RespondWorkflowTaskCompleted", {"run_id": self.run_id, "scheduled_event_id": scheduled.scheduled_event_id,
                                                   "commands": list(commands)})

    def reset(self, request_id: str = "reset-1", after_ms: int = 100, **fields: Any) -> Step:
        return self.send("ResetWorkflowExecution", {"reason": "bug fixed", "request_id": request_id, **fields}, after_ms)

    def events(self) -> list[tuple[int, str]]:
        return [(e["event_id"], e["attributes"][0]) for e in self.state.executions[WORKFLOW].history]


def started_run() -> Run:
    run = Run()
    run.send("StartWorkflowExecution", {"workflow_type": "Order", "task_queue": "orders", "request_id": "start-9"})
    return run


def activity(activity_id: str) -> tuple[str, dict[str, Any]]:
    return ("ScheduleActivityTask", {"activity_id": activity_id, "activity_type": "charge", "task_queue": "", "input": [],
                                     "start_to_close_timeout_ms": 10_000})


def effects(written: Step, section: str = "next_run") -> list[tuple[str, dict[str, Any]]]:
    assert written.batch is not None
    return written.batch["next_run"]["effects"] if section == "next_run" else written.batch["effects"]  # type: ignore[index]


def test_a_reset_to_the_last_workflow_task_copies_the_past_reapplies_signals_and_terminates_the_run() -> None:
    run = started_run()
    run.task(activity("a"))  # the first task (completed at 4) schedules the activity at 5
    base = run.run_id
    run.send("RecordActivityTaskStarted", {"run_id": base, "scheduled_event_id": 5, "attempt": 1, "request_id": "a1"})
    run.send("SignalWorkflowExecution", {"signal_name": "go", "input": [], "request_id": "sig-0"})
    run.task()  # the point: the second task, while the activity runs
    point = [event_id for event_id, kind in run.events() if kind == "WorkflowTaskCompleted"][-1]
    run.send("RespondActivityTaskCompleted", {"run_id": base, "scheduled_event_id": 5, "attempt": 1, "result": None})
    run.send("SignalWorkflowExecution", {"signal_name": "approve", "input": [], "request_id": "sig-1"})
    written = run.reset(reset_type="LAST_WORKFLOW_TASK")
    assert written.rejected is None and written.batch is not None
    assert written.batch["events"][-1]["attributes"][0] == "WorkflowExecutionTerminated"
    assert written.batch["events"][-1]["attributes"][1]["new_execution_run_id"] == run.run_id != base
    copied = [(event_id, kind) for event_id, kind in run.events() if event_id < point]
    assert copied[-1][1] == "WorkflowTaskStarted" and ("ActivityTaskStarted" in [kind for _, kind in copied])
    assert [kind for event_id, kind in run.events() if event_id >= point] == [
        "WorkflowTaskFailed", "WorkflowExecutionSignaled", "WorkflowTaskScheduled",
    ]
    failed = run.state.executions[WORKFLOW].history[point - 1]["attributes"][1]
    assert (failed["cause"], failed["base_run_id"], failed["new_run_id"]) == ("RESET_WORKFLOW", base, run.run_id)
    started = run.state.executions[WORKFLOW].history[0]["attributes"][1]
    assert (started["original_execution_run_id"], started["request_id"]) == (base, "reset-1")
    # The activity started before the point is pending again: its attempt's timeout is set (its
    # worker answers the base run, refused); the workflow task goes out; nothing of the copied
    # past is sent again (no second activity task, no second first workflow task).
    sent = effects(written)
    assert [kind for kind, _ in sent].count("WorkflowTask") == 1 and "ActivityTask" not in [kind for kind, _ in sent]
    assert "ACTIVITY_START_TO_CLOSE" in [effect["kind"] for kind, effect in sent if kind == "Timer"]
    assert 5 in run.state.executions[WORKFLOW].activities


def test_a_reset_sent_again_is_answered_with_the_run_it_made() -> None:
    run = started_run()
    run.task(activity("a"))
    run.reset(reset_type="FIRST_WORKFLOW_TASK")
    made = run.run_id
    again = run.reset(reset_type="FIRST_WORKFLOW_TASK")
    assert again.batch is None and again.answered_again is not None and run.run_id == made


def test_excluded_signals_are_not_reapplied_and_a_bad_point_is_refused() -> None:
    run = started_run()
    run.task()
    run.send("SignalWorkflowExecution", {"signal_name": "approve", "input": [], "request_id": "sig-1"})
    not_an_end = run.reset(event_id=2)
    assert not_an_end.rejected is not None and "end of a workflow task" in str(not_an_end.rejected)
    unknown = run.reset(reset_type="LAST_CONTINUED_AS_NEW")
    assert unknown.rejected is not None
    run.reset(event_id=4, reapply_exclude_types=["SIGNAL"])
    assert "WorkflowExecutionSignaled" not in [kind for _, kind in run.events()]


def test_what_was_pending_at_the_point_is_set_going_again_and_nothing_else() -> None:
    run = started_run()
    run.task(("StartTimer", {"timer_id": "soon", "start_to_fire_timeout_ms": 1_000}),
             ("StartTimer", {"timer_id": "later", "start_to_fire_timeout_ms": 60_000}), activity("a"))
    soon = run.state.executions[WORKFLOW].timers["soon"]
    run.send("TimeoutFired", {"run_id": run.run_id, "timer_id": f"{run.run_id}/USER_TIMER/{soon}/1", "kind": "USER_TIMER",
                              "scheduled_event_id": soon, "attempt": 1}, after_ms=1_000)
    run.task()  # the point: "soon" fired, "later" pending, the activity scheduled and not started
    written = run.reset(reset_type="LAST_WORKFLOW_TASK")
    sent = effects(written)
    assert [effect["timer_id"].split("/")[1:] for kind, effect in sent if kind == "Timer" and effect["kind"] == "USER_TIMER"] == [
        ["USER_TIMER", str(run.state.executions[WORKFLOW].timers["later"]), "1"],
    ]
    assert [kind for kind, _ in sent].count("ActivityTask") == 1
    # Deadlines count from the event that set them, not from the reset.
    later = run.state.executions[WORKFLOW].history[run.state.executions[WORKFLOW].timers["later"] - 1]
    assert [effect["fire_at_ms"] for kind, effect in sent if kind == "Timer" and effect["kind"] == "USER_TIMER"] == [
        later["event_time_ms"] + 60_000]


def test_a_nexus_operation_pending_at_the_point_is_dispatched_anew() -> None:
    run = started_run()
    run.task(("ScheduleNexusOperation", {"endpoint": "greeter", "service": "Greeter", "operation": "greet", "input": None,
                                         "task_queue": "handlers", "schedule_to_close_timeout_ms": 600_000}))
    run.send("SignalWorkflowExecution", {"run_id": "", "signal_name": "go", "input": [], "request_id": ""})
    run.task()  # the point: the operation scheduled, not answered
    written = run.reset(reset_type="LAST_WORKFLOW_TASK", after_ms=30_000)
    sent = effects(written)
    (task,) = [effect for kind, effect in sent if kind == "NexusTask"]
    assert task["request_deadline_ms"] == run.now + 10_000  # a fresh attempt, from the reset
    timers = [effect["kind"] for kind, effect in sent if kind == "Timer"]
    assert "NEXUS_ATTEMPT" in timers and "NEXUS_SCHEDULE_TO_CLOSE" in timers


def test_a_started_activitys_deadlines_count_from_its_start_and_its_schedule_to_close_is_set_again() -> None:
    run = started_run()
    run.task(("ScheduleActivityTask", {**activity("a")[1], "schedule_to_close_timeout_ms": 600_000}))
    run.send("RecordActivityTaskStarted", {"run_id": run.run_id, "scheduled_event_id": 5, "attempt": 1, "request_id": "a1"})
    started_at = run.now
    run.send("SignalWorkflowExecution", {"signal_name": "go", "input": [], "request_id": "sig-0"})
    run.task()  # the point: the activity started, in flight
    written = run.reset(reset_type="LAST_WORKFLOW_TASK", after_ms=30_000)
    due = {effect["kind"]: effect["fire_at_ms"] for kind, effect in effects(written) if kind == "Timer"}
    scheduled_at = run.state.executions[WORKFLOW].history[4]["event_time_ms"]
    assert (due["ACTIVITY_START_TO_CLOSE"], due["ACTIVITY_SCHEDULE_TO_CLOSE"]) == (started_at + 10_000, scheduled_at + 600_000)


def failed_run() -> Run:
    run = started_run()
    run.task(activity("a"))
    run.send("RecordActivityTaskStarted", {"run_id": run.run_id, "scheduled_event_id": 5, "attempt": 1, "request_id": "a1"})
    run.send("RespondActivityTaskCompleted", {"run_id": run.run_id, "scheduled_event_id": 5, "attempt": 1, "result": None})
    run.task(("FailWorkflowExecution", {"failure": failure_record("a bug", "ValueError", "worker")}))
    assert run.state.executions[WORKFLOW].status == "Failed"
    return run


def test_a_closed_run_is_reset_within_the_retention_and_nothing_is_written_for_it() -> None:
    run = failed_run()
    base = run.state.executions[WORKFLOW]
    written = run.reset(reset_type="LAST_WORKFLOW_TASK")
    assert written.rejected is None and written.batch is not None
    # The batch is the new run's, as a start's: no termination, the base run left as it closed.
    assert (written.batch["run_id"], written.batch["first_event_id"], written.batch["next_run"]) == (run.run_id, 1, None)
    assert run.run_id != base.run_id and base.status == "Failed"
    point = [e["event_id"] for e in base.history if e["attributes"][0] == "WorkflowTaskCompleted"][-1]
    assert [kind for event_id, kind in run.events() if event_id >= point] == ["WorkflowTaskFailed", "WorkflowTaskScheduled"]
    # The activity completed before the point is not sent again; the workflow task goes out once.
    sent = [kind for kind, _ in effects(written, "events")]
    assert sent.count("WorkflowTask") == 1 and "ActivityTask" not in sent
    again = run.reset(reset_type="LAST_WORKFLOW_TASK")
    assert again.batch is None and again.answered_again is not None


def test_a_closed_run_read_back_from_its_row_is_reset_as_from_memory_and_past_the_retention_is_refused() -> None:
    from_memory = failed_run()
    from_row = failed_run()
    closed = from_row.state.executions.pop(WORKFLOW)  # memory let it go: read back from its checkpoint row
    from_row.state.loaded(RunRow.of(closed).run())
    assert from_memory.reset(reset_type="FIRST_WORKFLOW_TASK").batch == from_row.reset(reset_type="FIRST_WORKFLOW_TASK").batch

    late = failed_run()
    late.now += reset_retention_ms()
    refused = late.reset(reset_type="LAST_WORKFLOW_TASK")
    assert refused.rejected is not None and refused.rejected.cause == "WORKFLOW_CLOSED"
    assert "past the reset retention" in str(refused.rejected)

    unkept = failed_run()  # closed by a release that kept no closed run's events
    ex = unkept.state.executions[WORKFLOW]
    unkept.state.executions[WORKFLOW] = closed_execution(WORKFLOW, ex.run_id, ex.status, ex.start_request_id)
    refused = unkept.reset(reset_type="LAST_WORKFLOW_TASK")
    assert refused.rejected is not None and "are not kept" in str(refused.rejected)


def test_an_older_run_is_refused_with_the_reason() -> None:
    other = started_run()
    other.task()
    older = other.reset(run_id="an-older-run", reset_type="LAST_WORKFLOW_TASK")
    assert older.rejected is not None and older.rejected.cause == "WORKFLOW_NOT_FOUND"


def test_a_reset_decided_twice_writes_the_same_batch() -> None:
    batches = []
    for _ in range(2):
        run = started_run()
        run.task(activity("a"))
        run.send("SignalWorkflowExecution", {"signal_name": "approve", "input": [], "request_id": "sig-1"})
        batches.append(run.reset(reset_type="LAST_WORKFLOW_TASK").batch)
    assert batches[0] == batches[1]


def test_the_new_run_folds_back_from_the_log_and_its_checkpoint_row_as_it_was_decided() -> None:
    run = started_run()
    run.task(activity("a"))
    run.send("SignalWorkflowExecution", {"signal_name": "approve", "input": [], "request_id": "sig-1"})
    run.reset(reset_type="LAST_WORKFLOW_TASK")
    live = run.state.executions[WORKFLOW]
    replayed = PartitionState(0)
    for batch in run.log:
        assert replayed.apply(batch)  # type: ignore[arg-type]
    again = replayed.executions[WORKFLOW]
    assert (again.run_id, again.history, again.activities, again.workflow_task) == (
        live.run_id, live.history, live.activities, live.workflow_task)
    restored = RunRow.of(live).run()  # through Avro: compared by what the machine decides on
    assert (restored.run_id, [e["event_id"] for e in restored.history], restored.activities.keys(), restored.workflow_task) == (
        live.run_id, [e["event_id"] for e in live.history], live.activities.keys(), live.workflow_task)


CHILD = {
    "workflow_id": "order-9-invoice", "workflow_type": "Invoice", "task_queue": "", "input": [], "execution_timeout_ms": 0,
    "run_timeout_ms": 0, "workflow_task_timeout_ms": 0, "id_reuse_policy": "ALLOW_DUPLICATE", "parent_close_policy": "TERMINATE",
    "search_attributes": {},
}


def child_started_run() -> Run:
    """A run whose first task started a child (initiated at 5), which started; the point, its second
    task (completed at 10), leaves the child running."""
    run = started_run()
    run.task(("StartChildWorkflowExecution", CHILD))
    run.send("RecordChildExecutionStarted", {"run_id": run.run_id, "initiated_event_id": 5, "child_run_id": "child-run"})
    run.send("SignalWorkflowExecution", {"signal_name": "go", "input": [], "request_id": "sig-0"})
    run.task()
    return run


def heard(run: Run) -> list[str]:
    """The kinds of the current run's events, and of those buffered while its workflow task is pending."""
    ex = run.state.executions[WORKFLOW]
    return [e["attributes"][0] for e in ex.history + ex.buffered]


def outbound_commands(written: Step) -> list[tuple[str, str]]:
    """(target workflow id, command kind) of the batch's outbound commands, the base run's."""
    sent = [effect for kind, effect in effects(written, "events") if kind == "OutboundCommand"]
    return [(target, kind) for target, kind, _ in map(decode_outbound, sent)]


def test_a_child_pending_at_the_point_keeps_running_and_its_close_goes_to_the_new_run() -> None:
    run = child_started_run()
    base = run.run_id
    written = run.reset(reset_type="LAST_WORKFLOW_TASK")
    assert written.rejected is None and run.run_id != base
    # The base run's termination leaves the child to the new run: no parent close policy for it.
    assert (CHILD["workflow_id"], "TerminateWorkflowExecution") not in outbound_commands(written)
    assert 5 in run.state.executions[WORKFLOW].children
    closed = run.send("RecordChildExecutionClosed", {"run_id": base, "initiated_event_id": 5, "child_run_id": "child-run",
                                                     "status": "Completed", "result": None})
    assert closed.rejected is None and "ChildWorkflowExecutionCompleted" in heard(run)
    assert 5 not in run.state.executions[WORKFLOW].children


def test_a_childs_answers_the_base_run_heard_after_the_point_are_the_new_runs_too() -> None:
    run = started_run()
    run.task(("StartChildWorkflowExecution", CHILD))
    run.send("SignalWorkflowExecution", {"signal_name": "go", "input": [], "request_id": "sig-0"})
    run.task()  # the point: the child initiated, its start not answered yet
    base = run.run_id
    run.send("RecordChildExecutionStarted", {"run_id": base, "initiated_event_id": 5, "child_run_id": "child-run"})
    run.send("RecordChildExecutionClosed", {"run_id": base, "initiated_event_id": 5, "child_run_id": "child-run",
                                            "status": "Completed", "result": None})
    point = [event_id for event_id, kind in run.events() if kind == "WorkflowTaskCompleted"][-1]
    run.reset(reset_type="LAST_WORKFLOW_TASK")
    assert [kind for event_id, kind in run.events() if event_id >= point] == [
        "WorkflowTaskFailed", "ChildWorkflowExecutionStarted", "ChildWorkflowExecutionCompleted", "WorkflowTaskScheduled",
    ]
    assert not run.state.executions[WORKFLOW].children


def test_a_child_started_after_the_point_gets_the_parent_close_policy_and_cannot_answer_the_new_run() -> None:
    run = started_run()
    run.task()  # the point: no child yet
    run.send("SignalWorkflowExecution", {"signal_name": "go", "input": [], "request_id": "sig-0"})
    run.task(("StartChildWorkflowExecution", CHILD))  # initiated at 11, after the point
    base = run.run_id
    initiated = next(event_id for event_id, kind in run.events() if kind == "StartChildWorkflowExecutionInitiated")
    written = run.reset(reset_type="FIRST_WORKFLOW_TASK")
    assert (CHILD["workflow_id"], "TerminateWorkflowExecution") in outbound_commands(written)
    # The new run initiates its own child at the same event id: the base run's child does not answer it.
    run.task(("StartChildWorkflowExecution", CHILD))
    assert initiated in run.state.executions[WORKFLOW].children
    late = run.send("RecordChildExecutionStarted", {"run_id": base, "initiated_event_id": initiated, "child_run_id": "old-child"})
    assert late.rejected is not None and late.rejected.cause == "WORKFLOW_NOT_FOUND"


def test_a_signal_to_another_workflow_pending_at_the_point_is_answered_in_the_new_run() -> None:
    run = started_run()
    run.task(("SignalExternalWorkflowExecution", {"workflow_id": "other", "run_id": "", "signal_name": "ping", "input": [],
                                                   "child_workflow_only": False}))
    run.send("SignalWorkflowExecution", {"signal_name": "go", "input": [], "request_id": "sig-0"})
    run.task()  # the point: the signal sent, not answered
    base = run.run_id
    written = run.reset(reset_type="LAST_WORKFLOW_TASK")
    # Not sent again: the base run's is on its way, and its answer comes here.
    assert ("other", "SignalWorkflowExecution") not in [(t, k) for t, k, _ in map(
        decode_outbound, (e for k, e in effects(written) if k == "OutboundCommand"))]
    answered = run.send("RecordExternalRequestOutcome", {"run_id": base, "initiated_event_id": 5})
    assert answered.rejected is None and "ExternalWorkflowExecutionSignaled" in heard(run)
    assert not run.state.executions[WORKFLOW].external_requests


def test_a_closed_run_is_not_reset_to_a_point_leaving_pending_a_child_it_left_pending_at_its_close() -> None:
    run = child_started_run()
    run.task(("CompleteWorkflowExecution", {"result": None}))
    before_the_child = run.reset(reset_type="FIRST_WORKFLOW_TASK")
    assert before_the_child.rejected is None
    run = child_started_run()
    point = [event_id for event_id, kind in run.events() if kind == "WorkflowTaskCompleted"][-1]
    run.task(("CompleteWorkflowExecution", {"result": None}))
    refused = run.reset(event_id=point)
    assert refused.rejected is not None and refused.rejected.cause == "WORKFLOW_CLOSED"
    assert "[5]" in str(refused.rejected)


def test_a_child_carried_through_a_line_of_resets_answers_the_last() -> None:
    run = child_started_run()
    base = run.run_id
    run.reset(reset_type="LAST_WORKFLOW_TASK")
    first_reset = next(event_id for event_id, kind in run.events() if kind == "WorkflowTaskFailed")
    # Back to the first reset's point: the copy ends before its WorkflowTaskFailed, so only the
    # start's original_execution_run_id tells that the base run initiated the child.
    run.reset(request_id="reset-2", event_id=first_reset)
    assert 5 in run.state.executions[WORKFLOW].children
    closed = run.send("RecordChildExecutionClosed", {"run_id": base, "initiated_event_id": 5, "child_run_id": "child-run",
                                                     "status": "Completed", "result": None})
    assert closed.rejected is None and "ChildWorkflowExecutionCompleted" in heard(run)
