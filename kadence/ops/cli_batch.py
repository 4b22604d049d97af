"""`kadence batch list|describe|terminate`: the batch jobs `kadence workflow signal|cancel|terminate|reset
--query` started (as `temporal batch list|describe|terminate`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click
import psycopg
import uvloop

from kadence.ops.batch import BatchJob, BatchJobError, BatchJobs, ExecutionResult
from kadence.protocol.settings import postgres_dsn

T = TypeVar("T")
SHOWN_RESULTS = 20  # executions failed or already closed that describe shows


def _with_jobs(main: Callable[[BatchJobs], Awaitable[T]]) -> T:
    async def connected() -> T:
        jobs = await BatchJobs.connect(postgres_dsn())
        try:
            return await main(jobs)
        finally:
            await jobs.close()

    try:
        return uvloop.run(connected())
    except BatchJobError as exc:
        raise click.ClickException(str(exc)) from exc
    except psycopg.OperationalError as exc:
        raise click.ClickException(f"Postgres does not answer (KADENCE_POSTGRES_DSN): {exc}") from exc


@click.group("batch")
def batch_group() -> None:
    """Batch jobs: `kadence workflow signal|cancel|terminate|reset --query` applied to many executions."""


@batch_group.command("list")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="At most this many jobs, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_jobs(limit: int, as_json: bool) -> None:
    """Batch jobs, newest first, with their counts."""
    jobs = _with_jobs(lambda j: j.newest(limit=limit))
    if as_json:
        click.echo(json.dumps([job.to_json() for job in jobs]))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table()
    columns = ("job_id", "operation", "state", "matched", "done", "failed", "already_closed", "not_current", "start_time", "query")
    for column in columns:
        table.add_column(column)
    for job in jobs:
        described = job.to_json()
        table.add_row(*(str(described[c] or "") for c in columns))
    Console().print(table)


@batch_group.command("describe")
@click.option("--job-id", required=True, help="The batch job's id.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def describe(job_id: str, as_json: bool) -> None:
    """The job: its operation, filter, state and counts, and the executions it failed on or found closed."""
    async def main(jobs: BatchJobs) -> tuple[BatchJob, list[ExecutionResult]]:
        job = await jobs.find(job_id)
        if job is None:
            raise BatchJobError(f"there is no batch job {job_id} (`kadence batch list` shows the jobs)")
        return job, await jobs.results(job_id, SHOWN_RESULTS)

    job, results = _with_jobs(main)
    described = {**job.to_json(), "executions": [
        {"workflow_id": r.workflow_id, "run_id": r.run_id, "outcome": r.outcome.value, "detail": r.detail} for r in results
    ]}
    if as_json:
        click.echo(json.dumps(described))
        return
    for key, value in described.items():
        if key != "executions":
            click.echo(f"{key}: {value}")
    for result in results:
        click.echo(f"  {result.outcome.value}: {result.workflow_id} run {result.run_id}: {result.detail}")
    if len(results) == SHOWN_RESULTS:
        click.echo(f"  (the first {SHOWN_RESULTS} shown)")


@batch_group.command("terminate")
@click.option("--job-id", required=True, help="The batch job's id.")
@click.option("--reason", required=True, help="Why the job is stopped (describe shows it).")
def terminate(job_id: str, reason: str) -> None:
    """Stop a running batch job: the CLI running it stops within a second, and it cannot be resumed.
    What it did stays done."""
    _with_jobs(lambda jobs: jobs.terminate(job_id, reason))
    click.echo(f"batch job {job_id} terminated", err=True)
