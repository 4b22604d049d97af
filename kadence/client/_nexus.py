"""Standalone Nexus operations through the client (as temporalio.client's): an operation a client
starts through an endpoint, outside any workflow (`client.create_nexus_client(service=...,
endpoint=...).start_operation(...)`), its handle, and what list and count find. Each is a run of
the history service under the key `kadence-nexus:<operation id>` whose only work is the operation
(docs/decisions/0008-nexus.md); its handle and listing are those of any standalone run
(kadence/client/_standalone.py). Its handler is any worker's, as for a workflow's operations."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar, overload

import nexusrpc

from kadence.client._handles import HandleClient
from kadence.client._inputs import StartNexusOperationInput
from kadence.client._standalone import ExecutionAsyncIterator, StandaloneHandle
from kadence.common import NexusOperationExecutionStatus, NexusOperationIDConflictPolicy, NexusOperationIDReusePolicy
from kadence.exceptions import NexusOperationFailureError
from kadence.protocol.names import NEXUS_KEY_PREFIX
from kadence.protocol.records import NexusOperationScheduled
from kadence.types import ReturnType
from kadence.visibility import WorkflowExecution, nexus_operations_scheduled
from kadence.workflow._nexus import operation_name_and_output, service_name

InputT = TypeVar("InputT")
OutputT = TypeVar("OutputT")
ServiceT = TypeVar("ServiceT")


def nexus_operation_key(operation_id: str) -> str:
    """The key a standalone Nexus operation's commands and history go under."""
    return f"{NEXUS_KEY_PREFIX}{operation_id}"


@dataclasses.dataclass(frozen=True)
class NexusOperationExecution:
    """A standalone Nexus operation as the read model knows it (as temporalio.client's, without
    the raw protobuf info): its row, and its run's NexusOperationScheduled for the service.
    `state_transition_count` is the run's history length."""

    operation_id: str
    run_id: str
    endpoint: str
    service: str
    operation: str
    schedule_time: datetime | None
    close_time: datetime | None
    status: NexusOperationExecutionStatus
    search_attributes: dict[str, Any]
    state_transition_count: int
    execution_duration: timedelta | None

    @classmethod
    def of(cls, run: WorkflowExecution, scheduled: NexusOperationScheduled) -> NexusOperationExecution:
        return cls(
            operation_id=run.id.removeprefix(NEXUS_KEY_PREFIX), run_id=run.run_id, endpoint=scheduled["endpoint"],
            service=scheduled["service"], operation=scheduled["operation"], schedule_time=run.start_time, close_time=run.close_time,
            status=NexusOperationExecutionStatus[run.status.name], search_attributes=run.search_attributes,
            state_transition_count=run.history_length,
            execution_duration=None if run.close_time is None else run.close_time - run.start_time,
        )


@dataclasses.dataclass(frozen=True)
class NexusOperationExecutionCountAggregationGroup:
    count: int
    group_values: Sequence[Any]


@dataclasses.dataclass(frozen=True)
class NexusOperationExecutionCount:
    """How many standalone Nexus operations a filter matches; `groups` is empty (Kadence's filters have no GROUP BY)."""

    count: int
    groups: Sequence[NexusOperationExecutionCountAggregationGroup] = ()


class NexusOperationExecutionAsyncIterator(ExecutionAsyncIterator[NexusOperationExecution]):
    """What `Client.list_nexus_operations` returns: the matching standalone Nexus operations, page by page."""


class NexusOperationHandle(StandaloneHandle[ReturnType]):
    """A standalone Nexus operation (as temporalio.client.NexusOperationHandle): `result()` waits
    for it, and raises NexusOperationFailureError with the cause when it did not complete."""

    failure_error = NexusOperationFailureError

    def __init__(
        self, client: HandleClient, operation_id: str, *, run_id: str | None = None, result_type: type | None = None,
        endpoint: str = "", service: str = "", operation: str = "",
    ) -> None:
        super().__init__(client, nexus_operation_key(operation_id), run_id=run_id, result_type=result_type)
        self._operation_id = operation_id
        self._endpoint = endpoint
        self._service = service
        self._operation = operation

    @property
    def operation_id(self) -> str:
        return self._operation_id

    @property
    def endpoint(self) -> str:
        return self._endpoint

    @property
    def service(self) -> str:
        return self._service

    async def describe(self) -> NexusOperationExecution:
        """The operation as the read model knows it (Kadence's is the list's NexusOperationExecution)."""
        run = await self._run.describe()
        scheduled = await nexus_operations_scheduled((await self._run.client._read_model()).pool, [run])
        return NexusOperationExecution.of(run, scheduled[run.id, run.run_id])


