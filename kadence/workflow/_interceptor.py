"""Workflow interceptors, as temporalio.worker's: a worker's interceptors
(kadence.worker.Interceptor.workflow_interceptor_class) wrap each workflow run, first
interceptor outermost. They run as workflow code, on the run's deterministic loop.

Inputs have temporalio's names and fields; those for features Kadence lacks (versioning, summaries,
priorities, eager execution) are carried and ignored. `headers` are what the caller's interceptors
set: they travel in the records and are recorded in the history where Temporal records them."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, NoReturn

from kadence.api.common.v1 import Payload
from kadence.common import ActivityCancellationType
from kadence.workflow._runtime import ChildWorkflowHandle, NexusOperationHandle, WorkflowInfo


@dataclasses.dataclass
class ContinueAsNewInput:
    workflow: str | None
    args: Sequence[Any]
    task_queue: str | None
    run_timeout: timedelta | None
    task_timeout: timedelta | None
    backoff_start_interval: timedelta | None
    retry_policy: Any
    memo: Mapping[str, Any] | None
    search_attributes: Mapping[str, Any] | None
    headers: Mapping[str, Payload]
    versioning_intent: Any
    arg_types: list[type] | None


@dataclasses.dataclass
class ExecuteWorkflowInput:
    type: type
    run_fn: Callable[..., Awaitable[Any]]  # unbound: called with the workflow object first
    args: Sequence[Any]
    headers: Mapping[str, Payload]


@dataclasses.dataclass
class HandleSignalInput:
    signal: str
    args: Sequence[Any]
    headers: Mapping[str, Payload]


@dataclasses.dataclass
class HandleQueryInput:
    id: str
    query: str
    args: Sequence[Any]
    headers: Mapping[str, Payload]


@dataclasses.dataclass
class HandleUpdateInput:
    id: str
    update: str
    args: Sequence[Any]
    headers: Mapping[str, Payload]


@dataclasses.dataclass
class SignalChildWorkflowInput:
    signal: str
    args: Sequence[Any]
    child_workflow_id: str
    headers: Mapping[str, Payload]


@dataclasses.dataclass
class SignalExternalWorkflowInput:
    signal: str
    args: Sequence[Any]
    namespace: str
    workflow_id: str
    workflow_run_id: str | None
    headers: Mapping[str, Payload]


@dataclasses.dataclass
class StartActivityInput:
    activity: str
    args: Sequence[Any]
    activity_id: str | None
    task_queue: str | None
    schedule_to_close_timeout: timedelta | None
    schedule_to_start_timeout: timedelta | None
    start_to_close_timeout: timedelta | None
    heartbeat_timeout: timedelta | None
    retry_policy: Any
    cancellation_type: ActivityCancellationType
    headers: Mapping[str, Payload]
    disable_eager_execution: bool
    versioning_intent: Any
    summary: str | None
    arg_types: list[type] | None
    ret_type: type | None


@dataclasses.dataclass
class StartChildWorkflowInput:
    workflow: str
    args: Sequence[Any]
    id: str
    task_queue: str | None
    cancellation_type: Any
    parent_close_policy: Any
    execution_timeout: timedelta | None
    run_timeout: timedelta | None
    task_timeout: timedelta | None
    id_reuse_policy: Any
    retry_policy: Any
    cron_schedule: str
    memo: Mapping[str, Any] | None
    search_attributes: Mapping[str, Any] | None
    headers: Mapping[str, Payload]
    versioning_intent: Any
    static_summary: str | None
    static_details: str | None
    arg_types: list[type] | None
    ret_type: type | None


@dataclasses.dataclass
class StartNexusOperationInput:
    """Input for WorkflowOutboundInterceptor.start_nexus_operation (temporalio's, less its summary)."""

    endpoint: str
    service: str
    operation: str
    input: Any
    schedule_to_close_timeout: timedelta | None
    cancellation_type: Any  # workflow.NexusOperationCancellationType
    headers: Mapping[str, str] | None
    output_type: type | None = None


@dataclasses.dataclass
class StartLocalActivityInput:
    activity: str
    args: Sequence[Any]
    activity_id: str | None
    schedule_to_close_timeout: timedelta | None
    schedule_to_start_timeout: timedelta | None
    start_to_close_timeout: timedelta | None
    retry_policy: Any
    local_retry_threshold: timedelta | None
    cancellation_type: ActivityCancellationType
    headers: Mapping[str, Payload]
    summary: str | None
    arg_types: list[type] | None
    ret_type: type | None


class WorkflowInboundInterceptor:
    """What reaches a workflow run: its execution, signals, queries and updates. Runs as workflow
    code (deterministic, replayed): it must not do I/O."""

    def __init__(self, next: WorkflowInboundInterceptor) -> None:
        self.next = next

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        """Called once per run; wrap `outbound` here to intercept what the workflow sends."""
        self.next.init(outbound)

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        return await self.next.execute_workflow(input)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        await self.next.handle_signal(input)

    async def handle_query(self, input: HandleQueryInput) -> Any:
        return await self.next.handle_query(input)

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        self.next.handle_update_validator(input)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        return await self.next.handle_update_handler(input)


class WorkflowOutboundInterceptor:
    """What a workflow run sends: activities, children, signals, continue-as-new."""

    def __init__(self, next: WorkflowOutboundInterceptor) -> None:
        self.next = next

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        self.next.continue_as_new(input)

    def info(self) -> WorkflowInfo:
        return self.next.info()

    async def signal_child_workflow(self, input: SignalChildWorkflowInput) -> None:
        await self.next.signal_child_workflow(input)

    async def signal_external_workflow(self, input: SignalExternalWorkflowInput) -> None:
        await self.next.signal_external_workflow(input)

    def start_activity(self, input: StartActivityInput) -> asyncio.Task[Any]:
        return self.next.start_activity(input)

    async def start_child_workflow(self, input: StartChildWorkflowInput) -> ChildWorkflowHandle:
        return await self.next.start_child_workflow(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> asyncio.Task[Any]:
        return self.next.start_local_activity(input)

    async def start_nexus_operation(self, input: StartNexusOperationInput) -> NexusOperationHandle[Any]:
        return await self.next.start_nexus_operation(input)
