"""The client: start workflows by producing commands, wait for answers and results on kadence.replies
and the read model, whichever comes first (as temporalio.client)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta
from enum import IntEnum
from typing import Any

import psycopg
from confluent_kafka import Message

from kadence import workflow as workflow_module
from kadence._client_interceptor import (
    CancelWorkflowInput,
    CompleteAsyncActivityInput,
    CountWorkflowsInput,
    DescribeWorkflowInput,
    FailAsyncActivityInput,
    HeartbeatAsyncActivityInput,
    Interceptor,
    ListWorkflowsInput,
    OutboundInterceptor,
    QueryWorkflowInput,
    ReportCancellationAsyncActivityInput,
    SignalWorkflowInput,
    StartWorkflowInput,
    StartWorkflowUpdateInput,
    TerminateWorkflowInput,
)
from kadence._replies import ReplyListener, RunWatch
from kadence.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy, to_ms
from kadence.converter import DataConverter, type_hints
from kadence.exceptions import (
    ApplicationError,
    AsyncActivityCancelledError,
    CancelledError,
    ClientClosedError,
    CommandRejectedError,
    CommandTooLargeError,
    KadenceError,
    TerminatedError,
    WorkflowAlreadyStartedError,
    WorkflowFailureError,
    WorkflowNotFoundError,
    WorkflowQueryFailedError,
    WorkflowQueryTimeoutError,
    WorkflowUpdateFailedError,
)
from kadence.protocol import topics, tracing
from kadence.protocol.codec import HeaderList, codec, command_codec
from kadence.protocol.cron import parse_cron
from kadence.protocol.kafka import AsyncProducer
from kadence.protocol.limits import MAX_RECORD_VALUE_BYTES, command_problem, text_problem
from kadence.protocol.names import CommandType
from kadence.protocol.postgres import CONNECT_TIMEOUT_S, RETRY_MAX_S, Backoff, Reachability, apply_ddl, connection_pool, until_answered
from kadence.protocol.read_model import (
    CLOSED_CHANNEL,
    OUTCOME_CHANNEL,
    VISIBILITY_DDL,
    CommandOutcome,
    update_accepted_request_id,
    update_request_id,
)
from kadence.protocol.settings import KafkaSettings, postgres_dsn
from kadence.protocol.task_token import TaskToken
from kadence.visibility import (
    PendingWorkflowTask,
    WorkflowExecution,
    WorkflowExecutionStatus,
    WorkflowHistory,
    activity_cancel_requested,
    count_executions,
    fetch_events,
    find_execution,
    list_executions,
)

__all__ = [
    "Client", "WorkflowHandle", "WorkflowUpdateHandle", "AsyncActivityHandle", "AsyncActivityIDReference",
    "WorkflowUpdateStage", "WorkflowExecution", "WorkflowExecutionStatus", "PendingWorkflowTask",
    "WorkflowExecutionCount", "WorkflowHistory",
    "Interceptor", "OutboundInterceptor", "StartWorkflowInput", "CancelWorkflowInput", "DescribeWorkflowInput",
    "ListWorkflowsInput", "CountWorkflowsInput", "QueryWorkflowInput", "SignalWorkflowInput", "TerminateWorkflowInput",
    "StartWorkflowUpdateInput", "HeartbeatAsyncActivityInput", "CompleteAsyncActivityInput", "FailAsyncActivityInput",
    "ReportCancellationAsyncActivityInput",
]

log = logging.getLogger("kadence.client")
# How long result() of a workflow the read model does not hold waits before WorkflowNotFoundError:
# a start produced to the topic by another process is recorded within milliseconds.
NOT_FOUND_AFTER_S = 5.0
# How long result() of a run this client started waits for its close on kadence.replies before it
# asks the read model too: the reply comes within milliseconds unless it was lost (the history
# service restarted between recording the close and replying), and a read-model wait per result
# costs the client more CPU than anything else on its path (docs/performance.md).
READ_MODEL_AFTER_REPLY_S = 1.0
ANSWERED_BEFORE_LOOKUP_S = 1.0  # a request's answer neither replied nor announced by then is looked up in the read model
QUERY_RESEND_S = 5.0  # how long a query waits for its answer before it is sent again
CHAIN_MOVES_MAX = 20  # continue-as-news a cancel, terminate or update of a chain follows before giving up

_UNSET: Any = object()


def default_identity() -> str:
    return f"{os.getpid()}@{socket.gethostname()}"


class Client:
    """Talks to Kadence through Kafka (commands out; answers, results and query answers back on
    kadence.replies) and the Postgres read model (lists, describe, and every answer and result again)."""

    def __init__(
        self, settings: KafkaSettings, *, data_converter: DataConverter, identity: str, postgres_dsn: str | None,
        interceptors: Sequence[Interceptor] = (),
    ) -> None:
        self.settings = settings
        self.data_converter = data_converter
        self.identity = identity
        self._postgres_dsn = postgres_dsn
        self._producer = AsyncProducer(settings)
        self._commands = command_codec()
        self._results: _ReadModel | None = None
        self._reply_listener: asyncio.Future[ReplyListener] | None = None
        # workflow id -> what to await before reading the read model about it (see _read_model_behind)
        self._unrecorded: dict[str, Callable[[], Awaitable[Any]]] = {}
        self._encoding: asyncio.Queue[tuple[list[dict[str, Any]], bool, HeaderList, list[asyncio.Future[Message]]]] | None = None
        self._encoder: asyncio.Task[None] | None = None
        self._closed = False
        # As temporalio: the first interceptor is the outermost, called first.
        self.interceptors = tuple(interceptors)
        impl: OutboundInterceptor = _ClientImpl(self)
        for interceptor in reversed(self.interceptors):
            impl = interceptor.intercept_client(impl)
        self._impl = impl

    @classmethod
    async def connect(
        cls, bootstrap_servers: str | None = None, *, namespace: str = "default", postgres_dsn: str | None = None,
        data_converter: DataConverter | None = None, identity: str | None = None, interceptors: Sequence[Interceptor] = (),
    ) -> "Client":
        """`bootstrap_servers` and `postgres_dsn` default to KADENCE_BOOTSTRAP_SERVERS and KADENCE_POSTGRES_DSN.
        A Kadence deployment (its topics and database) is one namespace: `namespace` must be "default"."""
        if namespace != "default":
            raise ValueError(
                f"namespace {namespace!r}: a Kadence deployment is one namespace, 'default'; "
                "give each namespace its own topics and database (a deployment of its own) instead"
            )
        settings = KafkaSettings.from_env()
        if bootstrap_servers:
            settings = dataclasses.replace(settings, bootstrap_servers=bootstrap_servers)
        return cls(
            settings, data_converter=data_converter or DataConverter(), identity=identity or default_identity(),
            postgres_dsn=postgres_dsn, interceptors=interceptors,
        )

    async def start_workflow(
        self, workflow: type | Callable[..., Any] | str, arg: Any = _UNSET, *, args: Sequence[Any] = (),
        id: str, task_queue: str, result_type: type | None = None, request_id: str = "",
        task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None,
        run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        start_signal: str | None = None,
        start_signal_args: Sequence[Any] = (),
        search_attributes: dict[str, Any] | None = None,
        start_delay: timedelta | None = None,
        cron_schedule: str = "",
    ) -> "WorkflowHandle":
        """Produce a StartWorkflowExecution command and wait for the history service's answer: the new
        run (or, for a retried `request_id`, the run it already started), or WorkflowAlreadyStartedError.
        With `start_signal`, this is signal-with-start: the running run gets the signal, or a new
        run starts with the signal delivered before its first workflow task. With `start_delay`, the
        run's first workflow task waits that long (a signal-with-start does not wait). With
        `cron_schedule` (`*/5 * * * *`, `@hourly`, `@every 90s`, `CRON_TZ=Europe/Paris 0 9 * * 1-5`),
        each run starts at the schedule's next time and one that completes, fails or times out is
        followed by the next, until the workflow is canceled or terminated (as Temporal)."""
        if cron_schedule:
            parse_cron(cron_schedule)  # a clear CronError here, not a rejection from history
        definition = workflow_module.definition(workflow)
        workflow_type = definition if isinstance(definition, str) else definition.name
        if result_type is None and not isinstance(definition, str):
            result_type = definition.result_type()
        return await self._impl.start_workflow(StartWorkflowInput(
            workflow=workflow_type, args=([arg] if arg is not _UNSET else []) + list(args), id=id, task_queue=task_queue,
            execution_timeout=execution_timeout, run_timeout=run_timeout, task_timeout=task_timeout,
            id_reuse_policy=id_reuse_policy, id_conflict_policy=id_conflict_policy, retry_policy=None,
            cron_schedule=cron_schedule, memo=None, search_attributes=search_attributes, start_delay=start_delay, headers={},
            start_signal=start_signal, start_signal_args=start_signal_args, static_summary=None, static_details=None,
            ret_type=result_type, rpc_metadata={}, rpc_timeout=None, request_id=request_id,
        ))

    async def signal_with_start(
        self, workflow: type | Callable[..., Any] | str, arg: Any = _UNSET, *, signal: Callable[..., Any] | str,
        signal_args: Sequence[Any] = (), **options: Any,
    ) -> "WorkflowHandle":
        """Signal the running run of the workflow id, or start one (with start_workflow's options)
        that gets the signal first: start_workflow(..., start_signal=..., start_signal_args=...)."""
        return await self.start_workflow(
            workflow, arg, start_signal=workflow_module.signal_name(signal), start_signal_args=signal_args, **options,
        )

    async def execute_workflow(self, workflow: type | Callable[..., Any] | str, arg: Any = _UNSET, **options: Any) -> Any:
        """start_workflow (with any of its options), then wait for the result."""
        return await (await self.start_workflow(workflow, arg, **options)).result()

    def list_workflows(self, query: str = "", *, limit: int | None = None, page_size: int = 1000) -> AsyncIterator[WorkflowExecution]:
        """Executions matching a Temporal list filter (`WorkflowType = 'Order' AND ExecutionStatus = 'Running'`),
        newest first unless the filter says ORDER BY; raises ListFilterError for a filter that does not parse."""
        return self._impl.list_workflows(ListWorkflowsInput(
            query=query, page_size=page_size, next_page_token=None, rpc_metadata={}, rpc_timeout=None, limit=limit,
        ))

    async def count_workflows(self, query: str = "") -> WorkflowExecutionCount:
        """How many executions match a list filter."""
        return await self._impl.count_workflows(CountWorkflowsInput(query=query, rpc_metadata={}, rpc_timeout=None))

    def get_workflow_handle(
        self, workflow_id: str, *, run_id: str | None = None, first_execution_run_id: str | None = None,
        result_type: type | None = None,
    ) -> "WorkflowHandle":
        """A handle on `run_id` (the current run without one); `first_execution_run_id` keeps
        cancel, terminate and updates to the runs of the chain that run started (as temporalio)."""
        return WorkflowHandle(
            self, workflow_id, run_id=run_id, result_run_id=run_id, first_execution_run_id=first_execution_run_id,
            result_type=result_type,
        )

    def get_async_activity_handle(
        self, *, workflow_id: str | None = None, run_id: str | None = None, activity_id: str | None = None,
        task_token: bytes | None = None,
    ) -> "AsyncActivityHandle":
        """A handle to complete, fail, heartbeat or cancel an activity attempt from outside its worker
        (one that called activity.raise_complete_async()): by its `task_token` alone, or by
        `workflow_id`, `activity_id` and optionally `run_id` (the current run without one), which
        reach the activity's current started attempt."""
        if task_token is not None:
            if workflow_id is not None or run_id is not None or activity_id is not None:
                raise ValueError("Task token cannot be present with other IDs")
            return AsyncActivityHandle(self, task_token)
        if workflow_id is not None:
            if activity_id is None:
                raise ValueError("Workflow ID and activity ID must both be present")
            return AsyncActivityHandle(self, AsyncActivityIDReference(workflow_id=workflow_id, run_id=run_id, activity_id=activity_id))
        if activity_id is not None:
            raise ValueError("an activity_id without a workflow_id names a standalone activity; Kadence runs activities only "
                             "from workflows: give the workflow_id too, or the task token")
        raise ValueError("Task token or workflow/activity ID must be present")

    def send_command(
        self, workflow_id: str, kind: str, body: dict[str, Any], *, identity: str | None = None, until_delivered: bool = False,
        reply_partition: int | None = None,
    ) -> asyncio.Future[Message]:
        """Produce one command, keyed (and so partitioned) by workflow_id; the future resolves on delivery.
        With a payload codec, commands are encoded one at a time, so they still leave in order.
        With `until_delivered`, a delivery that fails for a passing reason (the broker away past
        the delivery timeout) is tried again until it succeeds: for commands whose repetition is
        rejected as stale (a worker's task results). With `reply_partition`, the history service
        also answers the command's request id on that partition of kadence.replies."""
        return self.send_commands(workflow_id, [(kind, body)], identity=identity, until_delivered=until_delivered,
                                  reply_partition=reply_partition)[0]

    def send_commands(
        self, workflow_id: str, commands: Sequence[tuple[str, dict[str, Any]]], *, identity: str | None = None,
        until_delivered: bool = False, reply_partition: int | None = None, loop: asyncio.AbstractEventLoop | None = None,
    ) -> list[asyncio.Future[Message]]:
        """Commands of one workflow, as `send_command` sends one, produced back to back once all
        are encoded, so they usually travel in one produce request and the history service reads
        them in one poll (a workflow task's start and its answer). One that cannot be sent (too
        large, its payloads not encodable) is refused with the reason, and the commands after it
        with it: they may depend on it (an answer on the start before it). With `loop`, called
        from another thread on that loop's behalf: produced at once, so only for commands without
        payloads (the payload codec's encoding runs on the loop)."""
        if self._closed:
            raise ClientClosedError(f"{', '.join(kind for kind, _ in commands)} for {workflow_id}")
        records = [{
            "workflow_id": workflow_id, "identity": identity or self.identity, "command": (kind, body),
            "reply_partition": reply_partition,
        } for kind, body in commands]
        traced = tracing.current_headers()  # the span it is sent in: the next hop's parent
        if loop is not None or self.data_converter.payload_codec is None:
            return self._produce_commands(records, until_delivered, traced, loop or asyncio.get_running_loop())
        if self._encoding is None:
            self._encoding = asyncio.Queue()
            self._encoder = asyncio.create_task(self._encode_commands(self._encoding))
        running = asyncio.get_running_loop()
        delivered: list[asyncio.Future[Message]] = [running.create_future() for _ in records]
        self._encoding.put_nowait((records, until_delivered, traced, delivered))
        return delivered

    def _produce_commands(
        self, records: list[dict[str, Any]], until_delivered: bool, traced: HeaderList, loop: asyncio.AbstractEventLoop,
    ) -> list[asyncio.Future[Message]]:
        """Encode them all, then produce them one right after the other, up to the first that
        cannot be sent; its future and those of the commands after it say why."""
        values: list[bytes] = []
        refusal: Exception | None = None
        for record in records:
            try:
                values.append(self._commands.encode(record))
            except Exception as exc:  # payloads the codec left unencodable: the caller hears why
                refusal = exc
                break
            if len(values[-1]) > MAX_RECORD_VALUE_BYTES:  # the broker would refuse it: say so, and why
                refusal = CommandTooLargeError(
                    f"{record['command'][0]} for {record['workflow_id']} is {len(values[-1]) / 1e6:.1f} MB; a kadence.commands "
                    f"record holds at most {MAX_RECORD_VALUE_BYTES / 1e6:.1f} MB: keep large data out of payloads (pass a reference to it)"
                )
                values.pop()
                break
        headers = self._commands.headers() + traced
        sent = [
            self._producer.produce(topics.COMMANDS, value, record["workflow_id"].encode(), headers=headers,
                                   until_delivered=until_delivered, loop=loop)
            for record, value in zip(records, values, strict=False)
        ]
        return sent + _refusals(loop, records[len(values):], refusal)

    async def _encode_commands(
        self, queue: asyncio.Queue[tuple[list[dict[str, Any]], bool, HeaderList, list[asyncio.Future[Message]]]],
    ) -> None:
        while True:
            records, until_delivered, traced, delivered = await queue.get()
            loop, encoded, refusal = asyncio.get_running_loop(), 0, None
            try:
                for record in records:
                    await self.data_converter.encode_payloads(record)
                    encoded += 1
            except Exception as exc:  # the codec failed: the callers hear it, and the next commands go on
                refusal = exc
            try:
                sent = self._produce_commands(records[:encoded], until_delivered, traced, loop)
            except Exception as exc:  # never leave a caller waiting
                sent, encoded, refusal = [], 0, exc
            sent += _refusals(loop, records[encoded:], refusal)
            for produced, future in zip(sent, delivered, strict=True):
                produced.add_done_callback(functools.partial(_chain, target=future))

    def produce(
        self, topic: str, value: bytes, key: bytes, headers: HeaderList, *, partition: int | None = None,
    ) -> asyncio.Future[Message]:
        """Produce a record of Kadence's own (a worker's heartbeat on kadence.pollers, a query's answer)."""
        return self._producer.produce(topic, value, key, partition=partition, headers=headers)

    async def _request(self, workflow_id: str, kind: str, body: dict[str, Any], request_id: str) -> str:
        """Send a client command and wait for its outcome; the run id it applied to. A command the
        history service would refuse whatever the state (a bad id, name or search attribute) is
        refused here, with the same error, without a round trip."""
        problem = command_problem({"workflow_id": workflow_id, "identity": self.identity, "command": (kind, body)})
        if problem:
            raise CommandRejectedError(workflow_id, "INVALID_ARGUMENT", problem)
        outcome = await self.send_and_wait(workflow_id, kind, body, request_id)
        if outcome.accepted:
            return outcome.run_id
        if outcome.cause == "WORKFLOW_ALREADY_STARTED":
            workflow_type = body.get("workflow_type") or body.get("start", {}).get("workflow_type", "")
            raise WorkflowAlreadyStartedError(workflow_id, workflow_type, run_id=outcome.run_id or None, reason=outcome.reason or "")
        raise CommandRejectedError(workflow_id, outcome.cause or "", outcome.reason or "")

    async def send_and_wait(
        self, workflow_id: str, kind: str, body: dict[str, Any], request_id: str, *, identity: str | None = None,
    ) -> CommandOutcome:
        """Send a command carrying `request_id` and wait for the history service's answer to it:
        on this client's partition of kadence.replies, or from the read model, whichever comes
        first (the reply is sent once the answer is in the log; the read model holds it a few
        milliseconds later, and holds it whatever becomes of the reply).
        The command is sent again if its delivery fails (the broker away past the delivery
        timeout), so the call waits for the broker to come back: the history service applies a
        command of one request id once (a start starts one run, a signal signals once)."""
        read_model = await self._read_model()
        stored = read_model.expect_outcome(request_id)
        replies = await self._replies_if_listening()
        replied = replies.expect_answer(request_id) if replies is not None else None
        try:
            await self.send_command(
                workflow_id, kind, body, identity=identity, until_delivered=True,
                reply_partition=replies.partition if replies is not None else None,
            )
            # A request answered before (this one sent again) writes nothing the read model would
            # announce: its first answer is in the table, looked up at once without a reply
            # listener, else if the reply is late (lost: replies are best effort).
            waiting = [stored] if replied is None else [stored, replied]
            first = asyncio.FIRST_COMPLETED
            if replied is None or not (await asyncio.wait(waiting, timeout=ANSWERED_BEFORE_LOOKUP_S, return_when=first))[0]:
                read_model.look_up_outcomes_soon()
            await asyncio.wait(waiting, return_when=first)
        except BaseException:
            read_model.forget_outcome(request_id, stored)
            raise
        finally:
            if replies is not None:
                replies.forget_answer(request_id)
        if stored.done():
            return stored.result()
        assert replied is not None
        self._read_model_behind(workflow_id, lambda: read_model.recorded(stored))
        return replied.result()

    def _read_model_behind(self, workflow_id: str, recorded: Callable[[], Awaitable[Any]]) -> None:
        """This client heard about `workflow_id` on kadence.replies (a command's answer, a run's
        close) before the read model recorded it: for the next NOT_FOUND_AFTER_S, its reads of the
        read model about that workflow first await `recorded()`, so a describe() right after
        start_workflow or result() sees what the reply said. A factory: nothing is asked of
        Postgres unless such a read comes."""
        self._unrecorded[workflow_id] = recorded

        def expire() -> None:
            if self._unrecorded.get(workflow_id) is recorded:
                del self._unrecorded[workflow_id]

        asyncio.get_running_loop().call_later(NOT_FOUND_AFTER_S, expire)

    async def _read_model_caught_up(self, workflow_id: str | None = None) -> None:
        """Until the read model recorded what this client heard on kadence.replies (about
        `workflow_id`, or about any workflow), for at most NOT_FOUND_AFTER_S."""
        if workflow_id is None:
            behind = dict(self._unrecorded)
        else:
            behind = {workflow_id: self._unrecorded[workflow_id]} if workflow_id in self._unrecorded else {}
        if not behind:
            return
        pending = {asyncio.ensure_future(recorded()): (behind_id, recorded) for behind_id, recorded in behind.items()}
        done, still = await asyncio.wait(pending, timeout=NOT_FOUND_AFTER_S)
        for future in still:
            future.cancel()
        for future in done:
            behind_id, recorded = pending[future]
            if not future.cancelled() and future.exception() is None and self._unrecorded.get(behind_id) is recorded:
                del self._unrecorded[behind_id]  # caught up: later reads need not wait

    async def expect_outcome(self, request_id: str) -> asyncio.Future[CommandOutcome]:
        """The answer to a command carrying `request_id`; ask before sending it, so it cannot be missed."""
        return (await self._read_model()).expect_outcome(request_id)

    @property
    def read_model_started(self) -> bool:
        """Whether `expect_outcome_now` may be asked."""
        return self._results is not None and self._results.is_started

    def forget_outcome(self, request_id: str, future: asyncio.Future[CommandOutcome]) -> None:
        """Stop waiting for the answer to a command that was not sent."""
        if self._results is not None:
            self._results.forget_outcome(request_id, future)

    def expect_outcome_now(self, request_id: str) -> asyncio.Future[CommandOutcome]:
        """`expect_outcome` without waiting, once the read model is started (`read_model_started`)."""
        if self._results is None or not self._results.is_started:
            raise RuntimeError("the read model is not started yet: await expect_outcome instead, or check read_model_started")
        return self._results.expect_outcome(request_id)

    def readiness_problems(self) -> list[str]:
        """Why answers from Postgres cannot reach this client now (its LISTEN connection is lost and
        being opened again): part of a worker's /readyz."""
        problem = self._results.reachability.problem if self._results is not None else None
        return [problem] if problem is not None else []

    async def _read_model(self) -> "_ReadModel":
        if self._closed:
            raise ClientClosedError("reading the read model")
        if self._results is None:
            self._results = _ReadModel(self._postgres_dsn or postgres_dsn())
        await self._results.started()
        return self._results

    async def _closed_execution(self, workflow_id: str, run_id: str | None) -> tuple[str, bytes | None, bytes | None, str | None]:
        return await (await self._read_model()).wait_closed(workflow_id, run_id)

    async def _replies(self) -> ReplyListener:
        if self._closed:
            raise ClientClosedError("waiting for a reply")
        if self._reply_listener is None:
            self._reply_listener = asyncio.ensure_future(self._start_replies())
        starting = self._reply_listener
        try:
            return await asyncio.shield(starting)
        except Exception:
            if self._reply_listener is starting and starting.done():
                self._reply_listener = None  # the next call tries again
            raise

    async def _replies_if_listening(self) -> ReplyListener | None:
        """The reply listener, or None when it cannot start now (the broker away): answers then
        come from the read model alone, and the next call tries again."""
        try:
            return await self._replies()
        except ClientClosedError:
            raise
        except Exception as exc:
            log.warning("event=replies_unavailable error=%r fallback=%r", str(exc), "the read model")
            return None

    async def _watch_run(self, request_id: str) -> RunWatch | None:
        """The closes the history service sends for the run a start carrying `request_id` answers with."""
        replies = await self._replies_if_listening()
        return replies.watch(request_id) if replies is not None else None

    async def _start_replies(self) -> ReplyListener:
        listener = ReplyListener(self.settings)
        await listener.start()
        return listener

    async def close(self) -> None:
        """Stop sending and listening; any later call raises ClientClosedError instead of waiting."""
        self._closed = True
        if self._encoder is not None:
            self._encoder.cancel()
        if self._reply_listener is not None:
            await (await self._reply_listener).close()
        if self._results is not None:
            await self._results.close()
        await asyncio.get_running_loop().run_in_executor(None, self._producer.close)


@dataclasses.dataclass(frozen=True)
class WorkflowExecutionCount:
    """As temporalio.client.WorkflowExecutionCount."""

    count: int


class WorkflowHandle:
    """As temporalio.client.WorkflowHandle: `run_id` pins signals, queries, updates, describe,
    cancel and terminate to one run (None: the current run); `result_run_id` is the run result()
    starts from; `first_execution_run_id` keeps cancel, terminate and updates to the current run
    of the chain (continue-as-new) that run started."""

    def __init__(
        self, client: Client, id: str, *, run_id: str | None = None, result_run_id: str | None = None,
        first_execution_run_id: str | None = None, result_type: type | None = None,
    ) -> None:
        for name, value in (("run_id", run_id), ("result_run_id", result_run_id), ("first_execution_run_id", first_execution_run_id)):
            problem = text_problem("workflow_id", id) or (text_problem(name, value) if value else None)
            if problem:
                raise CommandRejectedError(id, "INVALID_ARGUMENT", problem)
        self.client = client
        self._id = id
        self._run_id = run_id
        self._result_run_id = result_run_id
        self._first_execution_run_id = first_execution_run_id
        self.result_type = result_type
        self._recorded = False  # whether the read model is known to hold the run
        self._close_watch: RunWatch | None = None  # the closes the history service sends this client, if it started the run

    @property
    def id(self) -> str:
        return self._id

    @property
    def run_id(self) -> str | None:
        """The run every call applies to; None (a handle from start_workflow) for the current run."""
        return self._run_id

    @property
    def result_run_id(self) -> str | None:
        """The run result() starts from: the started run for a handle from start_workflow."""
        return self._result_run_id

    @property
    def first_execution_run_id(self) -> str | None:
        """The first run of the chain cancel, terminate and updates must apply within."""
        return self._first_execution_run_id

    async def _chain_run_id(self) -> str:
        """The run id a cancel, terminate or update names: `run_id`, else the current run of the
        chain `first_execution_run_id` started (followed through the read model), else "" (the
        workflow id's current run, whichever chain it belongs to)."""
        if self._first_execution_run_id is None:
            return self._run_id or ""
        await self.client._read_model_caught_up(self._id)
        pool = (await self.client._read_model()).pool
        run_id, chain = self._first_execution_run_id, [self._first_execution_run_id]
        while True:
            row = await until_answered("client_chain_lookup", functools.partial(_run_row, pool, self._id, run_id))
            if row is None:
                raise WorkflowNotFoundError(f"workflow {self._id} run {run_id} not found")
            status, next_run_id = row
            if status != "ContinuedAsNew" or not next_run_id:
                break
            run_id = next_run_id
            chain.append(run_id)
        if self._run_id is None:
            return run_id
        if self._run_id not in chain:
            raise CommandRejectedError(self._id, "WORKFLOW_NOT_FOUND", (
                f"run {self._run_id} is not of the chain started by run {self._first_execution_run_id}"
            ))
        return self._run_id

    async def _request_in_chain(self, kind: str, body: dict[str, Any], request_id: str) -> str:
        """Send a cancel, terminate or update to the run `_chain_run_id` names; the run it applied to.
        Rejected as not current because that run continued as new before the read model said so,
        it goes to the chain's next run (with a request id of its own: the first has its answer)."""
        for attempt in range(CHAIN_MOVES_MAX):
            run_id = await self._chain_run_id()
            sent_id = request_id if attempt == 0 else f"{request_id}/{attempt}"
            try:
                return await self.client._request(self._id, kind, {**body, "run_id": run_id, "request_id": sent_id}, sent_id)
            except CommandRejectedError as exc:
                if self._run_id is not None or self._first_execution_run_id is None or "is not the current run" not in exc.reason:
                    raise
                if not await self._continued_as_new(run_id):
                    raise CommandRejectedError(self._id, exc.cause, (
                        f"the current run of workflow {self._id} is not of the chain started by run "
                        f"{self._first_execution_run_id}: {exc.reason}"
                    )) from exc
        raise CommandRejectedError(self._id, "WORKFLOW_NOT_FOUND", (
            f"the chain started by run {self._first_execution_run_id} continued as new {CHAIN_MOVES_MAX} times while "
            f"{kind} was sent: send it again"
        ))

    async def _continued_as_new(self, run_id: str) -> bool:
        """Whether the run continued as new, once the read model records its close (within NOT_FOUND_AFTER_S)."""
        try:
            status, *_ = await asyncio.wait_for(self.client._closed_execution(self._id, run_id), NOT_FOUND_AFTER_S)
        except TimeoutError:
            return False
        return status == "ContinuedAsNew"

    async def signal(self, signal: Callable[..., Any] | str, arg: Any = _UNSET, *, args: Sequence[Any] = ()) -> None:
        """Signal this run (or the current run when the handle has no run_id); returns once the signal
        is in its history, raises CommandRejectedError when the run is closed or unknown."""
        await self.client._impl.signal_workflow(SignalWorkflowInput(
            id=self.id, run_id=self.run_id, signal=workflow_module.signal_name(signal),
            args=([arg] if arg is not _UNSET else []) + list(args), headers={}, rpc_metadata={}, rpc_timeout=None,
        ))

    async def result(self, *, follow_runs: bool = True) -> Any:
        """Wait for the run to close; its result, or WorkflowFailureError with the cause. With
        `follow_runs`, a run that continued as new, or a cron run followed by the next, is followed
        to the run that ends the chain.
        Raises WorkflowNotFoundError when the read model does not hold the run (after a moment's
        grace, for a start another process just produced to the topic)."""
        if not self._recorded:
            await self._until_recorded()
        if self._close_watch is None:
            status, payload, recorded = await self._recorded_close(follow_runs)
        else:
            replied = self._close_watch.last if follow_runs else self._close_watch.first
            stored = asyncio.ensure_future(self._recorded_close(follow_runs, after_s=READ_MODEL_AFTER_REPLY_S))
            closed = await _first_result(asyncio.shield(replied), stored)
            if isinstance(closed, tuple):
                status, payload, recorded = closed
            else:
                status, payload, recorded = closed["status"], closed["result"], closed["failure"]
                run_id = closed["run_id"]
                self.client._read_model_behind(self.id, lambda: self.client._closed_execution(self.id, run_id))
        converter = self.client.data_converter
        if status == "Completed":
            await converter.decode_payloads(payload)
            return converter.payload_converter.from_payload(payload, self.result_type)
        await converter.decode_payloads(recorded)
        message = recorded["message"] if recorded else status
        cause: BaseException
        if status == "Canceled":
            cause = CancelledError(message)
        elif status == "Terminated":
            cause = TerminatedError(message)
        else:
            cause = converter.from_failure(recorded) if recorded else RuntimeError(status)
        raise WorkflowFailureError(cause=cause)

    async def _recorded_close(
        self, follow_runs: bool, after_s: float = 0.0,
    ) -> tuple[str, dict[str, Any] | None, dict[str, Any] | None]:
        """The close result() reports, from the read model (asked after `after_s`): status, result
        payload and failure."""
        await asyncio.sleep(after_s)
        run_id = self._result_run_id
        while True:
            status, result, failure, next_run_id = await self.client._closed_execution(self.id, run_id)
            if not follow_runs or not next_run_id:
                break
            run_id = next_run_id
        return status, codec("Payload").decode(result) if result else None, codec("Failure").decode(failure) if failure else None

    async def query(
        self, query: Callable[..., Any] | str, arg: Any = _UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
        timeout: timedelta = timedelta(seconds=30),
    ) -> Any:
        """Ask the workflow: the worker holding the run answers from its state (any worker of the
        queue replays the history if none holds it, a closed run included). Raises
        WorkflowQueryFailedError if the query failed, WorkflowQueryTimeoutError if no worker answered."""
        name = workflow_module.query_name(query)
        if result_type is None and not isinstance(query, str):
            result_type = type_hints(query).get("return")
        return await self.client._impl.query_workflow(QueryWorkflowInput(
            id=self.id, run_id=self.run_id, query=name, args=([arg] if arg is not _UNSET else []) + list(args),
            reject_condition=None, headers={}, ret_type=result_type, rpc_metadata={}, rpc_timeout=timeout,
        ))

    async def start_update(
        self, update: Callable[..., Any] | str, arg: Any = _UNSET, *, wait_for_stage: "WorkflowUpdateStage",
        args: Sequence[Any] = (), id: str | None = None, result_type: type | None = None,
    ) -> "WorkflowUpdateHandle":
        """Send an update and return its handle once it reached `wait_for_stage`: ACCEPTED (its
        validator passed, or it was rejected: result() then raises) or COMPLETED. ADMITTED is refused,
        as temporalio refuses it. Raises CommandRejectedError if the workflow is closed or unknown,
        WorkflowUpdateFailedError if it closes before the update reached the stage. An update sent
        again with the same `id` runs once."""
        if wait_for_stage == WorkflowUpdateStage.ADMITTED:
            raise ValueError("ADMITTED wait stage not supported")
        if wait_for_stage not in (WorkflowUpdateStage.ACCEPTED, WorkflowUpdateStage.COMPLETED):
            raise ValueError(f"wait_for_stage must be a WorkflowUpdateStage, ACCEPTED or COMPLETED, not {wait_for_stage!r}")
        name = workflow_module.update_name(update)
        if result_type is None and not isinstance(update, str):
            result_type = type_hints(update).get("return")
        return await self.client._impl.start_workflow_update(StartWorkflowUpdateInput(
            id=self.id, run_id=self.run_id, first_execution_run_id=self.first_execution_run_id, update_id=id, update=name,
            args=([arg] if arg is not _UNSET else []) + list(args), wait_for_stage=wait_for_stage, headers={},
            ret_type=result_type, rpc_metadata={}, rpc_timeout=None,
        ))

    async def execute_update(
        self, update: Callable[..., Any] | str, arg: Any = _UNSET, *, args: Sequence[Any] = (), id: str | None = None,
        result_type: type | None = None,
    ) -> Any:
        """Run an update handler in the workflow and wait for its result. Raises
        WorkflowUpdateFailedError if its validator rejected it or it failed, CommandRejectedError if
        the workflow is closed or unknown. An update sent again with the same `id` runs once."""
        handle = await self.start_update(
            update, arg, args=args, id=id, result_type=result_type, wait_for_stage=WorkflowUpdateStage.COMPLETED,
        )
        return await handle.result()

    def get_update_handle(self, id: str, *, workflow_run_id: str | None = None, result_type: type | None = None) -> "WorkflowUpdateHandle":
        """A handle to an update sent earlier (by any client), to wait for its result."""
        return WorkflowUpdateHandle(self.client, id, self.id, workflow_run_id=workflow_run_id or self.run_id, result_type=result_type)

    def get_update_handle_for(
        self, update: Callable[..., Any], id: str, *, workflow_run_id: str | None = None,
    ) -> "WorkflowUpdateHandle":
        """get_update_handle with the result type of the update handler `update`."""
        workflow_module.update_name(update)  # an update handler, or TypeError
        return self.get_update_handle(id, workflow_run_id=workflow_run_id, result_type=type_hints(update).get("return"))

    async def describe(self) -> WorkflowExecution:
        """This run (or the workflow id's latest run) as the read model knows it."""
        return await self.client._impl.describe_workflow(DescribeWorkflowInput(
            id=self.id, run_id=self.run_id, rpc_metadata={}, rpc_timeout=None,
        ))

    async def _execution(self, run_id: str | None) -> WorkflowExecution:
        await self.client._read_model_caught_up(self.id)
        found = await find_execution((await self.client._read_model()).pool, self.id, run_id)
        if found is None:
            raise WorkflowNotFoundError(f"workflow {self.id}" + (f" run {run_id}" if run_id else "") + " not found")
        return found

    async def _until_recorded(self) -> None:
        deadline = asyncio.get_running_loop().time() + NOT_FOUND_AFTER_S
        while True:
            try:
                await until_answered("client_result_lookup", lambda: self._execution(self._result_run_id))  # an outage is not "not found"
            except WorkflowNotFoundError:
                if asyncio.get_running_loop().time() >= deadline:
                    raise
                await asyncio.sleep(0.1)
            else:
                self._recorded = True
                return

    async def fetch_history(self) -> WorkflowHistory:
        """The run's events (the latest run's without a run id)."""
        execution = await self.describe()
        events = await fetch_events((await self.client._read_model()).pool, self.id, execution.run_id)
        return WorkflowHistory(self.id, execution.run_id, events)

    async def cancel(self) -> None:
        """Request cancellation: the workflow sees asyncio.CancelledError and may clean up first."""
        await self.client._impl.cancel_workflow(CancelWorkflowInput(
            id=self.id, run_id=self.run_id, first_execution_run_id=self.first_execution_run_id, reason="",
            rpc_metadata={}, rpc_timeout=None,
        ))

    async def terminate(self, *args: Any, reason: str | None = None) -> None:
        """End the run now: no workflow code runs, pending activities and timers are dropped."""
        await self.client._impl.terminate_workflow(TerminateWorkflowInput(
            id=self.id, run_id=self.run_id, first_execution_run_id=self.first_execution_run_id, args=args, reason=reason,
            rpc_metadata={}, rpc_timeout=None,
        ))


@dataclasses.dataclass(frozen=True)
class AsyncActivityIDReference:
    """An activity by its ids (as temporalio.client.AsyncActivityIDReference); run_id None is the current run."""

    workflow_id: str
    run_id: str | None
    activity_id: str


class AsyncActivityHandle:
    """Completes, fails, heartbeats or cancels an activity attempt from any process (as
    temporalio.client.AsyncActivityHandle). Each call returns once the history service applied it,
    and raises CommandRejectedError (cause ACTIVITY_NOT_FOUND) when the attempt is over: a stale
    task token, or an activity that completed, failed or timed out."""

    def __init__(self, client: Client, id_or_token: AsyncActivityIDReference | bytes) -> None:
        self._client = client
        self._id_or_token = id_or_token

    async def heartbeat(self, *details: Any) -> None:
        """Record a heartbeat: re-arms the heartbeat timeout; `details` reach the next attempt. Raises
        AsyncActivityCancelledError once the workflow asked to cancel the activity (the heartbeat is
        recorded all the same)."""
        await self._client._impl.heartbeat_async_activity(HeartbeatAsyncActivityInput(
            id_or_token=self._id_or_token, details=details, rpc_metadata={}, rpc_timeout=None,
        ))

    async def complete(self, result: Any = _UNSET) -> None:
        await self._client._impl.complete_async_activity(CompleteAsyncActivityInput(
            id_or_token=self._id_or_token, result=result, rpc_metadata={}, rpc_timeout=None,
        ))

    async def fail(self, error: Exception, *, last_heartbeat_details: Sequence[Any] = ()) -> None:
        """Fail the attempt with `error`, retried by the activity's retry policy; `last_heartbeat_details`
        reach the next attempt."""
        await self._client._impl.fail_async_activity(FailAsyncActivityInput(
            id_or_token=self._id_or_token, error=error, last_heartbeat_details=last_heartbeat_details, rpc_metadata={},
            rpc_timeout=None,
        ))

    async def report_cancellation(self, *details: Any) -> None:
        """Report the activity cancelled, as the workflow asked (refused when it did not ask)."""
        await self._client._impl.report_cancellation_async_activity(ReportCancellationAsyncActivityInput(
            id_or_token=self._id_or_token, details=details, rpc_metadata={}, rpc_timeout=None,
        ))

    async def _report(self, kind: str, body: dict[str, Any]) -> str:
        """Send the report and wait for history's answer; the run it applied to."""
        request_id = str(uuid.uuid4())
        if isinstance(self._id_or_token, AsyncActivityIDReference):
            ref = self._id_or_token
            workflow_id = ref.workflow_id
            target = {"run_id": ref.run_id or "", "scheduled_event_id": 0, "attempt": 0, "task_token": None, "activity_id": ref.activity_id}
        else:
            token = TaskToken.decode(self._id_or_token)  # bytes that are no token: ValueError, before sending
            workflow_id = token.workflow_id
            target = {"run_id": token.run_id, "scheduled_event_id": token.scheduled_event_id, "attempt": token.attempt,
                      "task_token": self._id_or_token, "activity_id": ""}
        return await self._client._request(workflow_id, kind, {**body, **target, "request_id": request_id}, request_id)


class WorkflowUpdateStage(IntEnum):
    """The stage start_update waits for the update to reach (as temporalio.client.WorkflowUpdateStage)."""

    ADMITTED = 1
    ACCEPTED = 2
    COMPLETED = 3


class WorkflowUpdateHandle:
    """An update sent to a workflow: result() waits for it to complete (as temporalio.client.WorkflowUpdateHandle)."""

    def __init__(
        self, client: Client, id: str, workflow_id: str, *, workflow_run_id: str | None = None, result_type: type | None = None,
    ) -> None:
        self._client = client
        self._id = id
        self._workflow_id = workflow_id
        self._workflow_run_id = workflow_run_id
        self._result_type = result_type

    @property
    def id(self) -> str:
        return self._id

    @property
    def workflow_id(self) -> str:
        return self._workflow_id

    @property
    def workflow_run_id(self) -> str | None:
        return self._workflow_run_id

    async def result(self) -> Any:
        """The update's result once it completed; WorkflowUpdateFailedError if its validator rejected
        it, its handler failed, or the run closed before it completed."""
        read_model = await self._client._read_model()
        request_id = update_request_id(self._workflow_id, self._id)
        await self._wait_for([read_model.expect_outcome(request_id)], [request_id])
        outcome = await read_model.update_outcome(request_id)
        assert outcome is not None
        result, failure = outcome
        converter = self._client.data_converter
        if failure is not None:
            recorded = codec("Failure").decode(failure)
            await converter.decode_payloads(recorded)
            raise WorkflowUpdateFailedError(converter.from_failure(recorded))
        payload = codec("Payload").decode(result) if result else None
        await converter.decode_payloads(payload)
        return converter.payload_converter.from_payload(payload, self._result_type)

    async def _wait_for(self, answers: list[asyncio.Future[CommandOutcome]], request_ids: list[str]) -> None:
        """Until one of the outcome rows `request_ids` is written (`answers` are their
        notifications, asked for earlier); WorkflowUpdateFailedError if the run closes first."""
        read_model = await self._client._read_model()
        if await read_model.any_outcome(request_ids):  # written before the answers were asked for
            return
        closed = asyncio.ensure_future(self._client._closed_execution(self._workflow_id, self._workflow_run_id))
        try:
            waiting: list[asyncio.Future[Any]] = [*answers, closed]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
        if not any(answer.done() for answer in answers) and not await read_model.any_outcome(request_ids):
            raise WorkflowUpdateFailedError(ApplicationError(  # Temporal's failure for an update its workflow outlived
                f"workflow {self._workflow_id} closed before update {self._id} reached the stage awaited",
                type="AcceptedUpdateCompletedWorkflow", non_retryable=True,
            ))


class _ClientImpl(OutboundInterceptor):
    """The innermost interceptor: what each client call does (temporalio's _ClientImpl)."""

    def __init__(self, client: Client) -> None:  # no next: this is the end of the chain
        self._client = client

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle:
        client = self._client
        payloads = client.data_converter.payload_converter
        request_id = input.request_id or str(uuid.uuid4())
        watch = await client._watch_run(request_id)  # before the send: the close may come soon after the answer
        start = {
            "workflow_type": input.workflow, "task_queue": input.task_queue,
            "input": payloads.to_payloads(list(input.args)), "request_id": request_id,
            "execution_timeout_ms": to_ms(input.execution_timeout), "run_timeout_ms": to_ms(input.run_timeout),
            "workflow_task_timeout_ms": to_ms(input.task_timeout), "start_delay_ms": to_ms(input.start_delay),
            "cron_schedule": input.cron_schedule,
            "id_reuse_policy": input.id_reuse_policy.value, "id_conflict_policy": input.id_conflict_policy.value,
            "search_attributes": {name: payloads.to_payload(value) for name, value in (input.search_attributes or {}).items()},
            "header": dict(input.headers),
        }
        if input.start_signal is None:
            run_id = await client._request(input.id, CommandType.StartWorkflowExecution, start, request_id)
        else:
            run_id = await client._request(input.id, CommandType.SignalWithStartWorkflowExecution, {
                "start": start, "signal_name": input.start_signal, "signal_input": payloads.to_payloads(list(input.start_signal_args)),
            }, request_id)
        log.info("event=workflow_started workflow_id=%s run_id=%s workflow_type=%s", input.id, run_id, input.workflow)
        # As temporalio: the handle targets the workflow id's current run (run_id None), so signals,
        # queries, updates and cancellation reach the run a continue-as-new started; result() starts
        # from this run and follows the chain; cancel, terminate and update stay within its chain.
        handle = WorkflowHandle(
            client, input.id, result_run_id=run_id, first_execution_run_id=run_id if input.start_signal is None else None,
            result_type=input.ret_type,
        )
        handle._recorded = True  # the start is in the log: result() need not look for the run first
        handle._close_watch = watch
        return handle

    async def cancel_workflow(self, input: CancelWorkflowInput) -> None:
        handle = self._handle(input.id, input.run_id, input.first_execution_run_id)
        await handle._request_in_chain(CommandType.RequestCancelWorkflowExecution, {"reason": input.reason}, str(uuid.uuid4()))

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecution:
        return await self._handle(input.id, input.run_id)._execution(input.run_id)

    def list_workflows(self, input: ListWorkflowsInput) -> AsyncIterator[WorkflowExecution]:
        async def executions() -> AsyncIterator[WorkflowExecution]:
            await self._client._read_model_caught_up()
            pool = (await self._client._read_model()).pool
            async for execution in list_executions(pool, input.query or "", input.limit, input.page_size):
                yield execution

        return executions()

    async def count_workflows(self, input: CountWorkflowsInput) -> WorkflowExecutionCount:
        await self._client._read_model_caught_up()
        return WorkflowExecutionCount(await count_executions((await self._client._read_model()).pool, input.query or ""))

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        client, name = self._client, input.query
        if problem := text_problem("query name", name):
            raise CommandRejectedError(input.id, "INVALID_ARGUMENT", problem)
        execution = await self._handle(input.id, input.run_id)._execution(input.run_id)
        replies = await client._replies()
        converter = client.data_converter
        query_id = str(uuid.uuid4())
        answer = replies.expect(query_id)
        command = {"run_id": execution.run_id, "query": {
            "task_queue": execution.task_queue, "workflow_type": execution.workflow_type, "query_id": query_id,
            "query_type": name, "args": converter.payload_converter.to_payloads(list(input.args)),
            "reply_partition": replies.partition, "header": dict(input.headers),
        }}
        timeout = input.rpc_timeout if input.rpc_timeout is not None else timedelta(seconds=30)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout.total_seconds()
        # Sent again while unanswered: the history service holds a query in memory until the run's
        # workflow task is done, so its restart (or a worker's) would otherwise cost the whole timeout.
        # Every copy has the same query id; history holds it once, and the first answer wins.
        while not answer.done() and loop.time() < deadline:
            await client.send_command(input.id, CommandType.QueryWorkflow, command)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(answer), min(QUERY_RESEND_S, max(0.0, deadline - loop.time())))
        if not answer.done():
            replies.forget(query_id)
            raise WorkflowQueryTimeoutError(
                f"no worker answered query {name!r} of workflow {input.id} within {timeout}: "
                f"is a worker polling task queue {execution.task_queue!r}?"
            ) from None
        answered = answer.result()
        await converter.decode_payloads(answered)
        if answered["error"] is not None:
            raise WorkflowQueryFailedError(answered["error"]["message"]) from converter.from_failure(answered["error"])
        return converter.payload_converter.from_payload(answered["result"], input.ret_type)

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        request_id = str(uuid.uuid4())
        await self._client._request(input.id, CommandType.SignalWorkflowExecution, {
            "run_id": input.run_id or "", "signal_name": input.signal,
            "input": self._client.data_converter.payload_converter.to_payloads(list(input.args)), "request_id": request_id,
            "header": dict(input.headers),
        }, request_id)

    async def terminate_workflow(self, input: TerminateWorkflowInput) -> None:
        handle = self._handle(input.id, input.run_id, input.first_execution_run_id)
        await handle._request_in_chain(CommandType.TerminateWorkflowExecution, {
            "reason": input.reason or "", "details": self._client.data_converter.payload_converter.to_payloads(list(input.args)),
        }, str(uuid.uuid4()))

    async def start_workflow_update(self, input: StartWorkflowUpdateInput) -> WorkflowUpdateHandle:
        client, workflow_id = self._client, input.id
        update_id = input.update_id or str(uuid.uuid4())
        read_model = await client._read_model()
        # Asked for before the send, so neither answer can be missed.
        reached = [read_model.expect_outcome(update_request_id(workflow_id, update_id))]
        if input.wait_for_stage == WorkflowUpdateStage.ACCEPTED:
            reached.append(read_model.expect_outcome(update_accepted_request_id(workflow_id, update_id)))
        workflow_handle = self._handle(workflow_id, input.run_id, input.first_execution_run_id)
        run_id = await workflow_handle._request_in_chain(CommandType.UpdateWorkflowExecution, {
            "update_id": update_id, "name": input.update,
            "args": client.data_converter.payload_converter.to_payloads(list(input.args)), "header": dict(input.headers),
        }, f"admit/{workflow_id}/{update_id}")
        handle = WorkflowUpdateHandle(client, update_id, workflow_id, workflow_run_id=run_id, result_type=input.ret_type)
        await handle._wait_for(reached, [update_request_id(workflow_id, update_id)] + (
            [update_accepted_request_id(workflow_id, update_id)] if input.wait_for_stage == WorkflowUpdateStage.ACCEPTED else []
        ))
        return handle

    async def heartbeat_async_activity(self, input: HeartbeatAsyncActivityInput) -> None:
        client, id_or_token = self._client, input.id_or_token
        run_id = await AsyncActivityHandle(client, id_or_token)._report(
            CommandType.RecordActivityTaskHeartbeat, {"details": client.data_converter.payload_converter.to_payloads(list(input.details))},
        )
        if isinstance(id_or_token, AsyncActivityIDReference):
            asked: dict[str, Any] = {"activity_id": id_or_token.activity_id}
            workflow_id = id_or_token.workflow_id
        else:
            token = TaskToken.decode(id_or_token)
            asked = {"scheduled_event_id": token.scheduled_event_id}
            workflow_id = token.workflow_id
        await client._read_model_caught_up(workflow_id)
        pool = (await client._read_model()).pool
        # The cancel request was recorded before the heartbeat it answers: the read model holds it now.
        if await until_answered("client_activity_cancel_lookup", lambda: activity_cancel_requested(pool, workflow_id, run_id, **asked)):
            raise AsyncActivityCancelledError()

    async def complete_async_activity(self, input: CompleteAsyncActivityInput) -> None:
        payloads = self._client.data_converter.payload_converter
        await AsyncActivityHandle(self._client, input.id_or_token)._report(
            CommandType.RespondActivityTaskCompleted, {"result": None if input.result is _UNSET else payloads.to_payload(input.result)},
        )

    async def fail_async_activity(self, input: FailAsyncActivityInput) -> None:
        if input.last_heartbeat_details:
            await self._client._impl.heartbeat_async_activity(HeartbeatAsyncActivityInput(
                id_or_token=input.id_or_token, details=input.last_heartbeat_details, rpc_metadata=input.rpc_metadata,
                rpc_timeout=input.rpc_timeout,
            ))
        await AsyncActivityHandle(self._client, input.id_or_token)._report(
            CommandType.RespondActivityTaskFailed, {"failure": self._client.data_converter.to_failure(input.error)},
        )

    async def report_cancellation_async_activity(self, input: ReportCancellationAsyncActivityInput) -> None:
        await AsyncActivityHandle(self._client, input.id_or_token)._report(
            CommandType.RespondActivityTaskCanceled,
            {"details": self._client.data_converter.payload_converter.to_payloads(list(input.details))},
        )

    def _handle(self, workflow_id: str, run_id: str | None, first_execution_run_id: str | None = None) -> WorkflowHandle:
        return WorkflowHandle(self._client, workflow_id, run_id=run_id, first_execution_run_id=first_execution_run_id)


