"""Workflow definitions and the API workflow code calls (as temporalio.workflow).

Workflow code runs on a deterministic loop replayed from history: it must not read clocks,
randomness, the network or files except through this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import functools
import inspect
import logging
import random as _random
import typing
import uuid as _uuid
import warnings
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar, overload

from kadence import activity as activity_module
from kadence._worker_interceptor import (
    ContinueAsNewInput,
    SignalChildWorkflowInput,
    SignalExternalWorkflowInput,
    StartActivityInput,
    StartChildWorkflowInput,
    StartLocalActivityInput,
    WorkflowOutboundInterceptor,
)
from kadence._workflow_instance import (
    UNFINISHED_POLICY_ATTR,
    ContinueAsNewError,
    Handler,
    HandlerUnfinishedPolicy,
    ParentInfo,
    PendingCommand,
    RootInfo,
    UnfinishedSignalHandlersWarning,
    UnfinishedUpdateHandlersWarning,
    UpdateInfo,
    WorkflowDefinition,
    WorkflowInfo,
    WorkflowInstance,
    _running_instance,
    current_update,
)
from kadence.common import ParentClosePolicy, RawValue, RetryPolicy, WorkflowIDReusePolicy, to_ms
from kadence.converter import PayloadConverter, type_hints
from kadence.exceptions import NondeterminismError, ReadOnlyContextError

__all__ = [
    "defn", "run", "signal", "query", "update", "continue_as_new", "ContinueAsNewError", "execute_activity", "start_activity", "sleep",
    "execute_local_activity", "start_local_activity",
    "wait_condition", "upsert_search_attributes", "info", "now", "patched", "deprecate_patch", "random", "uuid4",
    "get_current_history_length", "get_current_history_size", "is_continue_as_new_suggested",
    "start_child_workflow", "execute_child_workflow", "ChildWorkflowHandle", "ParentClosePolicy",
    "get_external_workflow_handle", "ExternalWorkflowHandle", "NondeterminismError", "ReadOnlyContextError", "Info",
    "logger", "LoggerAdapter", "unsafe", "in_workflow", "SandboxImportNotificationPolicy",
    "start_activity_method", "execute_activity_method", "start_local_activity_method", "execute_local_activity_method",
    "wait", "as_completed",
    "ParentInfo", "RootInfo", "UpdateInfo", "current_update_info", "HandlerUnfinishedPolicy",
    "UnfinishedUpdateHandlersWarning", "UnfinishedSignalHandlersWarning", "init", "all_handlers_finished", "payload_converter", "RawValue",
    "get_signal_handler", "set_signal_handler", "get_dynamic_signal_handler", "set_dynamic_signal_handler",
    "get_query_handler", "set_query_handler", "get_dynamic_query_handler", "set_dynamic_query_handler",
    "get_update_handler", "set_update_handler", "get_dynamic_update_handler", "set_dynamic_update_handler",
    "ActivityHandle",
]

ClassType = TypeVar("ClassType", bound=type)
RunFn = TypeVar("RunFn", bound=Callable[..., Any])

Info = WorkflowInfo
ActivityHandle = asyncio.Task  # temporalio's name for what start_activity returns: await it for the result

_UNSET: Any = object()
_DEFINITION_ATTR = "__kadence_workflow_definition"
_RUN_ATTR = "__kadence_workflow_run"
_SIGNAL_ATTR = "__kadence_workflow_signal"
_QUERY_ATTR = "__kadence_workflow_query"
_UPDATE_ATTR = "__kadence_workflow_update"
_VALIDATOR_ATTR = "__kadence_workflow_update_validator"
_INIT_ATTR = "__kadence_workflow_init"


@overload
def defn(cls: ClassType) -> ClassType: ...


@overload
def defn(*, name: str | None = None) -> Callable[[ClassType], ClassType]: ...


def defn(cls: ClassType | None = None, *, name: str | None = None) -> Any:
    """Mark a class as a workflow; its type name is `name` or the class name. One method must be @workflow.run."""

    def register(c: ClassType) -> ClassType:
        runs = [m for m in vars(c).values() if getattr(m, _RUN_ATTR, False)]
        if len(runs) != 1:
            raise TypeError(f"workflow {c.__name__} needs exactly one @workflow.run method, found {len(runs)}")
        if not inspect.iscoroutinefunction(runs[0]):
            raise TypeError(f"{c.__name__}.{runs[0].__name__}: the @workflow.run method must be `async def`")
        signals = {getattr(m, _SIGNAL_ATTR): m for m in vars(c).values() if hasattr(m, _SIGNAL_ATTR)}
        queries = {getattr(m, _QUERY_ATTR): m for m in vars(c).values() if hasattr(m, _QUERY_ATTR)}
        updates = {
            getattr(m, _UPDATE_ATTR): (m, getattr(m, _VALIDATOR_ATTR, None)) for m in vars(c).values() if hasattr(m, _UPDATE_ATTR)
        }
        init_takes_args = getattr(vars(c).get("__init__"), _INIT_ATTR, False)
        if init_takes_args:
            _check_init_matches_run(c, runs[0])
        setattr(c, _DEFINITION_ATTR, WorkflowDefinition(
            name or c.__name__, c, runs[0], signals, queries, updates, init_takes_args=init_takes_args,
        ))
        return c

    return register(cls) if cls is not None else register


def run(fn: RunFn) -> RunFn:
    """Mark the workflow's entry method."""
    setattr(fn, _RUN_ATTR, True)
    return fn


