"""A run's clock (services/history/machine/clock.py, docs/decisions/0006-time-skipping.md): decided
on its clock, a run that may skip jumps to its next deadline once nothing is in flight, and the
timer service is told every timer in wall-clock time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kadence.protocol.settings import TIME_SKIPPING
from services.history.machine import clock
from services.history.partition import PartitionState
from services.history.step import step
from tests.machine_steps import ACTIVITY, CHILD, NOW, START, decode_outbound

DAY_MS = 86_400_000
SKIPPING = {"enabled": True, "fast_forward_ms": 0, "disable_propagation": False}


@pytest.fixture(autouse=True)
def time_skipping_allowed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv(TIME_SKIPPING, "1")
    clock.time_skipping_allowed.cache_clear()
    yield
    clock.time_skipping_allowed.cache_clear()


class Run:
    """One run of "order-1" on partition 0, driven through the live step at wall-clock times."""

    def __init__(self, **start: Any) -> None:
        self.state = PartitionState(0)
        self.offset = 0
        self.wall_ms = NOW
        self.started = self.send("StartWorkflowExecution", {**START, **start})
        self.run_id = self.started["run_id"]

    def send(self, kind: str, body: dict[str, Any], *, after_ms: int = 0) -> dict[str, Any]:
        self.wall_ms += after_ms
        written = step(self.state, {"workflow_id": "order-1", "identity": "worker", "command": (kind, body)}, self.wall_ms, 0, self.offset)
        self.offset += 1
        assert written.batch is not None
        return written.batch

    def complete_task(self, scheduled_event_id: int, *commands: tuple[str, dict[str, Any]]) -> dict[str, Any]:
        return self.send("RespondWorkflowTaskCompleted", {
            "run_id": self.run_id, "scheduled_event_id": scheduled_event_id, "commands": list(commands), "started_time_ms": self.wall_ms,
        })

    def fire(self, effect: dict[str, Any]) -> dict[str, Any]:
        """The timer service's firing of a Timer effect, at its wall-clock time."""
        assert effect["fire_at_ms"] <= self.wall_ms, "the timer service fires nothing before its time"
        return self.send("TimeoutFired", {
            "run_id": self.run_id, "timer_id": effect["timer_id"], "kind": effect["kind"],
            "scheduled_event_id": effect["scheduled_event_id"], "attempt": effect["attempt"],
        })

    @property
    def execution(self) -> Any:
        return self.state.executions["order-1"]


def timers(batch: dict[str, Any], kind: str | None = None) -> list[dict[str, Any]]:
    return [e for k, e in batch["effects"] if k == "Timer" and (kind is None or e["kind"] == kind)]


def event_types(batch: dict[str, Any]) -> list[str]:
    return [e["attributes"][0] for e in batch["events"]]


def test_a_run_that_may_skip_jumps_over_a_30_day_timer_in_two_firings() -> None:
    run = Run(time_skipping=SKIPPING)
    completed = run.complete_task(2, ("StartTimer", {"timer_id": "reminder", "start_to_fire_timeout_ms": 30 * DAY_MS}))
    (user_timer,) = timers(completed, "USER_TIMER")
    assert user_timer["fire_at_ms"] == NOW + 30 * DAY_MS
    (skip,) = timers(completed, "TIME_SKIP")
    assert skip["fire_at_ms"] == run.wall_ms  # due at once, keyed by the run's next event id
    assert skip["scheduled_event_id"] == run.execution.next_event_id

    skipped = run.fire(skip)
    assert event_types(skipped) == ["WorkflowExecutionTimeSkipped"]
    assert skipped["events"][0]["attributes"][1]["skipped_ms"] == 30 * DAY_MS
    assert run.execution.clock_offset_ms == 30 * DAY_MS
    (again,) = timers(skipped, "USER_TIMER")
    assert again["timer_id"] == user_timer["timer_id"] and again["fire_at_ms"] == run.wall_ms
    assert timers(skipped, "TIME_SKIP") == []

    fired = run.fire(again)
    assert event_types(fired) == ["TimerFired", "WorkflowTaskScheduled"]
    assert fired["events"][0]["event_time_ms"] == run.wall_ms + 30 * DAY_MS
    (task,) = [e for k, e in fired["effects"] if k == "WorkflowTask"]
    assert task["clock_offset_ms"] == 30 * DAY_MS  # the worker's workflow.now() is on the run's clock


