"""Recorded histories: what the history state machine wrote for a set of scenarios, kept as JSON so
a change to the machine that changes a history fails tests/test_recorded_histories.py.

Each file holds the commands of one scenario (as the history service reads them from
kadence.commands, with the time it decided each at) and, for each, the HistoryBatch the machine
wrote (less schema fingerprints and the request id it answers, which is the command's own) or the
rejection it answered. `python -m tests.recorded_histories.record` writes them again:
run it only when a change is meant to change histories, and review the diff.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from kadence.protocol.codec import Record, command_codec
from services.history import step as history_step
from services.history.partition import PartitionState

HERE = Path(__file__).resolve().parent


def step(state: PartitionState, command: Record, now_ms: int, offset: int) -> Record:
    """One command through the machine as the history service takes it: its batch, or its rejection."""
    wire = command_codec()
    command = wire.decode(wire.encode(command), wire.headers())  # every field as a record read from the topic has it
    written = history_step.step(state, command, now_ms, 0, offset)
    if written.rejected is not None:
        return {"rejected": {"cause": written.rejected.cause, "reason": str(written.rejected)}}
    assert written.batch is not None
    kind, body = command["command"]
    request_id = history_step.request_id_of(kind, body)
    assert written.batch["request_ids"] == ([request_id] if request_id else []), "a batch answers its command's request id"
    return {"batch": to_json(_without_fingerprints({**written.batch, "request_ids": []}))}


def _without_fingerprints(value: Any) -> Any:
    """The record with the schema fingerprints a relayed command carries left out: they change with
    any schema change (tests/test_codec.py checks those), not with what the machine decided."""
    if isinstance(value, dict):
        return {k: _without_fingerprints(v) for k, v in value.items() if k != "schema_fingerprint"}
    if isinstance(value, (list, tuple)):
        return type(value)(_without_fingerprints(v) for v in value)
    return value


def to_json(value: Any) -> Any:
    """JSON of a record: bytes as {"base64": ...}, a union's (name, value) as [name, value]."""
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def from_json(value: Any) -> Any:
    """A record from `to_json`'s JSON: [name, value] pairs whose name is a record's are unions again."""
    if isinstance(value, dict):
        if set(value) == {"base64"}:
            return base64.b64decode(value["base64"])
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [from_json(v) for v in value]
        if len(items) == 2 and isinstance(items[0], str) and items[0][:1].isupper() and isinstance(items[1], dict):
            return (items[0], items[1])
        return items
    return value


def scenario_files() -> list[Path]:
    return sorted(HERE.glob("*.json"))


def load(path: Path) -> Record:
    return json.loads(path.read_text())
