"""The worker (as temporalio.worker): `Worker` polls a task queue's workflow and activity tasks;
`SharedStateManager` carries heartbeats and cancellation to sync activities run in other processes;
`Replayer` runs recorded histories against the workflow code, offline."""

from kadence.worker._interceptor import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ContinueAsNewInput,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    HandleQueryInput,
    HandleSignalInput,
    HandleUpdateInput,
    Interceptor,
    SignalChildWorkflowInput,
    SignalExternalWorkflowInput,
    StartActivityInput,
    StartChildWorkflowInput,
    StartLocalActivityInput,
    StartNexusOperationInput,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)
from kadence.worker._polling import PollerBehavior, PollerBehaviorAutoscaling, PollerBehaviorSimpleMaximum
from kadence.worker._replayer import Replayer, WorkflowReplayResult, WorkflowReplayResults
from kadence.worker._runner import UnsandboxedWorkflowRunner, WorkflowRunner
from kadence.worker._shared_state import SharedHeartbeatSender, SharedStateManager
from kadence.worker._worker import Worker

__all__ = [
    "SharedHeartbeatSender", "SharedStateManager", "Worker", "Replayer", "WorkflowReplayResult", "WorkflowReplayResults",
    "Interceptor", "ActivityInboundInterceptor", "ActivityOutboundInterceptor", "ExecuteActivityInput",
    "WorkflowInterceptorClassInput", "WorkflowInboundInterceptor", "WorkflowOutboundInterceptor", "ExecuteWorkflowInput",
    "HandleSignalInput", "HandleQueryInput", "HandleUpdateInput", "ContinueAsNewInput", "SignalChildWorkflowInput",
    "SignalExternalWorkflowInput", "StartActivityInput", "StartChildWorkflowInput", "StartLocalActivityInput", "StartNexusOperationInput",
    "UnsandboxedWorkflowRunner", "WorkflowRunner", "PollerBehavior", "PollerBehaviorAutoscaling", "PollerBehaviorSimpleMaximum",
]
