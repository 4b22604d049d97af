"""Client interceptors, as temporalio.client's: `Client(..., interceptors=[...])` wraps every
outbound call in the interceptors' `OutboundInterceptor`s, first interceptor outermost, so context
propagation, auth headers and tracing written for temporalio run after an import swap.

Each call's input is a dataclass with temporalio's name and fields. Kadence has no RPC:
`rpc_metadata` is carried but sent nowhere, `rpc_timeout` bounds only a query (its `timeout`), and
fields for features Kadence lacks (memo, retry_policy, static summaries) stay None.
`headers` travel in the command and are recorded in the history where Temporal records them."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kadence.api.common.v1 import Payload
from kadence.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

if TYPE_CHECKING:
    from kadence.client import (
        AsyncActivityIDReference,
        WorkflowExecution,
        WorkflowExecutionCount,
        WorkflowHandle,
        WorkflowUpdateHandle,
        WorkflowUpdateStage,
    )


@dataclasses.dataclass
class StartWorkflowInput:
    """Input for OutboundInterceptor.start_workflow (a signal-with-start when `start_signal` is set)."""

    workflow: str
    args: Sequence[Any]
    id: str
    task_queue: str
    execution_timeout: timedelta | None
    run_timeout: timedelta | None
    task_timeout: timedelta | None
    id_reuse_policy: WorkflowIDReusePolicy
    id_conflict_policy: WorkflowIDConflictPolicy
    retry_policy: Any
    cron_schedule: str
    memo: Mapping[str, Any] | None
    search_attributes: Mapping[str, Any] | None
    start_delay: timedelta | None
    headers: Mapping[str, Payload]
    start_signal: str | None
    start_signal_args: Sequence[Any]
    static_summary: str | None
    static_details: str | None
    ret_type: type | None
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None
    request_eager_start: bool = False
    request_id: str = ""  # Kadence's: the start's idempotency key ("" draws a uuid4)


@dataclasses.dataclass
class CancelWorkflowInput:
    id: str
    run_id: str | None
    first_execution_run_id: str | None
    reason: str
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None


@dataclasses.dataclass
class DescribeWorkflowInput:
    id: str
    run_id: str | None
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None


@dataclasses.dataclass
class ListWorkflowsInput:
    query: str | None
    page_size: int
    next_page_token: bytes | None
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None
    limit: int | None


@dataclasses.dataclass
class CountWorkflowsInput:
    query: str | None
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None


@dataclasses.dataclass
class QueryWorkflowInput:
    id: str
    run_id: str | None
    query: str
    args: Sequence[Any]
    reject_condition: Any
    headers: Mapping[str, Payload]
    ret_type: type | None
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None  # how long the query waits for a worker's answer


@dataclasses.dataclass
class SignalWorkflowInput:
    id: str
    run_id: str | None
    signal: str
    args: Sequence[Any]
    headers: Mapping[str, Payload]
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None


@dataclasses.dataclass
class TerminateWorkflowInput:
    id: str
    run_id: str | None
    first_execution_run_id: str | None
    args: Sequence[Any]
    reason: str | None
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None


@dataclasses.dataclass
class StartWorkflowUpdateInput:
    id: str
    run_id: str | None
    first_execution_run_id: str | None
    update_id: str | None
    update: str
    args: Sequence[Any]
    wait_for_stage: WorkflowUpdateStage
    headers: Mapping[str, Payload]
    ret_type: type | None
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None


@dataclasses.dataclass
class HeartbeatAsyncActivityInput:
    id_or_token: AsyncActivityIDReference | bytes
    details: Sequence[Any]
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None


@dataclasses.dataclass
class CompleteAsyncActivityInput:
    id_or_token: AsyncActivityIDReference | bytes
    result: Any | None
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None


@dataclasses.dataclass
class FailAsyncActivityInput:
    id_or_token: AsyncActivityIDReference | bytes
    error: Exception
    last_heartbeat_details: Sequence[Any]
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None


@dataclasses.dataclass
class ReportCancellationAsyncActivityInput:
    id_or_token: AsyncActivityIDReference | bytes
    details: Sequence[Any]
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None


class Interceptor:
    """Extend this, and override intercept_client, to intercept a client's calls."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        """The interceptor the client calls instead of `next` (which it should delegate to)."""
        return next


class OutboundInterceptor:
    """Every method delegates to `next` unless overridden."""

    def __init__(self, next: OutboundInterceptor) -> None:
        self.next = next

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle:
        return await self.next.start_workflow(input)

    async def cancel_workflow(self, input: CancelWorkflowInput) -> None:
        await self.next.cancel_workflow(input)

    async def describe_workflow(self, input: DescribeWorkflowInput) -> WorkflowExecution:
        return await self.next.describe_workflow(input)

    def list_workflows(self, input: ListWorkflowsInput) -> AsyncIterator[WorkflowExecution]:
        return self.next.list_workflows(input)

    async def count_workflows(self, input: CountWorkflowsInput) -> WorkflowExecutionCount:
        return await self.next.count_workflows(input)

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        return await self.next.query_workflow(input)

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        await self.next.signal_workflow(input)

    async def terminate_workflow(self, input: TerminateWorkflowInput) -> None:
        await self.next.terminate_workflow(input)

    async def start_workflow_update(self, input: StartWorkflowUpdateInput) -> WorkflowUpdateHandle:
        return await self.next.start_workflow_update(input)

    async def heartbeat_async_activity(self, input: HeartbeatAsyncActivityInput) -> None:
        await self.next.heartbeat_async_activity(input)

    async def complete_async_activity(self, input: CompleteAsyncActivityInput) -> None:
        await self.next.complete_async_activity(input)

    async def fail_async_activity(self, input: FailAsyncActivityInput) -> None:
        await self.next.fail_async_activity(input)

    async def report_cancellation_async_activity(self, input: ReportCancellationAsyncActivityInput) -> None:
        await self.next.report_cancellation_async_activity(input)
