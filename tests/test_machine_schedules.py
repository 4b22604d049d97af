"""Schedules in the history machine (services/history/machine/schedule.py), through the live step:
the schedule's partition and its runs' partition, with the relay and the timer service played by
hand between them (docs/decisions/0004-schedules-in-the-history-service.md, "What the tests must prove")."""

from __future__ import annotations

import copy
import datetime
from dataclasses import dataclass, field
from typing import Any

import pytest

from kadence.protocol.names import SCHEDULE_KEY_PREFIX
from kadence.protocol.settings import TIME_SKIPPING
from services.history.machine import clock
from services.history.machine import limits as machine_limits
from services.history.machine.schedule import action_workflow_id
from services.history.partition import PartitionState
from services.history.snapshot import RunRow
from services.history.step import Step, step
from tests.machine_steps import decode_outbound

KEY = f"{SCHEDULE_KEY_PREFIX}nightly"
T0 = int(datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).timestamp() * 1000)  # a whole minute
MINUTE = 60_000


def schedule(every_ms: int = MINUTE, overlap: str = "UNSPECIFIED", **changes: Any) -> dict[str, Any]:
    definition: dict[str, Any] = {
        "spec": {"calendars": [], "intervals": [{"every_ms": every_ms, "offset_ms": 0}], "cron_expressions": [], "skip": [],
                 "start_at_ms": 0, "end_at_ms": 0, "jitter_ms": 0, "time_zone_name": ""},
        "action": {"workflow_id": "report", "workflow_type": "ReportWorkflow", "task_queue": "reports", "input": [],
                   "execution_timeout_ms": 0, "run_timeout_ms": 0, "workflow_task_timeout_ms": 0, "search_attributes": {},
                   "header": {}, "memo": {}},
        "policy": {"overlap": overlap, "catchup_window_ms": 365 * 24 * 3_600_000, "pause_on_failure": False},
        "state": {"note": "", "paused": False, "limited_actions": False, "remaining_actions": 0},
    }
    for path, value in changes.items():
        part, name = path.split("__")
        definition[part][name] = value
    return definition


def patch(**changes: Any) -> dict[str, Any]:
    return {"trigger_immediately": False, "trigger_overlap": "UNSPECIFIED", "backfills": [], "pause": False, "unpause": False,
            "note": "", **changes}


@dataclass
class World:
    """A schedule's partition and its runs' partition; what the relay and the timer service would carry."""

    schedules: PartitionState = field(default_factory=lambda: PartitionState(0))
    runs: PartitionState = field(default_factory=lambda: PartitionState(1))
    offset: int = 0
    timers: dict[str, dict[str, Any]] = field(default_factory=dict)
    outbox: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    log: list[dict[str, Any]] = field(default_factory=list)

    def send(self, workflow_id: str, kind: str, body: dict[str, Any], now_ms: int) -> Step:
        state = self.schedules if workflow_id.startswith(SCHEDULE_KEY_PREFIX) else self.runs
        self.offset += 1
        command = {"workflow_id": workflow_id, "identity": "test", "command": (kind, body), "reply_partition": None}
        done = step(state, command, now_ms, state.partition, self.offset)
        if done.batch is not None:
            self.log.append(done.batch)
            for effect_kind, effect in done.batch["effects"] + (done.batch["next_run"] or {}).get("effects", []):
                if effect_kind == "Timer":
                    self.timers[effect["timer_id"]] = effect
                elif effect_kind == "DropTimer":
                    self.timers.pop(effect["timer_id"], None)
                elif effect_kind == "OutboundCommand":
                    self.outbox.append(decode_outbound(effect))
        return done

    def create(self, definition: dict[str, Any], now_ms: int = T0, request_id: str = "create-1", **patched: Any) -> Step:
        return self.send(KEY, "CreateSchedule", {"request_id": request_id, "schedule": definition, "patch": patch(**patched)}, now_ms)

    def fire(self, now_ms: int) -> Step | None:
        """Fire the schedule's timer if it is due (the timer service never fires early)."""
        due = [t for t in self.schedule_timers() if t["fire_at_ms"] <= now_ms]
        if not due:
            return None
        (timer,) = due
        return self.send(KEY, "TimeoutFired", {
            "run_id": self.info_run_id, "timer_id": timer["timer_id"], "kind": timer["kind"],
            "scheduled_event_id": timer["scheduled_event_id"], "attempt": timer["attempt"],
        }, now_ms)

    def schedule_timers(self) -> list[dict[str, Any]]:
        return [t for t in self.timers.values() if t["kind"] == "SCHEDULE_ACTION"]

    def relay(self, now_ms: int) -> list[tuple[str, str, dict[str, Any]]]:
        """Deliver what was sent, and what that sends, until nothing is left; what was delivered."""
        delivered = []
        while self.outbox:
            target, kind, body = self.outbox.pop(0)
            delivered.append((target, kind, body))
            self.send(target, kind, body, now_ms)
        return delivered

    def close(self, workflow_id: str, now_ms: int, kind: str = "TerminateWorkflowExecution") -> None:
        self.send(workflow_id, kind, {"run_id": "", "reason": "done", "details": [], "request_id": f"close-{workflow_id}"}, now_ms)
        self.relay(now_ms)

    @property
    def info_run_id(self) -> str:
        return self.schedules.executions[KEY].run_id

    @property
    def info(self) -> dict[str, Any]:
        info = self.schedules.executions[KEY].schedule_info
        assert info is not None
        return dict(info)

    def started(self) -> list[str]:
        """The workflow ids of the runs the schedule's actions started."""
        return sorted(w for w, ex in self.runs.executions.items() if ex.scheduled_by is not None)


