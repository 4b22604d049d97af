"""The innermost outbound interceptor: what each of the client's calls does (temporalio's _ClientImpl)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol

import psycopg
from confluent_kafka import Message
from psycopg_pool import AsyncConnectionPool

from kadence.api.common.v1 import Payload
from kadence.client._activities import ActivityExecution, ActivityExecutionCount, ActivityHandle, activity_key
from kadence.client._eager import EagerStart, EagerWorkers
from kadence.client._handles import AsyncActivityHandle, HandleClient, WorkflowHandle, WorkflowUpdateHandle
from kadence.client._inputs import (
    CancelWorkflowInput,
    CompleteAsyncActivityInput,
    CountActivitiesInput,
    CountNexusOperationsInput,
    CountWorkflowsInput,
    DescribeWorkflowInput,
    FailAsyncActivityInput,
    HeartbeatAsyncActivityInput,
    ListActivitiesInput,
    ListNexusOperationsInput,
    ListWorkflowsInput,
    QueryWorkflowInput,
    ReportCancellationAsyncActivityInput,
    SignalWorkflowInput,
    StartActivityInput,
    StartNexusOperationInput,
    StartWorkflowInput,
    StartWorkflowUpdateInput,
    StartWorkflowUpdateWithStartInput,
    TerminateWorkflowInput,
    UpdateWithStartStartWorkflowInput,
)
from kadence.client._interceptor import OutboundInterceptor
from kadence.client._nexus import NexusOperationExecution, NexusOperationExecutionCount, NexusOperationHandle, nexus_operation_key
from kadence.client._read_model import TABLES_MISSING, until_created
from kadence.client._replies import ReplyListener, RunWatch
from kadence.client._types import AsyncActivityIDReference, WorkflowExecutionCount, WorkflowUpdateStage
from kadence.common import UNSET, WorkflowIDConflictPolicy, WorkflowIDReusePolicy, to_ms
from kadence.exceptions import (
    AsyncActivityCancelledError,
    CommandRejectedError,
    KadenceError,
    WorkflowQueryFailedError,
    WorkflowQueryTimeoutError,
)
from kadence.list_filter import Scope
from kadence.protocol.limits import text_problem
from kadence.protocol.names import CommandType
from kadence.protocol.read_model import update_accepted_request_id, update_request_id
from kadence.protocol.task_token import TaskToken
from kadence.visibility import (
    WorkflowExecution,
    activity_cancel_requested,
    count_executions,
    list_executions,
    nexus_operations_scheduled,
)

log = logging.getLogger("kadence.client")
QUERY_RESEND_S = 5.0  # how long a query waits for its answer before it is sent again


class ImplClient(HandleClient, Protocol):
    """The client, as its implementation uses it: what its handles use, and its replies."""

    def send_command(self, workflow_id: str, kind: str, body: dict[str, Any]) -> asyncio.Future[Message]: ...

    async def _replies(self) -> ReplyListener: ...

    async def _watch_run(self, request_id: str) -> RunWatch | None: ...

    async def _replies_if_listening(self) -> ReplyListener | None: ...

    @property
    def _eager_workers(self) -> EagerWorkers: ...


class _ClientImpl(OutboundInterceptor):
    """The innermost interceptor: what each client call does (temporalio's _ClientImpl)."""

    def __init__(self, client: ImplClient) -> None:  # no next: this is the end of the chain
        self._client = client

    def _start_record(self, input: StartWorkflowInput | UpdateWithStartStartWorkflowInput, request_id: str) -> dict[str, Any]:
        """The StartWorkflowExecution record of a start (alone, or with a signal or an update)."""
        payloads = self._client.data_converter.payload_converter
        return {
            "workflow_type": input.workflow, "task_queue": input.task_queue,
            "input": payloads.to_payloads(list(input.args)), "request_id": request_id,
            "execution_timeout_ms": to_ms(input.execution_timeout), "run_timeout_ms": to_ms(input.run_timeout),
            "workflow_task_timeout_ms": to_ms(input.task_timeout), "start_delay_ms": to_ms(input.start_delay),
            "cron_schedule": input.cron_schedule,
            "id_reuse_policy": input.id_reuse_policy.value, "id_conflict_policy": input.id_conflict_policy.value,
            "search_attributes": {name: payloads.to_payload(value) for name, value in (input.search_attributes or {}).items()},
            "header": dict(input.headers),
            "memo": {key: payloads.to_payload(value) for key, value in (input.memo or {}).items()},
            "time_skipping": None if input.time_skipping is None else input.time_skipping.record(),
            "clock_offset_ms": input.clock_offset_ms,
            "nexus_caller": input.nexus_caller if isinstance(input, StartWorkflowInput) else None,
        }

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle:
        client = self._client
        payloads = client.data_converter.payload_converter
        request_id = input.request_id or str(uuid.uuid4())
        watch = await client._watch_run(request_id)  # before the send: the close may come soon after the answer
        start = self._start_record(input, request_id)
        eager = None
        if input.start_signal is None:
            eager = await self._eager_start(input, request_id)
            if eager is not None:
                start["eager_worker_identity"] = eager.slot.identity
            try:
                run_id = await client._request(input.id, CommandType.StartWorkflowExecution, start, request_id)
            except BaseException:
                if eager is not None:
                    eager.abandon()
                raise
        else:
            run_id = await client._request(input.id, CommandType.SignalWithStartWorkflowExecution, {
                "start": start, "signal_name": input.start_signal, "signal_input": payloads.to_payloads(list(input.start_signal_args)),
            }, request_id)
        eagerly_started = eager is not None and await eager.hand_over(input.id, run_id)
        log.info("event=workflow_started workflow_id=%s run_id=%s workflow_type=%s eagerly_started=%s",
                 input.id, run_id, input.workflow, eagerly_started)
        # As temporalio: the handle targets the workflow id's current run (run_id None), so signals,
        # queries, updates and cancellation reach the run a continue-as-new started; result() starts
        # from this run and follows the chain; cancel, terminate and update stay within its chain.
        handle = WorkflowHandle(
            client, input.id, result_run_id=run_id, first_execution_run_id=run_id if input.start_signal is None else None,
            result_type=input.ret_type,
        )
        handle._recorded = True  # the start is in the log: result() need not look for the run first
        handle._close_watch = watch
        # temporalio's mark of a start whose first workflow task a worker of this process took, which its eager start sample prints.
        setattr(handle, "__temporal_eagerly_started", eagerly_started)  # noqa: B010 (a name no attribute syntax can set)
        return handle

    async def _eager_start(self, input: StartWorkflowInput, request_id: str) -> EagerStart | None:
        """A slot of a worker of this process for the start's first task, when the start asks for one
        (temporalio's request_eager_start; a signal-with-start never does, as Temporal's)."""
        if not input.request_eager_start:
            return None
        client = self._client
        return EagerStart.reserve(client._eager_workers, await client._replies_if_listening(), input.task_queue, input.workflow,
                                  input.id, request_id)

    async def start_activity(self, input: StartActivityInput) -> ActivityHandle[Any]:
        """A standalone activity: a start under its key carrying the activity (decision 0007)."""
        run_id = await self._start_standalone(
            input, activity_key(input.id), input.activity_type, input.args, input.task_queue, input.headers, ("activity", {
                "schedule_to_close_timeout_ms": to_ms(input.schedule_to_close_timeout),
                "schedule_to_start_timeout_ms": to_ms(input.schedule_to_start_timeout),
                "start_to_close_timeout_ms": to_ms(input.start_to_close_timeout), "heartbeat_timeout_ms": to_ms(input.heartbeat_timeout),
                "retry_policy": input.retry_policy.to_record() if input.retry_policy is not None else None,
            }),
        )
        log.info("event=activity_started activity_id=%s run_id=%s activity_type=%s", input.id, run_id, input.activity_type)
        return ActivityHandle(self._client, input.id, run_id=run_id, result_type=input.result_type)

    async def _start_standalone(
        self, input: StartActivityInput | StartNexusOperationInput, key: str, run_type: str, args: Sequence[Any], task_queue: str,
        headers: Mapping[str, Payload], work: tuple[str, dict[str, Any]],
    ) -> str:
        """Send a standalone run's start (decisions 0007 and 0008): a plain start under its key,
        whose field `work` names (the activity, or the Nexus operation) is the run's only work; its run id."""
        request_id = input.request_id or str(uuid.uuid4())
        start = StartWorkflowInput(
            workflow=run_type, args=args, id=key, task_queue=task_queue, execution_timeout=None, run_timeout=None, task_timeout=None,
            id_reuse_policy=WorkflowIDReusePolicy[input.id_reuse_policy.name],
            id_conflict_policy=WorkflowIDConflictPolicy[input.id_conflict_policy.name], retry_policy=None, cron_schedule="",
            memo=None, search_attributes=input.search_attributes, start_delay=None, headers=headers, start_signal=None,
            start_signal_args=(), static_summary=input.summary, static_details=None, ret_type=input.result_type,
            rpc_metadata=input.rpc_metadata, rpc_timeout=input.rpc_timeout, request_id=request_id,
        )
        field, options = work
        record = {**self._start_record(start, request_id), field: options}
        return await self._client._request(key, CommandType.StartWorkflowExecution, record, request_id)

    def list_activities(self, input: ListActivitiesInput) -> AsyncIterator[ActivityExecution]:
        async def activities() -> AsyncIterator[ActivityExecution]:
            async for run in self._runs(input.query, input.limit, input.page_size, Scope.ACTIVITIES):
                yield ActivityExecution.of(run)

        return activities()

    async def count_activities(self, input: CountActivitiesInput) -> ActivityExecutionCount:
        return ActivityExecutionCount(await self._count(input.query, Scope.ACTIVITIES))

    async def start_nexus_operation(self, input: StartNexusOperationInput) -> NexusOperationHandle[Any]:
        """A standalone Nexus operation: a start under its key carrying the operation (decision
        0008), whose run names the endpoint as its task queue; history resolves the endpoint."""
        run_id = await self._start_standalone(
            input, nexus_operation_key(input.id), input.operation, [input.arg], input.endpoint, {}, ("nexus_operation", {
                "endpoint": input.endpoint, "service": input.service, "nexus_header": dict(input.headers),
                "schedule_to_close_timeout_ms": to_ms(input.schedule_to_close_timeout),
            }),
        )
        log.info("event=nexus_operation_started operation_id=%s run_id=%s endpoint=%s service=%s operation=%s",
                 input.id, run_id, input.endpoint, input.service, input.operation)
        return NexusOperationHandle(self._client, input.id, run_id=run_id, result_type=input.result_type, endpoint=input.endpoint,
                                    service=input.service, operation=input.operation)

    def list_nexus_operations(self, input: ListNexusOperationsInput) -> AsyncIterator[NexusOperationExecution]:
        async def operations() -> AsyncIterator[NexusOperationExecution]:
            pool = (await self._client._read_model()).pool
            page: list[WorkflowExecution] = []  # each page's scheduled events are read in one query
            async for run in self._runs(input.query, input.limit, input.page_size, Scope.NEXUS_OPERATIONS):
                page.append(run)
                if len(page) == input.page_size:
                    for operation in await self._nexus_operations(pool, page):
                        yield operation
                    page = []
            for operation in await self._nexus_operations(pool, page):
                yield operation

        return operations()

    @staticmethod
    async def _nexus_operations(pool: AsyncConnectionPool, runs: list[WorkflowExecution]) -> list[NexusOperationExecution]:
        scheduled = await nexus_operations_scheduled(pool, runs)
        return [NexusOperationExecution.of(run, scheduled[run.id, run.run_id]) for run in runs]

    async def count_nexus_operations(self, input: CountNexusOperationsInput) -> NexusOperationExecutionCount:
        return NexusOperationExecutionCount(await self._count(input.query, Scope.NEXUS_OPERATIONS))

    async def _runs(self, query: str | None, limit: int | None, page_size: int, scope: Scope) -> AsyncIterator[WorkflowExecution]:
        """The runs of `scope` the read model holds that a list filter matches."""
        await self._client._read_model_caught_up()
        pool = (await self._client._read_model()).pool
        try:
            async for run in list_executions(pool, query or "", limit, page_size, scope=scope):
                yield run
        except psycopg.errors.UndefinedTable as exc:
            raise KadenceError(f"listing {scope.name.lower().replace('_', ' ')}: {TABLES_MISSING}") from exc

    async def _count(self, query: str | None, scope: Scope) -> int:
        """How many runs `_runs` would give."""
        await self._client._read_model_caught_up()
        try:
            return await count_executions((await self._client._read_model()).pool, query or "", scope=scope)
        except psycopg.errors.UndefinedTable as exc:
            raise KadenceError(f"counting {scope.name.lower().replace('_', ' ')}: {TABLES_MISSING}") from exc

    async def cancel_workflow(self, input: CancelWorkflowInput) -> None:
        handle = self._handle(input.id, input.run_id, input.first_execution_run_id)
        await handle._request_in_chain(CommandType.RequestCancelWorkflowExecution, {"reason": input.reason},
                                      input.request_id or str(uuid.uuid4()))

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecution:
        return await self._handle(input.id, input.run_id)._execution(input.run_id)

    def list_workflows(self, input: ListWorkflowsInput) -> AsyncIterator[WorkflowExecution]:
        async def executions() -> AsyncIterator[WorkflowExecution]:
            async for execution in self._runs(input.query, input.limit, input.page_size, Scope.WORKFLOWS):
                yield dataclasses.replace(execution, data_converter=self._client.data_converter)  # memo() decodes as the client

        return executions()

    async def count_workflows(self, input: CountWorkflowsInput) -> WorkflowExecutionCount:
        return WorkflowExecutionCount(await self._count(input.query, Scope.WORKFLOWS))

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
        request_id = input.request_id or str(uuid.uuid4())
        await self._client._request(input.id, CommandType.SignalWorkflowExecution, {
            "run_id": input.run_id or "", "signal_name": input.signal,
            "input": self._client.data_converter.payload_converter.to_payloads(list(input.args)), "request_id": request_id,
            "header": dict(input.headers),
        }, request_id)

    async def terminate_workflow(self, input: TerminateWorkflowInput) -> None:
        handle = self._handle(input.id, input.run_id, input.first_execution_run_id)
        await handle._request_in_chain(CommandType.TerminateWorkflowExecution, {
            "reason": input.reason or "", "details": self._client.data_converter.payload_converter.to_payloads(list(input.args)),
        }, input.request_id or str(uuid.uuid4()))

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

    async def start_update_with_start_workflow(self, input: StartWorkflowUpdateWithStartInput) -> WorkflowUpdateHandle:
        """One UpdateWithStartWorkflowExecution command: history starts the run (or takes the running
        one, per the conflict policy) and admits the update in one batch; then wait as start_update waits."""
        client, start, update = self._client, input.start_workflow_input, input.update_workflow_input
        if update.wait_for_stage == WorkflowUpdateStage.ADMITTED:
            raise ValueError("ADMITTED wait stage not supported")
        workflow_id, update_id, request_id = start.id, update.update_id or str(uuid.uuid4()), str(uuid.uuid4())
        read_model = await client._read_model()
        awaited = [update_request_id(workflow_id, update_id)] + (
            [update_accepted_request_id(workflow_id, update_id)] if update.wait_for_stage == WorkflowUpdateStage.ACCEPTED else []
        )
        reached = [read_model.expect_outcome(request) for request in awaited]  # before the send, so no answer is missed
        try:
            run_id = await client._request(workflow_id, CommandType.UpdateWithStartWorkflowExecution, {
                "start": self._start_record(start, request_id),
                "update": {"update_id": update_id, "name": update.update, "header": dict(update.headers),
                           "args": client.data_converter.payload_converter.to_payloads(list(update.args))},
            }, request_id)
        except BaseException as exc:
            for request, outcome in zip(awaited, reached, strict=True):
                read_model.forget_outcome(request, outcome)
            input._on_start_error(exc)
            raise
        input._on_start(run_id)
        handle = WorkflowUpdateHandle(client, update_id, workflow_id, workflow_run_id=run_id, result_type=update.ret_type)
        await handle._wait_for(reached, awaited)
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
        if await until_created("client_activity_cancel_lookup", lambda: activity_cancel_requested(pool, workflow_id, run_id, **asked)):
            raise AsyncActivityCancelledError()

    async def complete_async_activity(self, input: CompleteAsyncActivityInput) -> None:
        payloads = self._client.data_converter.payload_converter
        await AsyncActivityHandle(self._client, input.id_or_token)._report(
            CommandType.RespondActivityTaskCompleted, {"result": None if input.result is UNSET else payloads.to_payload(input.result)},
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