def init(init_fn: RunFn) -> RunFn:
    """Mark a workflow's __init__ as taking the run's arguments (as temporalio): its parameters
    must be those of the @workflow.run method. Without it, __init__ takes none."""
    if init_fn.__name__ != "__init__":
        raise ValueError(f"@workflow.init may only decorate __init__, not {init_fn.__qualname__}")
    setattr(init_fn, _INIT_ATTR, True)
    return init_fn


def _check_init_matches_run(cls: type, run_fn: Callable[..., Any]) -> None:
    def shape(fn: Callable[..., Any]) -> list[tuple[str, Any]]:
        return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]

    if shape(vars(cls)["__init__"]) != shape(run_fn):
        raise ValueError(
            f"workflow {cls.__name__}: the @workflow.init __init__ must take the same parameters as the @workflow.run "
            f"method {run_fn.__name__}{inspect.signature(run_fn)}"
        )


def _check_dynamic(fn: Callable[..., Any], kind: str, is_method: bool = True) -> None:
    """A dynamic handler takes the name and the raw arguments: (self, name: str, args: Sequence[RawValue]);
    a signal or query one may take temporalio's deprecated (self, name: str, *args) instead (warned)."""
    parameters = list(inspect.signature(fn).parameters.values())
    self_part = "self, " if is_method else ""
    if len(parameters) == (3 if is_method else 2):
        if parameters[-1].kind is not inspect.Parameter.VAR_POSITIONAL:
            return
        if kind != "update":
            message = f"Dynamic {kind}s with vararg third param is deprecated, use Sequence[RawValue]"
            warnings.warn(message, DeprecationWarning, stacklevel=4)
            return
    raise TypeError(
        f"dynamic {kind} handler {getattr(fn, '__qualname__', fn)!r} must take ({self_part}name: str, args: Sequence[RawValue])"
    )


@overload
def signal(fn: RunFn) -> RunFn: ...


@overload
def signal(
    *, name: str | None = None, dynamic: bool = False,
    unfinished_policy: HandlerUnfinishedPolicy = HandlerUnfinishedPolicy.WARN_AND_ABANDON, description: str | None = None,
) -> Callable[[RunFn], RunFn]: ...


def signal(
    fn: RunFn | None = None, *, name: str | None = None, dynamic: bool = False,
    unfinished_policy: HandlerUnfinishedPolicy = HandlerUnfinishedPolicy.WARN_AND_ABANDON, description: str | None = None,
) -> Any:
    """Mark a method as the handler of the signal `name` (default: the method's name); with
    `dynamic=True`, of every signal no other handler takes: it gets (name, args: Sequence[RawValue])."""

    def register(f: RunFn) -> RunFn:
        setattr(f, _SIGNAL_ATTR, _handler_key(f, "signal", name, dynamic))
        setattr(f, UNFINISHED_POLICY_ATTR, HandlerUnfinishedPolicy(unfinished_policy))
        return f

    return register(fn) if fn is not None else register


@overload
def query(fn: RunFn) -> RunFn: ...


@overload
def query(
    *, name: str | None = None, dynamic: bool = False, description: str | None = None,
) -> Callable[[RunFn], RunFn]: ...


