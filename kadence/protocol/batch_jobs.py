"""The batch jobs' tables: written and read by `kadence workflow signal|cancel|terminate|reset --query` and
`kadence batch`, created by the visibility service with the read model (services own the DDL).

Unlike the read model, they do not derive from `kadence.history`: a job is an operator's request
and its progress, kept where every operator's CLI finds it (docs/architecture.md, "Batch jobs").
"""

from __future__ import annotations

BATCH_JOBS_DDL = [
    # One row per job: what it does to which executions, and when it began and finished.
    """
    CREATE TABLE IF NOT EXISTS kadence_batch_jobs (
        job_id text PRIMARY KEY,
        operation text NOT NULL,
        list_filter text NOT NULL,
        signal_name text NOT NULL DEFAULT '',
        signal_args jsonb NOT NULL DEFAULT '[]',
        reason text NOT NULL DEFAULT '',
        identity text NOT NULL,
        state text NOT NULL,
        start_time timestamptz NOT NULL DEFAULT now(),
        close_time timestamptz
    )
    """,
    # A reset job's point (ResetType, by kind) and what it does not reapply after it.
    "ALTER TABLE kadence_batch_jobs ADD COLUMN IF NOT EXISTS reset_type text NOT NULL DEFAULT ''",
    "ALTER TABLE kadence_batch_jobs ADD COLUMN IF NOT EXISTS reapply_exclude jsonb NOT NULL DEFAULT '[]'",
    # Why `kadence batch terminate` stopped the job (its state then Failed, as Temporal's).
    "ALTER TABLE kadence_batch_jobs ADD COLUMN IF NOT EXISTS terminate_reason text NOT NULL DEFAULT ''",
    # The executions the filter matched when the job began, each with its outcome once applied
    # (NULL until then): a resumed job applies the operation to the rows still without one.
    """
    CREATE TABLE IF NOT EXISTS kadence_batch_job_executions (
        job_id text NOT NULL REFERENCES kadence_batch_jobs ON DELETE CASCADE,
        workflow_id text NOT NULL,
        run_id text NOT NULL,
        outcome text,
        detail text NOT NULL DEFAULT '',
        PRIMARY KEY (job_id, workflow_id, run_id)
    )
    """,
]
