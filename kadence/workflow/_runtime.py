"""The run as workflow code sees it (as temporalio.workflow's _Runtime): the abstract runtime the
workflow API calls, which the worker's WorkflowInstance implements and runs workflow code on as
its event loop; the info it hands out (WorkflowInfo, ParentInfo, RootInfo, UpdateInfo); and the
handle of a child workflow it starts.

The info types live with the runtime because each needs the other: WorkflowInfo's history
methods ask the runtime, and the runtime hands out WorkflowInfo. kadence.workflow never imports
the worker: the worker imports this module and implements _Runtime.
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
import random
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Any, Concatenate, Generic, NoReturn, TypeVar, overload

from kadence.api.common.v1 import Payload
from kadence.common import (
    UNSET,
    ActivityCancellationType,
    ChildWorkflowCancellationType,
    MetricMeter,
    ParentClosePolicy,
    Priority,
    RetryPolicy,
    WorkflowIDReusePolicy,
)
from kadence.converter import DataConverter
from kadence.types import (
    HandleReturnType,
    HandleSelfType,
    MethodSyncOrAsyncNoParam,
    MethodSyncOrAsyncSingleParam,
    MultiParamSpec,
    ParamType,
)
from kadence.workflow._definition import Handler, signal_name


@dataclass(frozen=True)
class ParentInfo:
    """The workflow that started this one as its child (as temporalio.workflow.ParentInfo)."""

    namespace: str
    run_id: str
    workflow_id: str


@dataclass(frozen=True)
class RootInfo:
    """The top of the chain of parents (as temporalio.workflow.RootInfo)."""

    run_id: str
    workflow_id: str


_EPOCH = datetime.fromtimestamp(0, UTC)


@dataclass(frozen=True)
class UpdateInfo:
    """The update whose validator or handler runs (as temporalio.workflow.UpdateInfo)."""

    id: str
    name: str

    def _logger_details(self) -> dict[str, str]:
        return {"update_id": self.id, "update_name": self.name}


# Set while an update's validator and handler run (and in the tasks they start), as temporalio.
current_update: contextvars.ContextVar[UpdateInfo | None] = contextvars.ContextVar("kadence_current_update", default=None)


@dataclass(frozen=True)
class WorkflowInfo:
    """The running workflow's info (as temporalio.workflow.Info): from its WorkflowExecutionStarted
    event, so the same on every replay. Immutable but for search_attributes and raw_memo, which
    upserts update."""

    workflow_id: str
    run_id: str
    workflow_type: str
    task_queue: str
    namespace: str = "default"  # a Kadence deployment is one namespace
    attempt: int = 1  # runs are not retried: always the first attempt
    continued_run_id: str | None = None
    cron_schedule: str | None = None
    execution_timeout: timedelta | None = None
    first_execution_run_id: str = ""
    headers: Mapping[str, Payload] = field(default_factory=dict)  # the start's, as the caller's interceptors set them
    original_execution_run_id: str = ""  # the run that wrote the Started event: this one, or the run a reset started from
    parent: ParentInfo | None = None
    root: RootInfo | None = None
    priority: Priority = Priority.default  # runs take no priority yet
    raw_memo: dict[str, Payload] = field(default_factory=dict)  # the memo's payloads, decoded by the payload codec
    retry_policy: Any = None  # runs are not retried
    run_timeout: timedelta | None = None
    search_attributes: dict[str, list[Any]] = field(default_factory=dict)
    start_time: datetime = _EPOCH  # when the run's first workflow task started
    task_timeout: timedelta = timedelta(seconds=10)
    workflow_start_time: datetime = _EPOCH  # when the run was started (its WorkflowExecutionStarted)

    @property
    def typed_search_attributes(self) -> Any:
        raise NotImplementedError(
            "Kadence has no typed search attributes (TypedSearchAttributes) yet: read workflow.info().search_attributes, "
            "a dict of name to list of values"
        )

    def get_current_build_id(self) -> str:
        """The build id of the worker that ran the current workflow task: "" (temporalio's value for a
        worker without one), as Kadence's workers have no build ids before worker versioning."""
        return ""

    def get_current_deployment_version(self) -> None:
        """The worker deployment version that ran the current workflow task: None (temporalio's value
        for a worker without one), as Kadence has no worker deployments yet."""
        return None

    def is_target_worker_deployment_version_changed(self) -> bool:
        """Whether the run's target deployment version changed: never, without worker deployments."""
        return False

    def get_current_history_length(self) -> int:
        """Events in this run's history as of the current workflow task."""
        return _Runtime.current().history_length

    def get_current_history_size(self) -> int:
        """Payload bytes in this run's history as of the current workflow task."""
        return _Runtime.current().history_bytes

    def is_continue_as_new_suggested(self) -> bool:
        """Whether the history is past the history service's warning thresholds."""
        return _Runtime.current().continue_as_new_suggested()

    def _logger_details(self) -> dict[str, Any]:
        """What workflow.logger adds to each record (temporalio's keys)."""
        return {
            "attempt": self.attempt, "namespace": self.namespace, "run_id": self.run_id, "task_queue": self.task_queue,
            "workflow_id": self.workflow_id, "workflow_type": self.workflow_type,
        }