def query(fn: RunFn | None = None, *, name: str | None = None, dynamic: bool = False, description: str | None = None) -> Any:
    """Mark a method as the handler of the query `name` (default: the method's name). A query reads
    the workflow's state and returns it: it must not change state or await (so not `async def`)."""

    def register(f: RunFn) -> RunFn:
        if inspect.iscoroutinefunction(f):
            raise TypeError(f"query {f.__qualname__}: a query handler must be a plain `def`, not `async def`")
        setattr(f, _QUERY_ATTR, _handler_key(f, "query", name, dynamic))
        return f

    return register(fn) if fn is not None else register


@overload
def update(fn: RunFn) -> RunFn: ...


@overload
def update(
    *, name: str | None = None, dynamic: bool = False,
    unfinished_policy: HandlerUnfinishedPolicy = HandlerUnfinishedPolicy.WARN_AND_ABANDON, description: str | None = None,
) -> Callable[[RunFn], RunFn]: ...


def update(
    fn: RunFn | None = None, *, name: str | None = None, dynamic: bool = False,
    unfinished_policy: HandlerUnfinishedPolicy = HandlerUnfinishedPolicy.WARN_AND_ABANDON, description: str | None = None,
) -> Any:
    """Mark a method as the handler of the update `name` (default: the method's name): it may change
    state and await (activities, timers); its return value is the caller's result. A validator,
    registered with `@handler.validator`, runs first and rejects the update by raising."""

    def register(f: RunFn) -> RunFn:
        setattr(f, _UPDATE_ATTR, _handler_key(f, "update", name, dynamic))
        setattr(f, UNFINISHED_POLICY_ATTR, HandlerUnfinishedPolicy(unfinished_policy))

        def validator(check: Callable[..., None]) -> Callable[..., None]:
            setattr(f, _VALIDATOR_ATTR, check)
            return check

        f.validator = validator  # type: ignore[attr-defined]
        return f

    return register(fn) if fn is not None else register


def _handler_key(fn: Callable[..., Any], kind: str, name: str | None, dynamic: bool) -> str | None:
    """The name a handler is registered under; None for the dynamic one."""
    if not dynamic:
        return name or fn.__name__
    if name is not None:
        raise ValueError(f"{kind} {fn.__qualname__}: a dynamic handler takes no name")
    _check_dynamic(fn, kind)
    return None


def _name_of(handler: Callable[..., Any] | str, attr: str, kind: str) -> str:
    if isinstance(handler, str):
        return handler
    if not hasattr(handler, attr):
        raise TypeError(f"{handler!r} is not a {kind} handler; decorate it with @workflow.{kind} or pass the {kind}'s name")
    found = getattr(handler, attr)
    if found is None:
        raise TypeError(f"{handler!r} is the dynamic {kind} handler: pass the {kind}'s name instead")
    return found


def update_name(handler: Callable[..., Any] | str) -> str:
    return _name_of(handler, _UPDATE_ATTR, "update")


def query_name(query: Callable[..., Any] | str) -> str:
    return _name_of(query, _QUERY_ATTR, "query")


def signal_name(signal: Callable[..., Any] | str) -> str:
    return _name_of(signal, _SIGNAL_ATTR, "signal")


def definition(workflow: type | Callable[..., Any] | str) -> WorkflowDefinition | str:
    """The definition of a workflow class or its run method, or a bare type name."""
    if isinstance(workflow, str):
        return workflow
    if inspect.isclass(workflow):
        found = getattr(workflow, _DEFINITION_ATTR, None)
    else:
        owner = _owner_class(workflow)
        found = getattr(owner, _DEFINITION_ATTR, None) if owner else None
    if found is None:
        raise TypeError(f"{workflow!r} is not a workflow; decorate its class with @workflow.defn and its entry with @workflow.run")
    return found


def _owner_class(fn: Callable[..., Any]) -> type | None:
    qualname = getattr(fn, "__qualname__", "")
    module = inspect.getmodule(fn)
    if "." not in qualname or module is None:
        return None
    return getattr(module, qualname.rsplit(".", 1)[0], None)


def _current_instance() -> WorkflowInstance | None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop if isinstance(loop, WorkflowInstance) else None


_instance = _running_instance


def in_workflow() -> bool:
    """Whether the code is running in a workflow."""
    return _current_instance() is not None


def info() -> WorkflowInfo:
    return _instance().outbound.info()


def current_update_info() -> UpdateInfo | None:
    """The update whose validator or handler is running (or a task it started), else None."""
    return current_update.get()


def payload_converter() -> PayloadConverter:
    """The run's payload converter: to convert a dynamic handler's RawValue arguments."""
    return _instance().converter.payload_converter


