"""Workflow definitions (as temporalio.workflow's decorators): @workflow.defn, run, init, signal,
query and update mark a class and its methods; `definition()` reads back what they recorded."""

from __future__ import annotations

import enum
import inspect
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, overload

from kadence.converter import callable_arg_types, type_hints
from kadence.types import CallableType, ClassType, MultiParamSpec, ProtocolReturnType, ReturnType

_DEFINITION_ATTR = "__kadence_workflow_definition"
_RUN_ATTR = "__kadence_workflow_run"
_SIGNAL_ATTR = "__kadence_workflow_signal"
_QUERY_ATTR = "__kadence_workflow_query"
_UPDATE_ATTR = "__kadence_workflow_update"
_VALIDATOR_ATTR = "__kadence_workflow_update_validator"
_INIT_ATTR = "__kadence_workflow_init"


def method_arg_types(fn: Callable[..., Any]) -> list[Any]:
    """Type hints of a method's parameters after self, for decoding payloads."""
    return callable_arg_types(fn)[1:]


class HandlerUnfinishedPolicy(enum.Enum):
    """What happens to a signal or update handler still running when the run ends (as temporalio)."""

    WARN_AND_ABANDON = 1  # a warning names it (an UnfinishedUpdateHandlersWarning / UnfinishedSignalHandlersWarning)
    ABANDON = 2


class UnfinishedUpdateHandlersWarning(RuntimeWarning):
    """The run ended before all update handlers had finished."""


class UnfinishedSignalHandlersWarning(RuntimeWarning):
    """The run ended before all signal handlers had finished."""


UNFINISHED_POLICY_ATTR = "__kadence_unfinished_policy"


@dataclass(frozen=True)
class Handler:
    """A signal, query or update handler: a method of the workflow class (called with the workflow
    object) or a callable set at run time with workflow.set_*_handler (called as it is)."""

    fn: Callable[..., Any]
    is_method: bool = True
    validator: Callable[..., Any] | None = None  # an update's
    dynamic: bool = False  # called for the names no other handler takes, with the name and the raw payloads

    def takes_varargs(self) -> bool:
        return list(inspect.signature(self.fn).parameters.values())[-1].kind is inspect.Parameter.VAR_POSITIONAL

    @property
    def unfinished_policy(self) -> HandlerUnfinishedPolicy:
        return getattr(self.fn, UNFINISHED_POLICY_ATTR, HandlerUnfinishedPolicy.WARN_AND_ABANDON)

    def arg_types(self) -> list[Any]:
        return method_arg_types(self.fn) if self.is_method else callable_arg_types(self.fn)


@dataclass(frozen=True)
class WorkflowDefinition:
    name: str
    cls: type
    run_fn: Callable[..., Any]
    # By name; the dynamic handler (for the names no other handles) under None.
    signals: dict[str | None, Callable[..., Any]] = field(default_factory=dict)
    queries: dict[str | None, Callable[..., Any]] = field(default_factory=dict)
    updates: dict[str | None, tuple[Callable[..., Any], Callable[..., Any] | None]] = field(default_factory=dict)  # handler, validator
    init_takes_args: bool = False  # @workflow.init: the constructor gets the run's arguments
    # Exceptions that fail the workflow rather than its workflow task, besides FailureError (temporalio's
    # failure_exception_types, and the worker's workflow_failure_exception_types joined to them).
    failure_exception_types: tuple[type[BaseException], ...] = ()

    def arg_types(self) -> list[Any]:
        return method_arg_types(self.run_fn)

    def result_type(self) -> Any:
        return type_hints(self.run_fn).get("return")


@overload
def defn(cls: ClassType) -> ClassType: ...


@overload
def defn(
    *, name: str | None = None, failure_exception_types: Sequence[type[BaseException]] = (),
) -> Callable[[ClassType], ClassType]: ...


def defn(cls: ClassType | None = None, *, name: str | None = None, failure_exception_types: Sequence[type[BaseException]] = ()) -> Any:
    """Mark a class as a workflow; its type name is `name` or the class name. One method must be
    @workflow.run. An exception of `failure_exception_types` raised by the workflow's code fails the
    workflow, as a FailureError does, rather than its workflow task (which is retried), as temporalio's."""

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
            failure_exception_types=tuple(failure_exception_types),
        ))
        return c

    return register(cls) if cls is not None else register


def run(fn: CallableType) -> CallableType:
    """Mark the workflow's entry method."""
    setattr(fn, _RUN_ATTR, True)
    return fn


def init(init_fn: CallableType) -> CallableType:
    """Mark a workflow's __init__ as taking the run's arguments (as temporalio): its parameters
    must match the @workflow.run method's by position (kind, default, annotation; names may
    differ). Without it, __init__ takes none."""
    if init_fn.__name__ != "__init__":
        raise ValueError(f"@workflow.init may only decorate __init__, not {init_fn.__qualname__}")
    setattr(init_fn, _INIT_ATTR, True)
    return init_fn


