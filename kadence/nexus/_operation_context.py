"""What a Nexus operation handler sees while it runs in a worker (as temporalio.nexus's): its
info, the worker's client, and the contexts its start methods take. A workflow-run operation's
handler workflow is started with the operation's request id, so however often an attempt runs one
workflow starts, and names its caller, so its close is reported there (docs/decisions/0008-nexus.md)."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar

from nexusrpc.handler import CancelOperationContext, StartOperationContext

from kadence.client import Client
from kadence.client._inputs import NEXUS_BACKING_START
from kadence.common import UNSET, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from kadence.protocol.nexus_token import token_workflow_id, workflow_run_token
from kadence.protocol.records import NexusCaller

OutputT = TypeVar("OutputT")
ContextT = TypeVar("ContextT", bound=StartOperationContext)

NAMESPACE = "default"


@dataclass(frozen=True)
class Info:
    """The operation's task queue (the endpoint's), as temporalio.nexus.Info."""

    task_queue: str


@dataclass(frozen=True)
class _Operation:
    """The attempt a handler runs: where its handler workflow's close goes."""

    client: Client
    info: Info
    caller: NexusCaller
    worker_shutdown: asyncio.Event


_current: contextvars.ContextVar[_Operation] = contextvars.ContextVar("kadence_nexus_operation")


def _operation() -> _Operation:
    operation = _current.get(None)
    if operation is None:
        raise RuntimeError("not in a Nexus operation handler: kadence.nexus.info() and client() work only in one")
    return operation


def in_operation() -> bool:
    return _current.get(None) is not None


def info() -> Info:
    return _operation().info


def client() -> Client:
    """The client of the worker running the handler."""
    return _operation().client


def is_worker_shutdown() -> bool:
    return _operation().worker_shutdown.is_set()


async def wait_for_worker_shutdown() -> None:
    await _operation().worker_shutdown.wait()


class LoggerAdapter(logging.LoggerAdapter[logging.Logger]):
    """Adds the operation's service, operation and task queue to each record, as temporalio's."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        operation = _current.get(None)
        if operation is not None:
            msg = f"{msg} (task_queue={operation.info.task_queue})"
        return msg, kwargs


logger = LoggerAdapter(logging.getLogger("kadence.nexus"), None)


@dataclass(frozen=True)
class WorkflowHandle(Generic[OutputT]):
    """A workflow-run operation's handler workflow, as its token names it."""

    workflow_id: str
    namespace: str = NAMESPACE

    def to_token(self) -> str:
        return workflow_run_token(self.workflow_id, self.namespace)

    @classmethod
    def from_token(cls, token: str) -> WorkflowHandle[OutputT]:
        workflow_id = token_workflow_id(token)
        if workflow_id is None:
            raise TypeError(f"invalid workflow-run operation token {token[:100]!r}")
        return cls(workflow_id)


async def start_backing_workflow(
    context: StartOperationContext, workflow: str | Callable[..., Awaitable[Any]], arg: Any, *, args: Sequence[Any], id: str,
    task_queue: str | None, **options: Any,
) -> WorkflowHandle[Any]:
    """Start the operation's handler workflow: under the operation's request id (an attempt run
    again starts none), naming the caller its close is reported to."""
    operation = _operation()
    handle: WorkflowHandle[Any] = WorkflowHandle(id)
    caller: NexusCaller = {**operation.caller, "operation_token": handle.to_token()}
    reset = NEXUS_BACKING_START.set(caller)
    try:
        await operation.client.start_workflow(
            workflow,  # type: ignore[arg-type]  # any of start_workflow's forms, as the caller gave it
            arg, args=args, id=id, task_queue=task_queue or operation.info.task_queue, request_id=context.request_id, **options,
        )
    finally:
        NEXUS_BACKING_START.reset(reset)
    return handle


async def cancel_backing_workflow(token: str) -> None:
    """A workflow-run operation's cancel: its handler workflow is asked to cancel."""
    await _operation().client.get_workflow_handle(WorkflowHandle[Any].from_token(token).workflow_id).cancel()


