"""Run ids are derived from the start command's position, so a history instance that processes the
same start (a new owner, or an old one writing for a moment) derives the same run id."""

from __future__ import annotations

import uuid

_RUN_ID_NAMESPACE = uuid.UUID("6b0f3c8e-4f7a-4d5e-9a51-3c2d1e0f9a7b")


def run_id_for(workflow_id: str, partition: int, offset: int) -> str:
    return str(uuid.uuid5(_RUN_ID_NAMESPACE, f"{workflow_id}\x00{partition}\x00{offset}"))


def continued_run_id(previous_run_id: str, completed_event_id: int) -> str:
    """The run a continue-as-new starts: derived from the run and event that asked for it."""
    return str(uuid.uuid5(_RUN_ID_NAMESPACE, f"{previous_run_id}\x00continued\x00{completed_event_id}"))