def all_handlers_finished() -> bool:
    """Whether no signal or update handler is still running: wait for it before the run returns
    (`await workflow.wait_condition(workflow.all_handlers_finished)`) so none is cut off."""
    return not _instance().running_handlers


def get_signal_handler(name: str) -> Callable[..., Any] | None:
    """The handler of signal `name` (None if there is none)."""
    return _handler_fn(_instance().signals, name)


def set_signal_handler(name: str, handler: Callable[..., Any] | None) -> None:
    """Handle signal `name` with `handler` (None removes it); signals of that name that arrived
    before it was set reach it now, in order (as temporalio)."""
    _instance().set_signal_handler(name, handler)


def get_dynamic_signal_handler() -> Callable[..., Any] | None:
    return _handler_fn(_instance().signals, None)


def set_dynamic_signal_handler(handler: Callable[..., Any] | None) -> None:
    """Handle every signal no other handler takes with `handler(name, args: Sequence[RawValue])`;
    the signals kept for want of a handler reach it now."""
    if handler is not None:
        _check_dynamic(handler, "signal", is_method=False)
    _instance().set_signal_handler(None, handler)


def get_query_handler(name: str) -> Callable[..., Any] | None:
    return _handler_fn(_instance().queries, name)


def set_query_handler(name: str, handler: Callable[..., Any] | None) -> None:
    """Answer query `name` with `handler` (None removes it)."""
    _instance().set_query_handler(name, handler)


def get_dynamic_query_handler() -> Callable[..., Any] | None:
    return _handler_fn(_instance().queries, None)


def set_dynamic_query_handler(handler: Callable[..., Any] | None) -> None:
    """Answer every query no other handler takes with `handler(name, args: Sequence[RawValue])`."""
    if handler is not None:
        _check_dynamic(handler, "query", is_method=False)
    _instance().set_query_handler(None, handler)


def get_update_handler(name: str) -> Callable[..., Any] | None:
    return _handler_fn(_instance().updates, name)


def set_update_handler(name: str, handler: Callable[..., Any] | None, *, validator: Callable[..., Any] | None = None) -> None:
    """Run `handler` for update `name` (None removes it), after `validator` if given."""
    _instance().set_update_handler(name, handler, validator)


def get_dynamic_update_handler() -> Callable[..., Any] | None:
    return _handler_fn(_instance().updates, None)


def set_dynamic_update_handler(handler: Callable[..., Any] | None, *, validator: Callable[..., Any] | None = None) -> None:
    """Run `handler(name, args: Sequence[RawValue])` for every update no other handler takes."""
    if handler is not None:
        _check_dynamic(handler, "update", is_method=False)
    _instance().set_update_handler(None, handler, validator)


def _handler_fn(handlers: dict[str | None, Handler], name: str | None) -> Callable[..., Any] | None:
    handler = handlers.get(name)
    if handler is None:
        return None
    return functools.partial(handler.fn, _instance()._object) if handler.is_method else handler.fn


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
        return _instance().is_replaying()

    @staticmethod
    def is_replaying_history_events() -> bool:
        """Whether the workflow replays history events (queries and update validators, being live, excluded)."""
        instance = _instance()
        return instance.is_replaying() and not instance.read_only

    @staticmethod
    def is_read_only() -> bool:
        """Whether the code runs in a query handler or update validator, which must not change state."""
        return _instance().read_only

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
        instance = _current_instance()
        if instance is None:
            return msg, kwargs
        details = instance.info._logger_details()
        update = current_update.get()
        if update is not None:
            details.update(update._logger_details())
        extra: dict[str, Any] = {}
        if self.workflow_info_on_extra:
            extra["temporal_workflow"] = details
        if self.full_workflow_info_on_extra:
            extra["workflow_info"] = instance.info
        kwargs["extra"] = {**extra, **(kwargs.get("extra") or {})}  # the caller's extra wins, as temporalio
        if self.workflow_info_on_message:
            msg = f"{msg} ({details})"
        return msg, kwargs

    def isEnabledFor(self, level: int) -> bool:
        instance = _current_instance()
        if instance is not None and instance.is_replaying() and not instance.read_only and not self.log_during_replay:
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
    return _instance().now()


def random() -> _random.Random:
    """A random generator for workflow code: seeded by the run, so replay draws the same numbers."""
    return _instance().random


def uuid4() -> _uuid.UUID:
    """A version-4 UUID drawn from workflow.random(): the same on every replay."""
    return _uuid.UUID(int=_instance().random.getrandbits(128), version=4)


