"""The client (as temporalio.client): `Client` starts workflows and reaches them through handles;
`Interceptor` and `OutboundInterceptor` wrap its calls."""

from kadence.client._activities import (
    ActivityExecution,
    ActivityExecutionAsyncIterator,
    ActivityExecutionCount,
    ActivityExecutionCountAggregationGroup,
    ActivityExecutionStatus,
    ActivityHandle,
)
from kadence.client._client import Client
from kadence.client._handles import AsyncActivityHandle, WithStartWorkflowOperation, WorkflowHandle, WorkflowUpdateHandle
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
    UpdateWithStartUpdateWorkflowInput,
)
from kadence.client._interceptor import Interceptor, OutboundInterceptor
from kadence.client._listing import WorkflowExecutionAsyncIterator
from kadence.client._nexus import (
    NexusClient,
    NexusOperationExecution,
    NexusOperationExecutionAsyncIterator,
    NexusOperationExecutionCount,
    NexusOperationExecutionCountAggregationGroup,
    NexusOperationHandle,
)
from kadence.client._schedule_types import (
    Schedule,
    ScheduleActionExecutionStartWorkflow,
    ScheduleActionResult,
    ScheduleActionStartWorkflow,
    ScheduleBackfill,
    ScheduleCalendarSpec,
    ScheduleDescription,
    ScheduleInfo,
    ScheduleIntervalSpec,
    ScheduleListActionStartWorkflow,
    ScheduleListDescription,
    ScheduleListInfo,
    ScheduleListSchedule,
    ScheduleListState,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleRange,
    ScheduleSpec,
    ScheduleState,
    ScheduleUpdate,
    ScheduleUpdateInput,
)
from kadence.client._schedules import ScheduleAlreadyRunningError, ScheduleHandle, ScheduleNotFoundError
from kadence.client._types import AsyncActivityIDReference, ResetReapplyExcludeType, ResetType, WorkflowExecutionCount, WorkflowUpdateStage
from kadence.exceptions import (
    ActivityFailureError,
    AsyncActivityCancelledError,
    NexusOperationFailureError,
    WorkflowFailureError,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from kadence.visibility import PendingWorkflowTask, WorkflowExecution, WorkflowExecutionStatus, WorkflowHistory

__all__ = [
    "Client", "WorkflowHandle", "WorkflowUpdateHandle", "WithStartWorkflowOperation", "AsyncActivityHandle", "AsyncActivityIDReference",
    "WorkflowUpdateStage", "WorkflowExecution", "WorkflowExecutionStatus", "PendingWorkflowTask",
    "WorkflowExecutionCount", "WorkflowHistory", "WorkflowExecutionAsyncIterator",
    "Interceptor", "OutboundInterceptor", "StartWorkflowInput", "CancelWorkflowInput", "DescribeWorkflowInput",
    "ListWorkflowsInput", "CountWorkflowsInput", "QueryWorkflowInput", "SignalWorkflowInput", "TerminateWorkflowInput",
    "StartWorkflowUpdateInput", "HeartbeatAsyncActivityInput", "CompleteAsyncActivityInput", "FailAsyncActivityInput",
    "ReportCancellationAsyncActivityInput", "StartWorkflowUpdateWithStartInput", "UpdateWithStartStartWorkflowInput",
    "UpdateWithStartUpdateWorkflowInput", "StartActivityInput", "ListActivitiesInput", "CountActivitiesInput",
    "ActivityHandle", "ActivityExecution", "ActivityExecutionAsyncIterator", "ActivityExecutionCount",
    "ActivityExecutionCountAggregationGroup", "ActivityExecutionStatus", "ActivityFailureError",
    "NexusClient", "NexusOperationHandle", "NexusOperationExecution", "NexusOperationExecutionAsyncIterator",
    "NexusOperationExecutionCount", "NexusOperationExecutionCountAggregationGroup", "StartNexusOperationInput",
    "ListNexusOperationsInput", "CountNexusOperationsInput", "NexusOperationFailureError",
    "Schedule", "ScheduleActionExecutionStartWorkflow", "ScheduleActionResult", "ScheduleActionStartWorkflow", "ScheduleBackfill",
    "ScheduleCalendarSpec", "ScheduleDescription", "ScheduleInfo", "ScheduleIntervalSpec", "ScheduleListActionStartWorkflow",
    "ScheduleListDescription", "ScheduleListInfo", "ScheduleListSchedule", "ScheduleListState", "ScheduleOverlapPolicy",
    "SchedulePolicy", "ScheduleRange", "ScheduleSpec", "ScheduleState", "ScheduleUpdate", "ScheduleUpdateInput", "ScheduleHandle",
    "ScheduleAlreadyRunningError", "ScheduleNotFoundError", "ResetType", "ResetReapplyExcludeType",
    # temporalio.client's names for these errors of kadence.exceptions
    "AsyncActivityCancelledError", "WorkflowFailureError", "WorkflowQueryFailedError", "WorkflowUpdateFailedError",
]
