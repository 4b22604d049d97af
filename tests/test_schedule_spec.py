"""The nominal times of schedule specs (kadence.protocol.schedule_spec): intervals, calendars, cron
strings, skips, bounds, time zones across DST changes, and jitter."""

from __future__ import annotations

import datetime

import pytest

from kadence.protocol.schedule_spec import jitter_ms, next_time_ms, spec_problem, times_between_ms
from kadence.protocol.zones import UnknownTimeZone, time_zone


def ms(*parts: int) -> int:
    return int(datetime.datetime(*parts, tzinfo=datetime.UTC).timestamp() * 1000)  # type: ignore[misc]


def calendar(**fields: int) -> dict[str, list[dict[str, int]]]:
    return {name: [{"start": value}] for name, value in fields.items()}


def test_an_interval_is_aligned_to_the_epoch_plus_its_offset() -> None:
    spec = {"intervals": [{"every_ms": 3_600_000, "offset_ms": 60_000}]}
    assert times_between_ms(spec, ms(2026, 1, 1, 0, 30), ms(2026, 1, 1, 3), 10) == [
        ms(2026, 1, 1, 1, 1), ms(2026, 1, 1, 2, 1),
    ]
    assert next_time_ms(spec, ms(2026, 1, 1, 1, 1)) == ms(2026, 1, 1, 2, 1)  # strictly after


def test_a_calendar_field_left_empty_holds_every_value() -> None:
    spec = {"calendars": [{**calendar(second=0, minute=0), "hour": [{"start": 9, "end": 17, "step": 4}]}]}
    assert times_between_ms(spec, ms(2026, 1, 1), ms(2026, 1, 2), 10) == [ms(2026, 1, 1, 9), ms(2026, 1, 1, 13), ms(2026, 1, 1, 17)]


def test_a_calendar_matches_on_its_day_of_week_and_day_of_month_both() -> None:
    friday_13th = {"calendars": [{**calendar(second=0, minute=0, hour=12, day_of_month=13, day_of_week=5)}]}
    assert next_time_ms(friday_13th, ms(2026, 1, 1)) == ms(2026, 2, 13, 12)


def test_a_cron_string_takes_the_spec_zone_unless_it_names_its_own() -> None:
    in_new_york = {"cron_expressions": ["0 9 * * *"], "time_zone_name": "America/New_York"}
    assert next_time_ms(in_new_york, ms(2026, 7, 1)) == ms(2026, 7, 1, 13)
    own_zone = {"cron_expressions": ["CRON_TZ=Asia/Tokyo 0 9 * * *"], "time_zone_name": "America/New_York"}
    assert next_time_ms(own_zone, ms(2026, 7, 1)) == ms(2026, 7, 2, 0)


def test_every_in_a_cron_string_is_an_interval_from_the_epoch() -> None:
    assert next_time_ms({"cron_expressions": ["@every 10s"]}, ms(2026, 1, 1, 0, 0, 3)) == ms(2026, 1, 1, 0, 0, 10)


def test_skip_start_and_end_bound_the_times() -> None:
    spec = {
        "intervals": [{"every_ms": 3_600_000}], "skip": [calendar(hour=2)],
        "start_at_ms": ms(2026, 1, 1, 1), "end_at_ms": ms(2026, 1, 1, 4),
    }
    assert times_between_ms(spec, 0, ms(2027, 1, 1), 10) == [ms(2026, 1, 1, 1), ms(2026, 1, 1, 3), ms(2026, 1, 1, 4)]


def test_a_wall_time_the_spring_change_skips_is_not_taken_and_one_autumn_repeats_is_taken_once() -> None:
    half_past_two = {"calendars": [calendar(second=0, minute=30, hour=2)], "time_zone_name": "Europe/Berlin"}
    spring = times_between_ms(half_past_two, ms(2026, 3, 28), ms(2026, 3, 31), 10)
    assert spring == [ms(2026, 3, 28, 1, 30), ms(2026, 3, 30, 0, 30)]  # none on the 29th
    autumn = times_between_ms(half_past_two, ms(2026, 10, 24), ms(2026, 10, 27), 10)
    assert autumn == [ms(2026, 10, 24, 0, 30), ms(2026, 10, 25, 0, 30), ms(2026, 10, 26, 1, 30)]  # the first 02:30 on the 25th


def test_a_spec_that_cannot_be_computed_says_why() -> None:
    assert "names no time" in str(spec_problem({}))
    assert "at least 1s" in str(spec_problem({"intervals": [{"every_ms": 500}]}))
    assert "less than its every" in str(spec_problem({"intervals": [{"every_ms": 1000, "offset_ms": 1000}]}))
    assert "unknown time zone" in str(spec_problem({"intervals": [{"every_ms": 1000}], "time_zone_name": "Mars/Olympus"}))
    assert "within 0-23" in str(spec_problem({"calendars": [calendar(hour=24)]}))
    assert "needs 5" in str(spec_problem({"cron_expressions": ["* * *"]}))
    assert spec_problem({"intervals": [{"every_ms": 1000}]}) is None


def test_a_calendar_of_a_later_year_is_found_without_searching_the_years_between() -> None:
    spec = {"calendars": [{**calendar(second=1, minute=2, hour=4, day_of_month=7, month=9), "year": [{"start": 2080}]}]}
    assert next_time_ms(spec, ms(2026, 1, 1)) == ms(2080, 9, 7, 4, 2, 1)
    assert next_time_ms(spec, ms(2080, 9, 8)) is None


def test_a_calendar_that_never_matches_acts_no_more() -> None:
    assert next_time_ms({"calendars": [calendar(day_of_month=30, month=2)]}, ms(2026, 1, 1)) is None


def test_jitter_is_the_same_on_every_decision_and_below_the_gap_to_the_next_time() -> None:
    delays = [jitter_ms("kadence-schedule:a", ms(2026, 1, 1, 0, 0, s), 60_000, ms(2026, 1, 1, 0, 0, s + 1)) for s in range(50)]
    assert delays == [jitter_ms("kadence-schedule:a", ms(2026, 1, 1, 0, 0, s), 60_000, ms(2026, 1, 1, 0, 0, s + 1)) for s in range(50)]
    assert all(0 <= d < 1000 for d in delays) and len(set(delays)) > 10
    assert jitter_ms("kadence-schedule:a", 0, 0, None) == 0


def test_zones_come_from_the_tzdata_package_and_refuse_paths() -> None:
    assert str(time_zone("Europe/Berlin")) == "Europe/Berlin"
    for name in ("Mars/Olympus", "../etc/passwd", "Europe//Berlin"):
        with pytest.raises(UnknownTimeZone):
            time_zone(name)