Info = WorkflowInfo


class SignallingHandle(Generic[HandleSelfType]):
    """A handle to another workflow that this one signals (a child's, an external one's): its
    signals are typed from the workflow's class (HandleSelfType), as temporalio's."""

    @overload
    async def signal(self, signal: MethodSyncOrAsyncNoParam[HandleSelfType, None]) -> None: ...

    @overload
    async def signal(self, signal: MethodSyncOrAsyncSingleParam[HandleSelfType, ParamType, None], arg: ParamType) -> None: ...

    @overload
    async def signal(
        self, signal: Callable[Concatenate[HandleSelfType, MultiParamSpec], Awaitable[None] | None], *, args: Sequence[Any],
    ) -> None: ...

    @overload
    async def signal(self, signal: str, arg: Any = UNSET, *, args: Sequence[Any] = ()) -> None: ...

    async def signal(self, signal: Callable[..., Any] | str, arg: Any = UNSET, *, args: Sequence[Any] = ()) -> None:
        """Signal the workflow; raises ApplicationError if it cannot be signalled (closed, or not found)."""
        await self._signal(signal_name(signal), ([arg] if arg is not UNSET else []) + list(args))

    async def _signal(self, name: str, args: list[Any]) -> None:
        raise NotImplementedError


class ChildWorkflowHandle(asyncio.Task[HandleReturnType], SignallingHandle[HandleSelfType], Generic[HandleSelfType, HandleReturnType]):
    """A started child workflow (as temporalio's): await it for the result, which raises
    ChildWorkflowError if the child did not complete; cancel() asks the child to cancel.
    Of the child's workflow class and its run method's return type (ChildWorkflowHandle[MyChild,
    MyResult]), from start_child_workflow's `workflow`: its signals are the class's."""

    id: str
    first_execution_run_id: str

    async def _signal(self, name: str, args: list[Any]) -> None:
        await _Runtime.current().signal_child_workflow(self.id, name, args)


NexusOutputT = TypeVar("NexusOutputT")


class NexusOperationHandle(abc.ABC, Generic[NexusOutputT]):
    """A started Nexus operation: await it for its result (NexusOperationError if it failed, was
    canceled or timed out)."""

    @abc.abstractmethod
    def cancel(self) -> bool:
        """Ask the operation to cancel, as its cancellation type says; False if it ended already."""

    @abc.abstractmethod
    def __await__(self) -> Generator[Any, Any, NexusOutputT]: ...

    @property
    @abc.abstractmethod
    def operation_token(self) -> str | None:
        """The token of an operation its handler started asynchronously; None for a sync one."""


class NexusOperationCancellationType(IntEnum):
    """What cancelling an operation's handle (or the task awaiting it) waits for, as temporalio's."""

    ABANDON = 0
    """Send no cancel request; the handle resolves as canceled at once."""
    TRY_CANCEL = 1
    """Send the cancel request; the handle resolves as canceled at once."""
    WAIT_REQUESTED = 2
    """Send the cancel request; the handle resolves as canceled once history recorded it."""
    WAIT_COMPLETED = 3
    """Send the cancel request; the handle resolves when the operation ends (it may not end canceled)."""


