"""Time zones from the pinned `tzdata` package, never the host's `/usr/share/zoneinfo`: two
instances of one release must compute the same wall times, or a zombie's decision and the
owner's would disagree (docs/decisions/0004-schedules-in-the-history-service.md, "Time zones and calendars")."""

from __future__ import annotations

import datetime
from functools import cache
from importlib import resources
from zoneinfo import ZoneInfo


class UnknownTimeZone(ValueError):
    """A zone name the pinned tzdata does not hold."""


@cache
def time_zone(name: str) -> datetime.tzinfo:
    """The zone `name` names ('' and 'UTC' are UTC), read from the tzdata package."""
    if name in ("", "UTC", "Etc/UTC"):
        return datetime.UTC
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise UnknownTimeZone(f"time zone {name!r} is not an IANA zone name such as 'America/New_York'")
    entry = resources.files("tzdata.zoneinfo").joinpath(*parts)
    if not entry.is_file():
        raise UnknownTimeZone(f"unknown time zone {name!r}: tzdata has no such zone (names such as 'Europe/Berlin')")
    with entry.open("rb") as data:
        return ZoneInfo.from_file(data, key=name)
