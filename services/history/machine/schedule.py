"""Schedules: an entity of its own kind beside runs, keyed by `kadence-schedule:<schedule id>`
(docs/decisions/0004-schedules-in-the-history-service.md). It holds its definition (`Schedule`) and what it has done
(`ScheduleInfo`); every event it records carries both as its transition leaves them, so the last
event is the whole state, which is all the execution keeps of its history (`dispatch.fold`).

One pending SCHEDULE_ACTION timer, named by the event that set it, wakes it at the next nominal
time plus its jitter. A firing takes every nominal time due by the decision's time: a time older
than the catch-up window is missed, the others are taken under the overlap policy. An action is a
StartWorkflowExecution relayed to the action's workflow id with the nominal time appended, under
the request id `schedule/<schedule id>/<nominal ms>`, so every repeat of a decision starts one run;
the run reports its start and its close back (lifecycle.py), and a refused start comes back as a
close with status StartFailed (effects.rejection_answer).
"""

from __future__ import annotations

import copy
import datetime
import json
from collections.abc import Mapping
from typing import Any, cast

from kadence.protocol.events import SCHEDULE_EVENTS
from kadence.protocol.ids import run_id_for
from kadence.protocol.limits import MAX_RECORD_VALUE_BYTES, encoded_bytes_bound
from kadence.protocol.names import SCHEDULE_KEY_PREFIX, CommandType, EventType, TimerKind
from kadence.protocol.records import (
    CreateSchedule,
    DeleteSchedule,
    PatchSchedule,
    Payload,
    RecordScheduledRunClosed,
    RecordScheduledRunStarted,
    Schedule,
    ScheduleActionResult,
    ScheduledRun,
    ScheduleInfo,
    SchedulePatch,
    TimeoutFired,
    UpdateSchedule,
)
from kadence.protocol.schedule_spec import jitter_ms, next_time_ms, schedule_problem, times_between_ms
from services.history.machine.effects import START_FAILED, drop, outbound, timer
from services.history.machine.execution import RUNNING, Execution, TimeSkipping
from services.history.machine.records import EventAttributes, HistoryEvent, attributes
from services.history.machine.tables import Apply, Decide, Timeout
from services.history.machine.transition import Rejected, Transition

DELETED = "Deleted"
RECENT_ACTIONS = 10
MAX_BUFFERED = 1000  # Temporal's limit of buffered starts
# Runs an ALLOW_ALL schedule keeps as running (the newest; the others' reports still update recent
# actions): its decisions never read them, and every event carries them.
MAX_RUNNING_HELD = 1000
CLOCK_SKEW_RETRY_MS = 100  # a firing none of whose times are due yet (clocks apart) comes back after this
RECENT_REQUESTS = 20  # request ids of the last changes: one sent again is answered, not applied twice
MAX_TIMES_PER_DECISION = 100  # nominal times one batch takes; a firing with more due sets its timer for now
ACTIONS_RECORD_SHARE = MAX_RECORD_VALUE_BYTES // 2  # what one firing's starts may take of its record
FAILED_CLOSES = frozenset({"Failed", "TimedOut"})  # what pause on failure pauses for (as Temporal)


def schedule_id_of(key: str) -> str:
    return key.removeprefix(SCHEDULE_KEY_PREFIX)


def action_workflow_id(workflow_id: str, nominal_ms: int) -> str:
    """The workflow id of the action at `nominal_ms`: the action's, with the nominal time appended
    in RFC 3339 (as Temporal's scheduler names its runs)."""
    return f"{workflow_id}-{_rfc3339(nominal_ms)}"