def _copied(cls: type[ContextT], ctx: StartOperationContext) -> ContextT:
    return cls(**{field.name: getattr(ctx, field.name) for field in dataclasses.fields(ctx)})


@dataclass(frozen=True, kw_only=True)
class WorkflowRunOperationContext(StartOperationContext):
    """The context of a workflow-run operation's start method: it starts the handler workflow."""

    @classmethod
    def _from_start_operation_context(cls, ctx: StartOperationContext) -> WorkflowRunOperationContext:
        return _copied(cls, ctx)

    async def start_workflow(
        self, workflow: str | Callable[..., Awaitable[OutputT]], arg: Any = UNSET, *, args: Sequence[Any] = (), id: str,
        task_queue: str | None = None, result_type: type | None = None, execution_timeout: timedelta | None = None,
        run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
        id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy: WorkflowIDConflictPolicy = WorkflowIDConflictPolicy.FAIL,
        memo: Mapping[str, Any] | None = None, search_attributes: dict[str, Any] | None = None,
        start_delay: timedelta | None = None,
    ) -> WorkflowHandle[OutputT]:
        """Start the workflow whose close completes the operation, on `task_queue` (default: the
        endpoint's), as Client.start_workflow takes its options."""
        return await start_backing_workflow(
            self, workflow, arg, args=args, id=id, task_queue=task_queue, result_type=result_type,
            execution_timeout=execution_timeout, run_timeout=run_timeout, task_timeout=task_timeout, id_reuse_policy=id_reuse_policy,
            id_conflict_policy=id_conflict_policy, memo=memo, search_attributes=search_attributes, start_delay=start_delay,
        )


@dataclass(frozen=True, kw_only=True)
class TemporalStartOperationContext(StartOperationContext):
    """The context of a @temporal_operation's start method."""

    @classmethod
    def _from_start_operation_context(cls, ctx: StartOperationContext) -> TemporalStartOperationContext:
        return _copied(cls, ctx)


@dataclass(frozen=True, kw_only=True)
class TemporalCancelOperationContext(CancelOperationContext):
    """The context of a @temporal_operation's cancel."""


_UNSET_VALUE = object()


@dataclass(frozen=True)
class TemporalOperationResult(Generic[OutputT]):
    """A @temporal_operation's answer: its value (a sync result) or an asynchronous operation's token."""

    value: OutputT | object = _UNSET_VALUE
    token: str | None = None

    def __post_init__(self) -> None:
        if (self.value is _UNSET_VALUE) == (self.token is None):
            raise ValueError("a TemporalOperationResult holds exactly one of a value and a token")

    @classmethod
    def sync(cls, value: OutputT) -> TemporalOperationResult[OutputT]:
        return cls(value=value)

    @classmethod
    def async_token(cls, token: str) -> TemporalOperationResult[OutputT]:
        return cls(token=token)


class TemporalNexusClient:
    """What a @temporal_operation's start method acts through: the worker's client, and the start
    of the workflow that completes the operation asynchronously."""

    def __init__(self, context: StartOperationContext) -> None:
        self._context = context
        self._started = False

    @property
    def client(self) -> Client:
        return _operation().client

    async def start_workflow(
        self, workflow: str | Callable[..., Awaitable[OutputT]], arg: Any = UNSET, *, args: Sequence[Any] = (), id: str,
        task_queue: str | None = None, **options: Any,
    ) -> TemporalOperationResult[OutputT]:
        """Start the workflow whose close completes the operation (one per handler call)."""
        if self._started:
            raise RuntimeError("a Nexus operation handler starts at most one workflow that completes it; "
                               "use TemporalNexusClient.client for others")
        self._started = True
        handle = await start_backing_workflow(self._context, workflow, arg, args=args, id=id, task_queue=task_queue, **options)
        return TemporalOperationResult.async_token(handle.to_token())