def at(minutes: int) -> int:
    return T0 + minutes * MINUTE


def test_a_firing_starts_one_run_named_by_its_nominal_time_and_hears_its_start_and_close() -> None:
    world = World()
    world.create(schedule())
    (timer,) = world.schedule_timers()
    assert timer["fire_at_ms"] == at(1)
    assert world.fire(at(1) - 1) is None
    world.fire(at(1))
    delivered = world.relay(at(1))
    workflow_id = action_workflow_id("report", at(1))
    assert workflow_id == "report-2026-01-01T00:01:00Z"
    start = delivered[0]
    assert start[:2] == (workflow_id, "StartWorkflowExecution") and start[2]["request_id"] == f"schedule/nightly/{at(1)}"
    assert set(start[2]["search_attributes"]) == {"TemporalScheduledById", "TemporalScheduledStartTime"}
    assert [kind for _, kind, _ in delivered[1:]] == ["RecordScheduledRunStarted"]
    run_id = world.runs.executions[workflow_id].run_id
    assert world.info["running"][0]["run_id"] == run_id and world.info["next_nominal_ms"] == at(2)
    world.close(workflow_id, at(1) + 500)
    assert world.info["running"] == [] and world.info["recent_actions"][0]["status"] == "Terminated"


def test_a_firing_fired_again_is_refused_and_a_relayed_start_again_starts_nothing() -> None:
    world = World()
    world.create(schedule())
    (timer,) = world.schedule_timers()
    world.fire(at(1))
    start = copy.deepcopy(world.outbox[0])
    world.relay(at(1))
    again = world.send(KEY, "TimeoutFired", {
        "run_id": world.info_run_id, "timer_id": timer["timer_id"], "kind": "SCHEDULE_ACTION",
        "scheduled_event_id": timer["scheduled_event_id"], "attempt": 1,
    }, at(1) + 10)
    assert again.rejected is not None and "stale" in str(again.rejected)
    repeat = world.send(*start, at(1) + 20)
    assert repeat.batch is None and world.started() == [action_workflow_id("report", at(1))]


def test_a_firing_decided_twice_writes_the_same_batch() -> None:
    batches = []
    for _ in range(2):
        world = World()
        world.create(schedule(spec__jitter_ms=30_000))
        batch = world.fire(at(2))
        assert batch is not None
        batches.append(batch.batch)
    assert batches[0] == batches[1]


def test_skip_takes_no_action_while_a_run_runs() -> None:
    world = World()
    world.create(schedule())
    world.fire(at(1))
    world.relay(at(1))
    world.fire(at(2))
    world.relay(at(2))
    assert world.started() == [action_workflow_id("report", at(1))] and world.info["overlap_skipped"] == 1


