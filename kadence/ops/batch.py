"""Batch operations, as Temporal's: a signal, cancel, terminate or reset applied to every workflow
execution a list filter matches, at a bounded rate, as a job kept in Postgres (`kadence_batch_jobs`)
that a run of the CLI resumes where another stopped.

The job keeps the executions the filter matched when it began (a snapshot: executions started later
are not touched) and each one's outcome once applied. Each operation goes through the client with a
request id named after the job and the run (`batch_request_id`), so a run of the CLI killed between
sending a command and recording its outcome finds the answer in the read model when resumed, and a
signal sent again with that id is recorded once, and a reset sent again is answered with the run it
made (docs/architecture.md, "Batch jobs").
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from kadence.client import Client, ResetReapplyExcludeType, ResetType
from kadence.exceptions import CommandRejectedError, KadenceError
from kadence.list_filter import parse
from kadence.protocol.limits import text_problem
from kadence.visibility import WorkflowExecutionStatus

MAX_JOB_ID_BYTES = 200  # leaves a request id (batch/<job id>/<run id>) well within the 1,000-byte limit on ids
DEFAULT_RPS = 50.0
# The causes a command is refused with when the run it names is over: closed, or no longer the
# workflow id's current run (it continued as new, and so closed).
_CLOSED_CAUSES = frozenset({"WORKFLOW_CLOSED", "WORKFLOW_NOT_FOUND"})
_JOB_COLUMNS = (
    "job_id, operation, list_filter, signal_name, signal_args, reason, reset_type, reapply_exclude, identity, state, start_time, "
    "close_time, terminate_reason"
)
STATE_CHECK_S = 1.0  # how often a running job looks whether it was terminated
# Outcomes are recorded this many, or this often, at a time.
RECORD_BATCH = 500
RECORD_INTERVAL_S = 0.1
_COUNTS = (
    "count(*), count(*) FILTER (WHERE outcome = 'Done'), count(*) FILTER (WHERE outcome = 'Failed'), "
    "count(*) FILTER (WHERE outcome = 'AlreadyClosed'), count(*) FILTER (WHERE outcome = 'NotCurrent')"
)
TABLES_MISSING = ("the batch jobs' tables do not exist: start the kadence services of this release (the visibility "
                  "service creates them)")


class BatchOperation(StrEnum):
    """What a job does to each execution (Temporal's BatchOperationType)."""

    SIGNAL = "Signal"
    CANCEL = "Cancel"
    TERMINATE = "Terminate"
    RESET = "Reset"


class BatchJobState(StrEnum):
    """Temporal's BatchOperationState. A job whose CLI stopped stays Running until it is resumed."""

    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"  # stopped by `kadence batch terminate`, as Temporal shows a terminated batch operation


class ExecutionOutcome(StrEnum):
    DONE = "Done"
    FAILED = "Failed"  # refused for another reason than the run being over; `detail` says why
    ALREADY_CLOSED = "AlreadyClosed"  # closed when the job began, or before the operation reached it
    NOT_CURRENT = "NotCurrent"  # a reset's: the run is no longer its workflow id's current run


class BatchJobError(KadenceError):
    """A job that cannot be started or resumed as asked; the message says why and what to do."""


@dataclass(frozen=True)
class BatchRequest:
    """The operation a job applies, and to which executions."""

    operation: BatchOperation
    list_filter: str
    signal_name: str = ""
    signal_args: Sequence[Any] = ()  # JSON values
    reason: str = ""
    reset_type: ResetType | None = None  # a reset's point: by kind, as an event id names an event of one run only
    reapply_exclude: Sequence[ResetReapplyExcludeType] = ()  # what a reset does not reapply after its point

    def columns(self) -> tuple[Any, ...]:
        """(signal_name, signal_args, reason, reset_type, reapply_exclude) as kadence_batch_jobs keeps them."""
        return (self.signal_name, Jsonb(list(self.signal_args)), self.reason, self.reset_type.value if self.reset_type else "",
                Jsonb([e.value for e in self.reapply_exclude]))

    @classmethod
    def from_columns(
        cls, operation: str, list_filter: str, signal_name: str, signal_args: Any, reason: str, reset_type: str, reapply_exclude: Any,
    ) -> BatchRequest:
        return cls(
            BatchOperation(operation), list_filter, signal_name, tuple(signal_args), reason,
            reset_type=ResetType(reset_type) if reset_type else None,
            reapply_exclude=tuple(ResetReapplyExcludeType(e) for e in reapply_exclude),
        )


@dataclass(frozen=True)
class BatchCounts:
    matched: int
    done: int
    failed: int
    already_closed: int
    not_current: int

    @property
    def finished(self) -> int:
        return self.done + self.failed + self.already_closed + self.not_current

    def to_json(self) -> dict[str, int]:
        return {"matched": self.matched, "done": self.done, "failed": self.failed, "already_closed": self.already_closed,
                "not_current": self.not_current}

    def summary(self) -> str:
        return (f"done {self.done}, failed {self.failed}, already closed {self.already_closed}"
                + (f", not current {self.not_current}" if self.not_current else ""))


@dataclass(frozen=True)
class BatchJob:
    """A job as `kadence batch describe` shows it (Temporal's DescribeBatchOperationResponse)."""

    job_id: str
    request: BatchRequest
    identity: str
    state: BatchJobState
    start_time: datetime
    close_time: datetime | None
    counts: BatchCounts
    terminate_reason: str = ""  # why `kadence batch terminate` stopped it

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> BatchJob:
        job_id, operation, list_filter, *request_columns, identity, state, start_time, close_time, terminate_reason = row[:13]
        request = BatchRequest.from_columns(operation, list_filter, *request_columns)
        counts = row[13:]
        return cls(job_id, request, identity, BatchJobState(state), start_time, close_time, BatchCounts(*counts), terminate_reason)

    def to_json(self) -> dict[str, Any]:
        request = self.request
        return {
            "job_id": self.job_id, "operation": request.operation.value, "query": request.list_filter,
            "signal_name": request.signal_name or None, "signal_args": list(request.signal_args), "reason": request.reason,
            "identity": self.identity, "state": self.state.value, "start_time": self.start_time.isoformat(),
            "close_time": self.close_time.isoformat() if self.close_time else None, **self.counts.to_json(),
            **({"reset_type": request.reset_type.value if request.reset_type else None,
                "reapply_exclude": [e.value for e in request.reapply_exclude]} if request.operation == BatchOperation.RESET else {}),
            **({"terminate_reason": self.terminate_reason} if self.state == BatchJobState.FAILED else {}),
        }


@dataclass(frozen=True)
class ExecutionResult:
    """An execution of a job and its outcome; `detail` says why, for an outcome other than done."""

    workflow_id: str
    run_id: str
    outcome: ExecutionOutcome
    detail: str


def batch_request_id(job_id: str, run_id: str) -> str:
    """The request id of a job's command to a run: the same on every run of the CLI, so a command
    sent again finds its first answer, and a signal is recorded once."""
    return f"batch/{job_id}/{run_id}"


def job_id_problem(job_id: str) -> str | None:
    if not job_id:
        return "--job-id is empty"
    if len(job_id.encode()) > MAX_JOB_ID_BYTES:
        return f"--job-id is {len(job_id.encode())} bytes long; at most {MAX_JOB_ID_BYTES} are allowed"
    return text_problem("--job-id", job_id)


async def matching_executions(client: Client, list_filter: str) -> list[tuple[str, str, WorkflowExecutionStatus]]:
    """(workflow id, run id, status) of every execution the filter matches now: a job's snapshot."""
    parse(list_filter)  # a bad filter fails here, before anything else is asked
    return [(execution.id, execution.run_id, execution.status) async for execution in client.list_workflows(list_filter)]


class BatchJobs:
    """The jobs' tables, on one connection of the CLI's own. A job being run holds a session lock on
    it, so a second CLI cannot run the same job at once; the lock goes with the connection, so a
    CLI killed mid-job leaves nothing to clean up."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn

    @classmethod
    async def connect(cls, dsn: str) -> BatchJobs:
        from kadence.protocol.postgres import CONNECT_TIMEOUT_S

        return cls(await psycopg.AsyncConnection.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S))

    async def close(self) -> None:
        await self._conn.close()

    async def _fetch(self, sql: str, params: Sequence[Any] | Mapping[str, Any]) -> list[tuple[Any, ...]]:
        try:
            return await (await self._conn.execute(sql, params)).fetchall()
        except psycopg.errors.UndefinedTable as exc:
            raise BatchJobError(TABLES_MISSING) from exc

    async def find(self, job_id: str) -> BatchJob | None:
        found = await self.newest(job_id=job_id)
        return found[0] if found else None

    async def newest(self, *, limit: int | None = None, job_id: str | None = None) -> list[BatchJob]:
        """Jobs newest first (or the one `job_id` names), each with its counts."""
        rows = await self._fetch(
            # The jobs first, then each one's counts: only the jobs shown are counted.
            f"SELECT j.*, counts.* FROM (SELECT {_JOB_COLUMNS} FROM kadence_batch_jobs "
            "WHERE %(job_id)s::text IS NULL OR job_id = %(job_id)s ORDER BY start_time DESC, job_id LIMIT %(limit)s) j "
            f"CROSS JOIN LATERAL (SELECT {_COUNTS} FROM kadence_batch_job_executions e WHERE e.job_id = j.job_id) counts "
            "ORDER BY j.start_time DESC, j.job_id",
            {"job_id": job_id, "limit": limit},
        )
        return [BatchJob.from_row(row) for row in rows]

    async def results(self, job_id: str, limit: int) -> list[ExecutionResult]:
        """The executions that failed, then those already closed or no longer current, at most `limit`."""
        rows = await self._fetch(
            "SELECT workflow_id, run_id, outcome, detail FROM kadence_batch_job_executions WHERE job_id = %s "
            "AND outcome IN ('Failed', 'AlreadyClosed', 'NotCurrent') ORDER BY outcome = 'Failed' DESC, outcome, workflow_id, run_id "
            "LIMIT %s", (job_id, limit),
        )
        return [ExecutionResult(w, r, ExecutionOutcome(o), d) for w, r, o, d in rows]

    async def create(self, job_id: str, request: BatchRequest, identity: str,
                     executions: list[tuple[str, str, WorkflowExecutionStatus]]) -> None:
        """Keep the job and its snapshot, in one transaction: executions closed already are settled
        as such at once, but by a reset, which resets closed runs too."""
        closed = [status != WorkflowExecutionStatus.RUNNING and request.operation != BatchOperation.RESET
                  for _, _, status in executions]
        try:
            async with self._conn.transaction():
                await self._conn.execute(
                    "INSERT INTO kadence_batch_jobs (job_id, operation, list_filter, signal_name, signal_args, reason, reset_type, "
                    "reapply_exclude, identity, state) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (job_id, request.operation.value, request.list_filter, *request.columns(), identity, BatchJobState.RUNNING.value),
                )
                await self._conn.execute(
                    "INSERT INTO kadence_batch_job_executions (job_id, workflow_id, run_id, outcome, detail) "
                    "SELECT %s, * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[])",
                    (job_id, [w for w, _, _ in executions], [r for _, r, _ in executions],
                     [ExecutionOutcome.ALREADY_CLOSED.value if c else None for c in closed],
                     [f"{s.value} when the job began" if c else "" for (_, _, s), c in zip(executions, closed, strict=True)]),
                )
        except psycopg.errors.UndefinedTable as exc:
            raise BatchJobError(TABLES_MISSING) from exc
        except psycopg.errors.UniqueViolation as exc:
            raise BatchJobError(f"batch job {job_id} was created meanwhile by another run of the CLI") from exc

    async def hold(self, job_id: str) -> None:
        """Take the job's lock for as long as this connection lives, or refuse."""
        row = await (await self._conn.execute(
            "SELECT pg_try_advisory_lock(hashtextextended('kadence_batch_job/' || %s, 0))", (job_id,),
        )).fetchone()
        if not (row and row[0]):
            raise BatchJobError(f"batch job {job_id} is being run by another process; wait for it, or stop it first")

    async def pending(self, job_id: str) -> list[tuple[str, str]]:
        rows = await self._fetch(
            "SELECT workflow_id, run_id FROM kadence_batch_job_executions WHERE job_id = %s AND outcome IS NULL "
            "ORDER BY workflow_id, run_id", (job_id,),
        )
        return [(w, r) for w, r in rows]

    async def answered(self, job_id: str, runs: list[tuple[str, str]]) -> dict[tuple[str, str], tuple[bool, str, str]]:
        """(accepted, cause, reason) of each of `runs` whose command the history service answered
        already: sent by a run of the CLI stopped before it recorded the outcome."""
        by_request = {batch_request_id(job_id, run_id): (workflow_id, run_id) for workflow_id, run_id in runs}
        rows = await self._fetch(
            "SELECT request_id, accepted, coalesce(cause, ''), coalesce(reason, '') FROM kadence_command_outcomes "
            "WHERE request_id = ANY(%s)", (list(by_request),),
        )
        return {by_request[request_id]: (accepted, cause, reason) for request_id, accepted, cause, reason in rows}

    async def record(self, job_id: str, outcomes: Sequence[ExecutionResult]) -> None:
        """The executions' outcomes, in one statement."""
        await self._conn.execute(
            "UPDATE kadence_batch_job_executions e SET outcome = o.outcome, detail = o.detail "
            "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) AS o(workflow_id, run_id, outcome, detail) "
            "WHERE e.job_id = %s AND e.workflow_id = o.workflow_id AND e.run_id = o.run_id AND e.outcome IS NULL",
            ([o.workflow_id for o in outcomes], [o.run_id for o in outcomes], [o.outcome.value for o in outcomes],
             [o.detail for o in outcomes], job_id),
        )

    async def complete(self, job_id: str) -> None:
        await self._conn.execute(
            "UPDATE kadence_batch_jobs SET state = %s, close_time = now() WHERE job_id = %s AND state = %s",
            (BatchJobState.COMPLETED.value, job_id, BatchJobState.RUNNING.value),
        )

    async def terminate(self, job_id: str, reason: str) -> None:
        """Stop a running job: the CLI running it stops within STATE_CHECK_S, and it is never resumed.
        What it did stays done."""
        rows = await self._fetch(
            "UPDATE kadence_batch_jobs SET state = %s, close_time = now(), terminate_reason = %s WHERE job_id = %s AND state = %s "
            "RETURNING 1", (BatchJobState.FAILED.value, reason, job_id, BatchJobState.RUNNING.value),
        )
        if not rows:
            job = await self.find(job_id)
            raise BatchJobError(f"there is no batch job {job_id} (`kadence batch list` shows the jobs)" if job is None
                                else f"batch job {job_id} is {job.state.value} already: only a running job can be terminated")

    async def terminated(self, job_id: str) -> str | None:
        """Why the job was terminated, if it was."""
        rows = await self._fetch("SELECT terminate_reason FROM kadence_batch_jobs WHERE job_id = %s AND state = %s",
                                 (job_id, BatchJobState.FAILED.value))
        return rows[0][0] if rows else None


def _outcome_of(operation: BatchOperation, accepted: bool, cause: str, reason: str) -> tuple[ExecutionOutcome, str]:
    if accepted:
        return ExecutionOutcome.DONE, ""
    if operation == BatchOperation.RESET and cause == "WORKFLOW_NOT_FOUND":
        return ExecutionOutcome.NOT_CURRENT, reason  # a closed run is reset, unless another run of its id followed it
    if cause in _CLOSED_CAUSES:
        return ExecutionOutcome.ALREADY_CLOSED, reason
    return ExecutionOutcome.FAILED, f"{cause}: {reason}" if cause else reason


async def _apply(client: Client, job_id: str, request: BatchRequest, workflow_id: str, run_id: str) -> tuple[ExecutionOutcome, str]:
    """The job's operation on one run, through the client as a single operation; its outcome."""
    handle = client.get_workflow_handle(workflow_id, run_id=run_id)
    request_id = batch_request_id(job_id, run_id)
    try:
        if request.operation == BatchOperation.SIGNAL:
            await handle.signal(request.signal_name, args=request.signal_args, request_id=request_id)
        elif request.operation == BatchOperation.CANCEL:
            await handle.cancel(request_id=request_id)
        elif request.operation == BatchOperation.RESET:
            if request.reset_type is None:
                return ExecutionOutcome.FAILED, "the job names no reset type"
            # The same reset sent again (a resumed job) is answered with the run it made.
            await handle.reset(reset_type=request.reset_type, reason=request.reason or f"batch job {job_id}",
                               reapply_exclude_types=request.reapply_exclude, request_id=request_id)
        else:
            await handle.terminate(reason=request.reason or f"batch job {job_id}", request_id=request_id)
    except CommandRejectedError as exc:
        return _outcome_of(request.operation, False, exc.cause, exc.reason)
    except KadenceError as exc:
        return ExecutionOutcome.FAILED, str(exc)
    return ExecutionOutcome.DONE, ""


async def run_job(client: Client, jobs: BatchJobs, job_id: str, *, rps: float,
                  on_progress: Callable[[BatchCounts], None]) -> BatchCounts:
    """Apply the job's operation to each of its executions without an outcome, starting at most
    `rps` a second, and record the outcomes as they come, a batch at a time; the job is Completed
    once every execution has one. Holds the job's lock throughout. An error other than a refused command (Postgres or the
    broker gone) stops the job, to be resumed by running it again."""
    if rps <= 0:
        raise ValueError(f"rps must be above 0, not {rps}")
    await jobs.hold(job_id)
    job = await jobs.find(job_id)
    if job is None:
        raise BatchJobError(f"there is no batch job {job_id}")
    if job.state == BatchJobState.FAILED:
        raise BatchJobError(terminated_message(job_id, job.terminate_reason))
    counts = job.counts
    pending = await jobs.pending(job.job_id)
    settled = await jobs.answered(job.job_id, pending)
    done = {ExecutionOutcome.DONE: counts.done, ExecutionOutcome.FAILED: counts.failed,
            ExecutionOutcome.ALREADY_CLOSED: counts.already_closed, ExecutionOutcome.NOT_CURRENT: counts.not_current}

    loop = asyncio.get_running_loop()
    unrecorded: list[ExecutionResult] = []
    last_recorded = loop.time()

    async def record() -> None:
        nonlocal unrecorded, last_recorded
        outcomes, unrecorded, last_recorded = unrecorded, [], loop.time()
        if outcomes:
            await jobs.record(job.job_id, outcomes)
            for outcome in outcomes:
                done[outcome.outcome] += 1
        on_progress(_counts(counts.matched, done))

    async def settle(workflow_id: str, run_id: str, outcome: ExecutionOutcome, detail: str) -> None:
        # Recorded a batch at a time: one statement, not one per execution. An outcome not recorded
        # when the CLI stops is found again on resume (`answered`), as the command's outcome.
        unrecorded.append(ExecutionResult(workflow_id, run_id, outcome, detail))
        if len(unrecorded) >= RECORD_BATCH or loop.time() - last_recorded >= RECORD_INTERVAL_S:
            await record()

    for (workflow_id, run_id), answer in settled.items():
        unrecorded.append(ExecutionResult(workflow_id, run_id, *_outcome_of(job.request.operation, *answer)))
    await record()

    slots = asyncio.Semaphore(max(1, math.ceil(rps)))  # about a second's worth in flight

    async def one(workflow_id: str, run_id: str) -> None:
        try:
            await settle(workflow_id, run_id, *await _apply(client, job.job_id, job.request, workflow_id, run_id))
        finally:
            slots.release()

    next_start = next_check = loop.time()
    try:
        async with asyncio.TaskGroup() as group:
            for workflow_id, run_id in (run for run in pending if run not in settled):
                await slots.acquire()
                await asyncio.sleep(max(0.0, next_start - loop.time()))
                next_start = max(next_start, loop.time()) + 1 / rps  # no burst to catch up after a slow answer
                if loop.time() >= next_check:
                    next_check = loop.time() + STATE_CHECK_S
                    await _unless_terminated(jobs, job.job_id)
                group.create_task(one(workflow_id, run_id))
    except BaseExceptionGroup as failed:
        if isinstance(cause := failed.exceptions[0], psycopg.OperationalError):
            raise BatchJobError(f"the batch job stopped, Postgres failed ({cause}): run it again to resume it") from cause
        raise cause from None
    await record()
    await _unless_terminated(jobs, job.job_id)
    await jobs.complete(job.job_id)
    return _counts(counts.matched, done)


async def _unless_terminated(jobs: BatchJobs, job_id: str) -> None:
    if (reason := await jobs.terminated(job_id)) is not None:
        raise BatchJobError(terminated_message(job_id, reason))


def terminated_message(job_id: str, reason: str) -> str:
    return (f"batch job {job_id} was terminated ({reason or 'no reason given'}): what it did stays done; start a new job for "
            "the executions it left")


def _counts(matched: int, done: dict[ExecutionOutcome, int]) -> BatchCounts:
    return BatchCounts(matched, *(done[outcome] for outcome in ExecutionOutcome))
