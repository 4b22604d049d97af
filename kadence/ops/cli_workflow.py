"""`kadence workflow ...`: start, signal, query, cancel, terminate, describe, show, list, count and
wait for workflows from the shell. Inputs are JSON values; results and answers print as JSON, and
`--json` makes every other command print JSON too.

Exit codes: 0 done; 1 the workflow failed, or the command was refused or found nothing (the
message says why); 2 bad usage (a malformed option or filter).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import click
import uvloop

from kadence.client import Client, WorkflowHandle
from kadence.exceptions import KadenceError, WorkflowFailureError
from kadence.list_filter import ListFilterError

T = TypeVar("T")

workflow_id_option = click.option("--workflow-id", "-w", required=True, help="The workflow id.")
run_id_option = click.option("--run-id", "-r", default=None, help="A run of the workflow id (default: its latest).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
input_option = click.option("--input", "-i", "inputs", multiple=True, help="An argument as JSON; repeat for more.")


def _run(main: Callable[[Client], Awaitable[T]]) -> T:
    """Run `main` with a client from KADENCE_* settings; Kadence errors become exit code 1."""
    async def with_client() -> T:
        client = await Client.connect()
        try:
            return await main(client)
        finally:
            await client.close()

    try:
        return uvloop.run(with_client())
    except ListFilterError as exc:
        raise click.UsageError(str(exc)) from exc
    except WorkflowFailureError as exc:
        click.echo(f"workflow failed: {type(exc.cause).__name__}: {exc.cause}", err=True)
        sys.exit(1)
    except KadenceError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


def _arguments(inputs: tuple[str, ...]) -> list[Any]:
    try:
        return [json.loads(value) for value in inputs]
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"--input takes JSON values ('\"text\"', 42, '{{\"a\": 1}}'): {exc}") from exc


def _echo(value: Any, as_json: bool, human: str) -> None:
    click.echo(json.dumps(value, default=str) if as_json else human)


@click.group("workflow")
def workflow_group() -> None:
    """Workflow executions."""


def _start_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed([
        click.option("--type", "-t", "workflow_type", required=True, help="The workflow type (its name)."),
        click.option("--task-queue", "-q", required=True, help="The task queue its workers poll."),
        workflow_id_option, input_option,
        click.option("--execution-timeout", type=float, default=None, help="Seconds the whole execution may take."),
        click.option("--run-timeout", type=float, default=None, help="Seconds one run may take."),
        click.option("--request-id", default="", help="Makes a retried start idempotent: a start sent again with the same "
                     "request id answers with the run the first one started (default: a new id per command)."),
        json_option,
    ]):
        command = option(command)
    return command


async def _start(client: Client, workflow_type: str, task_queue: str, workflow_id: str, inputs: tuple[str, ...],
                 execution_timeout: float | None, run_timeout: float | None, request_id: str) -> WorkflowHandle:
    return await client.start_workflow(
        workflow_type, args=_arguments(inputs), id=workflow_id, task_queue=task_queue, request_id=request_id,
        execution_timeout=timedelta(seconds=execution_timeout) if execution_timeout else None,
        run_timeout=timedelta(seconds=run_timeout) if run_timeout else None,
    )


@workflow_group.command("start")
@_start_options
def start(workflow_type: str, task_queue: str, workflow_id: str, inputs: tuple[str, ...],
          execution_timeout: float | None, run_timeout: float | None, request_id: str, as_json: bool) -> None:
    """Start a workflow; prints its run id."""
    handle = _run(lambda c: _start(c, workflow_type, task_queue, workflow_id, inputs, execution_timeout, run_timeout, request_id))
    _echo({"workflow_id": handle.id, "run_id": handle.result_run_id}, as_json, f"started {handle.id} run {handle.result_run_id}")


@workflow_group.command("execute")
@_start_options
def execute(workflow_type: str, task_queue: str, workflow_id: str, inputs: tuple[str, ...],
            execution_timeout: float | None, run_timeout: float | None, request_id: str, as_json: bool) -> None:
    """Start a workflow and wait for its result (printed as JSON); exit 1 if it fails."""
    async def main(client: Client) -> Any:
        handle = await _start(client, workflow_type, task_queue, workflow_id, inputs, execution_timeout, run_timeout, request_id)
        return await handle.result()

    click.echo(json.dumps(_run(main), default=str))


@workflow_group.command("result")
@workflow_id_option
@run_id_option
def result(workflow_id: str, run_id: str | None) -> None:
    """Wait for the workflow's result (printed as JSON); exit 1 if it failed."""
    click.echo(json.dumps(_run(lambda c: c.get_workflow_handle(workflow_id, run_id=run_id).result()), default=str))