def test_allow_all_starts_every_action() -> None:
    world = World()
    world.create(schedule(overlap="ALLOW_ALL"))
    for minute in (1, 2, 3):
        world.fire(at(minute))
        world.relay(at(minute))
    assert len(world.started()) == 3 and len(world.info["running"]) == 3


def test_buffer_one_keeps_one_start_for_the_close_and_skips_the_rest() -> None:
    world = World()
    world.create(schedule(overlap="BUFFER_ONE"))
    for minute in (1, 2, 3):
        world.fire(at(minute))
        world.relay(at(minute))
    assert [b["nominal_ms"] for b in world.info["buffered"]] == [at(2)] and world.info["overlap_skipped"] == 1
    world.close(action_workflow_id("report", at(1)), at(3) + 1)
    assert world.started() == [action_workflow_id("report", at(1)), action_workflow_id("report", at(2))]
    assert world.info["buffered"] == []


def test_buffer_all_starts_the_buffered_one_at_a_time() -> None:
    world = World()
    world.create(schedule(overlap="BUFFER_ALL"))
    for minute in (1, 2, 3):
        world.fire(at(minute))
        world.relay(at(minute))
    assert len(world.info["buffered"]) == 2
    world.close(action_workflow_id("report", at(1)), at(3) + 1)
    assert len(world.info["buffered"]) == 1 and len(world.info["running"]) == 1
    world.close(action_workflow_id("report", at(2)), at(3) + 2)
    assert world.info["buffered"] == [] and len(world.started()) == 3


def test_cancel_other_and_terminate_other_end_the_running_run_then_start() -> None:
    for overlap, sent, closed in (("CANCEL_OTHER", "RequestCancelWorkflowExecution", "Canceled"),
                                  ("TERMINATE_OTHER", "TerminateWorkflowExecution", "Terminated")):
        world = World()
        world.create(schedule(overlap=overlap))
        world.fire(at(1))
        world.relay(at(1))
        world.fire(at(2))
        first = action_workflow_id("report", at(1))
        assert (first, sent) in [(target, kind) for target, kind, _ in world.outbox]
        world.relay(at(2))
        if overlap == "CANCEL_OTHER":  # the run chooses to end as asked
            assert world.started() == [first] and world.info["buffered"][0]["nominal_ms"] == at(2)
            world.close(first, at(2) + 1, kind="TerminateWorkflowExecution")
        assert world.started() == [first, action_workflow_id("report", at(2))], overlap
        assert world.info["recent_actions"][0]["status"] in (closed, "Terminated")


def test_times_past_the_catch_up_window_are_missed_and_the_rest_taken() -> None:
    world = World()
    world.create(schedule(overlap="ALLOW_ALL", policy__catchup_window_ms=10 * MINUTE))
    world.fire(at(60))  # an hour late: the timer service was down
    world.relay(at(60))
    info = world.info
    assert info["missed_catchup_window"] == 49 and info["action_count"] == 11
    assert min(r["nominal_ms"] for r in info["running"]) == at(50) and info["next_nominal_ms"] == at(61)


def test_pause_drops_the_timer_and_unpause_takes_only_times_after_it() -> None:
    world = World()
    world.create(schedule())
    world.send(KEY, "PatchSchedule", {"run_id": "", "request_id": "p1", "patch": patch(pause=True, note="maintenance")}, at(0) + 1)
    assert world.schedule_timers() == [] and world.schedules.executions[KEY].schedule["state"]["note"] == "maintenance"  # type: ignore[index]
    world.send(KEY, "PatchSchedule", {"run_id": "", "request_id": "p2", "patch": patch(unpause=True)}, at(5) + 30_000)
    (timer,) = world.schedule_timers()
    assert timer["fire_at_ms"] == at(6)
    world.fire(at(6))
    world.relay(at(6))
    assert world.started() == [action_workflow_id("report", at(6))]


