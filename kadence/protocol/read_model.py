"""The Postgres read model's contract: written by services.visibility, read by the client and CLI."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CLOSED_CHANNEL = "kadence_workflow_closed"
OUTCOME_CHANNEL = "kadence_command_outcome"
MAX_NOTIFICATION_BYTES = 8000


@dataclass(frozen=True)
class CommandOutcome:
    """How the history service answered a command that carried a request id."""

    request_id: str
    run_id: str
    accepted: bool
    cause: str | None
    reason: str | None

    def notification(self) -> str:
        """The OUTCOME_CHANNEL payload (under Postgres's 8,000-byte limit: the reason is cut; JSON's
        ASCII escapes make the payload's length its size in bytes)."""
        reason = (self.reason or "")[:2000]
        while True:
            payload = json.dumps({**self.__dict__, "reason": reason or None})
            if len(payload) < MAX_NOTIFICATION_BYTES or not reason:
                return payload
            reason = reason[:len(reason) // 2]

    @classmethod
    def from_notification(cls, payload: str) -> CommandOutcome:
        return cls(**json.loads(payload))

VISIBILITY_DDL = [
    """
    CREATE TABLE IF NOT EXISTS kadence_executions (
        workflow_id text NOT NULL,
        run_id text NOT NULL,
        workflow_type text NOT NULL,
        task_queue text NOT NULL,
        status text NOT NULL,
        start_time timestamptz NOT NULL,
        close_time timestamptz,
        history_length bigint NOT NULL,
        result bytea,
        failure bytea,
        next_run_id text,
        search_attributes jsonb NOT NULL DEFAULT '{}',
        PRIMARY KEY (workflow_id, run_id)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS kadence_events (
        workflow_id text NOT NULL,
        run_id text NOT NULL,
        event_id bigint NOT NULL,
        event_type text NOT NULL,
        event_time timestamptz NOT NULL,
        event bytea NOT NULL,
        PRIMARY KEY (workflow_id, run_id, event_id)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS kadence_command_outcomes (
        request_id text PRIMARY KEY,
        workflow_id text NOT NULL,
        run_id text NOT NULL,
        accepted boolean NOT NULL,
        cause text,
        reason text,
        recorded_at timestamptz NOT NULL DEFAULT now()
    )
    """,
    # An update's outcome carries its result or failure (Avro Payload, Failure).
    "ALTER TABLE kadence_command_outcomes ADD COLUMN IF NOT EXISTS result bytea",
    "ALTER TABLE kadence_command_outcomes ADD COLUMN IF NOT EXISTS failure bytea",
    # A workflow task retried after a failure or timeout (Avro TransientWorkflowTask), NULL otherwise:
    # describe's and the UI's pending workflow task.
    "ALTER TABLE kadence_executions ADD COLUMN IF NOT EXISTS pending_workflow_task bytea",
    # The run's memo (memo_json: each value a payload, as the payload codec left it).
    "ALTER TABLE kadence_executions ADD COLUMN IF NOT EXISTS memo jsonb NOT NULL DEFAULT '{}'",
    # The web UI pages the list by keyset on (start_time, workflow_id, run_id), newest first: each page
    # is a range of this index, however deep (kadence/ops/ui/queries.py).
    "CREATE INDEX IF NOT EXISTS kadence_executions_start_time ON kadence_executions (start_time, workflow_id, run_id)",
    # The visibility service deletes rows past their retention (services/visibility/retention.py).
    "CREATE INDEX IF NOT EXISTS kadence_command_outcomes_recorded_at ON kadence_command_outcomes (recorded_at)",
    # One row per schedule (docs/decisions/0004-schedules-in-the-history-service.md): its last event, which carries its
    # definition and what it has done (Avro HistoryEvent), and the columns a list shows.
    """
    CREATE TABLE IF NOT EXISTS kadence_schedules (
        schedule_id text PRIMARY KEY,
        run_id text NOT NULL,
        status text NOT NULL,
        workflow_type text NOT NULL,
        paused boolean NOT NULL,
        next_action_time timestamptz,
        created_time timestamptz NOT NULL,
        updated_time timestamptz NOT NULL,
        event_id bigint NOT NULL,
        state bytea NOT NULL
    )
    """,
]


def memo_json(memo: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A memo as the memo column holds it: each payload's metadata values and data in base64."""
    return {key: {"metadata": {name: base64.b64encode(value).decode() for name, value in payload["metadata"].items()},
                  "data": base64.b64encode(payload["data"]).decode()}
            for key, payload in memo.items()}


def memo_from_json(value: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The memo column's value as payload records (metadata and data as bytes)."""
    return {key: {"metadata": {name: base64.b64decode(v) for name, v in payload["metadata"].items()},
                  "data": base64.b64decode(payload["data"])}
            for key, payload in value.items()}


def update_request_id(workflow_id: str, update_id: str) -> str:
    """The outcome row of an update: written when the workflow completed or rejected it. Update ids
    are unique per workflow id, as in Temporal, so the row names both."""
    return f"update/{workflow_id}/{update_id}"


def fast_forward_request_id(request_id: str) -> str:
    """The outcome row written when a run's clock reached the bound of the fast-forward sent under
    `request_id` (UpdateWorkflowTimeSkipping): what WorkflowEnvironment.fast_forward waits for."""
    return f"fast-forward/{request_id}"


def update_accepted_request_id(workflow_id: str, update_id: str) -> str:
    """The outcome row written when the workflow accepted an update (its validator passed): what
    start_update(wait_for_stage=ACCEPTED) waits for."""
    return f"update-accepted/{workflow_id}/{update_id}"
