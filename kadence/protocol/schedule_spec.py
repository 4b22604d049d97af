"""When a schedule acts: the nominal times a `ScheduleSpec` record names, as Temporal's scheduler
computes them (docs/decisions/0004-schedules-in-the-history-service.md, "Catch-up window, jitter, time zones").

A spec is the union of its calendars (structured fields matched in the spec's time zone), its
cron strings (kadence.protocol.cron) and its intervals (epoch + offset + k × every, in UTC), less
the times its `skip` calendars match, bounded by `start_at_ms` and `end_at_ms`. Nominal times are
whole seconds. A wall time the zone skips (spring forward) is not taken; one it repeats (autumn)
is taken once, at its first occurrence. The history service decides with these functions, so
they are pure: the same spec and tzdata give the same times on every instance.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from kadence.protocol.cron import CronError, CronSchedule, parse_cron
from kadence.protocol.limits import payload_problem
from kadence.protocol.names import SCHEDULE_KEY_PREFIX
from kadence.protocol.zones import UnknownTimeZone, time_zone

Record = Mapping[str, Any]

# The fields of a ScheduleCalendar, with the values each may take.
CALENDAR_FIELDS: dict[str, tuple[int, int]] = {
    "second": (0, 59), "minute": (0, 59), "hour": (0, 23), "day_of_month": (1, 31), "month": (1, 12),
    "year": (1970, 9999), "day_of_week": (0, 6),
}
MIN_CATCHUP_WINDOW_MS = 10_000  # Temporal's least
_SEARCH_DAYS = 366 * 5  # a calendar that matches no day in this long (say 30 February) never matches
_MAX_SKIPPED = 100_000  # nominal times a `skip` may exclude in a row before the spec counts as never acting


class ScheduleSpecError(ValueError):
    """A spec that cannot be computed; the message says which part and why."""


def spec_problem(spec: Record) -> str | None:
    """Why the spec cannot be used, or None."""
    try:
        compiled_spec(_frozen(spec))
    except ScheduleSpecError as err:
        return str(err)
    return None


def schedule_problem(schedule: Record) -> str | None:
    """Why a schedule's definition (a Schedule record) cannot be used, or None: checked by the
    history service, and by the client before it sends one."""
    action = schedule["action"]
    if not (action["workflow_id"] and action["workflow_type"] and action["task_queue"]):
        return "a schedule's action needs a workflow_id, a workflow_type and a task_queue"
    if action["workflow_id"].startswith(SCHEDULE_KEY_PREFIX):
        return f"a schedule's action may not start a workflow id beginning with {SCHEDULE_KEY_PREFIX!r}"
    if problem := payload_problem(action["input"], "a schedule's workflow input"):
        return problem
    if schedule["policy"]["catchup_window_ms"] < MIN_CATCHUP_WINDOW_MS:
        return f"a schedule's catch-up window must be at least {MIN_CATCHUP_WINDOW_MS // 1000} s"
    return spec_problem(schedule["spec"])


def next_time_ms(spec: Record, after_ms: int) -> int | None:
    """The spec's first nominal time after `after_ms`, or None when it acts no more."""
    return compiled_spec(_frozen(spec)).next_after(after_ms)


def times_between_ms(spec: Record, after_ms: int, until_ms: int, limit: int) -> list[int]:
    """The spec's nominal times in (after_ms, until_ms], at most `limit` of them, earliest first."""
    compiled = compiled_spec(_frozen(spec))
    times: list[int] = []
    at = compiled.next_after(after_ms)
    while at is not None and at <= until_ms and len(times) < limit:
        times.append(at)
        at = compiled.next_after(at)
    return times