def test_nothing_is_skipped_while_an_activity_runs_and_a_late_skip_is_stale() -> None:
    run = Run(time_skipping=SKIPPING)
    completed = run.complete_task(
        2, ("StartTimer", {"timer_id": "t", "start_to_fire_timeout_ms": DAY_MS}),
        ("ScheduleActivityTask", {**ACTIVITY, "activity_id": "1"}),
    )
    assert timers(completed, "TIME_SKIP") == []  # the activity's task is queued: in flight
    run.send("RecordActivityTaskStarted", {"run_id": run.run_id, "scheduled_event_id": 6, "attempt": 1, "request_id": "s"})
    done = run.send("RespondActivityTaskCompleted", {"run_id": run.run_id, "scheduled_event_id": 6, "attempt": 1, "result": None})
    assert timers(done, "TIME_SKIP") == []  # a workflow task is scheduled
    (task,) = [e for k, e in done["effects"] if k == "WorkflowTask"]
    idle = run.complete_task(task["scheduled_event_id"])
    (skip,) = timers(idle, "TIME_SKIP")
    run.send("SignalWorkflowExecution", {"run_id": "", "signal_name": "go", "input": [], "request_id": "sig"})
    stale = step(run.state, {"workflow_id": "order-1", "identity": "timer", "command": ("TimeoutFired", {
        "run_id": run.run_id, "timer_id": skip["timer_id"], "kind": "TIME_SKIP", "scheduled_event_id": skip["scheduled_event_id"],
        "attempt": 1,
    })}, run.wall_ms, 0, 99)
    assert stale.rejected is not None and "stale time skip" in str(stale.rejected)
    assert run.execution.clock_offset_ms == 0


def test_a_fast_forward_stops_at_its_bound_and_says_so() -> None:
    run = Run(time_skipping={**SKIPPING, "enabled": False})  # V1's lock: no skipping until someone waits
    idle = run.complete_task(2, ("StartTimer", {"timer_id": "t", "start_to_fire_timeout_ms": 30 * DAY_MS}))
    assert timers(idle, "TIME_SKIP") == []
    updated = run.send("UpdateWorkflowTimeSkipping", {
        "run_id": run.run_id, "request_id": "ff-1", "time_skipping": {**SKIPPING, "fast_forward_ms": DAY_MS},
    })
    assert updated["request_ids"] == ["ff-1"]
    skipped = run.fire(timers(updated, "TIME_SKIP")[0])
    (jump,) = skipped["events"]
    assert jump["attributes"][1] == {"skipped_ms": DAY_MS, "bound_reached": True, "request_id": "ff-1"}
    assert run.execution.time_skipping.enabled is False
    (user_timer,) = timers(skipped, "USER_TIMER")
    assert user_timer["fire_at_ms"] == NOW + 29 * DAY_MS  # a day nearer on the wall clock
    assert timers(skipped, "TIME_SKIP") == []


def test_an_activity_s_retry_backoff_is_skipped() -> None:
    run = Run(time_skipping=SKIPPING)
    retry = {"initial_interval_ms": 3_600_000, "backoff_coefficient": 2.0, "maximum_interval_ms": 0, "maximum_attempts": 3,
             "non_retryable_error_types": []}
    run.complete_task(2, ("ScheduleActivityTask", {**ACTIVITY, "activity_id": "1", "retry_policy": retry}))
    run.send("RecordActivityTaskStarted", {"run_id": run.run_id, "scheduled_event_id": 5, "attempt": 1, "request_id": "s"})
    failed = run.send("RespondActivityTaskFailed", {"run_id": run.run_id, "scheduled_event_id": 5, "attempt": 1, "failure": {
        "message": "down", "type": "Down", "source": "", "stack_trace": "", "non_retryable": False, "timeout_type": None,
        "details": [], "activity_failure_info": None, "cause": None,
    }})
    skipped = run.fire(timers(failed, "TIME_SKIP")[0])
    assert skipped["events"][0]["attributes"][1]["skipped_ms"] == 3_600_000
    (due,) = timers(skipped, "ACTIVITY_RETRY")
    dispatched = run.fire(due)
    (task,) = [e for k, e in dispatched["effects"] if k == "ActivityTask"]
    assert task["attempt"] == 2