@workflow_group.command("signal")
@workflow_id_option
@run_id_option
@click.option("--name", "-n", required=True, help="The signal's name.")
@input_option
@json_option
def signal(workflow_id: str, run_id: str | None, name: str, inputs: tuple[str, ...], as_json: bool) -> None:
    """Signal the workflow; returns once the signal is in its history."""
    _run(lambda c: c.get_workflow_handle(workflow_id, run_id=run_id).signal(name, args=_arguments(inputs)))
    _echo({"workflow_id": workflow_id, "signalled": name}, as_json, f"signalled {workflow_id}: {name}")


@workflow_group.command("query")
@workflow_id_option
@click.option("--name", "-n", required=True, help="The query's name.")
@input_option
def query(workflow_id: str, name: str, inputs: tuple[str, ...]) -> None:
    """Query the workflow; prints the answer as JSON."""
    click.echo(json.dumps(_run(lambda c: c.get_workflow_handle(workflow_id).query(name, args=_arguments(inputs))), default=str))


@workflow_group.command("cancel")
@workflow_id_option
@run_id_option
@json_option
def cancel(workflow_id: str, run_id: str | None, as_json: bool) -> None:
    """Request cancellation: the workflow sees asyncio.CancelledError and may clean up."""
    _run(lambda c: c.get_workflow_handle(workflow_id, run_id=run_id).cancel())
    _echo({"workflow_id": workflow_id, "cancel_requested": True}, as_json, f"cancellation requested for {workflow_id}")


@workflow_group.command("terminate")
@workflow_id_option
@run_id_option
@click.option("--reason", default="", help="Why: recorded in the history.")
@json_option
def terminate(workflow_id: str, run_id: str | None, reason: str, as_json: bool) -> None:
    """End the run now."""
    _run(lambda c: c.get_workflow_handle(workflow_id, run_id=run_id).terminate(reason=reason))
    _echo({"workflow_id": workflow_id, "terminated": True}, as_json, f"terminated {workflow_id}")


@workflow_group.command("describe")
@workflow_id_option
@run_id_option
@json_option
def describe(workflow_id: str, run_id: str | None, as_json: bool) -> None:
    """The run as the read model knows it."""
    described = _run(lambda c: c.get_workflow_handle(workflow_id, run_id=run_id).describe()).to_json()
    _echo(described, as_json, "\n".join(f"{key}: {value}" for key, value in described.items()))


@workflow_group.command("show")
@workflow_id_option
@run_id_option
@click.option("--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="json: the history export the Replayer reads.")
def show(workflow_id: str, run_id: str | None, output: str) -> None:
    """The run's event history."""
    history = _run(lambda c: c.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()).to_json()
    if output == "json":
        click.echo(json.dumps(history))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{workflow_id} run {history['run_id']}")
    for column in ("id", "time", "type", "attributes"):
        table.add_column(column)
    for event in history["events"]:
        table.add_row(str(event["event_id"]), str(event["event_time_ms"]), event["event_type"], json.dumps(event["attributes"])[:120])
    Console().print(table)


@workflow_group.command("list")
@click.option("--query", "-q", "list_filter", default="", help="A Temporal list filter: WorkflowType = 'Order' AND ...")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True, help="At most this many executions.")
@json_option
def list_workflows(list_filter: str, limit: int, as_json: bool) -> None:
    """Executions matching the filter, newest first."""
    async def main(client: Client) -> list[dict[str, Any]]:
        return [execution.to_json() async for execution in client.list_workflows(list_filter, limit=limit)]

    executions = _run(main)
    if as_json:
        click.echo(json.dumps(executions))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for column in ("workflow_id", "run_id", "workflow_type", "status", "start_time", "close_time"):
        table.add_column(column)
    for execution in executions:
        table.add_row(*(str(execution[c] or "") for c in ("workflow_id", "run_id", "workflow_type", "status", "start_time", "close_time")))
    Console().print(table)


@workflow_group.command("count")
@click.option("--query", "-q", "list_filter", default="", help="A Temporal list filter.")
@json_option
def count(list_filter: str, as_json: bool) -> None:
    """How many executions match the filter."""
    counted = _run(lambda c: c.count_workflows(list_filter)).count
    _echo({"count": counted}, as_json, str(counted))