def get_current_history_length() -> int:
    """Events in this run's history as of the current workflow task (its WorkflowTaskStarted included)."""
    return _instance().history_length


def get_current_history_size() -> int:
    """Payload bytes in this run's history as of the current workflow task."""
    return _instance().history_bytes


def is_continue_as_new_suggested() -> bool:
    """True once the history passes 10,240 events or 10 MB (the history service warns there and ends
    the run at 51,200 events or 50 MB): time to workflow.continue_as_new()."""
    return _instance().continue_as_new_suggested()


def continue_as_new(
    arg: Any = _UNSET, *, args: Sequence[Any] = (), workflow: type | str | None = None, task_queue: str | None = None,
    run_timeout: timedelta | None = None, task_timeout: timedelta | None = None,
) -> NoReturn:
    """End this run and start a new one of the same workflow id with fresh history (and these arguments)."""
    instance = _instance()
    workflow_type = None
    if workflow is not None:
        found = definition(workflow)
        workflow_type = found if isinstance(found, str) else found.name
    instance.outbound.continue_as_new(ContinueAsNewInput(
        workflow=workflow_type, args=([arg] if arg is not _UNSET else []) + list(args), task_queue=task_queue,
        run_timeout=run_timeout, task_timeout=task_timeout, backoff_start_interval=None, retry_policy=None, memo=None,
        search_attributes=None, headers={}, versioning_intent=None, arg_types=None,
    ))


def upsert_search_attributes(attributes: dict[str, Any]) -> None:
    """Set (or overwrite) search attributes of this run: indexed in the read model for list queries."""
    _instance().upsert_search_attributes(attributes)


async def wait_condition(condition: Callable[[], bool], *, timeout: timedelta | float | None = None) -> None:
    """Wait until `condition()` is true (checked whenever the workflow has run dry); raises
    asyncio.TimeoutError after `timeout`, which is a durable timer."""
    future = _instance().wait_condition(condition)
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
    await asyncio.wait_for(future, seconds)


async def sleep(duration: timedelta | float) -> None:
    """A durable timer: the workflow resumes after `duration`, even across worker restarts."""
    await asyncio.sleep(duration.total_seconds() if isinstance(duration, timedelta) else duration)


def start_activity(
    activity: Callable[..., Any] | str,
    *positional: Any,
    args: Sequence[Any] = (),
    task_queue: str | None = None,
    schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None,
    start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    activity_id: str | None = None,
    result_type: type | None = None,
    disable_eager_execution: bool = False,
) -> asyncio.Task[Any]:
    """Schedule an activity; the returned task resolves to its result or raises ActivityError.

    Arguments go positionally (`start_activity(fn, a, b)`) or, as in temporalio, as `args=[a, b]`.
    A worker that polls the activity's task queue and has a free slot runs it itself (eager
    execution, as Temporal's) unless `disable_eager_execution` is set.
    """
    instance = _instance()
    if isinstance(activity, str):
        activity_type = activity
    else:
        activity_definition = activity_module.definition(activity)
        activity_type = activity_definition.name
        if result_type is None:
            result_type = type_hints(activity_definition.fn).get("return")
    if start_to_close_timeout is None and schedule_to_close_timeout is None:
        raise ValueError(f"activity {activity_type}: set start_to_close_timeout or schedule_to_close_timeout")
    return instance.outbound.start_activity(StartActivityInput(
        activity=activity_type, args=[*positional, *args], activity_id=activity_id, task_queue=task_queue,
        schedule_to_close_timeout=schedule_to_close_timeout, schedule_to_start_timeout=schedule_to_start_timeout,
        start_to_close_timeout=start_to_close_timeout, heartbeat_timeout=heartbeat_timeout, retry_policy=retry_policy,
        cancellation_type=None, headers={}, disable_eager_execution=disable_eager_execution, versioning_intent=None, summary=None,
        arg_types=None, ret_type=result_type,
    ))