def test_trigger_and_backfill_take_actions_now() -> None:
    world = World()
    world.create(schedule(overlap="ALLOW_ALL"), trigger_immediately=True)
    world.relay(at(0))
    assert world.started() == [action_workflow_id("report", at(0))]
    world.send(KEY, "PatchSchedule", {"run_id": "", "request_id": "b1", "patch": patch(backfills=[
        {"start_ms": at(-3), "end_ms": at(-2), "overlap": "ALLOW_ALL"},
    ])}, at(0) + 10)
    world.relay(at(0) + 10)
    assert world.started() == sorted(action_workflow_id("report", at(m)) for m in (-3, -2, 0))


def test_a_limited_schedule_stops_after_its_actions() -> None:
    world = World()
    world.create(schedule(overlap="ALLOW_ALL", state__limited_actions=True, state__remaining_actions=2))
    for minute in (1, 2):
        world.fire(at(minute))
        world.relay(at(minute))
    assert len(world.started()) == 2 and world.schedule_timers() == [] and world.fire(at(3)) is None


def test_pause_on_failure_pauses_when_a_run_fails() -> None:
    world = World()
    world.create(schedule(policy__pause_on_failure=True, overlap="ALLOW_ALL"))
    world.fire(at(1))
    world.relay(at(1))
    workflow_id = action_workflow_id("report", at(1))
    world.send(KEY, "RecordScheduledRunClosed", {
        "run_id": world.info_run_id, "nominal_ms": at(1), "workflow_id": workflow_id,
        "closed_run_id": world.runs.executions[workflow_id].run_id, "status": "Failed",
    }, at(1) + 5)
    definition = world.schedules.executions[KEY].schedule
    assert definition is not None and definition["state"]["paused"] and "Failed" in definition["state"]["note"]
    assert world.schedule_timers() == []


def test_a_refused_start_comes_back_as_start_failed() -> None:
    world = World()
    world.create(schedule())
    workflow_id = action_workflow_id("report", at(1))
    start = {"workflow_type": "Other", "task_queue": "q", "input": [], "request_id": "by-hand", "execution_timeout_ms": 0,
             "run_timeout_ms": 0, "workflow_task_timeout_ms": 0, "id_reuse_policy": "ALLOW_DUPLICATE", "id_conflict_policy": "FAIL",
             "search_attributes": {}}
    world.send(workflow_id, "StartWorkflowExecution", start, at(0) + 1)  # the id taken by hand
    world.fire(at(1))
    delivered = world.relay(at(1))
    assert [kind for _, kind, _ in delivered] == ["StartWorkflowExecution", "RecordScheduledRunClosed"]
    assert world.info["running"] == [] and world.info["recent_actions"][0]["status"] == "StartFailed"


def test_an_update_with_a_stale_conflict_token_is_refused_and_a_good_one_retimes() -> None:
    world = World()
    world.create(schedule())
    stale = world.send(KEY, "UpdateSchedule", {"run_id": "", "request_id": "u0", "schedule": schedule(), "conflict_token": 7}, at(0) + 1)
    assert stale.rejected is not None and stale.rejected.cause == "CONFLICT"
    world.send(KEY, "UpdateSchedule", {"run_id": "", "request_id": "u1", "schedule": schedule(every_ms=10 * MINUTE),
                                       "conflict_token": 0}, at(0) + 2)
    (timer,) = world.schedule_timers()
    assert timer["fire_at_ms"] == at(10) and world.info["conflict_token"] == 1


def test_a_deleted_schedule_refuses_commands_and_reports_and_leaves_its_runs() -> None:
    world = World()
    world.create(schedule())
    world.fire(at(1))
    world.relay(at(1))
    world.send(KEY, "DeleteSchedule", {"run_id": "", "request_id": "d1"}, at(1) + 1)
    assert world.schedule_timers() == []
    refused = world.send(KEY, "PatchSchedule", {"run_id": "", "request_id": "p", "patch": patch(pause=True)}, at(1) + 2)
    assert refused.rejected is not None and refused.rejected.cause == "WORKFLOW_NOT_FOUND"
    world.close(action_workflow_id("report", at(1)), at(1) + 3)  # its close report is refused as stale
    assert world.runs.executions[action_workflow_id("report", at(1))].status == "Terminated"
    resent = world.create(schedule(), now_ms=at(1) + 4)  # the first create sent again: answered, not applied
    assert resent.batch is None and resent.answered_again is not None
    again = world.create(schedule(), now_ms=at(1) + 5, request_id="create-2")
    assert again.rejected is None and world.schedules.executions[KEY].status == "Running"


