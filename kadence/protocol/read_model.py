"""The Postgres read model's contract: written by services.visibility, read by the client and CLI."""

CLOSED_CHANNEL = "kadence_workflow_closed"
OUTCOME_CHANNEL = "kadence_command_outcome"

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
]
