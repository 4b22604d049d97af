"""kadence/protocol/names.py holds exactly the names the schemas give their union branches and
enums, in their order: a schema that gains an event, a command, an effect or a timer kind fails here
until its name is added."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest

from kadence.protocol.names import CommandType, EffectType, EventType, TaskCommandType, TimerKind

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def _field(record: dict[str, Any], name: str) -> Any:
    return next(field["type"] for field in record["fields"] if field["name"] == name)


def _branches(union: list[Any]) -> list[str]:
    return [branch["name"] if isinstance(branch, dict) else branch for branch in union]


def _schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{name}.avsc").read_text())


def _respond_workflow_task_completed() -> dict[str, Any]:
    return next(b for b in _field(_schema("Command"), "command") if isinstance(b, dict) and b["name"] == "RespondWorkflowTaskCompleted")


@pytest.mark.parametrize(("names", "expected"), [
    (EventType, lambda: _branches(_field(_schema("HistoryEvent"), "attributes"))),
    (CommandType, lambda: _branches(_field(_schema("Command"), "command"))),
    (TaskCommandType, lambda: _branches(_field(_respond_workflow_task_completed(), "commands")["items"])),
    (EffectType, lambda: _branches(_field(_schema("HistoryBatch"), "effects")["items"])),
    (TimerKind, lambda: _schema("TimerKind")["symbols"]),
], ids=lambda value: value.__name__ if isinstance(value, type) else "")
def test_the_names_are_the_schemas(names: type[StrEnum], expected: Any) -> None:
    assert [member.value for member in names] == expected()
    assert all(member.name == member.value for member in names)


def test_the_workflow_instance_applies_every_event_of_a_command_and_every_answer() -> None:
    """A replayed run matches each event its commands record and resolves each answer to what it
    initiated: an event missing from the instance's table would be skipped silently."""
    from kadence.protocol.events import EVENT_FOR_COMMAND, INITIATED, INITIATED_BY_ANSWER
    from kadence.worker._workflow_instance._history import _APPLY

    needed = set(EVENT_FOR_COMMAND.values()) | set(INITIATED) | set(INITIATED_BY_ANSWER)
    assert needed - set(_APPLY) == set()
    assert set(_APPLY) <= set(EventType)
