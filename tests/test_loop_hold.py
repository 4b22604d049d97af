"""The history command loop's stretches: each into kadence_history_loop_pause_seconds, and a long
one logged with its CPU and commands, so an operator tells a busy loop from a starved one."""

import logging
import time

import pytest

from services.history.service import LONG_HOLD_S, LOOP_PAUSE, Stretch


def observed() -> float:
    return next(sample.value for metric in LOOP_PAUSE.collect() for sample in metric.samples if sample.name.endswith("_count"))


def test_a_long_stretch_is_logged_with_its_cpu_and_commands(caplog: pytest.LogCaptureFixture) -> None:
    before = observed()
    stretch = Stretch()
    stretch.commands = 3
    time.sleep(LONG_HOLD_S)  # held without CPU: what a process waiting for a core shows
    with caplog.at_level(logging.WARNING, logger="kadence.history"):
        stretch.observe()
    [line] = [r.getMessage() for r in caplog.records if "long_loop_hold" in r.getMessage()]
    assert "commands=3" in line
    cpu = float(line.split("cpu_seconds=")[1].split()[0])
    held = float(line.split("seconds=")[1].split()[0])
    assert held >= LONG_HOLD_S and cpu < held / 2
    assert observed() == before + 1


def test_a_short_stretch_is_counted_and_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    before = observed()
    with caplog.at_level(logging.WARNING, logger="kadence.history"):
        Stretch().observe()
    assert not [r for r in caplog.records if "long_loop_hold" in r.getMessage()]
    assert observed() == before + 1
