"""The client's schedule types and their records (kadence/client/_schedule_types.py): a schedule
described and sent back by an update is the schedule it was."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kadence.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleCalendarSpec,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleRange,
    ScheduleSpec,
    ScheduleState,
)
from kadence.client._schedule_types import schedule_from_record, schedule_record
from kadence.converter import DataConverter
from kadence.protocol.schedule_spec import schedule_problem


def test_a_schedule_survives_its_record_and_back_headers_included() -> None:
    payloads = DataConverter.default.payload_converter
    header = {"trace": {"metadata": {"encoding": b"json/plain"}, "data": b'"abc"'}}
    schedule = Schedule(
        action=ScheduleActionStartWorkflow("Report", "eu", 3, id="report", task_queue="reports", memo={"team": "data"},
                                           run_timeout=timedelta(minutes=5), headers=header),
        spec=ScheduleSpec(
            calendars=[ScheduleCalendarSpec(hour=(ScheduleRange(9, 17, 2),), comment="office hours")],
            intervals=[ScheduleIntervalSpec(every=timedelta(hours=1), offset=timedelta(minutes=5))],
            cron_expressions=["0 12 * * MON"], skip=[], start_at=datetime(2027, 1, 1, tzinfo=UTC), jitter=timedelta(seconds=30),
            time_zone_name="Europe/Berlin",
        ),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.BUFFER_ALL, catchup_window=timedelta(hours=2), pause_on_failure=True),
        state=ScheduleState(note="n", paused=True, limited_actions=True, remaining_actions=4),
    )
    record = schedule_record(schedule, payloads)
    assert schedule_problem(record) is None
    back = schedule_from_record(record, payloads)
    assert (back.spec, back.policy, back.state) == (schedule.spec, schedule.policy, schedule.state)
    assert (back.action.workflow, back.action.args, back.action.memo, back.action.run_timeout) == ("Report", ["eu", 3], {"team": "data"},
                                                                                                 timedelta(minutes=5))
    assert schedule_record(back, payloads) == record  # an update of what describe gave sends the same schedule


def test_a_schedule_the_history_service_would_refuse_is_refused_by_its_record() -> None:
    payloads = DataConverter.default.payload_converter
    action = ScheduleActionStartWorkflow("Report", id="report", task_queue="reports")
    short_window = Schedule(action=action, spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(minutes=1))]),
                            policy=SchedulePolicy(catchup_window=timedelta(seconds=5)))
    assert "at least 10 s" in str(schedule_problem(schedule_record(short_window, payloads)))
    no_time = Schedule(action=action, spec=ScheduleSpec())
    assert "names no time" in str(schedule_problem(schedule_record(no_time, payloads)))