def test_a_child_starts_on_its_parent_s_clock_and_skips_as_it_does() -> None:
    run = Run(time_skipping=SKIPPING, clock_offset_ms=5 * DAY_MS)
    batch = run.complete_task(2, ("StartChildWorkflowExecution", {**CHILD}))
    (effect,) = [e for k, e in batch["effects"] if k == "OutboundCommand"]
    _, kind, start = decode_outbound(effect)
    assert (kind, start["clock_offset_ms"], start["time_skipping"]["enabled"]) == ("StartWorkflowExecution", 5 * DAY_MS, True)
    assert run.execution.history[0]["event_time_ms"] == NOW + 5 * DAY_MS


def test_a_start_with_time_skipping_is_refused_where_the_server_does_not_allow_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIME_SKIPPING)
    clock.time_skipping_allowed.cache_clear()
    state = PartitionState(0)
    written = step(state, {"workflow_id": "order-1", "identity": "client", "command": ("StartWorkflowExecution", {
        **START, "request_id": "r", "time_skipping": SKIPPING,
    })}, NOW, 0, 0)
    assert written.rejected is not None and "time skipping is off on this server" in str(written.rejected)
    assert "order-1" not in state.executions


def test_a_parent_s_skipping_reaches_its_children_and_its_clock_catches_up_with_theirs() -> None:
    run = Run(time_skipping={**SKIPPING, "enabled": False})
    run.complete_task(2, ("StartChildWorkflowExecution", {**CHILD}))
    updated = run.send("UpdateWorkflowTimeSkipping", {"run_id": run.run_id, "request_id": "unlock", "time_skipping": SKIPPING})
    (effect,) = [e for k, e in updated["effects"] if k == "OutboundCommand"]
    target, kind, body = decode_outbound(effect)
    assert (target, kind, body["time_skipping"]["enabled"]) == (CHILD["workflow_id"], "UpdateWorkflowTimeSkipping", True)
    closed = run.send("RecordChildExecutionClosed", {
        "run_id": run.run_id, "initiated_event_id": 5, "child_run_id": "child-run", "status": "Completed", "result": None,
        "failure": None, "details": [], "retry_state": "RETRY_POLICY_NOT_SET", "clock_offset_ms": 10 * DAY_MS,
    })
    assert event_types(closed)[:2] == ["WorkflowExecutionTimeSkipped", "ChildWorkflowExecutionStarted"]
    assert closed["events"][0]["attributes"][1]["skipped_ms"] == 10 * DAY_MS
    assert closed["events"][-1]["event_time_ms"] == run.wall_ms + 10 * DAY_MS
    assert run.execution.clock_offset_ms == 10 * DAY_MS


def test_a_run_timeout_is_skipped_to_and_times_the_run_out_on_its_clock() -> None:
    run = Run(time_skipping=SKIPPING, run_timeout_ms=10 * DAY_MS)
    idle = run.complete_task(2)  # waits for a signal that never comes
    skipped = run.fire(timers(idle, "TIME_SKIP")[0])
    assert skipped["events"][0]["attributes"][1]["skipped_ms"] == 10 * DAY_MS
    timed_out = run.fire(timers(skipped, "WORKFLOW_RUN_TIMEOUT")[0])
    assert event_types(timed_out) == ["WorkflowExecutionTimedOut"]
    assert timed_out["events"][0]["event_time_ms"] == run.wall_ms + 10 * DAY_MS


def test_a_cron_run_waits_for_its_time_on_its_clock_and_the_next_run_keeps_it() -> None:
    run = Run(time_skipping=SKIPPING, cron_schedule="0 0 * * *", request_id="cron")  # NOW is 00:16:40 on 1 Jan 1970
    first_task_at = DAY_MS  # the next midnight
    started = run.state.executions["order-1"].history[0]
    assert started["event_time_ms"] + started["attributes"][1]["first_workflow_task_backoff_ms"] == first_task_at
    skipped = run.fire(timers(run.started, "TIME_SKIP")[0])  # a first task held back is a deadline, not work in flight
    assert skipped["events"][0]["attributes"][1]["skipped_ms"] == first_task_at - NOW
    dispatched = run.fire(timers(skipped, "WORKFLOW_TASK_RETRY")[0])
    (task,) = [e for k, e in dispatched["effects"] if k == "WorkflowTask"]
    completed = run.complete_task(task["scheduled_event_id"], ("CompleteWorkflowExecution", {"result": None}))
    following = completed["next_run"]
    assert following is not None and following["events"][0]["attributes"][1]["clock_offset_ms"] == first_task_at - NOW
    assert [e["kind"] for k, e in following["effects"] if k == "Timer"].count("TIME_SKIP") == 1  # and it skips to the next midnight
