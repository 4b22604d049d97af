"""`kadence workflow ...`: start, signal, query, cancel, terminate, describe, show, list, count and
wait for workflows from the shell; signal, cancel, terminate and reset with `--query` run a batch job
over every execution a list filter matches (`kadence/ops/batch.py`). Inputs are JSON values; results and
answers print as JSON, and `--json` makes every other command print JSON too.

Exit codes: 0 done; 1 the workflow failed, or the command was refused or found nothing, or a batch
job failed on an execution (the message says why); 2 bad usage (a malformed option or filter).
"""

from __future__ import annotations

import functools
import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

import click
import uvloop

from kadence.client import Client, ResetReapplyExcludeType, ResetType, WorkflowHandle
from kadence.exceptions import KadenceError, WorkflowFailureError
from kadence.list_filter import ListFilterError
from kadence.list_filter import parse as parse_list_filter
from kadence.ops.batch import (
    DEFAULT_RPS,
    BatchCounts,
    BatchJob,
    BatchJobs,
    BatchJobState,
    BatchOperation,
    BatchRequest,
    job_id_problem,
    matching_executions,
    run_job,
    terminated_message,
)
from kadence.protocol.settings import postgres_dsn

T = TypeVar("T")
_RESET_TYPES = {"FirstWorkflowTask": ResetType.FIRST_WORKFLOW_TASK, "LastWorkflowTask": ResetType.LAST_WORKFLOW_TASK}
_RESET_TYPE_NAMES = {kind: name for name, kind in _RESET_TYPES.items()}
_REAPPLY_EXCLUDES = {"Signal": ResetReapplyExcludeType.SIGNAL, "Update": ResetReapplyExcludeType.UPDATE}
_EXCLUDE_NAMES = {kind: name for name, kind in _REAPPLY_EXCLUDES.items()}

workflow_id_option = click.option("--workflow-id", "-w", required=True, help="The workflow id.")
run_id_option = click.option("--run-id", "-r", default=None, help="A run of the workflow id (default: its latest).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
input_option = click.option("--input", "-i", "inputs", multiple=True, help="An argument as JSON; repeat for more.")
# signal, cancel, terminate and reset name one workflow, or many as a batch job.
target_option = click.option("--workflow-id", "-w", default=None, help="The workflow id (or --query for every execution a filter matches).")
PROGRESS_LINE_EVERY = 100  # executions between progress lines when stderr is not a terminal


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


def _memo(pairs: tuple[str, ...]) -> dict[str, Any] | None:
    """`--memo KEY=JSON` pairs as a memo, as Temporal's CLI takes them; None when none is given."""
    memo: dict[str, Any] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise click.BadParameter(f"--memo takes KEY=JSON pairs ('team=\"ops\"', 'limit=3'): {pair!r}")
        try:
            memo[key] = json.loads(value)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"--memo {key}: the value must be JSON ('team=\"ops\"'): {exc}") from exc
    return memo or None


def _echo(value: Any, as_json: bool, human: str) -> None:
    click.echo(json.dumps(value, default=str) if as_json else human)


@click.group("workflow")
def workflow_group() -> None:
    """Workflow executions."""


def _batch_options(command: Callable[..., Any], *, reason: bool = True) -> Callable[..., Any]:
    for option in reversed([
        click.option("--query", "-q", "list_filter", default=None,
                     help="A list filter: apply to every execution it matches now, as a batch job (`kadence batch list`)."),
        click.option("--job-id", default=None, help="The batch job's id (default: a new one); run again with it to resume the job."),
        *([click.option("--reason", default=None, help="Why: kept with a batch job; a terminate records it in the history.")]
          if reason else []),
        click.option("--yes", "-y", is_flag=True, help="Start or resume the batch job without asking."),
        click.option("--rps", type=click.FloatRange(min=0, min_open=True), default=None,
                     help=f"Operations a batch job starts per second at most (default {DEFAULT_RPS:g})."),
    ]):
        command = option(command)
    return command