def start_local_activity(
    activity: Callable[..., Any] | str,
    *positional: Any,
    args: Sequence[Any] = (),
    schedule_to_close_timeout: timedelta | None = None,
    start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    result_type: type | None = None,
) -> asyncio.Task[Any]:
    """Run a short activity in this worker, within the workflow task, with no task queue round
    trip; its outcome is recorded as a marker. Retries follow `retry_policy` but stay within the
    workflow task (at most `schedule_to_close_timeout`, else 5 s of attempts): keep it short."""
    instance = _instance()
    if isinstance(activity, str):
        activity_type = activity
    else:
        activity_definition = activity_module.definition(activity)
        activity_type = activity_definition.name
        if result_type is None:
            result_type = type_hints(activity_definition.fn).get("return")
    if start_to_close_timeout is None and schedule_to_close_timeout is None:
        raise ValueError(f"local activity {activity_type}: set start_to_close_timeout or schedule_to_close_timeout")
    return instance.outbound.start_local_activity(StartLocalActivityInput(
        activity=activity_type, args=[*positional, *args], activity_id=None, schedule_to_close_timeout=schedule_to_close_timeout,
        schedule_to_start_timeout=None, start_to_close_timeout=start_to_close_timeout, retry_policy=retry_policy,
        local_retry_threshold=None, cancellation_type=None, headers={}, summary=None, arg_types=None, ret_type=result_type,
    ))


async def execute_local_activity(
    activity: Callable[..., Any] | str,
    *positional: Any,
    args: Sequence[Any] = (),
    schedule_to_close_timeout: timedelta | None = None,
    start_to_close_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    result_type: type | None = None,
) -> Any:
    """Run a local activity and wait for its result (raises ActivityError when it fails for good)."""
    return await start_local_activity(
        activity, *positional, args=args, schedule_to_close_timeout=schedule_to_close_timeout,
        start_to_close_timeout=start_to_close_timeout, retry_policy=retry_policy, result_type=result_type,
    )


def start_activity_method(activity: Callable[..., Any], *positional: Any, **options: Any) -> asyncio.Task[Any]:
    """start_activity for an activity defined as a method (`MyActivities.fetch`, registered on the
    worker as `activities=[my_activities.fetch]`): its type name is the method's name or its
    @activity.defn name, as temporalio."""
    return start_activity(activity, *positional, **options)


async def execute_activity_method(activity: Callable[..., Any], *positional: Any, **options: Any) -> Any:
    """execute_activity for an activity defined as a method."""
    return await start_activity(activity, *positional, **options)


def start_local_activity_method(activity: Callable[..., Any], *positional: Any, **options: Any) -> asyncio.Task[Any]:
    """start_local_activity for an activity defined as a method."""
    return start_local_activity(activity, *positional, **options)


async def execute_local_activity_method(activity: Callable[..., Any], *positional: Any, **options: Any) -> Any:
    """execute_local_activity for an activity defined as a method."""
    return await start_local_activity(activity, *positional, **options)


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
        instance = _instance()
        waiter = instance.create_future()

        def release() -> None:
            if not waiter.done():
                waiter.set_result(None)

        def settled(_: asyncio.Future[Any]) -> None:
            if enough():
                release()

        timer = instance.call_later(timeout, release) if timeout is not None else None
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
    instance = _instance()
    todo = [asyncio.ensure_future(f, loop=instance) for f in fs]
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

    timer = instance.call_later(timeout, timed_out) if todo and timeout is not None else None
    for future in todo:
        future.add_done_callback(completed)
    for _ in todo:
        yield next_result()


async def execute_activity(
    activity: Callable[..., Any] | str,
    *positional: Any,
    args: Sequence[Any] = (),
    task_queue: str | None = None,
    schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None,
    start_to_close_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    activity_id: str | None = None,
    result_type: type | None = None,
    disable_eager_execution: bool = False,
) -> Any:
    """Run an activity and wait for its result (raises ActivityError when it fails for good)."""
    return await start_activity(
        activity, *positional, args=args, task_queue=task_queue, schedule_to_close_timeout=schedule_to_close_timeout,
        schedule_to_start_timeout=schedule_to_start_timeout,
        start_to_close_timeout=start_to_close_timeout, heartbeat_timeout=heartbeat_timeout, retry_policy=retry_policy,
        activity_id=activity_id, result_type=result_type, disable_eager_execution=disable_eager_execution,
    )



def patched(id: str) -> bool:
    """Whether this run takes the code after patch `id`: True for runs that reach it with the patch
    deployed (a MarkerRecorded event remembers it), False when replaying history recorded before it."""
    return _instance().patched(id)


def deprecate_patch(id: str) -> None:
    """Mark patch `id` as the only path left: histories with or without its marker both replay."""
    _instance().patched(id, deprecated=True)


