"""Nexus operation handlers, as temporalio.nexus: the operation decorators that start workflows,
the contexts their start methods take, and the info and client of the worker running them. A
worker runs them with `Worker(nexus_service_handlers=[...])`; contracts and sync operations are
nexusrpc's (`@nexusrpc.service`, `@nexusrpc.handler.service_handler`, `@nexusrpc.handler.sync_operation`).
See docs/decisions/0008-nexus.md."""

from kadence.nexus._decorators import TemporalOperationStartHandlerFunc, temporal_operation, workflow_run_operation
from kadence.nexus._operation_context import (
    Info,
    LoggerAdapter,
    TemporalCancelOperationContext,
    TemporalNexusClient,
    TemporalOperationResult,
    TemporalStartOperationContext,
    WorkflowHandle,
    WorkflowRunOperationContext,
    client,
    in_operation,
    info,
    is_worker_shutdown,
    logger,
    wait_for_worker_shutdown,
)

__all__ = [
    "workflow_run_operation", "temporal_operation", "TemporalOperationStartHandlerFunc", "Info", "LoggerAdapter",
    "TemporalCancelOperationContext", "TemporalNexusClient", "TemporalOperationResult", "TemporalStartOperationContext",
    "WorkflowHandle", "WorkflowRunOperationContext", "client", "in_operation", "info", "is_worker_shutdown", "logger",
    "wait_for_worker_shutdown",
]