def _is_batch(workflow_id: str | None, run_id: str | None, list_filter: str | None, job_id: str | None,
              batch_only: dict[str, bool]) -> bool:
    """Whether the command is a batch job (--query or --job-id) rather than for --workflow-id."""
    if workflow_id is not None:
        if list_filter is not None or job_id is not None:
            raise click.UsageError("--workflow-id names one workflow, --query and --job-id a batch job: give one or the other")
        if given := [name for name, present in batch_only.items() if present]:
            raise click.UsageError(f"{', '.join(given)}: only for a batch job (--query or --job-id)")
        return False
    if list_filter is None and job_id is None:
        raise click.UsageError("Missing option '--workflow-id' / '-w' (or '--query' / '-q' for a batch job).")
    if run_id is not None:
        raise click.UsageError("--run-id goes with --workflow-id; a batch job applies to the runs its --query matches")
    if job_id is not None and (problem := job_id_problem(job_id)):
        raise click.BadParameter(problem, param_hint="--job-id")
    if list_filter is not None:
        try:
            parse_list_filter(list_filter)
        except ListFilterError as exc:
            raise click.BadParameter(str(exc), param_hint="--query") from exc
    return True


def _batch(operation: BatchOperation, list_filter: str | None, job_id: str | None, *, yes: bool, rps: float | None, as_json: bool,
           reason: str | None, signal_name: str | None = None, signal_args: list[Any] | None = None,
           reset_type: ResetType | None = None, reapply_exclude: tuple[ResetReapplyExcludeType, ...] = ()) -> None:
    """Start the batch job (or resume the one --job-id names), run it to the end and print its counts;
    exit 1 if an execution failed."""
    given = BatchRequest(operation, list_filter or "", signal_name or "", tuple(signal_args or ()), reason or "", reset_type,
                         reapply_exclude)

    async def main(client: Client) -> tuple[str, BatchCounts]:
        jobs = await BatchJobs.connect(postgres_dsn())
        try:
            job = await jobs.find(job_id) if job_id is not None else None
            if job is None:
                if list_filter is None:
                    raise click.UsageError(f"there is no batch job {job_id}: give --query to start one")
                if operation == BatchOperation.SIGNAL and not signal_name:
                    raise click.UsageError("Missing option '--name' / '-n'.")
                if operation == BatchOperation.RESET:
                    _reset_job_options(reset_type, reason)
                request = given
                executions = await matching_executions(client, list_filter)
                new_id = job_id or str(uuid.uuid4())
                if not executions:
                    click.echo(f"no workflow execution matches {list_filter!r}: nothing to do", err=True)
                    return new_id, BatchCounts(0, 0, 0, 0, 0)
                _confirm(f"{_described(request)} {len(executions)} workflow executions matching {list_filter!r}", yes)
                await jobs.create(new_id, request, client.identity, executions)
                job = await jobs.find(new_id)
                assert job is not None
            else:
                _same_request(job, given)
                if job.state == BatchJobState.COMPLETED:
                    click.echo(f"batch job {job.job_id} completed already", err=True)
                    return job.job_id, job.counts
                if job.state == BatchJobState.FAILED:
                    raise click.ClickException(terminated_message(job.job_id, job.terminate_reason))
                left = job.counts.matched - job.counts.finished
                _confirm(f"resume batch job {job.job_id}: {_described(job.request)} {left} more of its "
                         f"{job.counts.matched} workflow executions", yes)
            click.echo(f"batch job {job.job_id}: if it stops, run the command again with --job-id {job.job_id} to resume it", err=True)
            with _Progress(_described(job.request), job.counts.matched) as progress:
                return job.job_id, await run_job(client, jobs, job.job_id, rps=rps or DEFAULT_RPS, on_progress=progress)
        finally:
            await jobs.close()

    try:
        ran_id, counts = _run(main)
    except KeyboardInterrupt:
        click.echo("stopped: the batch job keeps what it did; run the command again with its --job-id to resume it", err=True)
        sys.exit(130)
    summary = f"matched {counts.matched}, {counts.summary()}"
    _echo({"job_id": ran_id, **counts.to_json()}, as_json, summary)
    if counts.failed:
        click.echo(f"{counts.failed} failed: `kadence batch describe --job-id {ran_id}` says why", err=True)
        sys.exit(1)