class _Outbound(Protocol):
    async def start_nexus_operation(self, input: StartNexusOperationInput) -> NexusOperationHandle[Any]: ...


class _Client(Protocol):
    """The client, as a NexusClient uses it: its outbound interceptor chain."""

    @property
    def _impl(self) -> _Outbound: ...


class NexusClient(Generic[ServiceT]):
    """A client of one Nexus service through one endpoint, for code outside workflows (as
    temporalio.client.NexusClient): each operation it starts is a standalone Nexus operation."""

    def __init__(self, client: _Client, service: type[ServiceT] | str, endpoint: str) -> None:
        self._client = client
        self._service = service_name(service)
        self._endpoint = endpoint

    @overload
    async def start_operation(
        self, operation: nexusrpc.Operation[InputT, OutputT], arg: InputT, *, id: str,
        id_reuse_policy: NexusOperationIDReusePolicy = ..., id_conflict_policy: NexusOperationIDConflictPolicy = ...,
        result_type: type | None = None, schedule_to_close_timeout: timedelta | None = None,
        schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
        search_attributes: Mapping[str, Any] | None = None, summary: str | None = None, headers: Mapping[str, str] | None = None,
        request_id: str = "",
    ) -> NexusOperationHandle[OutputT]: ...

    @overload
    async def start_operation(
        self, operation: str | Any, arg: Any, *, id: str,
        id_reuse_policy: NexusOperationIDReusePolicy = ..., id_conflict_policy: NexusOperationIDConflictPolicy = ...,
        result_type: type | None = None, schedule_to_close_timeout: timedelta | None = None,
        schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
        search_attributes: Mapping[str, Any] | None = None, summary: str | None = None, headers: Mapping[str, str] | None = None,
        request_id: str = "",
    ) -> NexusOperationHandle[Any]: ...

    async def start_operation(
        self, operation: Any, arg: Any, *, id: str,
        id_reuse_policy: NexusOperationIDReusePolicy = NexusOperationIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: NexusOperationIDConflictPolicy = NexusOperationIDConflictPolicy.FAIL,
        result_type: type | None = None, schedule_to_close_timeout: timedelta | None = None,
        schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
        search_attributes: Mapping[str, Any] | None = None, summary: str | None = None, headers: Mapping[str, str] | None = None,
        request_id: str = "",
    ) -> NexusOperationHandle[Any]:
        """Start the operation (given by name, as its contract's attribute `MyService.my_op`, or as a
        handler's start method) with `arg`, under the operation id `id` (its own space: a workflow
        or an activity may have the same id), and hand back its handle. Kadence bounds an operation
        by its schedule-to-close timeout only: the other two are refused (the handler's workflow
        takes its own timeouts)."""
        if schedule_to_start_timeout is not None or start_to_close_timeout is not None:
            raise ValueError("Kadence's Nexus operations take a schedule_to_close_timeout only: bound the operation with it "
                             "(and a workflow-run operation's handler workflow with its own execution_timeout)")
        name, declared_output = operation_name_and_output(operation)
        return await self._client._impl.start_nexus_operation(StartNexusOperationInput(
            operation=name, arg=arg, id=id, endpoint=self._endpoint, service=self._service, result_type=result_type or declared_output,
            schedule_to_close_timeout=schedule_to_close_timeout, schedule_to_start_timeout=None, start_to_close_timeout=None,
            id_reuse_policy=id_reuse_policy, id_conflict_policy=id_conflict_policy, search_attributes=search_attributes,
            summary=summary, headers=dict(headers or {}), rpc_metadata={}, rpc_timeout=None, request_id=request_id,
        ))

    @overload
    async def execute_operation(
        self, operation: nexusrpc.Operation[InputT, OutputT], arg: InputT, *, id: str, **options: Any,
    ) -> OutputT: ...

    @overload
    async def execute_operation(self, operation: str | Any, arg: Any, *, id: str, **options: Any) -> Any: ...

    async def execute_operation(self, operation: Any, arg: Any, *, id: str, **options: Any) -> Any:
        """`start_operation` (with any of its options), then its result: raises
        NexusOperationFailureError when the operation did not complete."""
        return await (await self.start_operation(operation, arg, id=id, **options)).result()