class _ReadModel:
    """One LISTEN connection for run closes (row lookups, batched: `_check_soon`) and command
    outcomes (carried in the notification).

    Notifications sent while that connection is down are lost: when it is lost (Postgres
    restarted, the network), it is opened again with backoff, and everything still awaited is
    read again from the tables before waiting on. Meanwhile `reachability` says why this client
    hears nothing (a worker's /readyz reports it)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.closed_waiters: dict[tuple[str, str | None], list[asyncio.Future[Any]]] = {}
        self.outcome_waiters: dict[str, list[asyncio.Future[Any]]] = {}
        # Requests wait as long as psycopg_pool's default: list_workflows and the like run concurrently.
        self.pool = connection_pool(dsn, min_size=1, max_size=4, timeout_s=30.0)
        self.reachability = Reachability("client_listen")
        self._listener: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._starting: asyncio.Future[None] | None = None
        self._unchecked: set[tuple[str, str | None]] = set()  # awaited closes to look up in the next batch
        self._checking: asyncio.Task[None] | None = None
        self._outcomes_unchecked = False  # awaited outcomes to look up in the next batch

    @property
    def is_started(self) -> bool:
        starting = self._starting
        return starting is not None and starting.done() and not starting.cancelled() and starting.exception() is None

    async def started(self) -> None:
        """Set up once; concurrent first callers all wait for the same setup. If Postgres does not
        answer the first time, the callers hear it, and the next call tries again."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        try:
            await asyncio.shield(self._starting)
        except psycopg.OperationalError:
            self._starting = None
            raise

    async def _start(self) -> None:
        await self.pool.open()
        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        try:
            await apply_ddl(conn, VISIBILITY_DDL)  # the client may start before the projector created them
            await self._subscribe(conn)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        self._listener = asyncio.create_task(self._listen())

    @staticmethod
    async def _subscribe(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(f"LISTEN {CLOSED_CHANNEL}")
        await conn.execute(f"LISTEN {OUTCOME_CHANNEL}")

    async def _listen(self) -> None:
        backoff = Backoff("client_listen")
        while True:
            try:
                if self._conn is None:
                    self._conn = await self._listen_again()
                    backoff.succeeded()
                await self._serve(self._conn)
            except Exception as exc:  # an outage (OperationalError), or a bug: either way, listen again
                if not isinstance(exc, psycopg.OperationalError):
                    log.exception("event=client_listen_failed error=%r", str(exc))
                self.reachability.lost(exc)
                if self._conn is not None:
                    await self._conn.close()
                    self._conn = None
                await asyncio.sleep(backoff.failed(exc) if isinstance(exc, psycopg.OperationalError) else RETRY_MAX_S)

    async def _listen_again(self) -> psycopg.AsyncConnection[Any]:
        """A new LISTEN connection, then what was awaited read again: answered meanwhile, it was
        notified on no connection."""
        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        try:
            await self._subscribe(conn)
            outcomes, closes = await self._read_outcomes_again(conn), await self._read_closes_again(conn)
        except BaseException:
            await conn.close()
            raise
        self.reachability.answered()
        log.info("event=postgres_listen_restored outcomes_found=%d closes_found=%d still_awaited=%d",
                 outcomes, closes, len(self.outcome_waiters) + len(self.closed_waiters))
        return conn

    async def _serve(self, conn: psycopg.AsyncConnection[Any]) -> None:
        async for notify in conn.notifies():
            if notify.channel == OUTCOME_CHANNEL:
                outcome = CommandOutcome.from_notification(notify.payload)
                _settle(self.outcome_waiters.pop(outcome.request_id, []), outcome)
                continue
            closed = json.loads(notify.payload)
            for key in ((closed["workflow_id"], closed["run_id"]), (closed["workflow_id"], None)):
                if key in self.closed_waiters:
                    self._check_soon(key)

    async def recorded(self, outcome: asyncio.Future[CommandOutcome]) -> CommandOutcome:
        """An awaited outcome once the read model holds it: looked up first, for a request answered
        before (sent again), whose answer the read model recorded then and announces no more."""
        if not outcome.done():
            self.look_up_outcomes_soon()
        return await outcome

    def look_up_outcomes_soon(self) -> None:
        """Settle the awaited outcomes the read model holds already (answered before they were
        awaited), with the other lookups asked meanwhile: one query for every outcome awaited then
        (2,000 starts at once, each asking for itself, made 2,000 queries of up to 2,000 ids each)."""
        self._outcomes_unchecked = True
        self._start_checking()

    async def _look_up_outcomes(self) -> None:
        async with self.pool.connection() as conn:
            await self._read_outcomes_again(conn)

    async def _read_outcomes_again(self, conn: psycopg.AsyncConnection[Any]) -> int:
        if not self.outcome_waiters:
            return 0
        rows = await (await conn.execute(
            "SELECT request_id, run_id, accepted, cause, reason FROM kadence_command_outcomes WHERE request_id = ANY(%s)",
            (list(self.outcome_waiters),),
        )).fetchall()
        for row in rows:
            _settle(self.outcome_waiters.pop(row[0], []), CommandOutcome(*row))
        return len(rows)

    async def _read_closes_again(self, conn: psycopg.AsyncConnection[Any]) -> int:
        """Every awaited run that closed meanwhile (one query for them all)."""
        return await self._settle_closed(conn, set(self.closed_waiters))

    async def _settle_closed(self, conn: psycopg.AsyncConnection[Any], keys: set[tuple[str, str | None]]) -> int:
        """Settle the waiters of each of `keys` whose run is closed, in one query; how many were."""
        if not keys:
            return 0
        rows = await (await conn.execute(
            "SELECT workflow_id, run_id, status, result, failure, next_run_id FROM kadence_executions "
            "WHERE workflow_id = ANY(%s) ORDER BY workflow_id, start_time",
            (sorted({workflow_id for workflow_id, _ in keys}),),
        )).fetchall()
        runs = {(row[0], row[1]): row[2:] for row in rows}
        latest = {row[0]: row[2:] for row in rows}  # ordered by start time: the last one stays
        found = 0
        for key in keys:
            row = runs.get(key) if key[1] is not None else latest.get(key[0])
            if row is not None and row[0] != "Running":
                _settle(self.closed_waiters.pop(key, []), row)
                found += 1
        return found

    def _check_soon(self, key: tuple[str, str | None]) -> None:
        """Look up whether `key`'s run is closed, with the other lookups asked meanwhile: one query
        for all the closes notified or awaited while the previous one ran (under load, hundreds)."""
        self._unchecked.add(key)
        self._start_checking()

    def _start_checking(self) -> None:
        if self._checking is None:
            self._checking = asyncio.create_task(self._check_unchecked())

    async def _check_unchecked(self) -> None:
        """Until nothing is left to look up: the awaited outcomes, then the closes."""
        try:
            while self._unchecked or self._outcomes_unchecked:
                await asyncio.sleep(0)  # the lookups asked in this turn of the loop join the batch
                if self._outcomes_unchecked:
                    self._outcomes_unchecked = False
                    if self.outcome_waiters:  # else settled meanwhile
                        await self._look_up("client_outcome_lookup", self._look_up_outcomes, self.outcome_waiters,
                                            set(self.outcome_waiters))
                keys = {key for key in self._unchecked if key in self.closed_waiters}
                self._unchecked.clear()
                if keys:  # else settled meanwhile (a reply, or the lookup before): nothing to ask
                    await self._look_up("client_result_lookup", functools.partial(self._look_up_closed, keys), self.closed_waiters, keys)
        finally:
            self._checking = None

    @staticmethod
    async def _look_up(
        name: str, lookup: Callable[[], Awaitable[Any]], waiters: dict[Any, list[asyncio.Future[Any]]], keys: set[Any],
    ) -> None:
        """One lookup, asked again while Postgres is away; any other error reaches the waiters of `keys`."""
        try:
            await until_answered(name, lookup)
        except Exception as exc:
            for key in keys:
                for future in waiters.pop(key, []):
                    if not future.done():
                        future.set_exception(exc)

    async def _look_up_closed(self, keys: set[tuple[str, str | None]]) -> None:
        async with self.pool.connection() as conn:
            await self._settle_closed(conn, keys)

    async def wait_closed(self, workflow_id: str, run_id: str | None) -> Any:
        key = (workflow_id, run_id)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.closed_waiters.setdefault(key, []).append(future)
        self._check_soon(key)  # not awaited: a LISTEN connection restored may answer first
        try:
            return await future
        finally:
            _forget(self.closed_waiters, key, future)  # given up on (a reply came first), or settled

    async def any_outcome(self, request_ids: list[str]) -> bool:
        """Whether any of these commands' outcomes is recorded."""

        async def lookup() -> Any:
            async with self.pool.connection() as conn:
                return await (await conn.execute(
                    "SELECT 1 FROM kadence_command_outcomes WHERE request_id = ANY(%s) LIMIT 1", (request_ids,),
                )).fetchone()

        return await until_answered("client_update_outcome", lookup) is not None

    async def update_outcome(self, request_id: str) -> tuple[bytes | None, bytes | None] | None:
        """An update's recorded result and failure (Avro Payload, Failure); None before it finished."""

        async def lookup() -> Any:
            async with self.pool.connection() as conn:
                return await (await conn.execute(
                    "SELECT result, failure FROM kadence_command_outcomes WHERE request_id = %s", (request_id,),
                )).fetchone()

        row = await until_answered("client_update_outcome", lookup)
        return (row[0], row[1]) if row else None

    def expect_outcome(self, request_id: str) -> asyncio.Future[CommandOutcome]:
        """The answer to a command not sent yet (its outcome is announced once it is recorded)."""
        future: asyncio.Future[CommandOutcome] = asyncio.get_running_loop().create_future()
        self.outcome_waiters.setdefault(request_id, []).append(future)
        return future

    def forget_outcome(self, request_id: str, future: asyncio.Future[CommandOutcome]) -> None:
        """Stop waiting for an outcome (answered on kadence.replies first)."""
        _forget(self.outcome_waiters, request_id, future)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
        if self._checking is not None:
            self._checking.cancel()
        if self._conn is not None:
            await self._conn.close()
        await self.pool.close()


async def _run_row(pool: Any, workflow_id: str, run_id: str) -> tuple[str, str | None] | None:
    """A run's status and the run it continued as (None when the read model does not hold it)."""
    async with pool.connection() as conn:
        return await (await conn.execute(
            "SELECT status, next_run_id FROM kadence_executions WHERE workflow_id = %s AND run_id = %s", (workflow_id, run_id),
        )).fetchone()


def _refusals(loop: asyncio.AbstractEventLoop, records: list[dict[str, Any]], reason: Exception | None) -> list[asyncio.Future[Message]]:
    """The deliveries of commands not sent: the first failed with `reason`, those after it because
    of it; failed at once on `loop`'s own thread, else (a caller on another thread) by `loop`."""
    on_loop = asyncio._get_running_loop() is loop
    refused: list[asyncio.Future[Message]] = []
    for index, record in enumerate(records):
        why = reason if index == 0 and reason is not None else KadenceError(
            f"{record['command'][0]} for {record['workflow_id']} not sent, as {records[0]['command'][0]} before it was not: {reason}"
        )
        future: asyncio.Future[Message] = loop.create_future()
        if on_loop:
            future.set_exception(why)
        else:
            loop.call_soon_threadsafe(future.set_exception, why)
        refused.append(future)
    return refused


def _chain(source: asyncio.Future[Any], target: asyncio.Future[Any]) -> None:
    if target.done():
        return
    if source.exception() is not None:
        target.set_exception(source.exception())  # type: ignore[arg-type]
    else:
        target.set_result(source.result())


async def _first_result(first: asyncio.Future[Any], second: asyncio.Future[Any]) -> Any:
    """The result of whichever of two futures that say the same finishes first (an answer on
    kadence.replies and the read model's); the other is cancelled."""
    try:
        await asyncio.wait([first, second], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in (first, second):
            if not future.done():
                future.cancel()
    done, other = (first, second) if first.done() and not first.cancelled() else (second, first)
    if other.done() and not other.cancelled():
        other.exception()  # retrieved: either would do
    return done.result()


def _forget(waiters: dict[Any, list[asyncio.Future[Any]]], key: Any, future: asyncio.Future[Any]) -> None:
    futures = waiters.get(key)
    if futures is not None and future in futures:
        futures.remove(future)
        if not futures:
            del waiters[key]


def _settle(futures: list[asyncio.Future[Any]], row: Any) -> None:
    for future in futures:
        if not future.done():
            future.set_result(row)
