"""The inputs of the client's outbound calls (OutboundInterceptor's methods), as temporalio.client's:
each a dataclass with temporalio's name and fields. Kadence has no RPC: `rpc_metadata` is carried
but sent nowhere, `rpc_timeout` bounds only a query (its `timeout`), and fields for features
Kadence lacks (retry_policy, static summaries) stay None. `headers` travel in the command
and are recorded in the history where Temporal records them."""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from kadence.api.common.v1 import Payload
from kadence.client._types import AsyncActivityIDReference, TimeSkippingConfig, WorkflowUpdateStage
from kadence.common import (
    ActivityIDConflictPolicy,
    ActivityIDReusePolicy,
    NexusOperationIDConflictPolicy,
    NexusOperationIDReusePolicy,
    RetryPolicy,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from kadence.protocol.records import NexusCaller


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
    # The run's time skipping (temporalio's TimeSkipper stamps it in an interceptor), and where its
    # clock starts ahead of this host's (a time-skipping test environment's clock).
    time_skipping: TimeSkippingConfig | None = None
    clock_offset_ms: int = 0
    # Set when a workflow-run Nexus operation's handler starts the run: its close is reported to the caller.
    nexus_caller: NexusCaller | None = None


# The Nexus operation whose handler workflow a start begins (kadence.nexus sets it around
# WorkflowRunOperationContext.start_workflow): Client.start_workflow names it in its input.
NEXUS_BACKING_START: contextvars.ContextVar[NexusCaller | None] = contextvars.ContextVar("kadence_nexus_backing_start", default=None)


@dataclasses.dataclass
class CancelWorkflowInput:
    id: str
    run_id: str | None
    first_execution_run_id: str | None
    reason: str
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None
    request_id: str = ""  # Kadence's: the request's idempotency key ("" draws a uuid4)


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
    request_id: str = ""  # Kadence's: a signal sent again with its request id applies once ("" draws a uuid4)


@dataclasses.dataclass
class TerminateWorkflowInput:
    id: str
    run_id: str | None
    first_execution_run_id: str | None
    args: Sequence[Any]
    reason: str | None
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None
    request_id: str = ""  # Kadence's: the request's idempotency key ("" draws a uuid4)


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
class UpdateWithStartStartWorkflowInput:
    """The start of an update-with-start (WithStartWorkflowOperation's), as temporalio's."""

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
    static_summary: str | None
    static_details: str | None
    start_delay: timedelta | None
    headers: Mapping[str, Payload]
    ret_type: type | None
    time_skipping: TimeSkippingConfig | None = None  # as StartWorkflowInput's
    clock_offset_ms: int = 0


@dataclasses.dataclass
class UpdateWithStartUpdateWorkflowInput:
    """The update of an update-with-start, as temporalio's."""

    update_id: str | None
    update: str
    args: Sequence[Any]
    wait_for_stage: WorkflowUpdateStage
    headers: Mapping[str, Payload]
    ret_type: type | None


@dataclasses.dataclass
class StartWorkflowUpdateWithStartInput:
    """Input for OutboundInterceptor.start_update_with_start_workflow, as temporalio's. `_on_start`
    gets the run the request left running (started, or the running one), `_on_start_error` why
    none: what WithStartWorkflowOperation.workflow_handle() returns or raises."""

    start_workflow_input: UpdateWithStartStartWorkflowInput
    update_workflow_input: UpdateWithStartUpdateWorkflowInput
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None
    _on_start: Callable[[str], None]
    _on_start_error: Callable[[BaseException], None]


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


@dataclasses.dataclass
class StartActivityInput:
    """Input for OutboundInterceptor.start_activity: a standalone activity (as temporalio's)."""

    activity_type: str
    args: Sequence[Any]
    id: str
    task_queue: str
    result_type: type | None
    schedule_to_close_timeout: timedelta | None
    schedule_to_start_timeout: timedelta | None
    start_to_close_timeout: timedelta | None
    heartbeat_timeout: timedelta | None
    id_reuse_policy: ActivityIDReusePolicy
    id_conflict_policy: ActivityIDConflictPolicy
    retry_policy: RetryPolicy | None
    search_attributes: Mapping[str, Any] | None
    summary: str | None
    headers: Mapping[str, Payload]
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None
    request_id: str = ""  # Kadence's: the start's idempotency key ("" draws a uuid4)


@dataclasses.dataclass
class ListActivitiesInput:
    query: str
    page_size: int
    limit: int | None
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None


@dataclasses.dataclass
class CountActivitiesInput:
    query: str
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None


@dataclasses.dataclass
class StartNexusOperationInput:
    """Input for OutboundInterceptor.start_nexus_operation: a standalone Nexus operation (as temporalio's)."""

    operation: str
    arg: Any
    id: str
    endpoint: str
    service: str
    result_type: type | None
    schedule_to_close_timeout: timedelta | None
    schedule_to_start_timeout: timedelta | None
    start_to_close_timeout: timedelta | None
    id_reuse_policy: NexusOperationIDReusePolicy
    id_conflict_policy: NexusOperationIDConflictPolicy
    search_attributes: Mapping[str, Any] | None
    summary: str | None
    headers: Mapping[str, str]
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None
    request_id: str = ""  # Kadence's: the start's idempotency key ("" draws a uuid4)


@dataclasses.dataclass
class ListNexusOperationsInput:
    query: str | None
    page_size: int
    next_page_token: bytes | None
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None
    limit: int | None


@dataclasses.dataclass
class CountNexusOperationsInput:
    query: str | None
    rpc_metadata: Mapping[str, str | bytes]
    rpc_timeout: timedelta | None