def _check_init_matches_run(cls: type, run_fn: Callable[..., Any]) -> None:
    """The constructor gets the run's arguments as they are passed to the run method, so its
    parameters must match by position: kind, default and annotation, whatever their names (as
    temporalio compares them)."""

    def shape(fn: Callable[..., Any]) -> list[inspect.Parameter]:
        return [p.replace(name=f"p{i}") for i, p in enumerate(inspect.signature(fn).parameters.values())]

    init_fn = vars(cls)["__init__"]
    if shape(init_fn) != shape(run_fn):
        raise ValueError(
            f"workflow {cls.__name__}: the @workflow.init __init__{inspect.signature(init_fn)} must take the parameters of the "
            f"@workflow.run method {run_fn.__name__}{inspect.signature(run_fn)} in the same order, with the same kinds, "
            "defaults and annotations (their names may differ)"
        )


def check_dynamic(fn: Callable[..., Any], kind: str, is_method: bool = True) -> None:
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
def signal(fn: CallableType) -> CallableType: ...


@overload
def signal(
    *, name: str | None = None, dynamic: bool = False,
    unfinished_policy: HandlerUnfinishedPolicy = HandlerUnfinishedPolicy.WARN_AND_ABANDON, description: str | None = None,
) -> Callable[[CallableType], CallableType]: ...


def signal(
    fn: CallableType | None = None, *, name: str | None = None, dynamic: bool = False,
    unfinished_policy: HandlerUnfinishedPolicy = HandlerUnfinishedPolicy.WARN_AND_ABANDON, description: str | None = None,
) -> Any:
    """Mark a method as the handler of the signal `name` (default: the method's name); with
    `dynamic=True`, of every signal no other handler takes: it gets (name, args: Sequence[RawValue])."""

    def register(f: CallableType) -> CallableType:
        setattr(f, _SIGNAL_ATTR, _handler_key(f, "signal", name, dynamic))
        setattr(f, UNFINISHED_POLICY_ATTR, HandlerUnfinishedPolicy(unfinished_policy))
        return f

    return register(fn) if fn is not None else register


@overload
def query(fn: CallableType) -> CallableType: ...


@overload
def query(
    *, name: str | None = None, dynamic: bool = False, description: str | None = None,
) -> Callable[[CallableType], CallableType]: ...


def query(fn: CallableType | None = None, *, name: str | None = None, dynamic: bool = False, description: str | None = None) -> Any:
    """Mark a method as the handler of the query `name` (default: the method's name). A query reads
    the workflow's state and returns it: it must not change state or await (so not `async def`)."""

    def register(f: CallableType) -> CallableType:
        if inspect.iscoroutinefunction(f):
            raise TypeError(f"query {f.__qualname__}: a query handler must be a plain `def`, not `async def`")
        setattr(f, _QUERY_ATTR, _handler_key(f, "query", name, dynamic))
        return f

    return register(fn) if fn is not None else register


class UpdateMethodMultiParam(Protocol[MultiParamSpec, ProtocolReturnType]):
    """What @workflow.update makes of a method, for type checkers (as temporalio's): the method as
    it was, with `validator` to register the update's validator (`@my_update.validator`). The
    client's update calls take it: `handle.execute_update(MyWorkflow.my_update, arg)` checks `arg`
    and is of the handler's return type."""

    def __call__(self, *args: MultiParamSpec.args, **kwargs: MultiParamSpec.kwargs) -> ProtocolReturnType | Awaitable[ProtocolReturnType]:
        ...

    def validator(self, vfunc: Callable[MultiParamSpec, None]) -> Callable[MultiParamSpec, None]: ...


class _UpdateDecorator(Protocol):
    """What `@workflow.update(name=...)` returns: @workflow.update, with the options given."""

    @overload
    def __call__(self, fn: Callable[MultiParamSpec, Awaitable[ReturnType]], /) -> UpdateMethodMultiParam[MultiParamSpec, ReturnType]: ...

    @overload
    def __call__(self, fn: Callable[MultiParamSpec, ReturnType], /) -> UpdateMethodMultiParam[MultiParamSpec, ReturnType]: ...


@overload
def update(fn: Callable[MultiParamSpec, Awaitable[ReturnType]]) -> UpdateMethodMultiParam[MultiParamSpec, ReturnType]: ...


@overload
def update(fn: Callable[MultiParamSpec, ReturnType]) -> UpdateMethodMultiParam[MultiParamSpec, ReturnType]: ...


@overload
def update(
    *, name: str | None = None, dynamic: bool = False,
    unfinished_policy: HandlerUnfinishedPolicy = HandlerUnfinishedPolicy.WARN_AND_ABANDON, description: str | None = None,
) -> _UpdateDecorator: ...


def update(
    fn: CallableType | None = None, *, name: str | None = None, dynamic: bool = False,
    unfinished_policy: HandlerUnfinishedPolicy = HandlerUnfinishedPolicy.WARN_AND_ABANDON, description: str | None = None,
) -> Any:
    """Mark a method as the handler of the update `name` (default: the method's name): it may change
    state and await (activities, timers); its return value is the caller's result. A validator,
    registered with `@handler.validator`, runs first and rejects the update by raising."""

    def register(f: CallableType) -> CallableType:
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
    check_dynamic(fn, kind)
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