class _Runtime(asyncio.AbstractEventLoop, abc.ABC):
    """What the workflow API asks of the run whose code is running: the run is the running event
    loop, so `_Runtime.current()` finds it. Outgoing calls take plain arguments: the runtime puts
    them through the run's outbound interceptors."""

    info: WorkflowInfo  # as the run knows it; workflow.info() asks the interceptors (workflow_info)
    converter: DataConverter
    metric_meter: MetricMeter  # the run's: workflow.metric_meter()
    # By name; the dynamic handler (for the names no other handles) under None.
    signals: dict[str | None, Handler]
    queries: dict[str | None, Handler]
    updates: dict[str | None, Handler]
    read_only: bool  # in a query handler or update validator
    history_length: int  # events as of the workflow task being run
    history_bytes: int  # payload bytes as of the workflow task being run

    @staticmethod
    def current() -> _Runtime:
        """The run whose workflow code is running now."""
        runtime = _Runtime.maybe_current()
        if runtime is None:
            raise RuntimeError("not in a workflow: this call is only valid in workflow code run by a Worker")
        return runtime

    @staticmethod
    def maybe_current() -> _Runtime | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        return loop if isinstance(loop, _Runtime) else None

    # ---- the run's state

    @abc.abstractmethod
    def workflow_info(self) -> WorkflowInfo:
        """The info, through the outbound interceptors."""

    @abc.abstractmethod
    def now(self) -> datetime: ...

    @property
    @abc.abstractmethod
    def random(self) -> random.Random: ...

    @abc.abstractmethod
    def is_replaying(self) -> bool: ...

    @abc.abstractmethod
    def continue_as_new_suggested(self) -> bool: ...

    @abc.abstractmethod
    def all_handlers_finished(self) -> bool: ...

    @abc.abstractmethod
    def patched(self, patch_id: str, deprecated: bool = False) -> bool: ...

    @abc.abstractmethod
    def upsert_search_attributes(self, attributes: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    def upsert_memo(self, updates: Mapping[str, Any]) -> None: ...

    @abc.abstractmethod
    def wait_condition(self, condition: Callable[[], bool]) -> asyncio.Future[None]:
        """Resolves once `condition()` holds, checked whenever the workflow has run dry."""

    # ---- handlers

    @abc.abstractmethod
    def callable(self, handler: Handler) -> Callable[..., Any]:
        """What to call for a handler: a method with the workflow object, else the callable as it is."""

    @abc.abstractmethod
    def set_signal_handler(self, name: str | None, fn: Callable[..., Any] | None) -> None: ...

    @abc.abstractmethod
    def set_query_handler(self, name: str | None, fn: Callable[..., Any] | None) -> None: ...

    @abc.abstractmethod
    def set_update_handler(self, name: str | None, fn: Callable[..., Any] | None, validator: Callable[..., Any] | None) -> None: ...

    # ---- what the run sends

    @abc.abstractmethod
    def start_activity(
        self, activity: str, args: Sequence[Any], *, activity_id: str | None, task_queue: str | None,
        schedule_to_close_timeout: timedelta | None, schedule_to_start_timeout: timedelta | None,
        start_to_close_timeout: timedelta | None, heartbeat_timeout: timedelta | None, retry_policy: RetryPolicy | None,
        cancellation_type: ActivityCancellationType, disable_eager_execution: bool, result_type: type | None,
    ) -> asyncio.Task[Any]: ...

    @abc.abstractmethod
    def start_local_activity(
        self, activity: str, args: Sequence[Any], *, schedule_to_close_timeout: timedelta | None,
        start_to_close_timeout: timedelta | None, retry_policy: RetryPolicy | None, cancellation_type: ActivityCancellationType,
        result_type: type | None,
    ) -> asyncio.Task[Any]: ...

    @abc.abstractmethod
    async def start_child_workflow(
        self, workflow: str, args: Sequence[Any], *, id: str, task_queue: str | None, execution_timeout: timedelta | None,
        run_timeout: timedelta | None, task_timeout: timedelta | None, id_reuse_policy: WorkflowIDReusePolicy,
        parent_close_policy: ParentClosePolicy, search_attributes: dict[str, Any] | None, memo: Mapping[str, Any] | None,
        result_type: type | None, cancellation_type: ChildWorkflowCancellationType,
    ) -> ChildWorkflowHandle: ...

    @abc.abstractmethod
    async def start_nexus_operation(
        self, endpoint: str, service: str, operation: str, input: Any, *, output_type: type | None,
        schedule_to_close_timeout: timedelta | None, cancellation_type: NexusOperationCancellationType, headers: dict[str, str],
    ) -> NexusOperationHandle[Any]: ...

    @abc.abstractmethod
    async def signal_child_workflow(self, workflow_id: str, signal: str, args: Sequence[Any]) -> None: ...

    @abc.abstractmethod
    async def signal_external_workflow(self, workflow_id: str, run_id: str | None, signal: str, args: Sequence[Any]) -> None: ...

    @abc.abstractmethod
    async def cancel_external_workflow(self, workflow_id: str, run_id: str | None) -> None: ...

    @abc.abstractmethod
    def continue_as_new(
        self, workflow: str | None, args: Sequence[Any], *, task_queue: str | None, run_timeout: timedelta | None,
        task_timeout: timedelta | None, memo: Mapping[str, Any] | None,
    ) -> NoReturn: ...