def _rfc3339(at_ms: int) -> str:
    stamp = datetime.datetime.fromtimestamp(at_ms / 1000, datetime.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S") + (f".{at_ms % 1000:03d}Z" if at_ms % 1000 else "Z")


def execution_from_schedule_event(workflow_id: str, run_id: str, event: HistoryEvent) -> Execution:
    """A schedule's execution from any of its events (each carries the whole state)."""
    ex = Execution(workflow_id=workflow_id, run_id=run_id, workflow_type="", task_queue="")
    _held(ex, event)
    return ex


# ---- apply: every event carries the whole state


def _held(ex: Execution, event: HistoryEvent) -> None:
    attrs = attributes(event)
    ex.schedule, ex.schedule_info = attrs["schedule"], attrs["info"]
    ex.clock_offset_ms, ex.time_skipping = _clock(attrs["info"])
    if event["attributes"][0] == EventType.ScheduleDeleted:
        ex.status = DELETED


def _clock(info: ScheduleInfo) -> tuple[int, TimeSkipping | None]:
    """A schedule's clock and its skipping, which its info keeps (docs/decisions/0006-time-skipping.md)."""
    setting = info.get("time_skipping")
    if setting is None:
        return info.get("clock_offset_ms", 0), None
    until_ms, request_id = info.get("skip_until_ms", 0), info.get("skip_request_id", "")
    return info.get("clock_offset_ms", 0), TimeSkipping(setting["enabled"], until_ms, request_id, setting["disable_propagation"])


APPLY: dict[str, Apply] = {kind: _held for kind in SCHEDULE_EVENTS}


# ---- deciding


class _Deciding:
    """One transition of a schedule: a copy of its state the decision changes, the events that
    record it, and the timers and commands it sends."""

    def __init__(self, ex: Execution, now_ms: int) -> None:
        assert ex.schedule is not None and ex.schedule_info is not None
        self.t = Transition(ex, now_ms)
        self.schedule: Schedule = copy.deepcopy(ex.schedule)
        self.info: ScheduleInfo = copy.deepcopy(ex.schedule_info)
        self.actions: list[ScheduleActionResult] = []
        self.fired_timer = 0  # the event id of the timer this transition's firing consumed
        self.behind = False  # a firing left nominal times due for the next
        self.key = ex.workflow_id

    @property
    def now_ms(self) -> int:
        return self.t.now_ms

    def record(self, kind: str, **extra: object) -> None:
        """Record an event with the state as it is now."""
        # Cast: each schedule event's attributes are the state and its own fields.
        self.t.add(kind, cast(EventAttributes, {"schedule": copy.deepcopy(self.schedule), "info": copy.deepcopy(self.info), **extra}))

    def record_actions(self) -> None:
        """Record what the actions taken since the last did, if any."""
        if self.actions:
            self.record(EventType.ScheduleActionsTaken, actions=self.actions)
            self.actions = []

    # -- actions

    def take(self, nominal_ms: int, overlap: str, request_id: str) -> None:
        """Take the action at `nominal_ms` under the overlap policy, given the runs still running."""
        overlap = overlap if overlap != "UNSPECIFIED" else _policy_overlap(self.schedule)
        running = self.info["running"]
        workflow_id = action_workflow_id(self.schedule["action"]["workflow_id"], nominal_ms)
        if any(run["workflow_id"] == workflow_id for run in running):  # a trigger or backfill of a time whose run runs
            self._skipped(nominal_ms)
        elif not running or overlap == "ALLOW_ALL":
            self._start(nominal_ms, request_id)
        elif overlap == "SKIP":
            self._skipped(nominal_ms)
        elif overlap == "BUFFER_ONE" and self.info["buffered"]:
            self._skipped(nominal_ms)
        elif overlap in ("BUFFER_ONE", "BUFFER_ALL"):
            self._buffer(nominal_ms, overlap, request_id)
        else:  # CANCEL_OTHER or TERMINATE_OTHER: the start waits for the runs it ends
            for earlier in self.info["buffered"]:
                self._skipped(earlier["nominal_ms"])
            self.info["buffered"] = []
            self._buffer(nominal_ms, overlap, request_id)
            for run in running:
                self._end_other(run, nominal_ms, overlap)

    def _start(self, nominal_ms: int, request_id: str) -> None:
        if self.schedule["state"]["limited_actions"]:
            if self.schedule["state"]["remaining_actions"] <= 0:
                self.actions.append({"nominal_ms": nominal_ms, "fate": "NO_ACTIONS_LEFT", "workflow_id": ""})
                return
            self.schedule["state"]["remaining_actions"] -= 1
        action = self.schedule["action"]
        workflow_id = action_workflow_id(action["workflow_id"], nominal_ms)
        run: ScheduledRun = {"nominal_ms": nominal_ms, "fired_ms": self.now_ms, "workflow_id": workflow_id, "run_id": "", "status": RUNNING}
        self.info["running"].append(run)
        if len(self.info["running"]) > MAX_RUNNING_HELD:  # ALLOW_ALL only: its decisions do not read them
            self.info["running"] = self.info["running"][-MAX_RUNNING_HELD:]
        self.info["recent_actions"] = [*self.info["recent_actions"], copy.copy(run)][-RECENT_ACTIONS:]
        self.info["action_count"] += 1
        self.actions.append({"nominal_ms": nominal_ms, "fate": "STARTED", "workflow_id": workflow_id})
        self.t.effects.append(outbound(workflow_id, CommandType.StartWorkflowExecution, {
            "workflow_type": action["workflow_type"], "task_queue": action["task_queue"], "input": action["input"],
            "request_id": request_id, "execution_timeout_ms": action["execution_timeout_ms"],
            "run_timeout_ms": action["run_timeout_ms"], "workflow_task_timeout_ms": action["workflow_task_timeout_ms"],
            "id_reuse_policy": "ALLOW_DUPLICATE", "id_conflict_policy": "FAIL",
            "search_attributes": {**action["search_attributes"], **_scheduled_attributes(self.key, nominal_ms)},
            "initiated_by": None, "start_delay_ms": 0, "cron_schedule": "", "header": action["header"], "memo": action["memo"],
            "scheduled_by": {"schedule_workflow_id": self.key, "schedule_run_id": self.t.execution.run_id, "nominal_ms": nominal_ms},
            **self.t.execution.clock_for_started_run(),
        }))

    def _skipped(self, nominal_ms: int) -> None:
        self.info["overlap_skipped"] += 1
        self.actions.append({"nominal_ms": nominal_ms, "fate": "SKIPPED", "workflow_id": ""})

    def _buffer(self, nominal_ms: int, overlap: str, request_id: str) -> None:
        if len(self.info["buffered"]) >= MAX_BUFFERED:
            self._skipped(nominal_ms)
            return
        self.info["buffered"].append({"nominal_ms": nominal_ms, "overlap": overlap, "request_id": request_id})
        self.actions.append({"nominal_ms": nominal_ms, "fate": "BUFFERED", "workflow_id": ""})

    def _end_other(self, run: ScheduledRun, nominal_ms: int, overlap: str) -> None:
        verb = "cancel" if overlap == "CANCEL_OTHER" else "terminate"
        request_id = f"schedule/{schedule_id_of(self.key)}/{nominal_ms}/{verb}/{run['workflow_id']}"
        reason = f"schedule {schedule_id_of(self.key)!r} overlap policy {overlap} at {_rfc3339(nominal_ms)}"
        if verb == "cancel":
            self.t.effects.append(outbound(run["workflow_id"], CommandType.RequestCancelWorkflowExecution, {
                "run_id": "", "reason": reason, "request_id": request_id, "initiated_by": None,
            }))
        else:
            self.t.effects.append(outbound(run["workflow_id"], CommandType.TerminateWorkflowExecution, {
                "run_id": "", "reason": reason, "details": [], "request_id": request_id,
            }))
        self.actions.append({"nominal_ms": nominal_ms, "fate": overlap, "workflow_id": run["workflow_id"]})

    def release_buffered(self) -> None:
        """Start buffered actions while nothing runs (one at a time: each waits for the one before)."""
        while self.info["buffered"] and not self.info["running"]:
            first = self.info["buffered"].pop(0)
            self._start(first["nominal_ms"], first["request_id"] or _request_id(self.key, first["nominal_ms"]))

    def take_due(self) -> None:
        """Take the nominal times due by now since the last decided, at most a batch's worth (by
        count, and by the bytes of the starts they send)."""
        window_start = self.now_ms - self.schedule["policy"]["catchup_window_ms"]
        batch = min(MAX_TIMES_PER_DECISION, max(1, ACTIONS_RECORD_SHARE // _start_bytes_bound(self.schedule)))
        due = times_between_ms(self.schedule["spec"], self.info["processed_until_ms"], self.now_ms, batch)
        for nominal_ms in due:
            if nominal_ms < window_start:
                self.info["missed_catchup_window"] += 1
                self.actions.append({"nominal_ms": nominal_ms, "fate": "MISSED", "workflow_id": ""})
            else:
                self.take(nominal_ms, "UNSPECIFIED", _request_id(self.key, nominal_ms))
            self.info["processed_until_ms"] = nominal_ms
        self.behind = len(due) == batch

    # -- the timer

    def retime(self, event_id: int) -> None:
        """Set the timer for the next nominal time (recorded by the event `event_id`, which names
        it), dropping the one pending unless it is the one that fired."""
        self.drop_timer()
        if self.t.execution.status != RUNNING or self.schedule["state"]["paused"] or self._out_of_actions():
            return
        spec = self.schedule["spec"]
        next_ms = self.now_ms if self.behind else next_time_ms(spec, self.info["processed_until_ms"])  # more due: at once
        if next_ms is None:
            return
        following = next_time_ms(spec, next_ms)
        fire_ms = next_ms + jitter_ms(self.key, next_ms, spec["jitter_ms"], following)
        if self.fired_timer and not self.actions:  # fired before its time by this clock: not at once again
            fire_ms = max(fire_ms, self.now_ms + CLOCK_SKEW_RETRY_MS)
        self.info["timer_event_id"], self.info["timer_fire_ms"], self.info["next_nominal_ms"] = event_id, fire_ms, next_ms
        self.t.effects.append(timer(self.t.execution, TimerKind.SCHEDULE_ACTION, fire_ms, event_id, 1))

    def drop_timer(self) -> None:
        """The pending timer goes (unless it is the one that fired: its firing dropped it)."""
        pending = self.info["timer_event_id"]
        if pending and pending != self.fired_timer:
            self.t.effects.append(drop(self.t.execution, TimerKind.SCHEDULE_ACTION, pending, 1))
        self.info["timer_event_id"], self.info["timer_fire_ms"], self.info["next_nominal_ms"] = 0, 0, 0

    def _out_of_actions(self) -> bool:
        state = self.schedule["state"]
        return state["limited_actions"] and state["remaining_actions"] <= 0

    def finish(self, kind: str, *, retime: bool = True, **extra: object) -> Transition:
        """Record the decision's event, then what its actions did; when `retime`, the timer is set
        anew, named by the last event (else the pending one stands: the next time is as it was)."""
        if retime:
            self.retime(self.t.next_event_id + (1 if self.actions else 0))
        self.record(kind, **extra)
        self.record_actions()
        return self.t


def _start_bytes_bound(schedule: Schedule) -> int:
    """A bound of the encoded size of one action's start (its payloads and a few ids)."""
    action = schedule["action"]
    return encoded_bytes_bound([action["input"], action["search_attributes"], action["header"], action["memo"]]) + 2048


def _policy_overlap(schedule: Schedule) -> str:
    overlap = schedule["policy"]["overlap"]
    return "SKIP" if overlap == "UNSPECIFIED" else overlap


def _request_id(key: str, nominal_ms: int) -> str:
    return f"schedule/{schedule_id_of(key)}/{nominal_ms}"


def _scheduled_attributes(key: str, nominal_ms: int) -> dict[str, Payload]:
    """The search attributes Temporal's scheduler sets on the runs it starts."""
    def json_payload(value: str) -> Payload:
        return {"metadata": {"encoding": b"json/plain"}, "data": json.dumps(value).encode()}
    return {
        "TemporalScheduledById": json_payload(schedule_id_of(key)),
        "TemporalScheduledStartTime": json_payload(_rfc3339(nominal_ms)),
    }


def _patched(d: _Deciding, patch: SchedulePatch, request_id: str) -> None:
    """A patch's pause or unpause, trigger, backfills and time skipping."""
    if (skipping := patch.get("time_skipping")) is not None:
        d.info["time_skipping"] = {**skipping, "fast_forward_ms": 0}
        d.info["skip_until_ms"] = d.now_ms + skipping["fast_forward_ms"] if skipping["enabled"] else 0
        d.info["skip_request_id"] = request_id if skipping["enabled"] else ""
    state = d.schedule["state"]
    if patch["pause"] or patch["unpause"]:
        state["paused"] = patch["pause"]
        state["note"] = patch["note"] or state["note"]
        if patch["unpause"]:
            d.info["processed_until_ms"] = max(d.info["processed_until_ms"], d.now_ms)  # times passed while paused are not taken
            d.release_buffered()  # a close heard while paused left its buffered start waiting
    if patch["trigger_immediately"]:
        d.take(d.now_ms, patch["trigger_overlap"], f"{_request_id(d.key, d.now_ms)}/trigger")
    for backfill in patch["backfills"]:
        for nominal_ms in times_between_ms(d.schedule["spec"], backfill["start_ms"] - 1, backfill["end_ms"], MAX_BUFFERED):
            d.take(nominal_ms, backfill["overlap"], f"{_request_id(d.key, nominal_ms)}/backfill/{d.t.first_event_id}")


# ---- commands


def decide_create(
    current: Execution | None, key: str, cmd: CreateSchedule, identity: str, now_ms: int, source_partition: int, source_offset: int,
) -> Transition:
    """CreateSchedule, whose entity may not exist yet (or be a deleted schedule's): a start's path,
    its run id derived from the command's position."""
    if current is not None and repeated(current, cmd):
        return Transition(current, now_ms, repeat=True)
    if current is not None and current.status == RUNNING:
        raise Rejected(f"schedule {schedule_id_of(key)!r} already exists", "SCHEDULE_ALREADY_RUNNING")
    problem = schedule_problem(cmd["schedule"])
    if problem:
        raise Rejected(problem)
    run_id = run_id_for(key, source_partition, source_offset)
    ex = Execution(workflow_id=key, run_id=run_id, workflow_type="", task_queue="", start_request_id=cmd["request_id"])
    ex.schedule, ex.schedule_info = cmd["schedule"], _new_info(now_ms)
    remember(ex.schedule_info, cmd["request_id"])
    d = _Deciding(ex, now_ms)
    _patched(d, cmd["patch"], cmd["request_id"])
    return d.finish(EventType.ScheduleCreated, request_id=cmd["request_id"])


def _new_info(now_ms: int) -> ScheduleInfo:
    return {
        "running": [], "buffered": [], "recent_actions": [], "processed_until_ms": now_ms, "next_nominal_ms": 0,
        "timer_event_id": 0, "timer_fire_ms": 0, "action_count": 0, "overlap_skipped": 0, "missed_catchup_window": 0,
        "conflict_token": 0, "created_ms": now_ms, "updated_ms": now_ms, "recent_request_ids": [],
        "clock_offset_ms": 0, "time_skipping": None, "skip_until_ms": 0, "skip_request_id": "",
    }


def remember(info: ScheduleInfo, request_id: str) -> None:
    """Keep a change's request id, so the same change sent again is answered, not applied again."""
    if request_id:
        info["recent_request_ids"] = [*info["recent_request_ids"], request_id][-RECENT_REQUESTS:]


def repeated(ex: Execution, cmd: Mapping[str, Any]) -> bool:
    """Whether a client's command to the schedule was applied before (a retry of one whose answer was lost)."""
    request_id = cmd.get("request_id", "")
    return bool(request_id) and ex.schedule_info is not None and request_id in ex.schedule_info["recent_request_ids"]


def _updated(ex: Execution, cmd: UpdateSchedule, identity: str, now_ms: int) -> Transition:
    d = _Deciding(ex, now_ms)
    if cmd["conflict_token"] >= 0 and cmd["conflict_token"] != d.info["conflict_token"]:
        raise Rejected(f"schedule {schedule_id_of(ex.workflow_id)!r} was updated since it was described: describe it again", "CONFLICT")
    problem = schedule_problem(cmd["schedule"])
    if problem:
        raise Rejected(problem)
    d.schedule = copy.deepcopy(cmd["schedule"])
    d.info["conflict_token"] += 1
    d.info["updated_ms"] = now_ms
    d.info["processed_until_ms"] = max(d.info["processed_until_ms"], now_ms)  # the new spec acts from now
    if not d.schedule["state"]["paused"]:
        d.release_buffered()
    remember(d.info, cmd["request_id"])
    return d.finish(EventType.ScheduleUpdated)


def _patch(ex: Execution, cmd: PatchSchedule, identity: str, now_ms: int) -> Transition:
    d = _Deciding(ex, now_ms)
    _patched(d, cmd["patch"], cmd["request_id"])
    d.info["updated_ms"] = now_ms
    remember(d.info, cmd["request_id"])
    pausing = cmd["patch"]["pause"] or cmd["patch"]["unpause"]
    return d.finish(EventType.SchedulePatched, retime=pausing, patch=cmd["patch"])


def _delete(ex: Execution, cmd: DeleteSchedule, identity: str, now_ms: int) -> Transition:
    d = _Deciding(ex, now_ms)
    d.drop_timer()
    d.info["buffered"] = []
    remember(d.info, cmd["request_id"])
    d.record(EventType.ScheduleDeleted)
    return d.t


def _run_started(ex: Execution, cmd: RecordScheduledRunStarted, identity: str, now_ms: int) -> Transition:
    d = _Deciding(ex, now_ms)
    run, recent = _run_of(d.info["running"], cmd), _run_of(d.info["recent_actions"], cmd)
    if run is None and recent is None:
        raise Rejected(f"no action of the schedule at {cmd['nominal_ms']} awaits its start ({cmd['workflow_id']})")
    for held in (run, recent):  # a continue-as-new's next run replaces the one before
        if held is not None:
            held["run_id"] = cmd["started_run_id"]
    d.record(EventType.ScheduledRunStarted, nominal_ms=cmd["nominal_ms"], workflow_id=cmd["workflow_id"], run_id=cmd["started_run_id"])
    return d.t


def _run_closed(ex: Execution, cmd: RecordScheduledRunClosed, identity: str, now_ms: int) -> Transition:
    d = _Deciding(ex, now_ms)
    run, recent = _run_of(d.info["running"], cmd), _run_of(d.info["recent_actions"], cmd)
    known = run if run is not None else recent
    if known is None or known["status"] != RUNNING or (cmd["status"] == START_FAILED and known["run_id"]):
        # none such, closed before, or a late repeat of a start that did start
        raise Rejected(f"no run of the schedule's action at {cmd['nominal_ms']} is running ({cmd['workflow_id']})")
    if run is not None:
        d.info["running"].remove(run)
    if recent is not None:
        recent["status"] = cmd["status"]
    pausing = d.schedule["policy"]["pause_on_failure"] and cmd["status"] in FAILED_CLOSES
    if pausing:
        d.schedule["state"]["paused"] = True
        d.schedule["state"]["note"] = f"paused: the run {cmd['workflow_id']} ({cmd['closed_run_id']}) closed {cmd['status']}"
    elif not d.schedule["state"]["paused"]:
        d.release_buffered()
    return d.finish(
        EventType.ScheduledRunClosed, retime=pausing, nominal_ms=cmd["nominal_ms"], workflow_id=cmd["workflow_id"],
        run_id=cmd["closed_run_id"], status=cmd["status"],
    )


def _run_of(runs: list[ScheduledRun], report: RecordScheduledRunStarted | RecordScheduledRunClosed) -> ScheduledRun | None:
    """The run among `runs` (running or recent) a report is about: its nominal time and workflow id."""
    return next((r for r in runs if (r["nominal_ms"], r["workflow_id"]) == (report["nominal_ms"], report["workflow_id"])), None)


def _fired(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    if ex.schedule_info is None or cmd["scheduled_event_id"] != ex.schedule_info["timer_event_id"]:
        raise Rejected("stale schedule timer")
    d = _Deciding(ex, now_ms)
    d.fired_timer = cmd["scheduled_event_id"]
    d.take_due()  # none may be due, by a clock behind the timer service's: the timer is set again
    d.retime(d.t.next_event_id)
    d.record(EventType.ScheduleActionsTaken, actions=d.actions)
    return d.t


def skipped(ex: Execution, now_ms: int, to_ms: int, bound_reached: bool) -> Transition:
    """The schedule's clock jumps to `to_ms` (its next action, or its fast-forward's bound, which
    ends its skipping): recorded as every schedule event is, with its whole state. Its pending
    timer is set again by the jump's effects (clock.py)."""
    d = _Deciding(ex, now_ms)
    d.info["clock_offset_ms"] = d.info.get("clock_offset_ms", 0) + to_ms - now_ms
    request_id = d.info.get("skip_request_id", "") if bound_reached else ""
    if bound_reached and (setting := d.info.get("time_skipping")) is not None:
        d.info["time_skipping"] = {**setting, "enabled": False}
        d.info["skip_until_ms"], d.info["skip_request_id"] = 0, ""
    d.record(EventType.ScheduleTimeSkipped, skipped_ms=to_ms - now_ms, bound_reached=bound_reached, request_id=request_id)
    return d.t


COMMANDS: dict[str, Decide] = {
    CommandType.UpdateSchedule: _updated, CommandType.PatchSchedule: _patch, CommandType.DeleteSchedule: _delete,
    CommandType.RecordScheduledRunStarted: _run_started, CommandType.RecordScheduledRunClosed: _run_closed,
}
TIMEOUTS: dict[str, Timeout] = {TimerKind.SCHEDULE_ACTION: _fired}