def test_a_schedule_key_and_a_workflow_id_refuse_each_others_commands() -> None:
    world = World()
    start = {"workflow_type": "W", "task_queue": "q", "input": [], "request_id": "s", "execution_timeout_ms": 0,
             "run_timeout_ms": 0, "workflow_task_timeout_ms": 0, "id_reuse_policy": "ALLOW_DUPLICATE", "id_conflict_policy": "FAIL",
             "search_attributes": {}}
    refused = world.send(KEY, "StartWorkflowExecution", start, T0)
    assert refused.rejected is not None and "reserved for schedules" in str(refused.rejected)
    misplaced = world.send("nightly", "CreateSchedule", {"request_id": "c", "schedule": schedule(), "patch": patch()}, T0)
    assert misplaced.rejected is not None and SCHEDULE_KEY_PREFIX in str(misplaced.rejected)
    bad = world.create(schedule(every_ms=500))
    assert bad.rejected is not None and "at least 1s" in str(bad.rejected)


def test_the_last_event_restores_the_schedule_from_its_checkpoint_row_and_from_the_log() -> None:
    world = World()
    world.create(schedule(overlap="BUFFER_ALL"))
    for minute in (1, 2, 3):
        world.fire(at(minute))
        world.relay(at(minute))
    live = world.schedules.executions[KEY]
    assert len(live.history) == 1  # the last event only: its memory does not grow with its actions
    restored = RunRow.of(live).run()
    assert (restored.schedule, restored.schedule_info, restored.run_id) == (live.schedule, live.schedule_info, live.run_id)
    replayed = PartitionState(0)
    for batch in world.log:
        if batch["workflow_id"] == KEY:
            assert replayed.apply(batch)
    again = replayed.executions[KEY]
    assert (again.schedule, again.schedule_info, again.next_event_id) == (live.schedule, live.schedule_info, live.next_event_id)


def test_a_schedule_keeps_acting_past_a_history_s_event_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine_limits, "MAX_HISTORY_EVENTS", 5)
    world = World()
    world.create(schedule(overlap="ALLOW_ALL"))
    for minute in range(1, 8):
        world.fire(at(minute))
        world.relay(at(minute))
    kinds = {e["attributes"][0] for batch in world.log if batch["workflow_id"] == KEY for e in batch["events"]}
    assert "WorkflowExecutionTerminated" not in kinds and len(world.started()) == 7


def test_a_firing_far_behind_takes_as_many_times_as_its_record_holds_and_comes_back_at_once() -> None:
    big = {"metadata": {"encoding": b"binary/plain"}, "data": b"x" * 1_000_000}
    world = World()
    world.create(schedule(every_ms=1000, overlap="ALLOW_ALL", action__input=[big]))
    late = T0 + 30_000  # 30 times due
    world.fire(late)
    assert 1 <= world.info["action_count"] < 10
    (timer,) = world.schedule_timers()
    assert timer["fire_at_ms"] == late  # the rest are due: at once
    while world.info["processed_until_ms"] < late:
        world.fire(late)
        world.outbox.clear()
    assert world.info["action_count"] == 30


def test_a_change_sent_again_is_answered_not_applied_twice() -> None:
    world = World()
    world.create(schedule(overlap="ALLOW_ALL"))
    trigger = {"run_id": "", "request_id": "t1", "patch": patch(trigger_immediately=True)}
    world.send(KEY, "PatchSchedule", trigger, at(0) + 10)
    again = world.send(KEY, "PatchSchedule", trigger, at(0) + 20)
    assert again.batch is None and world.info["action_count"] == 1
    assert world.create(schedule()).answered_again is not None  # the create too


