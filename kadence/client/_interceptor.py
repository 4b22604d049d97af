"""Client interceptors, as temporalio.client's: `Client(..., interceptors=[...])` wraps every
outbound call in the interceptors' `OutboundInterceptor`s, first interceptor outermost, so context
propagation, auth headers and tracing written for temporalio run after an import swap. Each call's
input is one of kadence.client._inputs' dataclasses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from kadence.client._activities import ActivityExecution, ActivityExecutionCount, ActivityHandle
from kadence.client._handles import WorkflowHandle, WorkflowUpdateHandle
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
)
from kadence.client._nexus import NexusOperationExecution, NexusOperationExecutionCount, NexusOperationHandle
from kadence.client._types import WorkflowExecutionCount
from kadence.visibility import WorkflowExecution


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

    async def start_activity(self, input: StartActivityInput) -> ActivityHandle[Any]:
        return await self.next.start_activity(input)

    def list_activities(self, input: ListActivitiesInput) -> AsyncIterator[ActivityExecution]:
        return self.next.list_activities(input)

    async def count_activities(self, input: CountActivitiesInput) -> ActivityExecutionCount:
        return await self.next.count_activities(input)

    async def start_nexus_operation(self, input: StartNexusOperationInput) -> NexusOperationHandle[Any]:
        return await self.next.start_nexus_operation(input)

    def list_nexus_operations(self, input: ListNexusOperationsInput) -> AsyncIterator[NexusOperationExecution]:
        return self.next.list_nexus_operations(input)

    async def count_nexus_operations(self, input: CountNexusOperationsInput) -> NexusOperationExecutionCount:
        return await self.next.count_nexus_operations(input)

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

    async def start_update_with_start_workflow(self, input: StartWorkflowUpdateWithStartInput) -> WorkflowUpdateHandle:
        return await self.next.start_update_with_start_workflow(input)

    async def heartbeat_async_activity(self, input: HeartbeatAsyncActivityInput) -> None:
        await self.next.heartbeat_async_activity(input)

    async def complete_async_activity(self, input: CompleteAsyncActivityInput) -> None:
        await self.next.complete_async_activity(input)

    async def fail_async_activity(self, input: FailAsyncActivityInput) -> None:
        await self.next.fail_async_activity(input)

    async def report_cancellation_async_activity(self, input: ReportCancellationAsyncActivityInput) -> None:
        await self.next.report_cancellation_async_activity(input)
