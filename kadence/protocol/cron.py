"""Cron schedules as Temporal reads them (robfig/cron): five fields (minute, hour, day of month,
month, day of week) with `*`, `?`, lists, ranges, steps and month or day names; the descriptors
`@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly` and `@every <duration>`; an optional
`CRON_TZ=<zone>` prefix (UTC otherwise; zones from the pinned tzdata: kadence.protocol.zones).
When both day fields are restricted, a day matching either runs, as in cron."""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass

from kadence.protocol.zones import UnknownTimeZone, time_zone

_DESCRIPTORS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
_MONTHS = {name: number for number, name in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split(), start=1)}
_DAYS = {name: number for number, name in enumerate("SUN MON TUE WED THU FRI SAT".split())}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_SEARCH_YEARS = 5  # a schedule that matches no day in this long never matches (say 30 February)


class CronError(ValueError):
    """A cron schedule that cannot be read; the message says which part and why."""


@dataclass(frozen=True)
class CronSchedule:
    expression: str
    zone: datetime.tzinfo
    every_ms: int = 0  # @every: a fixed interval instead of the fields
    minutes: frozenset[int] = frozenset()
    hours: frozenset[int] = frozenset()
    days_of_month: frozenset[int] = frozenset()
    months: frozenset[int] = frozenset()
    days_of_week: frozenset[int] = frozenset()
    any_day_of_month: bool = True
    any_day_of_week: bool = True

    def next_after_ms(self, after_ms: int) -> int:
        """The first time the schedule fires after `after_ms` (epoch ms, whole minutes for fields)."""
        if self.every_ms:
            return after_ms + self.every_ms
        start = datetime.datetime.fromtimestamp(after_ms / 1000, self.zone).replace(second=0, microsecond=0, tzinfo=None)
        start += datetime.timedelta(minutes=1)
        day = start.date()
        for _ in range(366 * _SEARCH_YEARS):
            if day.month in self.months and self._day_matches(day):
                first_minute = (start.hour, start.minute) if day == start.date() else (0, 0)
                for hour in sorted(h for h in self.hours if h >= first_minute[0]):
                    for minute in sorted(m for m in self.minutes if hour > first_minute[0] or m >= first_minute[1]):
                        local = datetime.datetime.combine(day, datetime.time(hour, minute))
                        fires_ms = int(local.replace(tzinfo=self.zone).timestamp() * 1000)
                        if fires_ms > after_ms:
                            return fires_ms
            day += datetime.timedelta(days=1)
        raise CronError(f"cron schedule {self.expression!r} matches no day in {_SEARCH_YEARS} years")

    def _day_matches(self, day: datetime.date) -> bool:
        in_month = day.day in self.days_of_month
        in_week = day.isoweekday() % 7 in self.days_of_week
        if self.any_day_of_month or self.any_day_of_week:
            return in_month and in_week
        return in_month or in_week


def parse_cron(expression: str) -> CronSchedule:
    """The schedule `expression` describes, or CronError saying what is wrong with it."""
    text = expression.strip()
    zone: datetime.tzinfo = datetime.UTC
    if text.startswith(("CRON_TZ=", "TZ=")):
        name, _, text = text.partition("=")[2].partition(" ")
        try:
            zone = time_zone(name)
        except UnknownTimeZone as err:
            raise CronError(f"cron schedule {expression!r}: unknown time zone {name!r}") from err
        text = text.strip()
    if text.startswith("@every"):
        return CronSchedule(expression, zone, every_ms=_duration_ms(expression, text.removeprefix("@every").strip()))
    text = _DESCRIPTORS.get(text, text)
    if text.startswith("@"):
        raise CronError(f"cron schedule {expression!r}: unknown descriptor {text.split()[0]!r}; "
                        f"use one of {', '.join(sorted(_DESCRIPTORS))} or @every <duration>")
    fields = text.split()
    if len(fields) != 5:
        raise CronError(f"cron schedule {expression!r} has {len(fields)} fields; it needs 5: minute hour day-of-month month day-of-week")
    minute, hour, day_of_month, month, day_of_week = fields
    days_of_week = _field(expression, "day-of-week", day_of_week, 0, 7, _DAYS)
    return CronSchedule(
        expression, zone,
        minutes=_field(expression, "minute", minute, 0, 59),
        hours=_field(expression, "hour", hour, 0, 23),
        days_of_month=_field(expression, "day-of-month", day_of_month, 1, 31),
        months=_field(expression, "month", month, 1, 12, _MONTHS),
        days_of_week=frozenset(d % 7 for d in days_of_week),  # 7 is Sunday too
        any_day_of_month=day_of_month in ("*", "?"),
        any_day_of_week=day_of_week in ("*", "?"),
    )


def _field(expression: str, name: str, text: str, low: int, high: int, names: dict[str, int] | None = None) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        span, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if span in ("*", "?"):
                first, last = low, high
            elif "-" in span:
                first_text, last_text = span.split("-", 1)
                first, last = _value(first_text, names), _value(last_text, names)
            else:
                first = _value(span, names)
                last = high if step_text else first
        except ValueError as err:
            raise CronError(f"cron schedule {expression!r}: {name} field {text!r} is not a number, name, range or step") from err
        if step < 1 or not low <= first <= last <= high:
            raise CronError(f"cron schedule {expression!r}: {name} field {text!r} must stay within {low}-{high}, ranges low to high")
        values.update(range(first, last + 1, step))
    return frozenset(values)


def _value(text: str, names: dict[str, int] | None) -> int:
    if names and text.upper() in names:
        return names[text.upper()]
    return int(text)


def go_duration_ms(text: str) -> int:
    """Milliseconds of a Go duration (`90s`, `1h30m`, `1.5h`, `250ms`, `0`); ValueError otherwise."""
    if text == "0":
        return 0
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"{text!r} is not a duration such as 90s, 15m, 1h30m or 250ms")
    return int(sum(float(number) * _UNIT_MS[unit] for number, unit in parts))


def _duration_ms(expression: str, text: str) -> int:
    """A Go duration (`1h30m`, `90s`), as @every takes."""
    try:
        every_ms = go_duration_ms(text)
    except ValueError as err:
        raise CronError(f"cron schedule {expression!r}: @every takes a duration such as 90s, 15m or 1h30m, not {text!r}") from err
    if every_ms < 1000:
        raise CronError(f"cron schedule {expression!r}: @every needs at least 1s")
    return every_ms