def test_a_backfill_of_a_time_whose_run_runs_is_skipped_and_a_buffered_one_keeps_its_request_id() -> None:
    world = World()
    world.create(schedule(overlap="BUFFER_ONE"))
    world.fire(at(1))
    world.relay(at(1))
    running_time = {"start_ms": at(1), "end_ms": at(1), "overlap": "ALLOW_ALL"}
    world.send(KEY, "PatchSchedule", {"run_id": "", "request_id": "b1", "patch": patch(backfills=[running_time])}, at(1) + 10)
    assert world.outbox == [] and world.info["overlap_skipped"] == 1 and len(world.info["running"]) == 1
    earlier = {"start_ms": at(-5), "end_ms": at(-5), "overlap": "UNSPECIFIED"}
    world.send(KEY, "PatchSchedule", {"run_id": "", "request_id": "b2", "patch": patch(backfills=[earlier])}, at(1) + 20)
    assert "/backfill/" in world.info["buffered"][0]["request_id"]  # released under its own id, not the time's first
    world.close(action_workflow_id("report", at(1)), at(1) + 30)
    assert world.started() == sorted([action_workflow_id("report", at(1)), action_workflow_id("report", at(-5))])
    assert len(world.info["running"]) == 1 and world.info["running"][0]["run_id"]  # its start was heard


def test_unpause_starts_what_a_close_heard_while_paused_left_buffered() -> None:
    world = World()
    world.create(schedule(overlap="BUFFER_ONE"))
    world.fire(at(1))
    world.relay(at(1))
    world.fire(at(2))  # buffered
    world.send(KEY, "PatchSchedule", {"run_id": "", "request_id": "p", "patch": patch(pause=True)}, at(2) + 1)
    world.close(action_workflow_id("report", at(1)), at(2) + 2)
    assert world.info["buffered"] and not world.info["running"]
    world.send(KEY, "PatchSchedule", {"run_id": "", "request_id": "u", "patch": patch(unpause=True)}, at(2) + 3)
    world.relay(at(2) + 3)
    assert world.started() == [action_workflow_id("report", at(1)), action_workflow_id("report", at(2))]


def test_a_schedule_skipping_time_takes_a_week_of_daily_actions_one_after_another_then_stops_at_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/decisions/0006-time-skipping.md: with its runs closed as they come, a schedule skipping
    a week takes its seven daily actions now, each run started on the schedule's clock."""
    monkeypatch.setenv(TIME_SKIPPING, "1")
    clock.time_skipping_allowed.cache_clear()
    day, week = 24 * 60 * MINUTE, 7 * 24 * 60 * MINUTE
    world = World()
    world.create(schedule(every_ms=day), request_id="ff-week", time_skipping={"enabled": True, "fast_forward_ms": week,
                                                                           "disable_propagation": False})
    for _ in range(100):  # the timer service and the relay, by hand, at one wall-clock instant
        due = [t for t in world.timers.values() if t["fire_at_ms"] <= T0 and t["timer_id"].startswith(world.info_run_id)]
        if not due:
            break
        timer = due[0]
        world.send(KEY, "TimeoutFired", {"run_id": world.info_run_id, "timer_id": timer["timer_id"], "kind": timer["kind"],
                                         "scheduled_event_id": timer["scheduled_event_id"], "attempt": timer["attempt"]}, T0)
        world.relay(T0)
        for workflow_id in [run["workflow_id"] for run in world.info["running"]]:
            world.close(workflow_id, T0)
    clock.time_skipping_allowed.cache_clear()
    assert world.started() == [action_workflow_id("report", T0 + n * day) for n in range(1, 8)]
    assert world.info["clock_offset_ms"] == week and world.info["time_skipping"]["enabled"] is False
    last_skip = [b for b in world.log if b["events"] and b["events"][-1]["attributes"][0] == "ScheduleTimeSkipped"][-1]
    assert last_skip["events"][-1]["attributes"][1]["bound_reached"] and last_skip["events"][-1]["attributes"][1]["request_id"] == "ff-week"
    sixth = world.runs.executions[action_workflow_id("report", T0 + 6 * day)]
    assert sixth.history[0]["event_time_ms"] == T0 + 6 * day  # started on the schedule's clock
