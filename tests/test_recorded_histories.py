"""The history state machine writes, for each recorded scenario, the very batches it wrote when the
scenario was recorded (tests/recorded_histories): a change to the machine that changes a history,
an effect or a rejection fails here, and is either a bug or a change to record again on purpose."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.history.partition import PartitionState
from tests.recorded_histories import from_json, load, scenario_files, step


def test_there_are_recorded_histories() -> None:
    assert len(scenario_files()) >= 5


@pytest.mark.parametrize("path", scenario_files(), ids=lambda path: path.stem)
def test_the_machine_writes_the_recorded_history(path: Path) -> None:
    state = PartitionState(0)
    for recorded in load(path)["steps"]:
        command = from_json(recorded["command"])
        written = step(state, command, recorded["now_ms"], recorded["offset"])
        expected = {key: recorded[key] for key in ("batch", "rejected") if key in recorded}
        assert written == expected, f"{path.name}: {command['command'][0]} at offset {recorded['offset']} wrote otherwise"