class ChildWorkflowHandle(asyncio.Task[Any]):
    """A started child workflow (as temporalio's): await it for the result, which raises
    ChildWorkflowError if the child did not complete; cancel() asks the child to cancel."""

    id: str
    first_execution_run_id: str

    async def signal(self, signal: Callable[..., Any] | str, arg: Any = _UNSET, *, args: Sequence[Any] = ()) -> None:
        """Signal the child; raises ApplicationError if it cannot be signalled (it closed)."""
        await _instance().outbound.signal_child_workflow(SignalChildWorkflowInput(
            signal=signal_name(signal), args=([arg] if arg is not _UNSET else []) + list(args), child_workflow_id=self.id, headers={},
        ))


async def start_child_workflow(
    workflow: type | Callable[..., Any] | str,
    arg: Any = _UNSET,
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
    result_type: type | None = None,
) -> ChildWorkflowHandle:
    """Start a child workflow and wait until it started (raises WorkflowAlreadyStartedError if its
    id is taken). The child runs on `task_queue` (default: this workflow's); its id is `id`, else
    workflow.uuid4() (the same on every replay), as temporalio."""
    instance = _instance()
    id = id or str(uuid4())
    found = definition(workflow)
    workflow_type = found if isinstance(found, str) else found.name
    if result_type is None and not isinstance(found, str):
        result_type = found.result_type()
    return await instance.outbound.start_child_workflow(StartChildWorkflowInput(
        workflow=workflow_type, args=([arg] if arg is not _UNSET else []) + list(args), id=id, task_queue=task_queue,
        cancellation_type=None, parent_close_policy=parent_close_policy, execution_timeout=execution_timeout,
        run_timeout=run_timeout, task_timeout=task_timeout, id_reuse_policy=id_reuse_policy, retry_policy=None,
        cron_schedule="", memo=None, search_attributes=search_attributes, headers={}, versioning_intent=None,
        static_summary=None, static_details=None, arg_types=None, ret_type=result_type,
    ))


async def _start_child(instance: WorkflowInstance, input: StartChildWorkflowInput) -> ChildWorkflowHandle:
    """What start_child_workflow does past the interceptors: issue the start and wait until the child started."""
    payloads = instance.converter.payload_converter
    pending = instance.start_child_workflow({
        "workflow_id": input.id, "workflow_type": input.workflow, "task_queue": input.task_queue or "",
        "input": payloads.to_payloads(list(input.args)),
        "execution_timeout_ms": to_ms(input.execution_timeout), "run_timeout_ms": to_ms(input.run_timeout),
        "workflow_task_timeout_ms": to_ms(input.task_timeout), "id_reuse_policy": WorkflowIDReusePolicy(input.id_reuse_policy).value,
        "parent_close_policy": ParentClosePolicy(input.parent_close_policy).value,
        "search_attributes": {name: payloads.to_payload(value) for name, value in (input.search_attributes or {}).items()},
        "header": dict(input.headers),
    })
    id = input.id
    result_type = input.ret_type
    assert pending.started is not None
    try:
        run_id = await asyncio.shield(pending.started)
    except asyncio.CancelledError:
        if not pending.started.done():
            instance.cancel_child_workflow(pending)
        raise
    handle = ChildWorkflowHandle(_child_result(instance, pending, result_type), loop=instance, name=f"child:{id}")
    handle.id = id
    handle.first_execution_run_id = run_id
    return handle


async def _child_result(instance: WorkflowInstance, pending: PendingCommand, result_type: type | None) -> Any:
    """The child's result; a cancellation of the waiting task asks the child to cancel and keeps
    waiting for how it ends (temporalio's WAIT_CANCELLATION_COMPLETED)."""
    assert pending.future is not None
    cancel_requested = False
    while True:
        try:
            payload = await asyncio.shield(pending.future)
            return instance.converter.payload_converter.from_payload(payload, result_type)
        except asyncio.CancelledError:
            if pending.future.done():
                raise
            if not cancel_requested:
                instance.cancel_child_workflow(pending)
                cancel_requested = True


async def execute_child_workflow(
    workflow: type | Callable[..., Any] | str,
    arg: Any = _UNSET,
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
    result_type: type | None = None,
) -> Any:
    """Start a child workflow and wait for its result (raises ChildWorkflowError if it did not complete)."""
    handle = await start_child_workflow(
        workflow, arg, args=args, id=id, task_queue=task_queue, execution_timeout=execution_timeout, run_timeout=run_timeout,
        task_timeout=task_timeout, id_reuse_policy=id_reuse_policy, parent_close_policy=parent_close_policy,
        search_attributes=search_attributes, result_type=result_type,
    )
    return await handle


