"""The schedule types of the client, as temporalio.client names them, and their records
(schemas/Schedule.avsc, ScheduleInfo.avsc, SchedulePatch.avsc): docs/decisions/0004-schedules-in-the-history-service.md."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Any

from kadence import workflow as workflow_module
from kadence.common import to_ms
from kadence.converter import PayloadConverter
from kadence.protocol.records import ScheduleInfo as ScheduleInfoRecord
from kadence.protocol.schedule_spec import times_between_ms

NEXT_ACTION_TIMES = 10  # how many describe() lists, as Temporal's server


class ScheduleOverlapPolicy(IntEnum):
    """What an action does while a run the schedule started still runs (temporalio's values)."""

    SKIP = 1
    BUFFER_ONE = 2
    BUFFER_ALL = 3
    CANCEL_OTHER = 4
    TERMINATE_OTHER = 5
    ALLOW_ALL = 6


@dataclasses.dataclass(frozen=True)
class ScheduleRange:
    """start to end (end 0 or below start: start alone), by step (0: 1)."""

    start: int
    end: int = 0
    step: int = 0


@dataclasses.dataclass(frozen=True)
class ScheduleCalendarSpec:
    """Wall times in the spec's zone; the defaults are temporalio's (second, minute and hour 0; every
    day, month and year)."""

    second: Sequence[ScheduleRange] = (ScheduleRange(0),)
    minute: Sequence[ScheduleRange] = (ScheduleRange(0),)
    hour: Sequence[ScheduleRange] = (ScheduleRange(0),)
    day_of_month: Sequence[ScheduleRange] = (ScheduleRange(1, 31),)
    month: Sequence[ScheduleRange] = (ScheduleRange(1, 12),)
    year: Sequence[ScheduleRange] = ()
    day_of_week: Sequence[ScheduleRange] = (ScheduleRange(0, 6),)
    comment: str | None = None


@dataclasses.dataclass(frozen=True)
class ScheduleIntervalSpec:
    """The times epoch + offset + k × every."""

    every: timedelta
    offset: timedelta | None = None


@dataclasses.dataclass
class ScheduleSpec:
    calendars: Sequence[ScheduleCalendarSpec] = ()
    intervals: Sequence[ScheduleIntervalSpec] = ()
    cron_expressions: Sequence[str] = ()
    skip: Sequence[ScheduleCalendarSpec] = ()
    start_at: datetime | None = None
    end_at: datetime | None = None
    jitter: timedelta | None = None
    time_zone_name: str | None = None


class ScheduleActionStartWorkflow:
    """The workflow each action starts (temporalio's): its id gets the nominal time appended."""

    def __init__(
        self, workflow: type | Callable[..., Any] | str, *args: Any, id: str, task_queue: str, arg_list: Sequence[Any] = (),
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
        memo: Mapping[str, Any] | None = None, search_attributes: Mapping[str, Any] | None = None,
        headers: Mapping[str, Any] | None = None,
    ) -> None:
        """`headers` are payloads (set by interceptors, as temporalio's); the rest are values."""
        definition = workflow_module.definition(workflow)
        self.workflow: str = definition if isinstance(definition, str) else definition.name
        self.args: Sequence[Any] = [*args, *arg_list]
        self.id = id
        self.task_queue = task_queue
        self.execution_timeout = execution_timeout
        self.run_timeout = run_timeout
        self.task_timeout = task_timeout
        self.memo = dict(memo or {})
        self.search_attributes = dict(search_attributes or {})
        self.headers = dict(headers or {})

    def __repr__(self) -> str:
        return (f"ScheduleActionStartWorkflow(workflow={self.workflow!r}, args={self.args!r}, id={self.id!r}, "
                f"task_queue={self.task_queue!r})")


@dataclasses.dataclass
class SchedulePolicy:
    overlap: ScheduleOverlapPolicy = ScheduleOverlapPolicy.SKIP
    catchup_window: timedelta = timedelta(days=365)
    pause_on_failure: bool = False


@dataclasses.dataclass
class ScheduleState:
    note: str | None = None
    paused: bool = False
    limited_actions: bool = False
    remaining_actions: int = 0


@dataclasses.dataclass
class Schedule:
    action: ScheduleActionStartWorkflow
    spec: ScheduleSpec
    policy: SchedulePolicy = dataclasses.field(default_factory=SchedulePolicy)
    state: ScheduleState = dataclasses.field(default_factory=ScheduleState)


@dataclasses.dataclass(frozen=True)
class ScheduleBackfill:
    """Take the nominal times in [start_at, end_at] now, whatever the catch-up window."""

    start_at: datetime
    end_at: datetime
    overlap: ScheduleOverlapPolicy | None = None


@dataclasses.dataclass(frozen=True)
class ScheduleActionExecutionStartWorkflow:
    workflow_id: str
    first_execution_run_id: str  # empty until the schedule heard the run start


@dataclasses.dataclass(frozen=True)
class ScheduleActionResult:
    scheduled_at: datetime  # the nominal time
    started_at: datetime  # when the action was taken
    action: ScheduleActionExecutionStartWorkflow
    status: str  # Running, the run's close status, or StartFailed (Kadence's addition)


@dataclasses.dataclass(frozen=True)
class ScheduleInfo:
    num_actions: int
    num_actions_missed_catchup_window: int
    num_actions_skipped_overlap: int
    running_actions: Sequence[ScheduleActionExecutionStartWorkflow]
    recent_actions: Sequence[ScheduleActionResult]
    next_action_times: Sequence[datetime]
    created_at: datetime
    last_updated_at: datetime | None


@dataclasses.dataclass
class ScheduleDescription:
    id: str
    schedule: Schedule
    info: ScheduleInfo
    conflict_token: int  # what update() sends: an update that came between refuses it


@dataclasses.dataclass(frozen=True)
class ScheduleUpdateInput:
    description: ScheduleDescription


@dataclasses.dataclass(frozen=True)
class ScheduleUpdate:
    schedule: Schedule


@dataclasses.dataclass(frozen=True)
class ScheduleListActionStartWorkflow:
    workflow: str


@dataclasses.dataclass(frozen=True)
class ScheduleListState:
    note: str | None
    paused: bool


@dataclasses.dataclass(frozen=True)
class ScheduleListSchedule:
    action: ScheduleListActionStartWorkflow
    spec: ScheduleSpec
    state: ScheduleListState


@dataclasses.dataclass(frozen=True)
class ScheduleListInfo:
    recent_actions: Sequence[ScheduleActionResult]
    next_action_times: Sequence[datetime]


@dataclasses.dataclass(frozen=True)
class ScheduleListDescription:
    id: str
    schedule: ScheduleListSchedule
    info: ScheduleListInfo


# ---- to records


def _epoch_ms(at: datetime | None) -> int:
    """Epoch ms of `at` (a naive datetime is UTC, as temporalio takes datetime.utcnow())."""
    if at is None:
        return 0
    return int((at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp() * 1000)


def _ranges(ranges: Sequence[ScheduleRange]) -> list[dict[str, int]]:
    return [{"start": r.start, "end": r.end, "step": r.step} for r in ranges]


def _calendar_record(calendar: ScheduleCalendarSpec) -> dict[str, Any]:
    return {
        "second": _ranges(calendar.second), "minute": _ranges(calendar.minute), "hour": _ranges(calendar.hour),
        "day_of_month": _ranges(calendar.day_of_month), "month": _ranges(calendar.month), "year": _ranges(calendar.year),
        "day_of_week": _ranges(calendar.day_of_week), "comment": calendar.comment or "",
    }


def overlap_name(overlap: ScheduleOverlapPolicy | None) -> str:
    return "UNSPECIFIED" if overlap is None else overlap.name


def schedule_record(schedule: Schedule, payloads: PayloadConverter) -> dict[str, Any]:
    """The Schedule record of `schedule` (its payloads as the converter makes them, as a start's)."""
    spec, action = schedule.spec, schedule.action
    return {
        "spec": {
            "calendars": [_calendar_record(c) for c in spec.calendars],
            "intervals": [{"every_ms": to_ms(i.every), "offset_ms": to_ms(i.offset)} for i in spec.intervals],
            "cron_expressions": list(spec.cron_expressions), "skip": [_calendar_record(c) for c in spec.skip],
            "start_at_ms": _epoch_ms(spec.start_at), "end_at_ms": _epoch_ms(spec.end_at), "jitter_ms": to_ms(spec.jitter),
            "time_zone_name": spec.time_zone_name or "",
        },
        "action": {
            "workflow_id": action.id, "workflow_type": action.workflow, "task_queue": action.task_queue,
            "input": payloads.to_payloads(list(action.args)), "execution_timeout_ms": to_ms(action.execution_timeout),
            "run_timeout_ms": to_ms(action.run_timeout), "workflow_task_timeout_ms": to_ms(action.task_timeout),
            "search_attributes": {name: payloads.to_payload(value) for name, value in action.search_attributes.items()},
            "header": dict(action.headers),  # payloads already, as a start's headers
            "memo": {key: payloads.to_payload(value) for key, value in action.memo.items()},
        },
        "policy": {
            "overlap": schedule.policy.overlap.name, "catchup_window_ms": to_ms(schedule.policy.catchup_window),
            "pause_on_failure": schedule.policy.pause_on_failure,
        },
        "state": {
            "note": schedule.state.note or "", "paused": schedule.state.paused, "limited_actions": schedule.state.limited_actions,
            "remaining_actions": schedule.state.remaining_actions,
        },
    }


def patch_record(
    *, trigger_immediately: bool = False, trigger_overlap: ScheduleOverlapPolicy | None = None,
    backfills: Sequence[ScheduleBackfill] = (), pause: bool = False, unpause: bool = False, note: str = "",
    time_skipping: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`time_skipping`: the TimeSkipping record a test's fast-forward of the schedule sets (kadence.testing.TimeSkipper)."""
    return {
        "trigger_immediately": trigger_immediately, "trigger_overlap": overlap_name(trigger_overlap),
        "backfills": [{"start_ms": _epoch_ms(b.start_at), "end_ms": _epoch_ms(b.end_at), "overlap": overlap_name(b.overlap)}
                      for b in backfills],
        "pause": pause, "unpause": unpause, "note": note, "time_skipping": time_skipping,
    }


# ---- from records


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _calendar(record: Mapping[str, Any]) -> ScheduleCalendarSpec:
    def ranges(name: str) -> tuple[ScheduleRange, ...]:
        return tuple(ScheduleRange(r["start"], r["end"], r["step"]) for r in record[name])
    return ScheduleCalendarSpec(
        second=ranges("second"), minute=ranges("minute"), hour=ranges("hour"), day_of_month=ranges("day_of_month"),
        month=ranges("month"), year=ranges("year"), day_of_week=ranges("day_of_week"), comment=record["comment"] or None,
    )


def _spec(record: Mapping[str, Any]) -> ScheduleSpec:
    return ScheduleSpec(
        calendars=[_calendar(c) for c in record["calendars"]],
        intervals=[ScheduleIntervalSpec(timedelta(milliseconds=i["every_ms"]), timedelta(milliseconds=i["offset_ms"]) or None)
                   for i in record["intervals"]],
        cron_expressions=list(record["cron_expressions"]), skip=[_calendar(c) for c in record["skip"]],
        start_at=_time(record["start_at_ms"]) if record["start_at_ms"] else None,
        end_at=_time(record["end_at_ms"]) if record["end_at_ms"] else None,
        jitter=timedelta(milliseconds=record["jitter_ms"]) if record["jitter_ms"] else None,
        time_zone_name=record["time_zone_name"] or None,
    )


def _duration(ms: int) -> timedelta | None:
    return timedelta(milliseconds=ms) if ms else None


def schedule_from_record(record: Mapping[str, Any], payloads: PayloadConverter) -> Schedule:
    action, policy, state = record["action"], record["policy"], record["state"]
    overlap = policy["overlap"]
    return Schedule(
        action=ScheduleActionStartWorkflow(
            action["workflow_type"], *payloads.from_payloads(action["input"]), id=action["workflow_id"],
            task_queue=action["task_queue"], execution_timeout=_duration(action["execution_timeout_ms"]),
            run_timeout=_duration(action["run_timeout_ms"]), task_timeout=_duration(action["workflow_task_timeout_ms"]),
            memo={key: payloads.from_payload(value) for key, value in action["memo"].items()},
            search_attributes={name: payloads.from_payload(value) for name, value in action["search_attributes"].items()},
            headers=action["header"],
        ),
        spec=_spec(record["spec"]),
        policy=SchedulePolicy(
            overlap=ScheduleOverlapPolicy.SKIP if overlap == "UNSPECIFIED" else ScheduleOverlapPolicy[overlap],
            catchup_window=timedelta(milliseconds=policy["catchup_window_ms"]), pause_on_failure=policy["pause_on_failure"],
        ),
        state=ScheduleState(note=state["note"] or None, paused=state["paused"], limited_actions=state["limited_actions"],
                            remaining_actions=state["remaining_actions"]),
    )


def _action_result(run: Mapping[str, Any]) -> ScheduleActionResult:
    return ScheduleActionResult(
        _time(run["nominal_ms"]), _time(run["fired_ms"]), ScheduleActionExecutionStartWorkflow(run["workflow_id"], run["run_id"]),
        run["status"],
    )


def next_action_times(schedule: Mapping[str, Any], info: Mapping[str, Any]) -> list[datetime]:
    """The recorded next nominal time and the spec's following ones (a display: the schedule's
    timer decides)."""
    first = info["next_nominal_ms"]
    if not first:
        return []
    following = times_between_ms(schedule["spec"], first, 2**62, NEXT_ACTION_TIMES - 1)
    return [_time(ms) for ms in (first, *following)]


def info_from_record(schedule: Mapping[str, Any], info: ScheduleInfoRecord) -> ScheduleInfo:
    record: Mapping[str, Any] = info
    return ScheduleInfo(
        num_actions=record["action_count"], num_actions_missed_catchup_window=record["missed_catchup_window"],
        num_actions_skipped_overlap=record["overlap_skipped"],
        running_actions=[ScheduleActionExecutionStartWorkflow(r["workflow_id"], r["run_id"]) for r in record["running"]],
        recent_actions=[_action_result(r) for r in record["recent_actions"]],
        next_action_times=next_action_times(schedule, record), created_at=_time(record["created_ms"]),
        last_updated_at=_time(record["updated_ms"]) if record["updated_ms"] != record["created_ms"] else None,
    )