def jitter_ms(schedule_key: str, nominal_ms: int, jitter_bound_ms: int, next_nominal_ms: int | None) -> int:
    """How long after its nominal time the action at `nominal_ms` fires: a hash of the schedule and
    the time, below the jitter and below the gap to the next nominal time. No random generator, so
    every instance deciding one firing sets the same timer."""
    bound = jitter_bound_ms if next_nominal_ms is None else min(jitter_bound_ms, next_nominal_ms - nominal_ms)
    if bound <= 0:
        return 0
    digest = hashlib.sha256(f"{schedule_key}/{nominal_ms}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % bound


@dataclass(frozen=True)
class Calendar:
    """A structured calendar: a time matches when every field holds its value (an empty field
    holds every value)."""

    second: tuple[int, ...]
    minute: tuple[int, ...]
    hour: tuple[int, ...]
    day_of_month: frozenset[int]
    month: frozenset[int]
    year: frozenset[int]  # empty: every year
    day_of_week: frozenset[int]  # 0 is Sunday

    def matches(self, wall: datetime.datetime) -> bool:
        return (
            self.day_matches(wall.date()) and wall.hour in self.hour and wall.minute in self.minute and wall.second in self.second
        )

    def day_matches(self, day: datetime.date) -> bool:
        return (
            day.month in self.month and day.day in self.day_of_month and day.isoweekday() % 7 in self.day_of_week
            and (not self.year or day.year in self.year)
        )

    def walls_after(self, start: datetime.datetime) -> Iterator[datetime.datetime]:
        """The wall times this calendar matches at or after `start`, in order, over _SEARCH_DAYS
        days of the years it allows (a year not allowed is passed over whole)."""
        day, searched = start.date(), 0
        while searched < _SEARCH_DAYS:
            if self.year and day.year not in self.year:
                later = [year for year in self.year if year > day.year]
                if not later:
                    return
                day = datetime.date(min(later), 1, 1)
            if self.day_matches(day):
                first = (start.hour, start.minute, start.second) if day == start.date() else (0, 0, 0)
                for hour in (h for h in self.hour if h >= first[0]):
                    for minute in (m for m in self.minute if (hour, m) >= first[:2]):
                        for second in (s for s in self.second if (hour, minute, s) >= first):
                            yield datetime.datetime.combine(day, datetime.time(hour, minute, second))
            day += datetime.timedelta(days=1)
            searched += 1


@dataclass(frozen=True)
class CompiledSpec:
    calendars: tuple[Calendar, ...]
    crons: tuple[CronSchedule, ...]
    intervals: tuple[tuple[int, int], ...]  # (every_ms, offset_ms)
    skip: tuple[Calendar, ...]
    start_at_ms: int
    end_at_ms: int  # 0: no end
    zone: datetime.tzinfo

    def next_after(self, after_ms: int) -> int | None:
        """The first nominal time after `after_ms` that no skip calendar matches, within the bounds."""
        at = max(after_ms, self.start_at_ms - 1)
        for _ in range(_MAX_SKIPPED):
            candidates = [t for t in self._candidates(at) if t is not None]
            if not candidates:
                return None
            at = min(candidates)
            if self.end_at_ms and at > self.end_at_ms:
                return None
            wall = self._wall(at)
            if not any(calendar.matches(wall) for calendar in self.skip):
                return at
        return None

    def _candidates(self, after_ms: int) -> Iterator[int | None]:
        for every_ms, offset_ms in self.intervals:
            yield offset_ms + ((after_ms - offset_ms) // every_ms + 1) * every_ms
        for cron in self.crons:
            yield cron.next_after_ms(after_ms)
        if self.calendars:
            start = self._wall((after_ms // 1000 + 1) * 1000)
            for calendar in self.calendars:
                yield self._first_existing(calendar.walls_after(start), after_ms)

    def _first_existing(self, walls: Iterator[datetime.datetime], after_ms: int) -> int | None:
        for wall in walls:
            at_ms = int(wall.replace(tzinfo=self.zone).timestamp()) * 1000  # fold 0: a repeated wall time's first occurrence
            if at_ms > after_ms and self._wall(at_ms) == wall:  # a wall time the zone skips comes back otherwise
                return at_ms
        return None

    def _wall(self, at_ms: int) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(at_ms // 1000, self.zone).replace(tzinfo=None)


def _frozen(spec: Any) -> Any:
    """A hashable form of the spec record, so its compiled form is cached."""
    if isinstance(spec, Mapping):
        return tuple(sorted((key, _frozen(value)) for key, value in spec.items()))
    if isinstance(spec, list | tuple):
        return tuple(_frozen(item) for item in spec)
    return spec


@cache
def compiled_spec(frozen: Any) -> CompiledSpec:
    spec = dict(frozen)
    name = spec.get("time_zone_name", "")
    try:
        zone = time_zone(name)
    except UnknownTimeZone as err:
        raise ScheduleSpecError(str(err)) from err
    intervals = tuple(_interval(dict(interval)) for interval in spec.get("intervals", ()))
    calendars = tuple(_calendar(dict(calendar), "calendar") for calendar in spec.get("calendars", ()))
    skip = tuple(_calendar(dict(calendar), "skip calendar") for calendar in spec.get("skip", ()))
    parsed = [_cron(expression, zone) for expression in spec.get("cron_expressions", ())]
    crons = tuple(cron for cron in parsed if not cron.every_ms)
    intervals += tuple(_interval({"every_ms": cron.every_ms}) for cron in parsed if cron.every_ms)  # @every: epoch-aligned, as Temporal
    start_at_ms, end_at_ms = spec.get("start_at_ms", 0), spec.get("end_at_ms", 0)
    if end_at_ms and end_at_ms < start_at_ms:
        raise ScheduleSpecError("the spec's end_at comes before its start_at")
    if spec.get("jitter_ms", 0) < 0:
        raise ScheduleSpecError("the spec's jitter must not be negative")
    if not (intervals or calendars or crons):
        raise ScheduleSpecError("the spec names no time: give it intervals, calendars or cron_expressions")
    return CompiledSpec(calendars, crons, intervals, skip, start_at_ms, end_at_ms, zone)


def _interval(interval: dict[str, int]) -> tuple[int, int]:
    every_ms, offset_ms = interval["every_ms"], interval.get("offset_ms", 0)
    if every_ms < 1000 or every_ms % 1000:
        raise ScheduleSpecError(f"an interval's every must be whole seconds, at least 1s (got {every_ms} ms)")
    if not 0 <= offset_ms < every_ms or offset_ms % 1000:
        raise ScheduleSpecError(f"an interval's offset must be whole seconds, less than its every (got {offset_ms} ms of {every_ms} ms)")
    return every_ms, offset_ms


def _calendar(calendar: dict[str, Any], what: str) -> Calendar:
    values = {name: _field(calendar.get(name, ()), name, what) for name in CALENDAR_FIELDS}
    return Calendar(
        tuple(sorted(values["second"])), tuple(sorted(values["minute"])), tuple(sorted(values["hour"])),
        frozenset(values["day_of_month"]), frozenset(values["month"]),
        frozenset() if not calendar.get("year") else frozenset(values["year"]), frozenset(values["day_of_week"]),
    )


def _field(ranges: Sequence[Any], name: str, what: str) -> set[int]:
    """A calendar field's values: its ranges (end 0 or below start: the start alone; step 0: 1),
    or every value when it has none."""
    low, high = CALENDAR_FIELDS[name]
    if not ranges:
        return set(range(low, high + 1))
    values: set[int] = set()
    for item in ranges:
        spread = dict(item)
        start, end, step = spread["start"], spread.get("end", 0), spread.get("step", 0) or 1
        end = max(end, start)
        if not low <= start <= end <= high or step < 1:
            raise ScheduleSpecError(f"a {what}'s {name} range {start}-{end}/{step} must stay within {low}-{high}")
        values.update(range(start, end + 1, step))
    return values


def _cron(expression: str, zone: datetime.tzinfo) -> CronSchedule:
    """A cron string of the spec, in the spec's zone unless it names its own (CRON_TZ=)."""
    try:
        cron = parse_cron(expression)
    except CronError as err:
        raise ScheduleSpecError(str(err)) from err
    return cron if expression.strip().startswith(("CRON_TZ=", "TZ=")) else dataclasses.replace(cron, zone=zone)
