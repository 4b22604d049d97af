"""Worker interceptors, as temporalio.worker's: `Worker(..., interceptors=[...])` (and the client's
interceptors that are also worker interceptors) wrap each activity attempt and each workflow run,
first interceptor outermost, so code written for temporalio's interceptors runs after an import swap.
The workflow interceptors and their inputs are kadence.workflow's (workflow code runs them); this
module gives them the names kadence.worker exports.

Inputs have temporalio's names and fields; those for features Kadence lacks are carried and ignored.
`headers` are what the caller's interceptors set."""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from kadence import activity
from kadence.api.common.v1 import Payload
from kadence.workflow._interceptor import (
    ContinueAsNewInput,
    ExecuteWorkflowInput,
    HandleQueryInput,
    HandleSignalInput,
    HandleUpdateInput,
    SignalChildWorkflowInput,
    SignalExternalWorkflowInput,
    StartActivityInput,
    StartChildWorkflowInput,
    StartLocalActivityInput,
    StartNexusOperationInput,
    WorkflowInboundInterceptor,
    WorkflowOutboundInterceptor,
)

__all__ = [
    "Interceptor", "WorkflowInterceptorClassInput", "ActivityInboundInterceptor", "ActivityOutboundInterceptor",
    "ExecuteActivityInput", "WorkflowInboundInterceptor", "WorkflowOutboundInterceptor", "ExecuteWorkflowInput",
    "HandleSignalInput", "HandleQueryInput", "HandleUpdateInput", "ContinueAsNewInput", "SignalChildWorkflowInput",
    "SignalExternalWorkflowInput", "StartActivityInput", "StartChildWorkflowInput", "StartLocalActivityInput", "StartNexusOperationInput",
]


@dataclasses.dataclass(frozen=True)
class WorkflowInterceptorClassInput:
    """Input for Interceptor.workflow_interceptor_class (Kadence has no sandbox: nothing extern)."""

    unsafe_extern_functions: MutableMapping[str, Callable[..., Any]]


class Interceptor:
    """Extend this to intercept a worker's activities and workflows."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """The interceptor each activity attempt runs through instead of `next`."""
        return next

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor] | None:
        """A class whose instance, made with the next interceptor, each workflow run goes through; None for none."""
        return None


# ---- activities


@dataclasses.dataclass
class ExecuteActivityInput:
    fn: Callable[..., Any]
    args: Sequence[Any]
    executor: concurrent.futures.Executor | None
    headers: Mapping[str, Payload]


class ActivityInboundInterceptor:
    def __init__(self, next: ActivityInboundInterceptor) -> None:
        self.next = next

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        """Called once per attempt before execute_activity; wrap `outbound` here to intercept it."""
        self.next.init(outbound)

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        return await self.next.execute_activity(input)


class ActivityOutboundInterceptor:
    def __init__(self, next: ActivityOutboundInterceptor) -> None:
        self.next = next

    def info(self) -> activity.Info:
        return self.next.info()

    def heartbeat(self, *details: Any) -> None:
        self.next.heartbeat(*details)
