"""Calling Nexus operations from a workflow (as temporalio.workflow's): a client of a service
through an endpoint, which schedules operations and hands back their handles
(docs/decisions/0008-nexus.md)."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Generic, TypeVar, overload

import nexusrpc

from kadence.workflow._runtime import NexusOperationCancellationType, NexusOperationHandle, _Runtime

OutputT = TypeVar("OutputT")
InputT = TypeVar("InputT")
ServiceT = TypeVar("ServiceT")


class NexusClient(abc.ABC, Generic[ServiceT]):
    """A client of one Nexus service through one endpoint, for workflow code."""

    @overload
    async def start_operation(
        self, operation: nexusrpc.Operation[InputT, OutputT], input: InputT, *, output_type: type[OutputT] | None = None,
        schedule_to_close_timeout: timedelta | None = None,
        cancellation_type: NexusOperationCancellationType = NexusOperationCancellationType.WAIT_COMPLETED,
        headers: Mapping[str, str] | None = None, summary: str | None = None,
    ) -> NexusOperationHandle[OutputT]: ...

    @overload
    async def start_operation(
        self, operation: str | Any, input: Any, *, output_type: type[OutputT] | None = None,
        schedule_to_close_timeout: timedelta | None = None,
        cancellation_type: NexusOperationCancellationType = NexusOperationCancellationType.WAIT_COMPLETED,
        headers: Mapping[str, str] | None = None, summary: str | None = None,
    ) -> NexusOperationHandle[Any]: ...

    @abc.abstractmethod
    async def start_operation(
        self, operation: Any, input: Any, *, output_type: type[Any] | None = None,
        schedule_to_close_timeout: timedelta | None = None,
        cancellation_type: NexusOperationCancellationType = NexusOperationCancellationType.WAIT_COMPLETED,
        headers: Mapping[str, str] | None = None, summary: str | None = None,
    ) -> NexusOperationHandle[Any]:
        """Schedule the operation and wait until it started: a sync operation's handle holds its
        result already, an asynchronous one's its token."""

    @overload
    async def execute_operation(
        self, operation: nexusrpc.Operation[InputT, OutputT], input: InputT, *, output_type: type[OutputT] | None = None,
        schedule_to_close_timeout: timedelta | None = None,
        cancellation_type: NexusOperationCancellationType = NexusOperationCancellationType.WAIT_COMPLETED,
        headers: Mapping[str, str] | None = None, summary: str | None = None,
    ) -> OutputT: ...

    @overload
    async def execute_operation(
        self, operation: str | Any, input: Any, *, output_type: type[OutputT] | None = None,
        schedule_to_close_timeout: timedelta | None = None,
        cancellation_type: NexusOperationCancellationType = NexusOperationCancellationType.WAIT_COMPLETED,
        headers: Mapping[str, str] | None = None, summary: str | None = None,
    ) -> Any: ...

    async def execute_operation(
        self, operation: Any, input: Any, *, output_type: type[Any] | None = None,
        schedule_to_close_timeout: timedelta | None = None,
        cancellation_type: NexusOperationCancellationType = NexusOperationCancellationType.WAIT_COMPLETED,
        headers: Mapping[str, str] | None = None, summary: str | None = None,
    ) -> Any:
        """Start the operation and wait for its result."""
        handle = await self.start_operation(
            operation, input, output_type=output_type, schedule_to_close_timeout=schedule_to_close_timeout,
            cancellation_type=cancellation_type, headers=headers, summary=summary,
        )
        return await handle


class _NexusClient(NexusClient[ServiceT]):
    def __init__(self, *, service: type[ServiceT] | str, endpoint: str) -> None:
        self.service_name = service_name(service)
        self.endpoint = endpoint

    async def start_operation(
        self, operation: Any, input: Any, *, output_type: type[Any] | None = None,
        schedule_to_close_timeout: timedelta | None = None,
        cancellation_type: NexusOperationCancellationType = NexusOperationCancellationType.WAIT_COMPLETED,
        headers: Mapping[str, str] | None = None, summary: str | None = None,
    ) -> NexusOperationHandle[Any]:
        name, declared_output = operation_name_and_output(operation)
        return await _Runtime.current().start_nexus_operation(
            self.endpoint, self.service_name, name, input, output_type=output_type or declared_output,
            schedule_to_close_timeout=schedule_to_close_timeout, cancellation_type=cancellation_type, headers=dict(headers or {}),
        )


def service_name(service: type[Any] | str) -> str:
    """A service's name: given, or of its @nexusrpc.service contract or @service_handler class."""
    if isinstance(service, str):
        return service
    definition = nexusrpc.get_service_definition(service)
    if definition is None:
        raise ValueError(f"service must be a name, or a class decorated with @nexusrpc.service or "
                         f"@nexusrpc.handler.service_handler; {service!r} is neither")
    return definition.name


def operation_name_and_output(operation: Any) -> tuple[str, type[Any] | None]:
    """An operation's name and declared output type: given by name, as its contract's attribute
    (MyService.my_operation), or as a handler's start method."""
    if isinstance(operation, str):
        return operation, None
    found = operation if isinstance(operation, nexusrpc.Operation) else nexusrpc.get_operation(operation)
    if found is None:
        raise ValueError(f"operation must be a name, a contract's nexusrpc.Operation or a handler's start method; got {operation!r}")
    return found.name, found.output_type


@overload
def create_nexus_client(*, service: type[ServiceT], endpoint: str) -> NexusClient[ServiceT]: ...


@overload
def create_nexus_client(*, service: str, endpoint: str) -> NexusClient[Any]: ...


def create_nexus_client(*, service: type[ServiceT] | str, endpoint: str) -> NexusClient[Any]:
    """A client of `service` (its contract class, its handler class, or its name) through the
    endpoint `endpoint` (`kadence nexus endpoint create` maps it to a task queue)."""
    return _NexusClient(service=service, endpoint=endpoint)