def _described(request: BatchRequest) -> str:
    if request.operation == BatchOperation.SIGNAL:
        return f"signal {request.signal_name!r} to"
    if request.operation == BatchOperation.RESET:
        excluded = f", not reapplying {', '.join(_EXCLUDE_NAMES[e] for e in request.reapply_exclude)}" if request.reapply_exclude else ""
        return f"reset ({_RESET_TYPE_NAMES[request.reset_type] if request.reset_type else '?'}{excluded})"
    return request.operation.value.lower()


def _reset_job_options(reset_type: ResetType | None, reason: str | None) -> None:
    """What a new reset batch job needs: its point by kind (an event id names an event of one run), and why."""
    if reset_type is None:
        raise click.UsageError("a reset batch job needs --type (FirstWorkflowTask or LastWorkflowTask): an event id names an "
                               "event of one run")
    if not reason:
        raise click.UsageError("Missing option '--reason'.")


def _same_request(job: BatchJob, given: BatchRequest) -> None:
    """A job is resumed as it began: an option given again must say the same."""
    stored = job.request
    differences = [
        f"{option} {stored_value!r}" for option, stored_value, value in (
            ("the operation", stored.operation.value.lower(), given.operation.value.lower()),
            ("--query", stored.list_filter, given.list_filter), ("--name", stored.signal_name, given.signal_name),
            ("--input", list(stored.signal_args), list(given.signal_args)), ("--reason", stored.reason, given.reason),
            ("--type", _RESET_TYPE_NAMES.get(stored.reset_type) if stored.reset_type else "",
             _RESET_TYPE_NAMES.get(given.reset_type) if given.reset_type else ""),
            ("--reapply-exclude", sorted(_EXCLUDE_NAMES[e] for e in stored.reapply_exclude),
             sorted(_EXCLUDE_NAMES[e] for e in given.reapply_exclude)),
        ) if value and value != stored_value
    ]
    if differences:
        raise click.UsageError(f"batch job {job.job_id} was started with {', '.join(differences)}: resume it with the same "
                               "(or leave the options out), or start another job with another --job-id")


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise click.UsageError(f"{question}? Pass --yes to go ahead without a terminal to confirm on")
    click.confirm(f"{question}?", abort=True, err=True)


class _Progress:
    """A batch job's progress on stderr: a bar on a terminal, else a line every PROGRESS_LINE_EVERY
    executions and at the end."""

    def __init__(self, label: str, matched: int) -> None:
        from rich.console import Console
        from rich.progress import MofNCompleteColumn, Progress, TimeRemainingColumn

        self.matched = matched
        self.console = Console(stderr=True)
        self.bar = Progress(*Progress.get_default_columns()[:-1], MofNCompleteColumn(), TimeRemainingColumn(), console=self.console) \
            if self.console.is_terminal else None
        self.task = self.bar.add_task(label, total=matched) if self.bar else None
        self.reported = -1

    def __enter__(self) -> _Progress:
        if self.bar:
            self.bar.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self.bar:
            self.bar.stop()

    def __call__(self, counts: BatchCounts) -> None:
        if self.bar and self.task is not None:
            self.bar.update(self.task, completed=counts.finished)
        elif counts.finished == counts.matched or counts.finished - self.reported >= PROGRESS_LINE_EVERY or self.reported < 0:
            self.reported = counts.finished
            click.echo(f"{counts.finished}/{counts.matched} ({counts.summary()})", err=True)


def _start_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed([
        click.option("--type", "-t", "workflow_type", required=True, help="The workflow type (its name)."),
        click.option("--task-queue", "-q", required=True, help="The task queue its workers poll."),
        workflow_id_option, input_option,
        click.option("--execution-timeout", type=float, default=None, help="Seconds the whole execution may take."),
        click.option("--run-timeout", type=float, default=None, help="Seconds one run may take."),
        click.option("--request-id", default="", help="Makes a retried start idempotent: a start sent again with the same "
                     "request id answers with the run the first one started (default: a new id per command)."),
        click.option("--memo", "memo_pairs", multiple=True, help="A memo entry as KEY=JSON; repeat for more."),
        json_option,
    ]):
        command = option(command)
    return command


