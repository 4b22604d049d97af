"""The client: start workflows by producing commands, wait for answers and results on kadence.replies
and the read model, whichever comes first (as temporalio.client)."""

from __future__ import annotations

import asyncio
import concurrent.futures.thread  # noqa: F401  registers its exit hook before _close_unclosed's (below)
import dataclasses
import functools
import logging
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Concatenate, cast, overload

import nexusrpc
from confluent_kafka import KafkaException, Message

from kadence import activity as activity_module
from kadence import workflow as workflow_module
from kadence.client._activities import ActivityExecutionAsyncIterator, ActivityExecutionCount, ActivityHandle
from kadence.client._eager import EagerWorkers
from kadence.client._handles import (
    AsyncActivityHandle,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateHandle,
    check_update_stage,
    update_name_and_result_type,
)
from kadence.client._impl import _ClientImpl
from kadence.client._inputs import (
    NEXUS_BACKING_START,
    CountActivitiesInput,
    CountNexusOperationsInput,
    CountWorkflowsInput,
    ListActivitiesInput,
    ListNexusOperationsInput,
    ListWorkflowsInput,
    StartActivityInput,
    StartWorkflowInput,
    StartWorkflowUpdateWithStartInput,
    UpdateWithStartUpdateWorkflowInput,
)
from kadence.client._interceptor import Interceptor, OutboundInterceptor
from kadence.client._listing import WorkflowExecutionAsyncIterator
from kadence.client._nexus import (
    NexusClient,
    NexusOperationExecutionAsyncIterator,
    NexusOperationExecutionCount,
    NexusOperationHandle,
    OutputT,
    ServiceT,
)
from kadence.client._read_model import NOT_FOUND_AFTER_S, ReadModel
from kadence.client._replies import ReplyListener, RunWatch
from kadence.client._schedule_types import Schedule, ScheduleBackfill, ScheduleListDescription
from kadence.client._schedules import ScheduleHandle, create_schedule, list_schedules
from kadence.client._types import AsyncActivityIDReference, WorkflowExecutionCount, WorkflowUpdateStage
from kadence.common import (
    UNSET,
    ActivityIDConflictPolicy,
    ActivityIDReusePolicy,
    RetryPolicy,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from kadence.converter import DataConverter, type_hints
from kadence.exceptions import (
    ClientClosedError,
    CommandRejectedError,
    CommandTooLargeError,
    KadenceError,
    WorkflowAlreadyStartedError,
)
from kadence.protocol import topics, tracing
from kadence.protocol.codec import HeaderList, command_codec
from kadence.protocol.cron import parse_cron
from kadence.protocol.kafka import AsyncProducer, broker_is_tansu, fitted_to_broker
from kadence.protocol.limits import MAX_RECORD_VALUE_BYTES, command_problem
from kadence.protocol.read_model import CommandOutcome
from kadence.protocol.settings import KafkaSettings, postgres_dsn
from kadence.runtime import Runtime
from kadence.types import LocalReturnType, MethodAsyncNoParam, MethodAsyncSingleParam, MultiParamSpec, ParamType, ReturnType, SelfType
from kadence.workflow import UpdateMethodMultiParam

log = logging.getLogger("kadence.client")
ANSWERED_BEFORE_LOOKUP_S = 1.0  # a request's answer neither replied nor announced by then is looked up in the read model
TEMPORAL_FRONTEND_PORT = "7233"  # no Kafka broker listens there: an address on it is temporalio's target_host


def default_identity() -> str:
    return f"{os.getpid()}@{socket.gethostname()}"


@dataclasses.dataclass(eq=False)
class _Connection:
    """What a client holds open (its producer, read model and reply listener), which the clients
    `with_interceptors` makes share, and the workers running on it (for eager starts)."""

    producer: AsyncProducer
    results: ReadModel | None = None
    reply_listener: asyncio.Future[ReplyListener] | None = None
    # workflow id -> what to await before reading the read model about it (see Client._read_model_behind)
    unrecorded: dict[str, Callable[[], Awaitable[Any]]] = dataclasses.field(default_factory=dict)
    encoding: asyncio.Queue[tuple[list[dict[str, Any]], bool, HeaderList, list[asyncio.Future[Message]]]] | None = None
    encoder: asyncio.Task[None] | None = None
    eager_workers: EagerWorkers = dataclasses.field(default_factory=EagerWorkers)
    on_tansu: bool | None = None  # whether the broker is Tansu (asked once, before the first consumer: Client._fit_to_broker)
    closed: bool = False

    def starts_tasks(self) -> None:
        """Called before it starts a task on the running loop (its tasks all run on the first)."""
        _UNCLOSED.setdefault(self, asyncio.get_running_loop())

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        _UNCLOSED.pop(self, None)
        if self.encoder is not None:
            self.encoder.cancel()
        if self.reply_listener is not None:
            await (await self.reply_listener).close()
        if self.results is not None:
            await self.results.close()
        await asyncio.get_running_loop().run_in_executor(None, self.producer.close)


# The connections that started tasks and are not closed, with their loop, for _close_unclosed.
# Held strongly: a client's tasks stay reachable from its loop (a LISTEN socket, a poll in a
# thread) when the client itself is not, and a weak set would lose the client to a collection
# before exit while its tasks remain.
_UNCLOSED: dict[_Connection, asyncio.AbstractEventLoop] = {}


def _close_unclosed() -> None:
    """Close the clients a program leaves open on a loop it neither runs nor closes, as temporalio's
    samples end (`loop.run_until_complete(main())`; temporalio's client needs no close): their
    tasks would otherwise be destroyed pending when the interpreter frees the loop, and asyncio
    reports each. Run as threading's exit hooks run, before concurrent.futures stops taking work
    (a Kafka client's close runs in the loop's executor): an atexit hook would come too late."""
    for conn, loop in list(_UNCLOSED.items()):
        if loop.is_running() or loop.is_closed():
            continue  # asyncio.run's end cancelled its tasks, or the loop is another thread's to run
        try:
            loop.run_until_complete(conn.close())
        except Exception:
            log.exception("event=client_close_at_exit_failed")


# threading runs its exit hooks last registered first: this one before concurrent.futures' (imported
# above), which stops the executors. CPython's own hook, as concurrent.futures uses it.
threading._register_atexit(_close_unclosed)  # type: ignore[attr-defined]
os.register_at_fork(after_in_child=_UNCLOSED.clear)  # a forked child's copies are its parent's to close


class Client:
    """Talks to Kadence through Kafka (commands out; answers, results and query answers back on
    kadence.replies) and the Postgres read model (lists, describe, and every answer and result again)."""

    def __init__(
        self, settings: KafkaSettings, *, data_converter: DataConverter, identity: str, postgres_dsn: str | None,
        interceptors: Sequence[Interceptor] = (), runtime: Runtime | None = None, _connection: _Connection | None = None,
    ) -> None:
        self.settings = settings
        self.runtime = runtime or Runtime.default()  # where the client's and its workers' metrics go
        self.data_converter = data_converter
        self.identity = identity
        self._postgres_dsn = postgres_dsn
        self._conn = _connection or _Connection(AsyncProducer(settings))
        self._commands = command_codec()
        # As temporalio: the first interceptor is the outermost, called first.
        self.interceptors = tuple(interceptors)
        impl: OutboundInterceptor = _ClientImpl(self)
        for interceptor in reversed(self.interceptors):
            impl = interceptor.intercept_client(impl)
        self._impl = impl

    def with_interceptors(self, *interceptors: Interceptor) -> Client:
        """A client with `interceptors` after this one's, on this one's connections (its producer, read
        model and reply listener), as temporalio's test environments clone a client to add theirs:
        there is nothing more to close, and closing either closes both."""
        return Client(
            self.settings, data_converter=self.data_converter, identity=self.identity, postgres_dsn=self._postgres_dsn,
            interceptors=[*self.interceptors, *interceptors], runtime=self.runtime, _connection=self._conn,
        )

    @classmethod
    async def connect(
        cls, bootstrap_servers: str | None = None, *, namespace: str = "default", postgres_dsn: str | None = None,
        data_converter: DataConverter | None = None, identity: str | None = None, interceptors: Sequence[Interceptor] = (),
        runtime: Runtime | None = None, kafka_config: Mapping[str, str] | None = None, target_host: str | None = None,
    ) -> Client:
        """`bootstrap_servers` and `postgres_dsn` default to KADENCE_BOOTSTRAP_SERVERS and KADENCE_POSTGRES_DSN.
        A Kadence deployment (its topics and database) is one namespace: `namespace` must be "default".
        `runtime`: where its metrics and its workers' go (kadence.runtime; Runtime.default() without one).
        `kafka_config`: librdkafka properties (security.protocol, sasl.username ...) over those of
        KADENCE_KAFKA_*. kadence.envconfig reads all of these from a profile. `target_host`,
        temporalio's frontend address: the bootstrap servers, when neither `bootstrap_servers` nor
        KADENCE_BOOTSTRAP_SERVERS gives them (docs/temporal-differences.md, "The client"); so is
        `bootstrap_servers` when it names Temporal's frontend port, 7233, as temporalio's first
        argument does (`Client.connect("localhost:7233")`)."""
        if bootstrap_servers and _names_temporal_frontend(bootstrap_servers):
            if not os.environ.get("KADENCE_BOOTSTRAP_SERVERS"):
                raise ValueError(
                    f"Client.connect({bootstrap_servers!r}) names Temporal's frontend port {TEMPORAL_FRONTEND_PORT}, and Kadence "
                    "connects to Kafka instead: set KADENCE_BOOTSTRAP_SERVERS and KADENCE_POSTGRES_DSN "
                    "(eval \"$(kadence env)\" for the local stack), or pass the Kafka brokers"
                )
            target_host, bootstrap_servers = bootstrap_servers, None
        if namespace != "default":
            raise ValueError(
                f"namespace {namespace!r}: a Kadence deployment is one namespace, 'default'; "
                "give each namespace its own topics and database (a deployment of its own) instead, or, to run code "
                "written for several namespaces (temporalio's Nexus samples) on one deployment, set TEMPORAL_NAMESPACE=default "
                "where it reads its profile (ClientConfig.load_client_connect_config)"
            )
        settings = KafkaSettings.from_env()
        if target_host and not bootstrap_servers and not os.environ.get("KADENCE_BOOTSTRAP_SERVERS"):
            bootstrap_servers = target_host
        if bootstrap_servers:
            settings = dataclasses.replace(settings, bootstrap_servers=bootstrap_servers)
        if kafka_config:
            settings = dataclasses.replace(settings, client_config={**settings.client_config, **kafka_config})
        return cls(
            settings, data_converter=data_converter or DataConverter(), identity=identity or default_identity(),
            postgres_dsn=postgres_dsn, interceptors=interceptors, runtime=runtime,
        )

    @overload
    async def start_workflow(
        self, workflow: MethodAsyncNoParam[SelfType, ReturnType], *,
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        start_signal: str | None = None, start_signal_args: Sequence[Any] = (),
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> WorkflowHandle[SelfType, ReturnType]: ...

    @overload
    async def start_workflow(
        self, workflow: MethodAsyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, *,
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        start_signal: str | None = None, start_signal_args: Sequence[Any] = (),
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> WorkflowHandle[SelfType, ReturnType]: ...

    @overload
    async def start_workflow(
        self, workflow: Callable[Concatenate[SelfType, MultiParamSpec], Awaitable[ReturnType]], *, args: Sequence[Any],
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        start_signal: str | None = None, start_signal_args: Sequence[Any] = (),
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> WorkflowHandle[SelfType, ReturnType]: ...

    @overload
    async def start_workflow(
        self, workflow: type[SelfType], arg: Any = UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        start_signal: str | None = None, start_signal_args: Sequence[Any] = (),
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> WorkflowHandle[SelfType, Any]: ...

    @overload
    async def start_workflow(
        self, workflow: str, arg: Any = UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        start_signal: str | None = None, start_signal_args: Sequence[Any] = (),
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> WorkflowHandle[Any, Any]: ...

    async def start_workflow(
        self, workflow: type | Callable[..., Any] | str, arg: Any = UNSET, *, args: Sequence[Any] = (),
        id: str, task_queue: str, result_type: type | None = None, request_id: str = "",
        task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None,
        run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        start_signal: str | None = None,
        start_signal_args: Sequence[Any] = (),
        memo: Mapping[str, Any] | None = None,
        search_attributes: dict[str, Any] | None = None,
        start_delay: timedelta | None = None,
        cron_schedule: str = "",
        request_eager_start: bool = False,
    ) -> WorkflowHandle[Any, Any]:
        """Produce a StartWorkflowExecution command and wait for the history service's answer: the new
        run (or, for a retried `request_id`, the run it already started), or WorkflowAlreadyStartedError.
        With `start_signal`, this is signal-with-start: the running run gets the signal, or a new
        run starts with the signal delivered before its first workflow task. With `start_delay`, the
        run's first workflow task waits that long (a signal-with-start does not wait). With
        `cron_schedule` (`*/5 * * * *`, `@hourly`, `@every 90s`, `CRON_TZ=Europe/Paris 0 9 * * 1-5`),
        each run starts at the schedule's next time and one that completes, fails or times out is
        followed by the next, until the workflow is canceled or terminated (as Temporal). `memo`:
        values kept with the run and shown by describe, list and the UI, not indexed (as Temporal's).
        With `request_eager_start`, a Worker of this client polling `task_queue` with a free
        workflow task slot runs the first workflow task, which history hands back in the start's
        answer instead of dispatching it (Temporal's eager workflow start); the handle's
        `__temporal_eagerly_started` says whether it did (docs/temporal-differences.md, "The client").
        The handle is of the workflow's class and result type (WorkflowHandle[MyWorkflow, MyResult])
        when `workflow` is its run method."""
        if cron_schedule:
            parse_cron(cron_schedule)  # a clear CronError here, not a rejection from history
        definition = workflow_module.definition(workflow)
        workflow_type = definition if isinstance(definition, str) else definition.name
        if result_type is None and not isinstance(definition, str):
            result_type = definition.result_type()
        return await self._impl.start_workflow(StartWorkflowInput(
            workflow=workflow_type, args=([arg] if arg is not UNSET else []) + list(args), id=id, task_queue=task_queue,
            execution_timeout=execution_timeout, run_timeout=run_timeout, task_timeout=task_timeout,
            id_reuse_policy=id_reuse_policy, id_conflict_policy=id_conflict_policy, retry_policy=None,
            cron_schedule=cron_schedule, memo=memo, search_attributes=search_attributes, start_delay=start_delay, headers={},
            start_signal=start_signal, start_signal_args=start_signal_args, static_summary=None, static_details=None,
            ret_type=result_type, rpc_metadata={}, rpc_timeout=None, request_eager_start=request_eager_start, request_id=request_id,
            nexus_caller=NEXUS_BACKING_START.get(),
        ))

    @overload
    async def signal_with_start(
        self, workflow: MethodAsyncNoParam[SelfType, ReturnType], *,
        signal: Callable[..., Any] | str, signal_args: Sequence[Any] = (),
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> WorkflowHandle[SelfType, ReturnType]: ...

    @overload
    async def signal_with_start(
        self, workflow: MethodAsyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, *,
        signal: Callable[..., Any] | str, signal_args: Sequence[Any] = (),
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> WorkflowHandle[SelfType, ReturnType]: ...

    @overload
    async def signal_with_start(
        self, workflow: Callable[Concatenate[SelfType, MultiParamSpec], Awaitable[ReturnType]], *, args: Sequence[Any],
        signal: Callable[..., Any] | str, signal_args: Sequence[Any] = (),
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> WorkflowHandle[SelfType, ReturnType]: ...

    @overload
    async def signal_with_start(
        self, workflow: type[SelfType], arg: Any = UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
        signal: Callable[..., Any] | str, signal_args: Sequence[Any] = (),
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> WorkflowHandle[SelfType, Any]: ...

    @overload
    async def signal_with_start(
        self, workflow: str, arg: Any = UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
        signal: Callable[..., Any] | str, signal_args: Sequence[Any] = (),
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> WorkflowHandle[Any, Any]: ...

    async def signal_with_start(
        self, workflow: type | Callable[..., Any] | str, arg: Any = UNSET, *, signal: Callable[..., Any] | str,
        signal_args: Sequence[Any] = (), **options: Any,
    ) -> WorkflowHandle[Any, Any]:
        """Signal the running run of the workflow id, or start one (with start_workflow's options)
        that gets the signal first: start_workflow(..., start_signal=..., start_signal_args=...)."""
        # Its overloads checked the arguments: start_workflow's implementation takes them as they come.
        return await cast(Callable[..., Any], self.start_workflow)(
            workflow, arg, start_signal=workflow_module.signal_name(signal), start_signal_args=signal_args, **options,
        )

    @overload
    async def start_update_with_start_workflow(
        self, update: UpdateMethodMultiParam[[SelfType], LocalReturnType], *,
        start_workflow_operation: WithStartWorkflowOperation[SelfType, Any], wait_for_stage: WorkflowUpdateStage, id: str | None = None,
    ) -> WorkflowUpdateHandle[LocalReturnType]: ...

    @overload
    async def start_update_with_start_workflow(
        self, update: UpdateMethodMultiParam[[SelfType, ParamType], LocalReturnType], arg: ParamType, *,
        start_workflow_operation: WithStartWorkflowOperation[SelfType, Any], wait_for_stage: WorkflowUpdateStage, id: str | None = None,
    ) -> WorkflowUpdateHandle[LocalReturnType]: ...

    @overload
    async def start_update_with_start_workflow(
        self, update: UpdateMethodMultiParam[Concatenate[SelfType, MultiParamSpec], LocalReturnType], *,
        start_workflow_operation: WithStartWorkflowOperation[SelfType, Any], wait_for_stage: WorkflowUpdateStage,
        args: Sequence[Any], id: str | None = None,
    ) -> WorkflowUpdateHandle[LocalReturnType]: ...

    @overload
    async def start_update_with_start_workflow(
        self, update: str, arg: Any = UNSET, *, start_workflow_operation: WithStartWorkflowOperation[Any, Any],
        wait_for_stage: WorkflowUpdateStage, args: Sequence[Any] = (), id: str | None = None, result_type: type | None = None,
    ) -> WorkflowUpdateHandle[Any]: ...

    async def start_update_with_start_workflow(
        self, update: Callable[..., Any] | str, arg: Any = UNSET, *, start_workflow_operation: WithStartWorkflowOperation[Any, Any],
        wait_for_stage: WorkflowUpdateStage, args: Sequence[Any] = (), id: str | None = None, result_type: type | None = None,
    ) -> WorkflowUpdateHandle[Any]:
        """Temporal's update-with-start: start the operation's workflow unless a run of its id is
        running (per its id_conflict_policy: USE_EXISTING takes that run, FAIL raises
        WorkflowAlreadyStartedError) and send it the update, in one command history applies in one
        batch; return the update's handle once it reached `wait_for_stage` (ACCEPTED or COMPLETED).
        `start_workflow_operation.workflow_handle()` then gives the run's handle. Sent again with the
        same update `id`, the update runs once."""
        check_update_stage(wait_for_stage)
        if start_workflow_operation._used:
            raise RuntimeError("WithStartWorkflowOperation cannot be reused")
        start_workflow_operation._used = True
        name, result_type = update_name_and_result_type(update, result_type)
        start = start_workflow_operation._start_workflow_input

        started = start_workflow_operation._workflow_handle

        def on_start(run_id: str) -> None:
            handle = WorkflowHandle(self, start.id, result_run_id=run_id, result_type=start.ret_type)
            handle._recorded = True  # the answer came from the log: result() need not look for the run first
            started.set_result(handle)

        def on_start_error(error: BaseException) -> None:
            if not started.done():
                started.set_exception(error)

        try:
            return await self._impl.start_update_with_start_workflow(StartWorkflowUpdateWithStartInput(
                start_workflow_input=start, update_workflow_input=UpdateWithStartUpdateWorkflowInput(
                    update_id=id, update=name, args=([arg] if arg is not UNSET else []) + list(args), wait_for_stage=wait_for_stage,
                    headers={}, ret_type=result_type,
                ), rpc_metadata={}, rpc_timeout=None, _on_start=on_start, _on_start_error=on_start_error,
            ))
        except BaseException as exc:  # refused before the request was sent (an interceptor): workflow_handle() says so too
            on_start_error(exc)
            raise

    @overload
    async def execute_update_with_start_workflow(
        self, update: UpdateMethodMultiParam[[SelfType], LocalReturnType], *,
        start_workflow_operation: WithStartWorkflowOperation[SelfType, Any], id: str | None = None,
    ) -> LocalReturnType: ...

    @overload
    async def execute_update_with_start_workflow(
        self, update: UpdateMethodMultiParam[[SelfType, ParamType], LocalReturnType], arg: ParamType, *,
        start_workflow_operation: WithStartWorkflowOperation[SelfType, Any], id: str | None = None,
    ) -> LocalReturnType: ...

    @overload
    async def execute_update_with_start_workflow(
        self, update: UpdateMethodMultiParam[Concatenate[SelfType, MultiParamSpec], LocalReturnType], *,
        start_workflow_operation: WithStartWorkflowOperation[SelfType, Any], args: Sequence[Any], id: str | None = None,
    ) -> LocalReturnType: ...

    @overload
    async def execute_update_with_start_workflow(
        self, update: str, arg: Any = UNSET, *, start_workflow_operation: WithStartWorkflowOperation[Any, Any],
        args: Sequence[Any] = (), id: str | None = None, result_type: type | None = None,
    ) -> Any: ...

    async def execute_update_with_start_workflow(
        self, update: Callable[..., Any] | str, arg: Any = UNSET, *, start_workflow_operation: WithStartWorkflowOperation[Any, Any],
        args: Sequence[Any] = (), id: str | None = None, result_type: type | None = None,
    ) -> Any:
        """start_update_with_start_workflow, waiting for the update to complete: its result (or
        WorkflowUpdateFailedError), of the update handler's return type."""
        # Its overloads checked the arguments: start_update_with_start_workflow's implementation takes them as they come.
        handle = await cast(Callable[..., Any], self.start_update_with_start_workflow)(
            update, arg, start_workflow_operation=start_workflow_operation, wait_for_stage=WorkflowUpdateStage.COMPLETED,
            args=args, id=id, result_type=result_type,
        )
        return await handle.result()

    @overload
    async def execute_workflow(
        self, workflow: MethodAsyncNoParam[SelfType, ReturnType], *,
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        start_signal: str | None = None, start_signal_args: Sequence[Any] = (),
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> ReturnType: ...

    @overload
    async def execute_workflow(
        self, workflow: MethodAsyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, *,
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        start_signal: str | None = None, start_signal_args: Sequence[Any] = (),
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> ReturnType: ...

    @overload
    async def execute_workflow(
        self, workflow: Callable[Concatenate[SelfType, MultiParamSpec], Awaitable[ReturnType]], *, args: Sequence[Any],
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        start_signal: str | None = None, start_signal_args: Sequence[Any] = (),
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> ReturnType: ...

    @overload
    async def execute_workflow(
        self, workflow: type[SelfType], arg: Any = UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        start_signal: str | None = None, start_signal_args: Sequence[Any] = (),
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> Any: ...

    @overload
    async def execute_workflow(
        self, workflow: str, arg: Any = UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
        id: str, task_queue: str, request_id: str = "", task_timeout: timedelta | None = None,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        start_signal: str | None = None, start_signal_args: Sequence[Any] = (),
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None, start_delay: timedelta | None = None,
        cron_schedule: str = "", request_eager_start: bool = False,
    ) -> Any: ...

    async def execute_workflow(self, workflow: type | Callable[..., Any] | str, arg: Any = UNSET, **options: Any) -> Any:
        """start_workflow (with any of its options), then wait for the result: of the run method's
        return type when `workflow` is the run method."""
        # Its overloads checked the options: start_workflow's implementation takes them as they come.
        return await (await cast(Callable[..., Any], self.start_workflow)(workflow, arg, **options)).result()

    def list_workflows(self, query: str = "", *, limit: int | None = None, page_size: int = 1000) -> WorkflowExecutionAsyncIterator:
        """Executions matching a Temporal list filter (`WorkflowType = 'Order' AND ExecutionStatus = 'Running'`),
        newest first unless the filter says ORDER BY; raises ListFilterError for a filter that does not parse.
        `.map_histories()` gives their histories, for the Replayer."""
        executions = self._impl.list_workflows(ListWorkflowsInput(
            query=query, page_size=page_size, next_page_token=None, rpc_metadata={}, rpc_timeout=None, limit=limit,
        ))
        return WorkflowExecutionAsyncIterator(executions, lambda id, run_id: self.get_workflow_handle(id, run_id=run_id).fetch_history())

    async def start_activity(
        self, activity: str | Callable[..., Awaitable[ReturnType]] | Callable[..., ReturnType], arg: Any = UNSET, *,
        args: Sequence[Any] = (), id: str, task_queue: str, result_type: type | None = None,
        schedule_to_close_timeout: timedelta | None = None, schedule_to_start_timeout: timedelta | None = None,
        start_to_close_timeout: timedelta | None = None, heartbeat_timeout: timedelta | None = None,
        id_reuse_policy: ActivityIDReusePolicy = ActivityIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: ActivityIDConflictPolicy = ActivityIDConflictPolicy.FAIL,
        retry_policy: RetryPolicy | None = None, search_attributes: dict[str, Any] | None = None, summary: str | None = None,
        request_id: str = "",
    ) -> ActivityHandle[ReturnType]:
        """Start a standalone activity (Temporal's, server 1.31): an activity run by the workers of
        `task_queue` outside any workflow, with its own id, retries and timeouts (start-to-close or
        schedule-to-close is required, as for any activity). Its id is of its own space: an activity
        and a workflow may share one (docs/decisions/0007-standalone-activities.md)."""
        if isinstance(activity, str):
            activity_type = activity
        else:
            activity_type = activity_module.definition(activity).name
            result_type = result_type or type_hints(activity).get("return")
        return await self._impl.start_activity(StartActivityInput(
            activity_type=activity_type, args=([arg] if arg is not UNSET else []) + list(args), id=id, task_queue=task_queue,
            result_type=result_type, schedule_to_close_timeout=schedule_to_close_timeout,
            schedule_to_start_timeout=schedule_to_start_timeout, start_to_close_timeout=start_to_close_timeout,
            heartbeat_timeout=heartbeat_timeout, id_reuse_policy=id_reuse_policy, id_conflict_policy=id_conflict_policy,
            retry_policy=retry_policy, search_attributes=search_attributes, summary=summary, headers={}, rpc_metadata={},
            rpc_timeout=None, request_id=request_id,
        ))

    async def execute_activity(
        self, activity: str | Callable[..., Awaitable[ReturnType]] | Callable[..., ReturnType], arg: Any = UNSET, **options: Any,
    ) -> ReturnType:
        """`start_activity`, then its result: raises ActivityFailureError when it did not complete."""
        return await (await self.start_activity(activity, arg, **options)).result()

    def get_activity_handle(self, activity_id: str, *, run_id: str | None = None, result_type: type | None = None) -> ActivityHandle[Any]:
        """A handle on the standalone activity `activity_id` (its latest run without `run_id`)."""
        return ActivityHandle(self, activity_id, run_id=run_id, result_type=result_type)

    def list_activities(self, query: str = "", *, limit: int | None = None, page_size: int = 1000) -> ActivityExecutionAsyncIterator:
        """Standalone activities matching a list filter (`TaskQueue = 'q' AND ActivityType = 'charge'`;
        `ActivityId`, `ActivityType`, `ExecutionStatus`, `TaskQueue`, `StartTime`, `CloseTime` ...)."""
        return ActivityExecutionAsyncIterator(self._impl.list_activities(ListActivitiesInput(
            query=query, page_size=page_size, limit=limit, rpc_metadata={}, rpc_timeout=None,
        )))

    async def count_activities(self, query: str = "") -> ActivityExecutionCount:
        """How many standalone activities match a list filter."""
        return await self._impl.count_activities(CountActivitiesInput(query=query, rpc_metadata={}, rpc_timeout=None))

    def create_nexus_client(self, service: type[ServiceT] | str, endpoint: str) -> NexusClient[ServiceT]:
        """A client of `service` (its contract class, its handler class, or its name) through the
        endpoint `endpoint` (`kadence nexus endpoint create` maps it to a task queue), whose
        operations are standalone Nexus operations: started outside any workflow, each with its own
        id and handle (docs/decisions/0008-nexus.md)."""
        return NexusClient(self, service, endpoint)

    @overload
    def get_nexus_operation_handle(
        self, operation_id: str, *, operation: nexusrpc.Operation[Any, OutputT], run_id: str | None = None,
    ) -> NexusOperationHandle[OutputT]: ...

    @overload
    def get_nexus_operation_handle(
        self, operation_id: str, *, run_id: str | None = None, result_type: type | None = None,
    ) -> NexusOperationHandle[Any]: ...

    def get_nexus_operation_handle(
        self, operation_id: str, *, operation: nexusrpc.Operation[Any, Any] | None = None, run_id: str | None = None,
        result_type: type | None = None,
    ) -> NexusOperationHandle[Any]:
        """A handle on the standalone Nexus operation `operation_id` (its latest run without
        `run_id`); its result is of `result_type`, else of `operation`'s output type."""
        return NexusOperationHandle(self, operation_id, run_id=run_id,
                                    result_type=result_type or (operation.output_type if operation else None))

    def list_nexus_operations(
        self, query: str = "", *, limit: int | None = None, page_size: int = 1000,
    ) -> NexusOperationExecutionAsyncIterator:
        """Standalone Nexus operations matching a list filter (`Endpoint = "payments" AND Operation = "charge"`;
        `OperationId`, `Endpoint`, `Operation`, `ExecutionStatus`, `StartTime`, `CloseTime` ...)."""
        return NexusOperationExecutionAsyncIterator(self._impl.list_nexus_operations(ListNexusOperationsInput(
            query=query, page_size=page_size, next_page_token=None, rpc_metadata={}, rpc_timeout=None, limit=limit,
        )))

    async def count_nexus_operations(self, query: str | None = None) -> NexusOperationExecutionCount:
        """How many standalone Nexus operations match a list filter."""
        return await self._impl.count_nexus_operations(CountNexusOperationsInput(query=query, rpc_metadata={}, rpc_timeout=None))

    async def count_workflows(self, query: str = "") -> WorkflowExecutionCount:
        """How many executions match a list filter."""
        return await self._impl.count_workflows(CountWorkflowsInput(query=query, rpc_metadata={}, rpc_timeout=None))

    def get_workflow_handle(
        self, workflow_id: str, *, run_id: str | None = None, first_execution_run_id: str | None = None,
        result_type: type | None = None,
    ) -> WorkflowHandle[Any, Any]:
        """A handle on `run_id` (the current run without one); `first_execution_run_id` keeps
        cancel, terminate and updates to the runs of the chain that run started (as temporalio)."""
        return WorkflowHandle(
            self, workflow_id, run_id=run_id, result_run_id=run_id, first_execution_run_id=first_execution_run_id,
            result_type=result_type,
        )

    def get_workflow_handle_for(
        self, workflow: Callable[Concatenate[SelfType, MultiParamSpec], Awaitable[ReturnType]], workflow_id: str, *,
        run_id: str | None = None, first_execution_run_id: str | None = None,
    ) -> WorkflowHandle[SelfType, ReturnType]:
        """get_workflow_handle, typed by the workflow's run method (`MyWorkflow.run`), as temporalio's:
        result() decodes to, and is typed as, its return type; signal, query and updates take the
        class's handlers."""
        found = workflow_module.definition(workflow)
        return self.get_workflow_handle(
            workflow_id, run_id=run_id, first_execution_run_id=first_execution_run_id,
            result_type=None if isinstance(found, str) else found.result_type(),
        )

    async def create_schedule(
        self, id: str, schedule: Schedule, *, trigger_immediately: bool = False, backfill: Sequence[ScheduleBackfill] = (),
        memo: Mapping[str, Any] | None = None, search_attributes: Mapping[str, Any] | None = None,
    ) -> ScheduleHandle:
        """Create a schedule (as temporalio's): from then on it starts `schedule.action` at the times
        its spec names, under its policies, on the history service (docs/decisions/0004-schedules-in-the-history-service.md).
        `trigger_immediately` takes an action now; `backfill` takes the past ranges' times now.
        Raises ScheduleAlreadyRunningError if the id holds a schedule. A schedule takes no memo or
        search attributes of its own yet (docs/temporal-differences.md, "Schedules")."""
        if memo or search_attributes:
            raise KadenceError("a schedule takes no memo or search attributes of its own; give them to its action "
                               "(ScheduleActionStartWorkflow(memo=..., search_attributes=...))")
        return await create_schedule(self, id, schedule, trigger_immediately=trigger_immediately, backfill=backfill)

    def get_schedule_handle(self, id: str) -> ScheduleHandle:
        return ScheduleHandle(self, id)

    async def list_schedules(self, query: str | None = None) -> AsyncIterator[ScheduleListDescription]:
        """Every schedule, by id (awaited, then iterated: `async for s in await client.list_schedules()`, as temporalio)."""
        return list_schedules(self, query)

    def get_async_activity_handle(
        self, *, workflow_id: str | None = None, run_id: str | None = None, activity_id: str | None = None,
        task_token: bytes | None = None,
    ) -> AsyncActivityHandle:
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
        self, workflow_id: str, kind: str, body: Mapping[str, Any], *, identity: str | None = None, until_delivered: bool = False,
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
        self, workflow_id: str, commands: Sequence[tuple[str, Mapping[str, Any]]], *, identity: str | None = None,
        until_delivered: bool = False, reply_partition: int | None = None, loop: asyncio.AbstractEventLoop | None = None,
    ) -> list[asyncio.Future[Message]]:
        """Commands of one workflow, as `send_command` sends one, produced back to back once all
        are encoded, so they usually travel in one produce request and the history service reads
        them in one poll (a workflow task's start and its answer). One that cannot be sent (too
        large, its payloads not encodable) is refused with the reason, and the commands after it
        with it: they may depend on it (an answer on the start before it). With `loop`, called
        from another thread on that loop's behalf: produced at once, so only for commands without
        payloads (the payload codec's encoding runs on the loop)."""
        if self._conn.closed:
            raise ClientClosedError(f"{', '.join(kind for kind, _ in commands)} for {workflow_id}")
        records = [{
            "workflow_id": workflow_id, "identity": identity or self.identity, "command": (kind, body),
            "reply_partition": reply_partition,
        } for kind, body in commands]
        traced = tracing.current_headers()  # the span it is sent in: the next hop's parent
        if loop is not None or not self.data_converter.transforms_payloads:
            return self._produce_commands(records, until_delivered, traced, loop or asyncio.get_running_loop())
        if self._conn.encoding is None:
            self._conn.starts_tasks()
            self._conn.encoding = asyncio.Queue()
            self._conn.encoder = asyncio.create_task(self._encode_commands(self._conn.encoding))
        running = asyncio.get_running_loop()
        delivered: list[asyncio.Future[Message]] = [running.create_future() for _ in records]
        self._conn.encoding.put_nowait((records, until_delivered, traced, delivered))
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
            self._conn.producer.produce(topics.COMMANDS, value, record["workflow_id"].encode(), headers=headers,
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
        return self._conn.producer.produce(topic, value, key, partition=partition, headers=headers)

    async def _request(self, workflow_id: str, kind: str, body: dict[str, Any], request_id: str) -> str:
        """Send a client command and wait for its outcome; the run id it applied to. A command the
        history service would refuse whatever the state (a bad id, name or search attribute) is
        refused here, with the same error, without a round trip."""
        problem = command_problem({"workflow_id": workflow_id, "identity": self.identity, "command": (kind, body)})
        if problem:
            raise CommandRejectedError(workflow_id, "INVALID_ARGUMENT", problem)
        began = time.monotonic()
        outcome = await self.send_and_wait(workflow_id, kind, body, request_id)
        # As temporalio's temporal_request metrics, by operation: Kadence's client commands bear its RPCs' names.
        metrics, attributes = self.runtime.sdk_metrics, {"namespace": "default", "operation": kind}
        metrics.request_latency.record(timedelta(seconds=time.monotonic() - began), attributes)
        (metrics.request if outcome.accepted else metrics.request_failure).add(1, attributes)
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
        self._conn.unrecorded[workflow_id] = recorded

        def expire() -> None:
            if self._conn.unrecorded.get(workflow_id) is recorded:
                del self._conn.unrecorded[workflow_id]

        asyncio.get_running_loop().call_later(NOT_FOUND_AFTER_S, expire)

    async def _read_model_caught_up(self, workflow_id: str | None = None) -> None:
        """Until the read model recorded what this client heard on kadence.replies (about
        `workflow_id`, or about any workflow), for at most NOT_FOUND_AFTER_S."""
        if workflow_id is None:
            behind = dict(self._conn.unrecorded)
        else:
            behind = {workflow_id: self._conn.unrecorded[workflow_id]} if workflow_id in self._conn.unrecorded else {}
        if not behind:
            return
        pending = {asyncio.ensure_future(recorded()): (behind_id, recorded) for behind_id, recorded in behind.items()}
        done, still = await asyncio.wait(pending, timeout=NOT_FOUND_AFTER_S)
        for future in still:
            future.cancel()
        for future in done:
            behind_id, recorded = pending[future]
            if not future.cancelled() and future.exception() is None and self._conn.unrecorded.get(behind_id) is recorded:
                del self._conn.unrecorded[behind_id]  # caught up: later reads need not wait

    async def expect_outcome(self, request_id: str) -> asyncio.Future[CommandOutcome]:
        """The answer to a command carrying `request_id`; ask before sending it, so it cannot be missed."""
        return (await self._read_model()).expect_outcome(request_id)

    @property
    def read_model_started(self) -> bool:
        """Whether `expect_outcome_now` may be asked."""
        return self._conn.results is not None and self._conn.results.is_started

    def forget_outcome(self, request_id: str, future: asyncio.Future[CommandOutcome]) -> None:
        """Stop waiting for the answer to a command that was not sent."""
        if self._conn.results is not None:
            self._conn.results.forget_outcome(request_id, future)

    def expect_outcome_now(self, request_id: str) -> asyncio.Future[CommandOutcome]:
        """`expect_outcome` without waiting, once the read model is started (`read_model_started`)."""
        if self._conn.results is None or not self._conn.results.is_started:
            raise RuntimeError("the read model is not started yet: await expect_outcome instead, or check read_model_started")
        return self._conn.results.expect_outcome(request_id)

    def readiness_problems(self) -> list[str]:
        """Why answers from Postgres cannot reach this client now (its LISTEN connection is lost and
        being opened again): part of a worker's /readyz."""
        problem = self._conn.results.reachability.problem if self._conn.results is not None else None
        return [problem] if problem is not None else []

    async def _read_model(self) -> ReadModel:
        if self._conn.closed:
            raise ClientClosedError("reading the read model")
        if self._conn.results is None:
            self._conn.starts_tasks()
            self._conn.results = ReadModel(self._postgres_dsn or postgres_dsn())
        await self._conn.results.started()
        return self._conn.results

    async def _closed_execution(self, workflow_id: str, run_id: str | None) -> tuple[str, bytes | None, bytes | None, str | None]:
        return await (await self._read_model()).wait_closed(workflow_id, run_id)

    async def _replies(self) -> ReplyListener:
        if self._conn.closed:
            raise ClientClosedError("waiting for a reply")
        if self._conn.reply_listener is None:
            self._conn.starts_tasks()
            self._conn.reply_listener = asyncio.ensure_future(self._start_replies())
        starting = self._conn.reply_listener
        try:
            return await asyncio.shield(starting)
        except Exception:
            if self._conn.reply_listener is starting and starting.done():
                self._conn.reply_listener = None  # the next call tries again
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

    @property
    def _eager_workers(self) -> EagerWorkers:
        """The workers of this process on this client's connection that may take an eager start's
        first task (a Worker registers while it runs, as temporalio's with its client)."""
        return self._conn.eager_workers

    async def _watch_run(self, request_id: str) -> RunWatch | None:
        """The closes the history service sends for the run a start carrying `request_id` answers with."""
        replies = await self._replies_if_listening()
        return replies.watch(request_id) if replies is not None else None

    async def _fit_to_broker(self) -> None:
        """This client's settings for its broker before its first consumer is made (its reply
        listener's, its workers'): on Tansu, a short fetch wait (kafka.fitted_to_broker). Asked once
        per connection; a broker that does not answer leaves the settings as they are."""
        if self._conn.on_tansu is None:
            try:
                self._conn.on_tansu = await asyncio.get_running_loop().run_in_executor(None, broker_is_tansu, self.settings, 10.0)
            except KafkaException as exc:
                log.warning("event=broker_kind_unknown error=%r consequence=%r", str(exc), "the fetch wait stays as set")
                return
        self.settings = fitted_to_broker(self.settings, self._conn.on_tansu)

    async def _start_replies(self) -> ReplyListener:
        await self._fit_to_broker()
        listener = ReplyListener(self.settings)
        await listener.start()
        return listener

    async def close(self) -> None:
        """Stop sending and listening (this client and those made from it or it from: they share its
        connections); any later call raises ClientClosedError instead of waiting."""
        await self._conn.close()


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


def _names_temporal_frontend(addresses: str) -> bool:
    """Whether every host:port of a comma-separated list is on Temporal's frontend port."""
    return all(address.strip().rpartition(":")[2] == TEMPORAL_FRONTEND_PORT for address in addresses.split(","))
