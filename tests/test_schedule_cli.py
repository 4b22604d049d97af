"""The `kadence schedule` commands, run as a user runs them (separate processes against the session
stack): create, list, describe, toggle, trigger, backfill, update and delete a schedule that acts
every second, and the errors a bad option or an unknown schedule give."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kadence.dev.local_stack import LocalStack
from tests.conftest import audit_of
from tests.test_cli import REPO, kadence, kadence_at_once, worker  # noqa: F401 (worker: a fixture, used by name)


def described(stack: LocalStack, schedule_id: str) -> dict[str, Any]:
    shown = kadence(stack, "schedule", "describe", "-s", schedule_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)  # type: ignore[no-any-return]


def described_when(stack: LocalStack, schedule_id: str, check: Callable[[dict[str, Any]], bool], timeout_s: float = 30) -> dict[str, Any]:
    """The schedule's description once `check` holds (it acts on its own time)."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, Any] = {}
    while time.monotonic() < deadline:
        last = described(stack, schedule_id)
        if check(last):
            return last
        time.sleep(0.3)
    raise AssertionError(f"the schedule never got there: {last}")


@pytest.mark.usefixtures("worker")
def test_a_schedule_made_and_managed_by_the_cli(stack: LocalStack, task_queue: str) -> None:
    schedule_id = f"cli-schedule-{uuid.uuid4()}"
    created = kadence(stack, "schedule", "create", "-s", schedule_id, "-w", f"tick-{schedule_id}", "-t", "EchoWorkflow",
                      "-q", task_queue, "-i", '"tick"', "--interval", "1s", "--overlap-policy", "AllowAll", "--notes", "from the cli",
                      "--json")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout) == {"schedule_id": schedule_id, "created": True}

    listing, again = kadence_at_once(
        stack,
        ("schedule", "list", "--json"),
        ("schedule", "create", "-s", schedule_id, "-w", "other", "-t", "EchoWorkflow", "-q", task_queue, "--interval", "1h"),
    )
    mine = [s for s in json.loads(listing.stdout) if s["id"] == schedule_id]
    assert len(mine) == 1, listing.stdout + listing.stderr
    assert mine[0]["schedule"]["action"] == {"workflow": "EchoWorkflow"}
    assert mine[0]["schedule"]["state"] == {"note": "from the cli", "paused": False}
    assert mine[0]["schedule"]["spec"]["intervals"] == [{"every": "1s", "offset": None}]
    assert again.returncode == 1 and f"schedule {schedule_id!r} already exists" in again.stderr, again.stderr

    ran = described_when(stack, schedule_id, lambda d: any(a["status"] == "Completed" for a in d["info"]["recent_actions"]))
    assert ran["schedule"]["action"]["args"] == ["tick"] and ran["schedule"]["action"]["task_queue"] == task_queue
    assert ran["schedule"]["policy"]["overlap"] == "AllowAll" and ran["schedule"]["policy"]["catchup_window"] == "8760h"
    completed = next(a for a in ran["info"]["recent_actions"] if a["status"] == "Completed")
    assert completed["action"]["workflow_id"] == f"tick-{schedule_id}-{completed['scheduled_at']}"
    assert ran["info"]["num_actions"] >= 1 and ran["info"]["next_action_times"]

    paused = kadence(stack, "schedule", "toggle", "-s", schedule_id, "--pause", "--reason", "maintenance")
    assert paused.returncode == 0, paused.stderr
    held = described(stack, schedule_id)
    assert held["schedule"]["state"]["paused"] and held["schedule"]["state"]["note"] == "maintenance"
    assert held["info"]["next_action_times"] == []
    count = held["info"]["num_actions"]
    time.sleep(2)
    assert described(stack, schedule_id)["info"]["num_actions"] == count

    triggered = kadence(stack, "schedule", "trigger", "-s", schedule_id)
    assert triggered.returncode == 0, triggered.stderr
    described_when(stack, schedule_id, lambda d: d["info"]["num_actions"] == count + 1)
    ten_minutes_ago = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=10)
    backfilled = kadence(stack, "schedule", "backfill", "-s", schedule_id, "--start-time", ten_minutes_ago.isoformat(),
                         "--end-time", (ten_minutes_ago + timedelta(seconds=2)).isoformat(), "--overlap-policy", "AllowAll")
    assert backfilled.returncode == 0, backfilled.stderr
    filled = described_when(stack, schedule_id, lambda d: d["info"]["num_actions"] == count + 4)
    nominal = {a["scheduled_at"] for a in filled["info"]["recent_actions"]}
    assert {(ten_minutes_ago + timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%SZ") for s in range(3)} <= nominal

    updated = kadence(stack, "schedule", "update", "-s", schedule_id, "-w", f"tock-{schedule_id}", "-t", "EchoWorkflow",
                      "-q", task_queue, "-i", '"tock"', "--interval", "1h/15m", "--time-zone", "Europe/Berlin", "--paused",
                      "--notes", "hourly now")
    assert updated.returncode == 0, updated.stderr
    replaced = described(stack, schedule_id)
    assert replaced["schedule"]["spec"]["intervals"] == [{"every": "1h", "offset": "15m"}]
    assert replaced["schedule"]["spec"]["time_zone_name"] == "Europe/Berlin"
    assert replaced["schedule"]["action"]["args"] == ["tock"] and replaced["schedule"]["action"]["id"] == f"tock-{schedule_id}"
    assert replaced["schedule"]["policy"]["overlap"] == "Skip"  # update replaces: what the options leave out takes its default
    assert replaced["schedule"]["state"] == {"note": "hourly now", "paused": True, "limited_actions": False, "remaining_actions": 0}
    assert replaced["info"]["last_updated_at"] is not None

    unpaused = kadence(stack, "schedule", "toggle", "-s", schedule_id, "--unpause")
    assert unpaused.returncode == 0, unpaused.stderr
    running = described(stack, schedule_id)
    assert not running["schedule"]["state"]["paused"] and running["schedule"]["state"]["note"] == "(no reason provided)"
    assert running["info"]["next_action_times"][0].endswith(":15:00Z")

    as_text = kadence(stack, "schedule", "describe", "-s", schedule_id)
    assert as_text.returncode == 0 and "spec: every 1h/15m; in Europe/Berlin" in as_text.stdout, as_text.stdout + as_text.stderr
    list_text = subprocess.run([sys.executable, "-m", "kadence.ops.cli", "schedule", "list"], env={**stack.env, "COLUMNS": "300"},
                               cwd=REPO, capture_output=True, text=True, timeout=120)
    row = next((line for line in list_text.stdout.splitlines() if schedule_id in line), "")
    assert "EchoWorkflow" in row and "(no reason provided)" in row and ":15:00Z" in row, list_text.stdout + list_text.stderr

    deleted = kadence(stack, "schedule", "delete", "-s", schedule_id, "--json")
    assert deleted.returncode == 0 and json.loads(deleted.stdout) == {"schedule_id": schedule_id, "deleted": True}, deleted.stderr
    gone, gone_trigger, listed_after = kadence_at_once(
        stack,
        ("schedule", "describe", "-s", schedule_id),
        ("schedule", "trigger", "-s", schedule_id),
        ("schedule", "list", "--json"),
    )
    assert gone.returncode == 1 and f"schedule {schedule_id!r} not found" in gone.stderr, gone.stderr
    assert gone_trigger.returncode == 1 and f"schedule {schedule_id!r} not found" in gone_trigger.stderr, gone_trigger.stderr
    assert schedule_id not in {s["id"] for s in json.loads(listed_after.stdout)}
    assert audit_of(stack, f"kadence-schedule:{schedule_id}").violations == []


def test_schedule_commands_say_what_is_wrong(stack: LocalStack) -> None:
    create = ("schedule", "create", "-s", f"bad-{uuid.uuid4()}", "-w", "w", "-t", "EchoWorkflow", "-q", "q")
    bad_interval, sub_second, unknown_zone, no_time, bad_calendar, naive_time, both, short_window, unknown = kadence_at_once(
        stack,
        (*create, "--interval", "soon"),
        (*create, "--interval", "500ms"),
        (*create, "--interval", "1m", "--time-zone", "Mars/Olympus_Mons"),
        create,
        (*create, "--calendar", '{"hours": 9}'),
        ("schedule", "backfill", "-s", "x", "--start-time", "2026-01-01", "--end-time", "2026-01-02T00:00:00Z"),
        ("schedule", "toggle", "-s", "x", "--pause", "--unpause"),
        (*create, "--interval", "1m", "--catchup-window", "5s"),
        ("schedule", "describe", "-s", f"nobody-{uuid.uuid4()}"),
    )
    assert bad_interval.returncode == 2 and "Invalid value for '--interval': 'soon' is not a duration" in bad_interval.stderr
    assert sub_second.returncode == 2 and "an interval's every must be whole seconds, at least 1s" in sub_second.stderr
    assert unknown_zone.returncode == 2, unknown_zone.stderr
    assert "Invalid value for '--time-zone': unknown time zone 'Mars/Olympus_Mons'" in unknown_zone.stderr
    assert no_time.returncode == 2 and "give the schedule a time: --interval, --cron or --calendar" in no_time.stderr
    assert bad_calendar.returncode == 2 and "a calendar has no field hours" in bad_calendar.stderr
    assert naive_time.returncode == 2 and "is not an RFC 3339 time with its offset" in naive_time.stderr
    assert both.returncode == 2 and "give one of --pause and --unpause" in both.stderr
    assert short_window.returncode == 1 and "catch-up window must be at least 10 s" in short_window.stderr, short_window.stderr
    assert unknown.returncode == 1 and "not found" in unknown.stderr, unknown.stderr