async def _start(client: Client, workflow_type: str, task_queue: str, workflow_id: str, inputs: tuple[str, ...],
                 execution_timeout: float | None, run_timeout: float | None, request_id: str,
                 memo_pairs: tuple[str, ...]) -> WorkflowHandle:
    return await client.start_workflow(
        workflow_type, args=_arguments(inputs), id=workflow_id, task_queue=task_queue, request_id=request_id, memo=_memo(memo_pairs),
        execution_timeout=timedelta(seconds=execution_timeout) if execution_timeout else None,
        run_timeout=timedelta(seconds=run_timeout) if run_timeout else None,
    )


@workflow_group.command("start")
@_start_options
def start(workflow_type: str, task_queue: str, workflow_id: str, inputs: tuple[str, ...],
          execution_timeout: float | None, run_timeout: float | None, request_id: str, memo_pairs: tuple[str, ...], as_json: bool) -> None:
    """Start a workflow; prints its run id."""
    handle = _run(lambda c: _start(c, workflow_type, task_queue, workflow_id, inputs, execution_timeout, run_timeout, request_id,
                                   memo_pairs))
    _echo({"workflow_id": handle.id, "run_id": handle.result_run_id}, as_json, f"started {handle.id} run {handle.result_run_id}")


@workflow_group.command("execute")
@_start_options
def execute(workflow_type: str, task_queue: str, workflow_id: str, inputs: tuple[str, ...],
            execution_timeout: float | None, run_timeout: float | None, request_id: str, memo_pairs: tuple[str, ...],
            as_json: bool) -> None:
    """Start a workflow and wait for its result (printed as JSON); exit 1 if it fails."""
    async def main(client: Client) -> Any:
        handle = await _start(client, workflow_type, task_queue, workflow_id, inputs, execution_timeout, run_timeout, request_id,
                              memo_pairs)
        return await handle.result()

    click.echo(json.dumps(_run(main), default=str))


@workflow_group.command("result")
@workflow_id_option
@run_id_option
def result(workflow_id: str, run_id: str | None) -> None:
    """Wait for the workflow's result (printed as JSON); exit 1 if it failed."""
    click.echo(json.dumps(_run(lambda c: c.get_workflow_handle(workflow_id, run_id=run_id).result()), default=str))


@workflow_group.command("signal")
@target_option
@run_id_option
@click.option("--name", "-n", default=None, help="The signal's name.")
@input_option
@_batch_options
@json_option
def signal(workflow_id: str | None, run_id: str | None, name: str | None, inputs: tuple[str, ...], list_filter: str | None,
           job_id: str | None, reason: str | None, yes: bool, rps: float | None, as_json: bool) -> None:
    """Signal the workflow; returns once the signal is in its history. With --query, signal every
    execution the filter matches (a batch job)."""
    if _is_batch(workflow_id, run_id, list_filter, job_id, {"--reason": reason is not None, "--yes": yes, "--rps": rps is not None}):
        _batch(BatchOperation.SIGNAL, list_filter, job_id, yes=yes, rps=rps, as_json=as_json, reason=reason,
               signal_name=name, signal_args=_arguments(inputs) if inputs else None)
        return
    assert workflow_id is not None
    if name is None:
        raise click.UsageError("Missing option '--name' / '-n'.")
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
@target_option
@run_id_option
@_batch_options
@json_option
def cancel(workflow_id: str | None, run_id: str | None, list_filter: str | None, job_id: str | None, reason: str | None,
           yes: bool, rps: float | None, as_json: bool) -> None:
    """Request cancellation: the workflow sees asyncio.CancelledError and may clean up. With --query,
    of every execution the filter matches (a batch job)."""
    if _is_batch(workflow_id, run_id, list_filter, job_id, {"--reason": reason is not None, "--yes": yes, "--rps": rps is not None}):
        _batch(BatchOperation.CANCEL, list_filter, job_id, yes=yes, rps=rps, as_json=as_json, reason=reason)
        return
    assert workflow_id is not None
    _run(lambda c: c.get_workflow_handle(workflow_id, run_id=run_id).cancel())
    _echo({"workflow_id": workflow_id, "cancel_requested": True}, as_json, f"cancellation requested for {workflow_id}")