class ExternalWorkflowHandle:
    """Another workflow this one may signal or ask to cancel (as temporalio's)."""

    def __init__(self, id: str, run_id: str | None = None) -> None:
        self.id = id
        self.run_id = run_id

    async def signal(self, signal: Callable[..., Any] | str, arg: Any = _UNSET, *, args: Sequence[Any] = ()) -> None:
        """Signal the workflow; raises ApplicationError if it is not found or closed."""
        await _instance().outbound.signal_external_workflow(SignalExternalWorkflowInput(
            signal=signal_name(signal), args=([arg] if arg is not _UNSET else []) + list(args), namespace="default",
            workflow_id=self.id, workflow_run_id=self.run_id, headers={},
        ))

    async def cancel(self) -> None:
        """Ask the workflow to cancel; raises ApplicationError if it is not found or closed."""
        await _instance().request_cancel_external(self.id, self.run_id or "")


def get_external_workflow_handle(workflow_id: str, *, run_id: str | None = None) -> ExternalWorkflowHandle:
    """A handle to signal or cancel another workflow (its current run unless `run_id` is given)."""
    _instance()
    return ExternalWorkflowHandle(workflow_id, run_id)


class _WorkflowOutboundImpl(WorkflowOutboundInterceptor):
    """The innermost outbound interceptor: what the workflow API does past the interceptors."""

    def __init__(self, instance: WorkflowInstance) -> None:  # no next: this is the end of the chain
        self._instance = instance

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        raise ContinueAsNewError({
            "workflow_type": input.workflow or "", "task_queue": input.task_queue or "",
            "input": self._instance.converter.payload_converter.to_payloads(list(input.args)),
            "workflow_task_timeout_ms": to_ms(input.task_timeout), "run_timeout_ms": to_ms(input.run_timeout),
            "header": dict(input.headers),
        })

    def info(self) -> WorkflowInfo:
        return self._instance.info

    async def signal_child_workflow(self, input: SignalChildWorkflowInput) -> None:
        payloads = self._instance.converter.payload_converter.to_payloads(list(input.args))
        await self._instance.signal_external(input.child_workflow_id, "", input.signal, payloads, True, dict(input.headers))

    async def signal_external_workflow(self, input: SignalExternalWorkflowInput) -> None:
        payloads = self._instance.converter.payload_converter.to_payloads(list(input.args))
        await self._instance.signal_external(input.workflow_id, input.workflow_run_id or "", input.signal, payloads, False,
                                             dict(input.headers))

    def start_activity(self, input: StartActivityInput) -> asyncio.Task[Any]:
        instance = self._instance
        future = instance.schedule_activity({
            "activity_id": input.activity_id or "",
            "activity_type": input.activity,
            "task_queue": input.task_queue or "",
            "input": instance.converter.payload_converter.to_payloads(list(input.args)),
            "schedule_to_close_timeout_ms": to_ms(input.schedule_to_close_timeout),
            "schedule_to_start_timeout_ms": to_ms(input.schedule_to_start_timeout),
            "start_to_close_timeout_ms": to_ms(input.start_to_close_timeout),
            "heartbeat_timeout_ms": to_ms(input.heartbeat_timeout),
            "retry_policy": input.retry_policy.to_record() if input.retry_policy else None,
            "header": dict(input.headers),
        }, disable_eager_execution=input.disable_eager_execution)

        async def result() -> Any:
            return instance.converter.payload_converter.from_payload(await future, input.ret_type)

        return instance.create_task(result(), name=f"activity:{input.activity}")

    async def start_child_workflow(self, input: StartChildWorkflowInput) -> ChildWorkflowHandle:
        return await _start_child(self._instance, input)

    def start_local_activity(self, input: StartLocalActivityInput) -> asyncio.Task[Any]:
        instance = self._instance
        future = instance.schedule_local_activity({
            "activity_type": input.activity,
            "input": instance.converter.payload_converter.to_payloads(list(input.args)),
            "schedule_to_close_timeout_ms": to_ms(input.schedule_to_close_timeout),
            "start_to_close_timeout_ms": to_ms(input.start_to_close_timeout),
            "retry_policy": input.retry_policy.to_record() if input.retry_policy else None,
            "header": dict(input.headers),
        })

        async def result() -> Any:
            return instance.converter.payload_converter.from_payload(await future, input.ret_type)

        return instance.create_task(result(), name=f"local-activity:{input.activity}")
