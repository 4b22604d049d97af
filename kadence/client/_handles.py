"""The client's handles, as temporalio.client's: on a workflow (WorkflowHandle), an update
(WorkflowUpdateHandle), an activity completed from outside its worker (AsyncActivityHandle), and
the start of an update-with-start (WithStartWorkflowOperation), which becomes a workflow handle.

Their calls go through the client's outbound interceptor chain, whose calls return handles: the
chain and the client are seen here as the Protocols `Outbound` and `HandleClient`, which
OutboundInterceptor and Client (in the modules above this one) are."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Concatenate, Generic, Protocol, cast, overload

import psycopg

from kadence import workflow as workflow_module
from kadence.client._inputs import (
    CancelWorkflowInput,
    CompleteAsyncActivityInput,
    DescribeWorkflowInput,
    FailAsyncActivityInput,
    HeartbeatAsyncActivityInput,
    QueryWorkflowInput,
    ReportCancellationAsyncActivityInput,
    SignalWorkflowInput,
    StartWorkflowUpdateInput,
    TerminateWorkflowInput,
    UpdateWithStartStartWorkflowInput,
)
from kadence.client._read_model import NOT_FOUND_AFTER_S, TABLES_MISSING, ReadModel, run_row, until_created
from kadence.client._replies import RunWatch
from kadence.client._types import AsyncActivityIDReference, ResetReapplyExcludeType, ResetType, WorkflowUpdateStage
from kadence.common import UNSET, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from kadence.converter import DataConverter, type_hints
from kadence.exceptions import (
    ApplicationError,
    CancelledError,
    CommandRejectedError,
    TerminatedError,
    WorkflowFailureError,
    WorkflowNotFoundError,
    WorkflowUpdateFailedError,
)
from kadence.protocol.codec import codec
from kadence.protocol.limits import text_problem
from kadence.protocol.names import CommandType
from kadence.protocol.postgres import until_answered
from kadence.protocol.read_model import CommandOutcome, update_request_id
from kadence.protocol.task_token import TaskToken
from kadence.types import (
    HandleLocalReturnType,
    HandleReturnType,
    HandleSelfType,
    LocalReturnType,
    MethodAsyncNoParam,
    MethodAsyncSingleParam,
    MethodSyncOrAsyncNoParam,
    MethodSyncOrAsyncSingleParam,
    MultiParamSpec,
    ParamType,
    SelfType,
)
from kadence.visibility import WorkflowExecution, WorkflowHistory, fetch_events, find_execution
from kadence.workflow import UpdateMethodMultiParam

# How long result() of a run this client started waits for its close on kadence.replies before it
# asks the read model too: the reply comes within milliseconds unless it was lost (the history
# service restarted between recording the close and replying), and a read-model wait per result
# costs the client more CPU than anything else on its path (docs/performance.md).
READ_MODEL_AFTER_REPLY_S = 1.0
CHAIN_MOVES_MAX = 20  # continue-as-news a cancel, terminate or update of a chain follows before giving up


class Outbound(Protocol):
    """The outbound interceptor chain, as the handles call it."""

    async def cancel_workflow(self, input: CancelWorkflowInput) -> None: ...

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecution: ...

    async def query_workflow(self, input: QueryWorkflowInput) -> Any: ...

    async def signal_workflow(self, input: SignalWorkflowInput) -> None: ...

    async def terminate_workflow(self, input: TerminateWorkflowInput) -> None: ...

    async def start_workflow_update(self, input: StartWorkflowUpdateInput) -> WorkflowUpdateHandle: ...

    async def heartbeat_async_activity(self, input: HeartbeatAsyncActivityInput) -> None: ...

    async def complete_async_activity(self, input: CompleteAsyncActivityInput) -> None: ...

    async def fail_async_activity(self, input: FailAsyncActivityInput) -> None: ...

    async def report_cancellation_async_activity(self, input: ReportCancellationAsyncActivityInput) -> None: ...


class HandleClient(Protocol):
    """The client, as its handles use it."""

    @property
    def data_converter(self) -> DataConverter: ...

    @property
    def _impl(self) -> Outbound: ...

    async def _request(self, workflow_id: str, kind: str, body: dict[str, Any], request_id: str) -> str: ...

    async def _read_model(self) -> ReadModel: ...

    async def _read_model_caught_up(self, workflow_id: str | None = None) -> None: ...

    def _read_model_behind(self, workflow_id: str, recorded: Callable[[], Awaitable[Any]]) -> None: ...

    async def _closed_execution(self, workflow_id: str, run_id: str | None) -> tuple[str, bytes | None, bytes | None, str | None]: ...


class WorkflowHandle(Generic[HandleSelfType, HandleReturnType]):
    """As temporalio.client.WorkflowHandle: `run_id` pins signals, queries, updates, describe,
    cancel and terminate to one run (None: the current run); `result_run_id` is the run result()
    starts from; `first_execution_run_id` keeps cancel, terminate and updates to the current run
    of the chain (continue-as-new) that run started.
    Of the workflow's class and its run method's return type (WorkflowHandle[MyWorkflow, MyResult],
    from the run method start_workflow was given): result() is of that type, and signal, query and
    updates take the class's handlers and their arguments."""

    def __init__(
        self, client: HandleClient, id: str, *, run_id: str | None = None, result_run_id: str | None = None,
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
            row = await until_created("client_chain_lookup", functools.partial(run_row, pool, self._id, run_id))
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

    @overload
    async def signal(self, signal: MethodSyncOrAsyncNoParam[HandleSelfType, None], *, request_id: str = "") -> None: ...

    @overload
    async def signal(
        self, signal: MethodSyncOrAsyncSingleParam[HandleSelfType, ParamType, None], arg: ParamType, *, request_id: str = "",
    ) -> None: ...

    @overload
    async def signal(
        self, signal: Callable[Concatenate[HandleSelfType, MultiParamSpec], Awaitable[None] | None], *, args: Sequence[Any],
        request_id: str = "",
    ) -> None: ...

    @overload
    async def signal(self, signal: str, arg: Any = UNSET, *, args: Sequence[Any] = (), request_id: str = "") -> None: ...

    async def signal(
        self, signal: Callable[..., Any] | str, arg: Any = UNSET, *, args: Sequence[Any] = (), request_id: str = "",
    ) -> None:
        """Signal this run (or the current run when the handle has no run_id); returns once the signal
        is in its history, raises CommandRejectedError when the run is closed or unknown. A signal
        sent again with the same `request_id` (Kadence's) is recorded once."""
        await self.client._impl.signal_workflow(SignalWorkflowInput(
            id=self.id, run_id=self.run_id, signal=workflow_module.signal_name(signal),
            args=([arg] if arg is not UNSET else []) + list(args), headers={}, rpc_metadata={}, rpc_timeout=None,
            request_id=request_id,
        ))

    async def result(self, *, follow_runs: bool = True) -> HandleReturnType:
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
            if not follow_runs or not next_run_id or status == "Terminated":  # a reset's next run is not followed
                break
            run_id = next_run_id
        return status, codec("Payload").decode(result) if result else None, codec("Failure").decode(failure) if failure else None

    @overload
    async def query(
        self, query: MethodSyncOrAsyncNoParam[HandleSelfType, LocalReturnType], *, timeout: timedelta = timedelta(seconds=30),
    ) -> LocalReturnType: ...

    @overload
    async def query(
        self, query: MethodSyncOrAsyncSingleParam[HandleSelfType, ParamType, LocalReturnType], arg: ParamType, *,
        timeout: timedelta = timedelta(seconds=30),
    ) -> LocalReturnType: ...

    @overload
    async def query(
        self, query: Callable[Concatenate[HandleSelfType, MultiParamSpec], Awaitable[LocalReturnType] | LocalReturnType], *,
        args: Sequence[Any], timeout: timedelta = timedelta(seconds=30),
    ) -> LocalReturnType: ...

    @overload
    async def query(
        self, query: str, arg: Any = UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
        timeout: timedelta = timedelta(seconds=30),
    ) -> Any: ...

    async def query(
        self, query: Callable[..., Any] | str, arg: Any = UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
        timeout: timedelta = timedelta(seconds=30),
    ) -> Any:
        """Ask the workflow: the worker holding the run answers from its state (any worker of the
        queue replays the history if none holds it, a closed run included). Raises
        WorkflowQueryFailedError if the query failed, WorkflowQueryTimeoutError if no worker answered."""
        name = workflow_module.query_name(query)
        if result_type is None and not isinstance(query, str):
            result_type = type_hints(query).get("return")
        return await self.client._impl.query_workflow(QueryWorkflowInput(
            id=self.id, run_id=self.run_id, query=name, args=([arg] if arg is not UNSET else []) + list(args),
            reject_condition=None, headers={}, ret_type=result_type, rpc_metadata={}, rpc_timeout=timeout,
        ))

    @overload
    async def start_update(
        self, update: UpdateMethodMultiParam[[HandleSelfType], LocalReturnType], *, wait_for_stage: WorkflowUpdateStage,
        id: str | None = None,
    ) -> WorkflowUpdateHandle[LocalReturnType]: ...

    @overload
    async def start_update(
        self, update: UpdateMethodMultiParam[[HandleSelfType, ParamType], LocalReturnType], arg: ParamType, *,
        wait_for_stage: WorkflowUpdateStage, id: str | None = None,
    ) -> WorkflowUpdateHandle[LocalReturnType]: ...

    @overload
    async def start_update(
        self, update: UpdateMethodMultiParam[Concatenate[HandleSelfType, MultiParamSpec], LocalReturnType], *,
        wait_for_stage: WorkflowUpdateStage, args: Sequence[Any], id: str | None = None,
    ) -> WorkflowUpdateHandle[LocalReturnType]: ...

    @overload
    async def start_update(
        self, update: str, arg: Any = UNSET, *, wait_for_stage: WorkflowUpdateStage, args: Sequence[Any] = (),
        id: str | None = None, result_type: type | None = None,
    ) -> WorkflowUpdateHandle[Any]: ...

    async def start_update(
        self, update: Callable[..., Any] | str, arg: Any = UNSET, *, wait_for_stage: WorkflowUpdateStage,
        args: Sequence[Any] = (), id: str | None = None, result_type: type | None = None,
    ) -> WorkflowUpdateHandle[Any]:
        """Send an update and return its handle once it reached `wait_for_stage`: ACCEPTED (its
        validator passed, or it was rejected: result() then raises) or COMPLETED. ADMITTED is refused,
        as temporalio refuses it. Raises CommandRejectedError if the workflow is closed or unknown,
        WorkflowUpdateFailedError if it closes before the update reached the stage. An update sent
        again with the same `id` runs once."""
        check_update_stage(wait_for_stage)
        name, result_type = update_name_and_result_type(update, result_type)
        return await self.client._impl.start_workflow_update(StartWorkflowUpdateInput(
            id=self.id, run_id=self.run_id, first_execution_run_id=self.first_execution_run_id, update_id=id, update=name,
            args=([arg] if arg is not UNSET else []) + list(args), wait_for_stage=wait_for_stage, headers={},
            ret_type=result_type, rpc_metadata={}, rpc_timeout=None,
        ))

    @overload
    async def execute_update(
        self, update: UpdateMethodMultiParam[[HandleSelfType], LocalReturnType], *, id: str | None = None,
    ) -> LocalReturnType: ...

    @overload
    async def execute_update(
        self, update: UpdateMethodMultiParam[[HandleSelfType, ParamType], LocalReturnType], arg: ParamType, *, id: str | None = None,
    ) -> LocalReturnType: ...

    @overload
    async def execute_update(
        self, update: UpdateMethodMultiParam[Concatenate[HandleSelfType, MultiParamSpec], LocalReturnType], *, args: Sequence[Any],
        id: str | None = None,
    ) -> LocalReturnType: ...

    @overload
    async def execute_update(
        self, update: str, arg: Any = UNSET, *, args: Sequence[Any] = (), id: str | None = None, result_type: type | None = None,
    ) -> Any: ...

    async def execute_update(
        self, update: Callable[..., Any] | str, arg: Any = UNSET, *, args: Sequence[Any] = (), id: str | None = None,
        result_type: type | None = None,
    ) -> Any:
        """Run an update handler in the workflow and wait for its result. Raises
        WorkflowUpdateFailedError if its validator rejected it or it failed, CommandRejectedError if
        the workflow is closed or unknown. An update sent again with the same `id` runs once."""
        # Its overloads checked the arguments: start_update's implementation takes them as they come.
        handle = await cast(Callable[..., Any], self.start_update)(
            update, arg, args=args, id=id, result_type=result_type, wait_for_stage=WorkflowUpdateStage.COMPLETED,
        )
        return await handle.result()

    def get_update_handle(
        self, id: str, *, workflow_run_id: str | None = None, result_type: type | None = None,
    ) -> WorkflowUpdateHandle[Any]:
        """A handle to an update sent earlier (by any client), to wait for its result."""
        return WorkflowUpdateHandle(self.client, id, self.id, workflow_run_id=workflow_run_id or self.run_id, result_type=result_type)

    def get_update_handle_for(
        self, update: UpdateMethodMultiParam[Any, LocalReturnType], id: str, *, workflow_run_id: str | None = None,
    ) -> WorkflowUpdateHandle[LocalReturnType]:
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
        named = f"workflow {self.id}" + (f" run {run_id}" if run_id else "")
        try:
            found = await find_execution((await self.client._read_model()).pool, self.id, run_id)
        except psycopg.errors.UndefinedTable as exc:  # the services have not created it yet: nothing is recorded
            raise WorkflowNotFoundError(f"{named} not found: {TABLES_MISSING}") from exc
        if found is None:
            raise WorkflowNotFoundError(f"{named} not found")
        return dataclasses.replace(found, data_converter=self.client.data_converter)  # its memo() decodes as this client does

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

    async def cancel(self, *, request_id: str = "") -> None:
        """Request cancellation: the workflow sees asyncio.CancelledError and may clean up first.
        `request_id` (Kadence's) names the request, so its answer can be found again."""
        await self.client._impl.cancel_workflow(CancelWorkflowInput(
            id=self.id, run_id=self.run_id, first_execution_run_id=self.first_execution_run_id, reason="",
            rpc_metadata={}, rpc_timeout=None, request_id=request_id,
        ))

    async def terminate(self, *args: Any, reason: str | None = None, request_id: str = "") -> None:
        """End the run now: no workflow code runs, pending activities and timers are dropped.
        `request_id` (Kadence's) names the request, so its answer can be found again."""
        await self.client._impl.terminate_workflow(TerminateWorkflowInput(
            id=self.id, run_id=self.run_id, first_execution_run_id=self.first_execution_run_id, args=args, reason=reason,
            rpc_metadata={}, rpc_timeout=None, request_id=request_id,
        ))


    async def reset(
        self, *, event_id: int = 0, reset_type: ResetType | str | None = None, reason: str = "",
        reapply_exclude_types: Sequence[ResetReapplyExcludeType] = (), request_id: str = "",
    ) -> WorkflowHandle[HandleSelfType, HandleReturnType]:
        """Reset the run (Kadence's; temporalio has only the raw ResetWorkflowExecution RPC, and
        Temporal's CLI `temporal workflow reset`): a new run of the workflow id goes on from the end
        of a workflow task of this run (`event_id`, a WorkflowTaskCompleted, Failed or TimedOut; or
        `reset_type`), with the signals and updates this run received after it (unless excluded);
        this run, if running, is terminated. Only the workflow id's current run can be reset, while
        it runs (docs/temporal-differences.md, "Reset"). A handle to the new run; `request_id` makes
        the reset once however often it is sent."""
        if bool(event_id) == (reset_type is not None):
            raise ValueError("give reset() an event_id or a reset_type, one of them")
        request_id = request_id or str(uuid.uuid4())
        new_run_id = await self.client._request(self.id, CommandType.ResetWorkflowExecution, {
            "run_id": self.run_id or "", "event_id": event_id, "reset_type": ResetType(reset_type).value if reset_type is not None else "",
            "reason": reason, "reapply_exclude_types": [t.value for t in reapply_exclude_types], "request_id": request_id,
        }, request_id)
        return WorkflowHandle(self.client, self.id, result_run_id=new_run_id, first_execution_run_id=new_run_id,
                              result_type=self.result_type)


class AsyncActivityHandle:
    """Completes, fails, heartbeats or cancels an activity attempt from any process (as
    temporalio.client.AsyncActivityHandle). Each call returns once the history service applied it,
    and raises CommandRejectedError (cause ACTIVITY_NOT_FOUND) when the attempt is over: a stale
    task token, or an activity that completed, failed or timed out."""

    def __init__(self, client: HandleClient, id_or_token: AsyncActivityIDReference | bytes) -> None:
        self._client = client
        self._id_or_token = id_or_token

    async def heartbeat(self, *details: Any) -> None:
        """Record a heartbeat: re-arms the heartbeat timeout; `details` reach the next attempt. Raises
        AsyncActivityCancelledError once the workflow asked to cancel the activity (the heartbeat is
        recorded all the same)."""
        await self._client._impl.heartbeat_async_activity(HeartbeatAsyncActivityInput(
            id_or_token=self._id_or_token, details=details, rpc_metadata={}, rpc_timeout=None,
        ))

    async def complete(self, result: Any = UNSET) -> None:
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


def check_update_stage(wait_for_stage: WorkflowUpdateStage) -> None:
    """The stages an update's caller may wait for: ACCEPTED or COMPLETED (ADMITTED refused as temporalio refuses it)."""
    if wait_for_stage == WorkflowUpdateStage.ADMITTED:
        raise ValueError("ADMITTED wait stage not supported")
    if wait_for_stage not in (WorkflowUpdateStage.ACCEPTED, WorkflowUpdateStage.COMPLETED):
        raise ValueError(f"wait_for_stage must be a WorkflowUpdateStage, ACCEPTED or COMPLETED, not {wait_for_stage!r}")


def update_name_and_result_type(update: Callable[..., Any] | str, result_type: type | None) -> tuple[str, type | None]:
    """An update's name, and the type its result decodes to: `result_type`, else the handler's return hint."""
    if result_type is None and not isinstance(update, str):
        result_type = type_hints(update).get("return")
    return workflow_module.update_name(update), result_type


class WithStartWorkflowOperation(Generic[HandleSelfType, HandleReturnType]):
    """How to start the workflow of an update-with-start, as temporalio's: start_workflow's options,
    with `id_conflict_policy` required (USE_EXISTING sends the update to a running run, FAIL
    refuses while one runs, TERMINATE_EXISTING ends it and starts another). A cron schedule or a
    start delay is refused, as Temporal refuses them. Used once; `workflow_handle()` waits for the
    request's answer: the handle on the run it left running, or the error that refused it.
    Of the workflow's class and result type, as start_workflow's handle: the update sent with it
    must be of that class."""

    @overload
    def __init__(
        self, workflow: MethodAsyncNoParam[HandleSelfType, HandleReturnType], *,
        id: str, task_queue: str, id_conflict_policy: WorkflowIDConflictPolicy,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE, cron_schedule: str = "",
        memo: Mapping[str, Any] | None = None, search_attributes: Mapping[str, Any] | None = None,
        start_delay: timedelta | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self, workflow: MethodAsyncSingleParam[HandleSelfType, ParamType, HandleReturnType], arg: ParamType, *,
        id: str, task_queue: str, id_conflict_policy: WorkflowIDConflictPolicy,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE, cron_schedule: str = "",
        memo: Mapping[str, Any] | None = None, search_attributes: Mapping[str, Any] | None = None,
        start_delay: timedelta | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self, workflow: Callable[Concatenate[HandleSelfType, MultiParamSpec], Awaitable[HandleReturnType]], *, args: Sequence[Any],
        id: str, task_queue: str, id_conflict_policy: WorkflowIDConflictPolicy,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE, cron_schedule: str = "",
        memo: Mapping[str, Any] | None = None, search_attributes: Mapping[str, Any] | None = None,
        start_delay: timedelta | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: WithStartWorkflowOperation[SelfType, Any], workflow: type[SelfType], arg: Any = UNSET, *, args: Sequence[Any] = (),
        result_type: type | None = None,
        id: str, task_queue: str, id_conflict_policy: WorkflowIDConflictPolicy,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE, cron_schedule: str = "",
        memo: Mapping[str, Any] | None = None, search_attributes: Mapping[str, Any] | None = None,
        start_delay: timedelta | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: WithStartWorkflowOperation[Any, Any], workflow: str, arg: Any = UNSET, *, args: Sequence[Any] = (),
        result_type: type | None = None,
        id: str, task_queue: str, id_conflict_policy: WorkflowIDConflictPolicy,
        execution_timeout: timedelta | None = None, run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE, cron_schedule: str = "",
        memo: Mapping[str, Any] | None = None, search_attributes: Mapping[str, Any] | None = None,
        start_delay: timedelta | None = None,
    ) -> None: ...

    def __init__(
        self, workflow: type | Callable[..., Any] | str, arg: Any = UNSET, *, args: Sequence[Any] = (), id: str, task_queue: str,
        id_conflict_policy: WorkflowIDConflictPolicy, result_type: type | None = None, execution_timeout: timedelta | None = None,
        run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE, cron_schedule: str = "",
        memo: Mapping[str, Any] | None = None, search_attributes: Mapping[str, Any] | None = None,
        start_delay: timedelta | None = None,
    ) -> None:
        if not isinstance(id_conflict_policy, WorkflowIDConflictPolicy):
            raise ValueError(f"WorkflowIDConflictPolicy is required: give id_conflict_policy= (not {id_conflict_policy!r})")
        if cron_schedule or start_delay:
            raise ValueError("an update-with-start takes no cron_schedule nor start_delay (Temporal refuses them): "
                             "the update needs the run at once")
        definition = workflow_module.definition(workflow)
        if result_type is None and not isinstance(definition, str):
            result_type = definition.result_type()
        self._start_workflow_input = UpdateWithStartStartWorkflowInput(
            workflow=definition if isinstance(definition, str) else definition.name,
            args=([arg] if arg is not UNSET else []) + list(args), id=id, task_queue=task_queue,
            execution_timeout=execution_timeout, run_timeout=run_timeout, task_timeout=task_timeout, id_reuse_policy=id_reuse_policy,
            id_conflict_policy=id_conflict_policy, retry_policy=None, cron_schedule=cron_schedule, memo=memo,
            search_attributes=search_attributes, static_summary=None, static_details=None, start_delay=start_delay, headers={},
            ret_type=result_type,
        )
        self._workflow_handle: asyncio.Future[WorkflowHandle[HandleSelfType, HandleReturnType]] = asyncio.get_running_loop().create_future()
        self._used = False

    async def workflow_handle(self) -> WorkflowHandle[HandleSelfType, HandleReturnType]:
        """The handle on the run the update-with-start left running (as a signal-with-start's, it
        follows the workflow id's current run); raises what refused the start."""
        return await self._workflow_handle


class WorkflowUpdateHandle(Generic[HandleLocalReturnType]):
    """An update sent to a workflow: result() waits for it to complete (as temporalio.client.WorkflowUpdateHandle).
    Of the update handler's return type (WorkflowUpdateHandle[MyResult]), from the handler it was sent with."""

    def __init__(
        self, client: HandleClient, id: str, workflow_id: str, *, workflow_run_id: str | None = None, result_type: type | None = None,
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

    async def result(self) -> HandleLocalReturnType:
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