@workflow_group.command("terminate")
@target_option
@run_id_option
@_batch_options
@json_option
def terminate(workflow_id: str | None, run_id: str | None, list_filter: str | None, job_id: str | None, reason: str | None,
              yes: bool, rps: float | None, as_json: bool) -> None:
    """End the run now (--reason is recorded in its history). With --query, every execution the
    filter matches (a batch job)."""
    if _is_batch(workflow_id, run_id, list_filter, job_id, {"--yes": yes, "--rps": rps is not None}):
        _batch(BatchOperation.TERMINATE, list_filter, job_id, yes=yes, rps=rps, as_json=as_json, reason=reason)
        return
    assert workflow_id is not None
    _run(lambda c: c.get_workflow_handle(workflow_id, run_id=run_id).terminate(reason=reason or ""))
    _echo({"workflow_id": workflow_id, "terminated": True}, as_json, f"terminated {workflow_id}")


@workflow_group.command("reset")
@target_option
@run_id_option
@click.option("--event-id", "-e", type=click.IntRange(min=1), default=None,
              help="The point: a WorkflowTaskCompleted, WorkflowTaskFailed or WorkflowTaskTimedOut event of the run.")
@click.option("--type", "-t", "reset_type", type=click.Choice(list(_RESET_TYPES)), default=None,
              help="The point by its kind, instead of --event-id (a batch job takes only this).")
@click.option("--reason", default=None, help="Recorded in both runs' histories (required; a batch job keeps it too).")
@click.option("--reapply-exclude", "excludes", multiple=True, type=click.Choice(list(_REAPPLY_EXCLUDES)),
              help="Do not reapply these after the point (repeatable).")
@click.option("--request-id", default="", help="Names the reset, so running the command again resets once.")
@functools.partial(_batch_options, reason=False)
@json_option
def reset(workflow_id: str | None, run_id: str | None, event_id: int | None, reset_type: str | None, reason: str | None,
          excludes: tuple[str, ...], request_id: str, list_filter: str | None, job_id: str | None, yes: bool, rps: float | None,
          as_json: bool) -> None:
    """A new run from the end of a workflow task of the run, with the signals and updates after it
    (as `temporal workflow reset`); the run, if running, is terminated. With --query, every execution
    the filter matches, each to its own workflow task of --type (a batch job)."""
    if _is_batch(workflow_id, run_id, list_filter, job_id, {"--yes": yes, "--rps": rps is not None}):
        if event_id is not None:
            raise click.UsageError("--event-id names an event of one run: a batch job resets each run to its --type "
                                   "(FirstWorkflowTask or LastWorkflowTask)")
        if request_id:
            raise click.UsageError("--request-id goes with --workflow-id: a batch job names each run's reset batch/<job id>/<run id>")
        if job_id is None:  # a new job (a --job-id may name one to resume, which knows its own)
            _reset_job_options(_RESET_TYPES[reset_type] if reset_type else None, reason)
        _batch(BatchOperation.RESET, list_filter, job_id, yes=yes, rps=rps, as_json=as_json, reason=reason,
               reset_type=_RESET_TYPES[reset_type] if reset_type else None, reapply_exclude=tuple(_REAPPLY_EXCLUDES[e] for e in excludes))
        return
    assert workflow_id is not None
    if (event_id is None) == (reset_type is None):
        raise click.UsageError("give --event-id or --type, one of them")
    if not reason:
        raise click.UsageError("Missing option '--reason'.")

    async def main(client: Client) -> str:
        handle = await client.get_workflow_handle(workflow_id, run_id=run_id).reset(
            event_id=event_id or 0, reset_type=_RESET_TYPES[reset_type] if reset_type else None, reason=reason,
            reapply_exclude_types=[_REAPPLY_EXCLUDES[e] for e in excludes], request_id=request_id,
        )
        return handle.result_run_id or ""

    new_run_id = _run(main)
    _echo({"workflow_id": workflow_id, "run_id": new_run_id}, as_json, f"reset {workflow_id}: new run {new_run_id}")


@workflow_group.command("describe")
@workflow_id_option
@run_id_option
@json_option
def describe(workflow_id: str, run_id: str | None, as_json: bool) -> None:
    """The run as the read model knows it, its memo decoded."""
    async def main(client: Client) -> dict[str, Any]:
        execution = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
        return {**execution.to_json(), "memo": await execution.memo()}

    described = _run(main)
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
