"""The API workflow code calls (as temporalio.workflow's functions): time, randomness, timers,
conditions, activities, child and external workflows, patches, handlers set at run time, the
logger and the sandbox's escape hatches. Each asks the running run (_Runtime).

Workflow code runs on a deterministic loop replayed from history: it must not read clocks,
randomness, the network or files except through this API.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import logging
import random as _random
import typing
import uuid as _uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Concatenate, NoReturn, TypeVar, Unpack, cast, overload

from kadence import activity as activity_module
from kadence.common import (
    UNSET,
    ActivityCancellationType,
    ChildWorkflowCancellationType,
    MetricMeter,
    ParentClosePolicy,
    RetryPolicy,
    WorkflowIDReusePolicy,
)
from kadence.converter import PayloadConverter, type_hints
from kadence.protocol.records import ContinueAsNewWorkflowExecution
from kadence.types import (
    CallableAsyncNoParam,
    CallableAsyncSingleParam,
    CallableSyncNoParam,
    CallableSyncSingleParam,
    FirstParamType,
    HandleSelfType,
    MethodAsyncNoParam,
    MethodAsyncSingleParam,
    MethodSyncNoParam,
    MethodSyncSingleParam,
    MoreParamTypes,
    MultiParamSpec,
    ParamType,
    ReturnType,
    SecondParamType,
    SelfType,
)
from kadence.workflow._definition import Handler, check_dynamic, definition
from kadence.workflow._runtime import ChildWorkflowHandle, SignallingHandle, UpdateInfo, WorkflowInfo, _Runtime, current_update

# temporalio's name for what start_activity returns: await it for the result. Generic as asyncio.Task
# is: ActivityHandle[ReturnType], of the activity's return type.
ActivityHandle = asyncio.Task

# The functions below are typed by their overloads, as temporalio's. One that calls another (execute_activity
# calling start_activity) calls it as cast(Callable[..., Any], start_activity): its own overloads checked the
# arguments it passes on, which the other's implementation takes as they come.

class ContinueAsNewError(BaseException):
    """Raised by workflow.continue_as_new(): ends this run and starts a new one with fresh history.
    A BaseException, so `except Exception` in workflow code does not swallow it (as temporalio)."""

    def __init__(self, attributes: ContinueAsNewWorkflowExecution) -> None:
        super().__init__("continue as new")
        self.attributes = attributes


def in_workflow() -> bool:
    """Whether the code is running in a workflow."""
    return _Runtime.maybe_current() is not None


def info() -> WorkflowInfo:
    return _Runtime.current().workflow_info()


def current_update_info() -> UpdateInfo | None:
    """The update whose validator or handler is running (or a task it started), else None."""
    return current_update.get()


def payload_converter() -> PayloadConverter:
    """The run's payload converter: to convert a dynamic handler's RawValue arguments."""
    return _Runtime.current().converter.payload_converter


def metric_meter() -> MetricMeter:
    """A meter of the worker's runtime (kadence.runtime) whose metrics carry the run's namespace,
    task_queue and workflow_type, and record nothing while the run replays (as temporalio's)."""
    return _Runtime.current().metric_meter


def all_handlers_finished() -> bool:
    """Whether no signal or update handler is still running: wait for it before the run returns
    (`await workflow.wait_condition(workflow.all_handlers_finished)`) so none is cut off."""
    return _Runtime.current().all_handlers_finished()


def get_signal_handler(name: str) -> Callable[..., Any] | None:
    """The handler of signal `name` (None if there is none)."""
    return _handler_fn(_Runtime.current().signals, name)


def set_signal_handler(name: str, handler: Callable[..., Any] | None) -> None:
    """Handle signal `name` with `handler` (None removes it); signals of that name that arrived
    before it was set reach it now, in order (as temporalio)."""
    _Runtime.current().set_signal_handler(name, handler)


def get_dynamic_signal_handler() -> Callable[..., Any] | None:
    return _handler_fn(_Runtime.current().signals, None)


def set_dynamic_signal_handler(handler: Callable[..., Any] | None) -> None:
    """Handle every signal no other handler takes with `handler(name, args: Sequence[RawValue])`;
    the signals kept for want of a handler reach it now."""
    if handler is not None:
        check_dynamic(handler, "signal", is_method=False)
    _Runtime.current().set_signal_handler(None, handler)


def get_query_handler(name: str) -> Callable[..., Any] | None:
    return _handler_fn(_Runtime.current().queries, name)


def set_query_handler(name: str, handler: Callable[..., Any] | None) -> None:
    """Answer query `name` with `handler` (None removes it)."""
    _Runtime.current().set_query_handler(name, handler)


def get_dynamic_query_handler() -> Callable[..., Any] | None:
    return _handler_fn(_Runtime.current().queries, None)


def set_dynamic_query_handler(handler: Callable[..., Any] | None) -> None:
    """Answer every query no other handler takes with `handler(name, args: Sequence[RawValue])`."""
    if handler is not None:
        check_dynamic(handler, "query", is_method=False)
    _Runtime.current().set_query_handler(None, handler)


def get_update_handler(name: str) -> Callable[..., Any] | None:
    return _handler_fn(_Runtime.current().updates, name)


def set_update_handler(name: str, handler: Callable[..., Any] | None, *, validator: Callable[..., Any] | None = None) -> None:
    """Run `handler` for update `name` (None removes it), after `validator` if given."""
    _Runtime.current().set_update_handler(name, handler, validator)


def get_dynamic_update_handler() -> Callable[..., Any] | None:
    return _handler_fn(_Runtime.current().updates, None)


def set_dynamic_update_handler(handler: Callable[..., Any] | None, *, validator: Callable[..., Any] | None = None) -> None:
    """Run `handler(name, args: Sequence[RawValue])` for every update no other handler takes."""
    if handler is not None:
        check_dynamic(handler, "update", is_method=False)
    _Runtime.current().set_update_handler(None, handler, validator)


def _handler_fn(handlers: dict[str | None, Handler], name: str | None) -> Callable[..., Any] | None:
    handler = handlers.get(name)
    if handler is None:
        return None
    return _Runtime.current().callable(handler)


class SandboxImportNotificationPolicy(enum.Flag):
    """temporalio's sandbox import policies: accepted and ignored, there being no sandbox."""

    SILENT = enum.auto()
    WARN_ON_DYNAMIC_IMPORT = enum.auto()
    WARN_ON_UNINTENTIONAL_PASSTHROUGH = enum.auto()
    RAISE_ON_UNINTENTIONAL_PASSTHROUGH = enum.auto()


_sandbox_unrestricted: contextvars.ContextVar[bool] = contextvars.ContextVar("kadence_sandbox_unrestricted", default=False)
_imports_passed_through: contextvars.ContextVar[bool] = contextvars.ContextVar("kadence_imports_passed_through", default=False)
_import_policy: contextvars.ContextVar[SandboxImportNotificationPolicy | None] = contextvars.ContextVar(
    "kadence_import_notification_policy", default=None,
)


@contextlib.contextmanager
def _flag_set(flag: contextvars.ContextVar[Any], value: Any) -> Iterator[None]:
    token = flag.set(value)
    try:
        yield
    finally:
        flag.reset(token)


class unsafe:  # noqa: N801 (temporalio's name)
    """temporalio's escape hatches for workflow code. Kadence runs workflow code without a sandbox
    (determinism is the code's own duty, checked on replay), so the sandbox's context managers
    only mark their block, as under temporalio's UnsandboxedWorkflowRunner."""

    def __init__(self) -> None:
        raise NotImplementedError

    @staticmethod
    def in_sandbox() -> bool:
        """Always False: there is no sandbox."""
        return False

    @staticmethod
    def is_replaying() -> bool:
        """Whether the workflow runs again over history already recorded (a query or update
        validator during a replay included)."""
        return _Runtime.current().is_replaying()

    @staticmethod
    def is_replaying_history_events() -> bool:
        """Whether the workflow replays history events (queries and update validators, being live, excluded)."""
        runtime = _Runtime.current()
        return runtime.is_replaying() and not runtime.read_only

    @staticmethod
    def is_read_only() -> bool:
        """Whether the code runs in a query handler or update validator, which must not change state."""
        return _Runtime.current().read_only

    @staticmethod
    def is_sandbox_unrestricted() -> bool:
        """Whether the code runs inside sandbox_unrestricted()."""
        return _sandbox_unrestricted.get()

    @staticmethod
    def sandbox_unrestricted() -> contextlib.AbstractContextManager[None]:
        """Run a block without sandbox restrictions (a no-op: there are none)."""
        return _flag_set(_sandbox_unrestricted, True)

    @staticmethod
    def is_imports_passed_through() -> bool:
        """Whether the code runs inside imports_passed_through()."""
        return _imports_passed_through.get()

    @staticmethod
    def imports_passed_through() -> contextlib.AbstractContextManager[None]:
        """Import modules as they are, not reloaded per run (a no-op: every import is)."""
        return _flag_set(_imports_passed_through, True)

    @staticmethod
    def current_import_notification_policy_override() -> SandboxImportNotificationPolicy | None:
        return _import_policy.get()

    @staticmethod
    def sandbox_import_notification_policy(policy: SandboxImportNotificationPolicy) -> contextlib.AbstractContextManager[None]:
        """Set the sandbox's import notification policy for a block (recorded, nothing to notify)."""
        return _flag_set(_import_policy, policy)


class LoggerAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger for workflow code (as temporalio's): each record gets the run's details appended to
    its message (`workflow_info_on_message`) and as `extra["temporal_workflow"]`
    (`workflow_info_on_extra`), the whole Info as `extra["workflow_info"]` if
    `full_workflow_info_on_extra`; nothing is logged while the run replays history unless
    `log_during_replay`, so a message appears once however often the run is rebuilt."""

    def __init__(self, logger: logging.Logger, extra: typing.Mapping[str, Any] | None) -> None:
        super().__init__(logger, extra or {})
        self.workflow_info_on_message = True
        self.workflow_info_on_extra = True
        self.full_workflow_info_on_extra = False
        self.log_during_replay = False

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, MutableMapping[str, Any]]:
        runtime = _Runtime.maybe_current()
        if runtime is None:
            return msg, kwargs
        details = runtime.info._logger_details()
        update = current_update.get()
        if update is not None:
            details.update(update._logger_details())
        extra: dict[str, Any] = {}
        if self.workflow_info_on_extra:
            extra["temporal_workflow"] = details
        if self.full_workflow_info_on_extra:
            extra["workflow_info"] = runtime.info
        kwargs["extra"] = {**extra, **(kwargs.get("extra") or {})}  # the caller's extra wins, as temporalio
        if self.workflow_info_on_message:
            msg = f"{msg} ({details})"
        return msg, kwargs

    def isEnabledFor(self, level: int) -> bool:
        runtime = _Runtime.maybe_current()
        if runtime is not None and runtime.is_replaying() and not runtime.read_only and not self.log_during_replay:
            return False
        return super().isEnabledFor(level)

    @property
    def base_logger(self) -> logging.Logger:
        """The logger underneath, to add handlers or formatters to."""
        return self.logger

    def unsafe_disable_sandbox(self, value: bool = True) -> None:
        """Nothing to disable: Kadence runs workflow code without a sandbox."""


logger = LoggerAdapter(logging.getLogger("kadence.workflow"), None)
"""Logger for workflow code: the run's details on every record, quiet during replay."""


def now() -> datetime:
    """Deterministic current time: the start time of the current workflow task."""
    return _Runtime.current().now()


def random() -> _random.Random:
    """A random generator for workflow code: seeded by the run, so replay draws the same numbers."""
    return _Runtime.current().random


def uuid4() -> _uuid.UUID:
    """A version-4 UUID drawn from workflow.random(): the same on every replay."""
    return _uuid.UUID(int=_Runtime.current().random.getrandbits(128), version=4)


def get_current_history_length() -> int:
    """Events in this run's history as of the current workflow task (its WorkflowTaskStarted included)."""
    return _Runtime.current().history_length


def get_current_history_size() -> int:
    """Payload bytes in this run's history as of the current workflow task."""
    return _Runtime.current().history_bytes


def is_continue_as_new_suggested() -> bool:
    """True once the history passes 10,240 events or 10 MB (the history service warns there and ends
    the run at 51,200 events or 50 MB): time to workflow.continue_as_new()."""
    return _Runtime.current().continue_as_new_suggested()


def continue_as_new(
    arg: Any = UNSET, *, args: Sequence[Any] = (), workflow: type | str | None = None, task_queue: str | None = None,
    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None, memo: Mapping[str, Any] | None = None,
) -> NoReturn:
    """End this run and start a new one of the same workflow id with fresh history (and these
    arguments). The new run's memo is `memo`, else this run's as its upserts left it (as temporalio)."""
    runtime = _Runtime.current()
    workflow_type = None
    if workflow is not None:
        found = definition(workflow)
        workflow_type = found if isinstance(found, str) else found.name
    runtime.continue_as_new(
        workflow_type, ([arg] if arg is not UNSET else []) + list(args), task_queue=task_queue, run_timeout=run_timeout,
        task_timeout=task_timeout, memo=memo,
    )


def upsert_search_attributes(attributes: dict[str, Any]) -> None:
    """Set (or overwrite) search attributes of this run: indexed in the read model for list queries."""
    _Runtime.current().upsert_search_attributes(attributes)


def memo() -> Mapping[str, Any]:
    """This run's memo, each value converted without a type hint (a dataclass comes back a dict:
    use memo_value's type_hint), as temporalio's."""
    runtime = _Runtime.current()
    converter = runtime.converter.payload_converter
    return {key: converter.from_payload(payload) for key, payload in runtime.workflow_info().raw_memo.items()}


def memo_value(key: str, default: Any = UNSET, *, type_hint: type | None = None) -> Any:
    """One memo value, converted with `type_hint`; `default` when the memo has no `key` (without one,
    KeyError), as temporalio's."""
    runtime = _Runtime.current()
    payload = runtime.workflow_info().raw_memo.get(key)
    if payload is None:
        if default is UNSET:
            raise KeyError(f"Memo does not have a value for key {key}")
        return default
    return runtime.converter.payload_converter.from_payload(payload, type_hint)


def upsert_memo(updates: Mapping[str, Any]) -> None:
    """Set memo values of this run, and remove those set to None (as temporalio's): recorded as a
    WorkflowPropertiesModified event, shown by describe, list and the UI."""
    _Runtime.current().upsert_memo(updates)


async def wait_condition(condition: Callable[[], bool], *, timeout: timedelta | float | None = None) -> None:
    """Wait until `condition()` is true (checked whenever the workflow has run dry); raises
    asyncio.TimeoutError after `timeout`, which is a durable timer."""
    future = _Runtime.current().wait_condition(condition)
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    await asyncio.wait_for(future, seconds)


async def sleep(duration: timedelta | float) -> None:
    """A durable timer: the workflow resumes after `duration`, even across worker restarts."""
    await asyncio.sleep(duration.total_seconds() if isinstance(duration, timedelta) else duration)


@overload
def start_activity(
    activity: CallableAsyncNoParam[ReturnType], *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity(
    activity: CallableSyncNoParam[ReturnType], *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity(
    activity: CallableAsyncSingleParam[ParamType, ReturnType], arg: ParamType, /, *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity(
    activity: CallableSyncSingleParam[ParamType, ReturnType], arg: ParamType, /, *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity(
    activity: Callable[[FirstParamType, SecondParamType, Unpack[MoreParamTypes]], Awaitable[ReturnType]],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity(
    activity: Callable[[FirstParamType, SecondParamType, Unpack[MoreParamTypes]], ReturnType],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity(
    activity: Callable[..., Awaitable[ReturnType]], *, args: Sequence[Any],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity(
    activity: Callable[..., ReturnType], *, args: Sequence[Any],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity(
    activity: str, *positional: Any, args: Sequence[Any] = (), result_type: type | None = None,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[Any]: ...


def start_activity(
    activity: Callable[..., Any] | str,
    *positional: object,
    args: Sequence[Any] = (),
    task_queue: str | None = None,
    schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None,
    start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
    activity_id: str | None = None,
    result_type: type | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[Any]:
    """Schedule an activity; the returned task resolves to its result or raises ActivityError.

    Arguments go positionally (`start_activity(fn, a, b)`) or, as in temporalio, as `args=[a, b]`.
    A worker that polls the activity's task queue and has a free slot runs it itself (eager
    execution, as Temporal's) unless `disable_eager_execution` is set. Cancelling the task cancels
    the activity as `cancellation_type` says (ActivityCancellationType).
    """
    runtime = _Runtime.current()
    if isinstance(activity, str):
        activity_type = activity
    else:
        activity_definition = activity_module.definition(activity)
        activity_type = activity_definition.name
        if result_type is None:
            result_type = type_hints(activity_definition.fn).get("return")
    if start_to_close_timeout is None and schedule_to_close_timeout is None:
        raise ValueError(f"activity {activity_type}: set start_to_close_timeout or schedule_to_close_timeout")
    return runtime.start_activity(
        activity_type, [*positional, *args], activity_id=activity_id, task_queue=task_queue,
        schedule_to_close_timeout=schedule_to_close_timeout, schedule_to_start_timeout=schedule_to_start_timeout,
        start_to_close_timeout=start_to_close_timeout, heartbeat_timeout=heartbeat_timeout, retry_policy=retry_policy,
        cancellation_type=ActivityCancellationType(cancellation_type), disable_eager_execution=disable_eager_execution,
        result_type=result_type,
    )


@overload
def start_local_activity(
    activity: CallableAsyncNoParam[ReturnType], *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity(
    activity: CallableSyncNoParam[ReturnType], *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity(
    activity: CallableAsyncSingleParam[ParamType, ReturnType], arg: ParamType, /, *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity(
    activity: CallableSyncSingleParam[ParamType, ReturnType], arg: ParamType, /, *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity(
    activity: Callable[[FirstParamType, SecondParamType, Unpack[MoreParamTypes]], Awaitable[ReturnType]],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity(
    activity: Callable[[FirstParamType, SecondParamType, Unpack[MoreParamTypes]], ReturnType],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity(
    activity: Callable[..., Awaitable[ReturnType]], *, args: Sequence[Any],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity(
    activity: Callable[..., ReturnType], *, args: Sequence[Any],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity(
    activity: str, *positional: Any, args: Sequence[Any] = (), result_type: type | None = None,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[Any]: ...


def start_local_activity(
    activity: Callable[..., Any] | str,
    *positional: object,
    args: Sequence[Any] = (),
    schedule_to_close_timeout: timedelta | None = None,
    start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
    result_type: type | None = None,
) -> ActivityHandle[Any]:
    """Run a short activity in this worker, within the workflow task, with no task queue round
    trip; its outcome is recorded as a marker. Retries follow `retry_policy` but stay within the
    workflow task (at most `schedule_to_close_timeout`, else 5 s of attempts): keep it short.
    It runs once the workflow code waits, so a cancellation reaches it only before then: the task
    raises at once an ActivityError "Local Activity cancelled" caused by a CancelledError (as
    temporalio's) and the activity never runs, unless `cancellation_type` is ABANDON, which lets it
    run and records its outcome."""
    runtime = _Runtime.current()
    if isinstance(activity, str):
        activity_type = activity
    else:
        activity_definition = activity_module.definition(activity)
        activity_type = activity_definition.name
        if result_type is None:
            result_type = type_hints(activity_definition.fn).get("return")
    if start_to_close_timeout is None and schedule_to_close_timeout is None:
        raise ValueError(f"local activity {activity_type}: set start_to_close_timeout or schedule_to_close_timeout")
    return runtime.start_local_activity(
        activity_type, [*positional, *args], schedule_to_close_timeout=schedule_to_close_timeout,
        start_to_close_timeout=start_to_close_timeout, retry_policy=retry_policy,
        cancellation_type=ActivityCancellationType(cancellation_type), result_type=result_type,
    )


@overload
async def execute_local_activity(
    activity: CallableAsyncNoParam[ReturnType], *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity(
    activity: CallableSyncNoParam[ReturnType], *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity(
    activity: CallableAsyncSingleParam[ParamType, ReturnType], arg: ParamType, /, *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity(
    activity: CallableSyncSingleParam[ParamType, ReturnType], arg: ParamType, /, *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity(
    activity: Callable[[FirstParamType, SecondParamType, Unpack[MoreParamTypes]], Awaitable[ReturnType]],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity(
    activity: Callable[[FirstParamType, SecondParamType, Unpack[MoreParamTypes]], ReturnType],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity(
    activity: Callable[..., Awaitable[ReturnType]], *, args: Sequence[Any],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity(
    activity: Callable[..., ReturnType], *, args: Sequence[Any],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity(
    activity: str, *positional: Any, args: Sequence[Any] = (), result_type: type | None = None,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> Any: ...


async def execute_local_activity(
    activity: Callable[..., Any] | str,
    *positional: object,
    args: Sequence[Any] = (),
    schedule_to_close_timeout: timedelta | None = None,
    start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
    result_type: type | None = None,
) -> Any:
    """Run a local activity and wait for its result (raises ActivityError when it fails for good)."""
    return await cast(Callable[..., Any], start_local_activity)(
        activity, *positional, args=args, schedule_to_close_timeout=schedule_to_close_timeout,
        start_to_close_timeout=start_to_close_timeout, retry_policy=retry_policy, cancellation_type=cancellation_type,
        result_type=result_type,
    )


@overload
def start_activity_method(
    activity: MethodAsyncNoParam[SelfType, ReturnType], *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity_method(
    activity: MethodSyncNoParam[SelfType, ReturnType], *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity_method(
    activity: MethodAsyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, /, *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity_method(
    activity: MethodSyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, /, *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity_method(
    activity: Callable[[SelfType, FirstParamType, SecondParamType, Unpack[MoreParamTypes]], Awaitable[ReturnType]],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity_method(
    activity: Callable[[SelfType, FirstParamType, SecondParamType, Unpack[MoreParamTypes]], ReturnType],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity_method(
    activity: Callable[Concatenate[SelfType, MultiParamSpec], Awaitable[ReturnType]], *, args: Sequence[Any],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_activity_method(
    activity: Callable[Concatenate[SelfType, MultiParamSpec], ReturnType], *, args: Sequence[Any],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ActivityHandle[ReturnType]: ...


def start_activity_method(activity: Callable[..., Any], *positional: object, **options: Any) -> ActivityHandle[Any]:
    """start_activity for an activity defined as a method (`MyActivities.fetch`, registered on the
    worker as `activities=[my_activities.fetch]`): its type name is the method's name or its
    @activity.defn name, as temporalio."""
    return cast(Callable[..., Any], start_activity)(activity, *positional, **options)


@overload
async def execute_activity_method(
    activity: MethodAsyncNoParam[SelfType, ReturnType], *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity_method(
    activity: MethodSyncNoParam[SelfType, ReturnType], *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity_method(
    activity: MethodAsyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, /, *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity_method(
    activity: MethodSyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, /, *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity_method(
    activity: Callable[[SelfType, FirstParamType, SecondParamType, Unpack[MoreParamTypes]], Awaitable[ReturnType]],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity_method(
    activity: Callable[[SelfType, FirstParamType, SecondParamType, Unpack[MoreParamTypes]], ReturnType],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity_method(
    activity: Callable[Concatenate[SelfType, MultiParamSpec], Awaitable[ReturnType]], *, args: Sequence[Any],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity_method(
    activity: Callable[Concatenate[SelfType, MultiParamSpec], ReturnType], *, args: Sequence[Any],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


async def execute_activity_method(activity: Callable[..., Any], *positional: object, **options: Any) -> Any:
    """execute_activity for an activity defined as a method."""
    return await cast(Callable[..., Any], start_activity)(activity, *positional, **options)


@overload
def start_local_activity_method(
    activity: MethodAsyncNoParam[SelfType, ReturnType], *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity_method(
    activity: MethodSyncNoParam[SelfType, ReturnType], *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity_method(
    activity: MethodAsyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, /, *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity_method(
    activity: MethodSyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, /, *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity_method(
    activity: Callable[[SelfType, FirstParamType, SecondParamType, Unpack[MoreParamTypes]], Awaitable[ReturnType]],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity_method(
    activity: Callable[[SelfType, FirstParamType, SecondParamType, Unpack[MoreParamTypes]], ReturnType],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity_method(
    activity: Callable[Concatenate[SelfType, MultiParamSpec], Awaitable[ReturnType]], *, args: Sequence[Any],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


@overload
def start_local_activity_method(
    activity: Callable[Concatenate[SelfType, MultiParamSpec], ReturnType], *, args: Sequence[Any],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ActivityHandle[ReturnType]: ...


def start_local_activity_method(activity: Callable[..., Any], *positional: object, **options: Any) -> ActivityHandle[Any]:
    """start_local_activity for an activity defined as a method."""
    return cast(Callable[..., Any], start_local_activity)(activity, *positional, **options)


@overload
async def execute_local_activity_method(
    activity: MethodAsyncNoParam[SelfType, ReturnType], *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity_method(
    activity: MethodSyncNoParam[SelfType, ReturnType], *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity_method(
    activity: MethodAsyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, /, *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity_method(
    activity: MethodSyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, /, *,
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity_method(
    activity: Callable[[SelfType, FirstParamType, SecondParamType, Unpack[MoreParamTypes]], Awaitable[ReturnType]],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity_method(
    activity: Callable[[SelfType, FirstParamType, SecondParamType, Unpack[MoreParamTypes]], ReturnType],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity_method(
    activity: Callable[Concatenate[SelfType, MultiParamSpec], Awaitable[ReturnType]], *, args: Sequence[Any],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


@overload
async def execute_local_activity_method(
    activity: Callable[Concatenate[SelfType, MultiParamSpec], ReturnType], *, args: Sequence[Any],
    schedule_to_close_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None, cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
) -> ReturnType: ...


async def execute_local_activity_method(activity: Callable[..., Any], *positional: object, **options: Any) -> Any:
    """execute_local_activity for an activity defined as a method."""
    return await cast(Callable[..., Any], start_local_activity)(activity, *positional, **options)


_ReturnWhen = typing.Literal["FIRST_COMPLETED", "FIRST_EXCEPTION", "ALL_COMPLETED"]
FutureType = TypeVar("FutureType", bound=asyncio.Future[Any])


async def wait(
    fs: typing.Iterable[FutureType], *, timeout: float | None = None, return_when: _ReturnWhen = asyncio.ALL_COMPLETED,
) -> tuple[list[FutureType], list[FutureType]]:
    """asyncio.wait for workflow code (as temporalio's): `done` and `pending` are lists in the order
    of `fs`, not sets, so iterating them is the same on every replay; `timeout` is a durable timer."""
    if asyncio.isfuture(fs) or asyncio.iscoroutine(fs):
        raise TypeError(f"workflow.wait takes an iterable of tasks or futures, not a {type(fs).__name__}")
    futures = list(fs)
    if not futures:
        raise ValueError("workflow.wait needs at least one task or future")
    if return_when not in (asyncio.FIRST_COMPLETED, asyncio.FIRST_EXCEPTION, asyncio.ALL_COMPLETED):
        raise ValueError(f"workflow.wait: return_when must be FIRST_COMPLETED, FIRST_EXCEPTION or ALL_COMPLETED, not {return_when!r}")
    if any(asyncio.iscoroutine(f) for f in futures):
        raise TypeError("workflow.wait takes tasks, not coroutines: wrap each in asyncio.create_task")

    def enough() -> bool:
        done = [f for f in futures if f.done()]
        if return_when == asyncio.FIRST_COMPLETED and done:
            return True
        if return_when == asyncio.FIRST_EXCEPTION and any(not f.cancelled() and f.exception() is not None for f in done):
            return True
        return len(done) == len(futures)

    if not enough():
        runtime = _Runtime.current()
        waiter = runtime.create_future()

        def release() -> None:
            if not waiter.done():
                waiter.set_result(None)

        def settled(_: asyncio.Future[Any]) -> None:
            if enough():
                release()

        timer = runtime.call_later(timeout, release) if timeout is not None else None
        for future in futures:
            future.add_done_callback(settled)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            for future in futures:
                future.remove_done_callback(settled)
    return [f for f in futures if f.done()], [f for f in futures if not f.done()]


def as_completed(fs: typing.Iterable[typing.Awaitable[Any]], *, timeout: float | None = None) -> Iterator[typing.Awaitable[Any]]:
    """asyncio.as_completed for workflow code (as temporalio's): awaitables that give the results
    in the order they complete, the same on every replay; after `timeout` (a durable timer) the
    rest raise asyncio.TimeoutError."""
    if asyncio.isfuture(fs) or asyncio.iscoroutine(fs):
        raise TypeError(f"workflow.as_completed takes an iterable of awaitables, not a {type(fs).__name__}")
    runtime = _Runtime.current()
    todo = [asyncio.ensure_future(f, loop=runtime) for f in fs]
    finished: asyncio.Queue[asyncio.Future[Any] | None] = asyncio.Queue()
    outstanding = list(todo)

    def completed(future: asyncio.Future[Any]) -> None:
        if future in outstanding:
            outstanding.remove(future)
            finished.put_nowait(future)
            if not outstanding and timer is not None:
                timer.cancel()

    def timed_out() -> None:
        for future in outstanding:
            future.remove_done_callback(completed)
            finished.put_nowait(None)
        outstanding.clear()

    async def next_result() -> Any:
        future = await finished.get()
        if future is None:
            raise asyncio.TimeoutError()
        return future.result()

    timer = runtime.call_later(timeout, timed_out) if todo and timeout is not None else None
    for future in todo:
        future.add_done_callback(completed)
    for _ in todo:
        yield next_result()


@overload
async def execute_activity(
    activity: CallableAsyncNoParam[ReturnType], *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity(
    activity: CallableSyncNoParam[ReturnType], *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity(
    activity: CallableAsyncSingleParam[ParamType, ReturnType], arg: ParamType, /, *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity(
    activity: CallableSyncSingleParam[ParamType, ReturnType], arg: ParamType, /, *,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity(
    activity: Callable[[FirstParamType, SecondParamType, Unpack[MoreParamTypes]], Awaitable[ReturnType]],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity(
    activity: Callable[[FirstParamType, SecondParamType, Unpack[MoreParamTypes]], ReturnType],
    arg: FirstParamType, arg2: SecondParamType, /, *more: Unpack[MoreParamTypes],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity(
    activity: Callable[..., Awaitable[ReturnType]], *, args: Sequence[Any],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity(
    activity: Callable[..., ReturnType], *, args: Sequence[Any],
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> ReturnType: ...


@overload
async def execute_activity(
    activity: str, *positional: Any, args: Sequence[Any] = (), result_type: type | None = None,
    task_queue: str | None = None, schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None, start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None, retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL, activity_id: str | None = None,
    disable_eager_execution: bool = False,
) -> Any: ...


async def execute_activity(
    activity: Callable[..., Any] | str,
    *positional: object,
    args: Sequence[Any] = (),
    task_queue: str | None = None,
    schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None,
    start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    cancellation_type: ActivityCancellationType = ActivityCancellationType.TRY_CANCEL,
    activity_id: str | None = None,
    result_type: type | None = None,
    disable_eager_execution: bool = False,
) -> Any:
    """Run an activity and wait for its result (raises ActivityError when it fails for good)."""
    return await cast(Callable[..., Any], start_activity)(
        activity, *positional, args=args, task_queue=task_queue, schedule_to_close_timeout=schedule_to_close_timeout,
        schedule_to_start_timeout=schedule_to_start_timeout,
        start_to_close_timeout=start_to_close_timeout, heartbeat_timeout=heartbeat_timeout, retry_policy=retry_policy,
        cancellation_type=cancellation_type, activity_id=activity_id, result_type=result_type,
        disable_eager_execution=disable_eager_execution,
    )


def patched(id: str) -> bool:
    """Whether this run takes the code after patch `id`: True for runs that reach it with the patch
    deployed (a MarkerRecorded event remembers it), False when replaying history recorded before it."""
    return _Runtime.current().patched(id)


def deprecate_patch(id: str) -> None:
    """Mark patch `id` as the only path left: histories with or without its marker both replay."""
    _Runtime.current().patched(id, deprecated=True)


@overload
async def start_child_workflow(
    workflow: MethodAsyncNoParam[SelfType, ReturnType], *,
    id: str | None = None, task_queue: str | None = None, execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE, search_attributes: dict[str, Any] | None = None,
    cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    memo: Mapping[str, Any] | None = None,
) -> ChildWorkflowHandle[SelfType, ReturnType]: ...


@overload
async def start_child_workflow(
    workflow: MethodAsyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, *,
    id: str | None = None, task_queue: str | None = None, execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE, search_attributes: dict[str, Any] | None = None,
    cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    memo: Mapping[str, Any] | None = None,
) -> ChildWorkflowHandle[SelfType, ReturnType]: ...


@overload
async def start_child_workflow(
    workflow: Callable[Concatenate[SelfType, MultiParamSpec], Awaitable[ReturnType]], *, args: Sequence[Any],
    id: str | None = None, task_queue: str | None = None, execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE, search_attributes: dict[str, Any] | None = None,
    cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    memo: Mapping[str, Any] | None = None,
) -> ChildWorkflowHandle[SelfType, ReturnType]: ...


@overload
async def start_child_workflow(
    workflow: type[SelfType], arg: Any = UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
    id: str | None = None, task_queue: str | None = None, execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE, search_attributes: dict[str, Any] | None = None,
    cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    memo: Mapping[str, Any] | None = None,
) -> ChildWorkflowHandle[SelfType, Any]: ...


@overload
async def start_child_workflow(
    workflow: str, arg: Any = UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
    id: str | None = None, task_queue: str | None = None, execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE, search_attributes: dict[str, Any] | None = None,
    cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    memo: Mapping[str, Any] | None = None,
) -> ChildWorkflowHandle[Any, Any]: ...


async def start_child_workflow(
    workflow: type | Callable[..., Any] | str,
    arg: Any = UNSET,
    *,
    args: Sequence[Any] = (),
    id: str | None = None,
    task_queue: str | None = None,
    execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None,
    task_timeout: timedelta | None = None,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE,
    search_attributes: dict[str, Any] | None = None,
    cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    memo: Mapping[str, Any] | None = None,
    result_type: type | None = None,
) -> ChildWorkflowHandle[Any, Any]:
    """Start a child workflow and wait until it started (raises WorkflowAlreadyStartedError if its
    id is taken). The child runs on `task_queue` (default: this workflow's); its id is `id`, else
    workflow.uuid4() (the same on every replay), as temporalio. The handle is of the child's class
    and result type (ChildWorkflowHandle[MyChild, MyResult]) when `workflow` is its run method."""
    runtime = _Runtime.current()
    id = id or str(uuid4())
    found = definition(workflow)
    workflow_type = found if isinstance(found, str) else found.name
    if result_type is None and not isinstance(found, str):
        result_type = found.result_type()
    return await runtime.start_child_workflow(
        workflow_type, ([arg] if arg is not UNSET else []) + list(args), id=id, task_queue=task_queue,
        execution_timeout=execution_timeout, run_timeout=run_timeout, task_timeout=task_timeout, id_reuse_policy=id_reuse_policy,
        parent_close_policy=parent_close_policy, search_attributes=search_attributes, memo=memo, result_type=result_type,
        cancellation_type=cancellation_type,
    )


@overload
async def execute_child_workflow(
    workflow: MethodAsyncNoParam[SelfType, ReturnType], *,
    id: str | None = None, task_queue: str | None = None, execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE, search_attributes: dict[str, Any] | None = None,
    cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    memo: Mapping[str, Any] | None = None,
) -> ReturnType: ...


@overload
async def execute_child_workflow(
    workflow: MethodAsyncSingleParam[SelfType, ParamType, ReturnType], arg: ParamType, *,
    id: str | None = None, task_queue: str | None = None, execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE, search_attributes: dict[str, Any] | None = None,
    cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    memo: Mapping[str, Any] | None = None,
) -> ReturnType: ...


@overload
async def execute_child_workflow(
    workflow: Callable[Concatenate[SelfType, MultiParamSpec], Awaitable[ReturnType]], *, args: Sequence[Any],
    id: str | None = None, task_queue: str | None = None, execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE, search_attributes: dict[str, Any] | None = None,
    cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    memo: Mapping[str, Any] | None = None,
) -> ReturnType: ...


@overload
async def execute_child_workflow(
    workflow: type[SelfType], arg: Any = UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
    id: str | None = None, task_queue: str | None = None, execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE, search_attributes: dict[str, Any] | None = None,
    cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    memo: Mapping[str, Any] | None = None,
) -> Any: ...


@overload
async def execute_child_workflow(
    workflow: str, arg: Any = UNSET, *, args: Sequence[Any] = (), result_type: type | None = None,
    id: str | None = None, task_queue: str | None = None, execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE, search_attributes: dict[str, Any] | None = None,
    cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    memo: Mapping[str, Any] | None = None,
) -> Any: ...


async def execute_child_workflow(
    workflow: type | Callable[..., Any] | str,
    arg: Any = UNSET,
    *,
    args: Sequence[Any] = (),
    id: str | None = None,
    task_queue: str | None = None,
    execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None,
    task_timeout: timedelta | None = None,
    id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE,
    search_attributes: dict[str, Any] | None = None,
    cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    memo: Mapping[str, Any] | None = None,
    result_type: type | None = None,
) -> Any:
    """Start a child workflow and wait for its result (raises ChildWorkflowError if it did not complete)."""
    handle = await cast(Callable[..., Any], start_child_workflow)(
        workflow, arg, args=args, id=id, task_queue=task_queue, execution_timeout=execution_timeout, run_timeout=run_timeout,
        task_timeout=task_timeout, id_reuse_policy=id_reuse_policy, parent_close_policy=parent_close_policy,
        search_attributes=search_attributes, memo=memo, result_type=result_type, cancellation_type=cancellation_type,
    )
    return await handle


class ExternalWorkflowHandle(SignallingHandle[HandleSelfType]):
    """Another workflow this one may signal or ask to cancel (as temporalio's). Of the workflow's
    class (ExternalWorkflowHandle[MyWorkflow], from get_external_workflow_handle_for): its signals
    are the class's."""

    def __init__(self, id: str, run_id: str | None = None) -> None:
        self.id = id
        self.run_id = run_id

    async def _signal(self, name: str, args: list[Any]) -> None:
        await _Runtime.current().signal_external_workflow(self.id, self.run_id, name, args)

    async def cancel(self) -> None:
        """Ask the workflow to cancel; raises ApplicationError if it is not found or closed."""
        await _Runtime.current().cancel_external_workflow(self.id, self.run_id)


def get_external_workflow_handle(workflow_id: str, *, run_id: str | None = None) -> ExternalWorkflowHandle[Any]:
    """A handle to signal or cancel another workflow (its current run unless `run_id` is given)."""
    _Runtime.current()  # workflow code only, as the handle's calls
    return ExternalWorkflowHandle(workflow_id, run_id)


def get_external_workflow_handle_for(
    workflow: Callable[Concatenate[SelfType, MultiParamSpec], Awaitable[Any]], workflow_id: str, *, run_id: str | None = None,
) -> ExternalWorkflowHandle[SelfType]:
    """get_external_workflow_handle, typed by the workflow's run method (`MyWorkflow.run`): its
    signal() takes the class's signal handlers and their arguments (as temporalio's). The method
    is only read by type checkers: the workflow is not checked to be of that type."""
    return get_external_workflow_handle(workflow_id, run_id=run_id)
