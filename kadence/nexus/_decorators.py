"""The operation decorators of temporalio.nexus: a workflow-run operation (its start method starts
the handler workflow whose close completes it) and a Temporal operation (its start method answers
at once or starts such a workflow), each an operation of its @service_handler class for nexusrpc."""

from __future__ import annotations

import typing
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

import nexusrpc
from nexusrpc.handler import (
    CancelOperationContext,
    OperationHandler,
    StartOperationContext,
    StartOperationResultAsync,
    StartOperationResultSync,
)

from kadence.nexus._operation_context import (
    TemporalNexusClient,
    TemporalOperationResult,
    TemporalStartOperationContext,
    WorkflowHandle,
    WorkflowRunOperationContext,
    cancel_backing_workflow,
)

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT")
ServiceT = TypeVar("ServiceT")

WorkflowRunStart = Callable[[ServiceT, WorkflowRunOperationContext, InputT], Awaitable[WorkflowHandle[OutputT]]]
TemporalOperationStartHandlerFunc = Callable[
    [ServiceT, TemporalStartOperationContext, TemporalNexusClient, InputT], Awaitable[TemporalOperationResult[OutputT]],
]

# Where nexusrpc finds a start method's operation handler factory (what its own decorators set).
_FACTORY_ATTRIBUTE = "__nexus_operation_factory__"


class _BackedByWorkflow(OperationHandler[Any, Any]):
    """An operation handler whose start runs `start`; its cancel asks the handler workflow to cancel."""

    def __init__(self, start: Callable[[StartOperationContext, Any], Awaitable[StartOperationResultSync[Any] | StartOperationResultAsync]]):
        self._start = start

    async def start(self, ctx: StartOperationContext, input: Any) -> StartOperationResultSync[Any] | StartOperationResultAsync:
        return await self._start(ctx, input)

    async def cancel(self, ctx: CancelOperationContext, token: str) -> None:
        await cancel_backing_workflow(token)


def _input_and_output(start: Callable[..., Any]) -> tuple[type[Any] | None, type[Any] | None]:
    """The operation's input type (the start method's last parameter's) and output type (the
    argument of what it returns: WorkflowHandle[Out], TemporalOperationResult[Out])."""
    try:
        hints = typing.get_type_hints(start)
    except (NameError, TypeError):
        return None, None
    returned = hints.pop("return", None)
    parameters = list(hints.values())
    output = typing.get_args(returned)[0] if typing.get_args(returned) else None
    return (parameters[-1] if parameters else None), output


def _register(start: Callable[..., Any], name: str | None, factory: Callable[[Any], OperationHandler[Any, Any]]) -> None:
    input_type, output_type = _input_and_output(start)
    operation: nexusrpc.Operation[Any, Any] = nexusrpc.Operation(
        name=name or start.__name__, input_type=input_type, output_type=output_type,
    )
    operation.method_name = start.__name__
    nexusrpc.set_operation(factory, operation)
    setattr(start, _FACTORY_ATTRIBUTE, factory)


@overload
def workflow_run_operation(start: WorkflowRunStart[ServiceT, InputT, OutputT]) -> WorkflowRunStart[ServiceT, InputT, OutputT]: ...


@overload
def workflow_run_operation(
    *, name: str | None = None,
) -> Callable[[WorkflowRunStart[ServiceT, InputT, OutputT]], WorkflowRunStart[ServiceT, InputT, OutputT]]: ...


def workflow_run_operation(start: Any = None, *, name: str | None = None) -> Any:
    """Mark a service handler's method as a workflow-run operation's start: it starts a workflow
    (`ctx.start_workflow`) and returns its handle; the workflow's close completes the operation."""

    def decorator(start: WorkflowRunStart[Any, Any, Any]) -> WorkflowRunStart[Any, Any, Any]:
        def factory(service: Any) -> OperationHandler[Any, Any]:
            async def run(ctx: StartOperationContext, input: Any) -> StartOperationResultAsync:
                handle = await start(service, WorkflowRunOperationContext._from_start_operation_context(ctx), input)
                return StartOperationResultAsync(handle.to_token())

            return _BackedByWorkflow(run)

        _register(start, name, factory)
        return start

    return decorator if start is None else decorator(start)


@overload
def temporal_operation(
    start: TemporalOperationStartHandlerFunc[ServiceT, InputT, OutputT],
) -> TemporalOperationStartHandlerFunc[ServiceT, InputT, OutputT]: ...


@overload
def temporal_operation(
    *, name: str | None = None,
) -> Callable[
    [TemporalOperationStartHandlerFunc[ServiceT, InputT, OutputT]], TemporalOperationStartHandlerFunc[ServiceT, InputT, OutputT],
]: ...


def temporal_operation(start: Any = None, *, name: str | None = None) -> Any:
    """Mark a service handler's method as a Temporal operation's start: it answers with
    TemporalOperationResult.sync(value), or the result of `client.start_workflow(...)`, whose
    workflow's close completes the operation."""

    def decorator(start: TemporalOperationStartHandlerFunc[Any, Any, Any]) -> TemporalOperationStartHandlerFunc[Any, Any, Any]:
        def factory(service: Any) -> OperationHandler[Any, Any]:
            async def run(ctx: StartOperationContext, input: Any) -> StartOperationResultSync[Any] | StartOperationResultAsync:
                context = TemporalStartOperationContext._from_start_operation_context(ctx)
                result = await start(service, context, TemporalNexusClient(ctx), input)
                if result.token is not None:
                    return StartOperationResultAsync(result.token)
                return StartOperationResultSync(result.value)

            return _BackedByWorkflow(run)

        _register(start, name, factory)
        return start

    return decorator if start is None else decorator(start)
