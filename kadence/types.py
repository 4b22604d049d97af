"""The types the typed client and workflow API are written with (as temporalio.types): the type
variables and the Protocols a workflow's, activity's or handler's method is matched against, so
that `await client.execute_workflow(MyWorkflow.run, arg, ...)` checks `arg` against the run
method's parameter and is of its return type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, Protocol, TypeVarTuple

from typing_extensions import TypeVar  # PEP 696's default=, in typing itself from Python 3.13

AnyType = TypeVar("AnyType")
ClassType = TypeVar("ClassType", bound=type)
SelfType = TypeVar("SelfType")
"""The workflow class of a run method or handler: a handle's signals, queries and updates are its methods."""
ParamType = TypeVar("ParamType")
ReturnType = TypeVar("ReturnType", covariant=True)
"""What a workflow's run method, or an activity, returns."""
LocalReturnType = TypeVar("LocalReturnType", covariant=True)
"""What a query or an update returns."""

# The handle classes' type parameters (WorkflowHandle[SelfType, ReturnType], WorkflowUpdateHandle[LocalReturnType],
# ChildWorkflowHandle, ExternalWorkflowHandle, WithStartWorkflowOperation): the three above, defaulting to Any, so
# a bare `WorkflowHandle` in an annotation is WorkflowHandle[Any, Any], as it was before the handles were generic.
# Functions take the three above: a type parameter with a default may not come before one without in a function's.
HandleSelfType = TypeVar("HandleSelfType", default=Any)
HandleReturnType = TypeVar("HandleReturnType", covariant=True, default=Any)
HandleLocalReturnType = TypeVar("HandleLocalReturnType", covariant=True, default=Any)

CallableType = TypeVar("CallableType", bound=Callable[..., Any])
CallableAsyncType = TypeVar("CallableAsyncType", bound=Callable[..., Awaitable[Any]])
CallableSyncOrAsyncType = TypeVar("CallableSyncOrAsyncType", bound=Callable[..., Any | Awaitable[Any]])
CallableSyncOrAsyncReturnNoneType = TypeVar("CallableSyncOrAsyncReturnNoneType", bound=Callable[..., None | Awaitable[None]])
MultiParamSpec = ParamSpec("MultiParamSpec")

# Kadence's own: an activity takes its arguments positionally, any number of them
# (`workflow.execute_activity(fn, a, b, ...)`); the first two, then the rest.
FirstParamType = TypeVar("FirstParamType")
SecondParamType = TypeVar("SecondParamType")
MoreParamTypes = TypeVarTuple("MoreParamTypes")

ProtocolParamType = TypeVar("ProtocolParamType", contravariant=True)
ProtocolReturnType = TypeVar("ProtocolReturnType", covariant=True)
ProtocolSelfType = TypeVar("ProtocolSelfType", contravariant=True)


class CallableAsyncNoParam(Protocol[ProtocolReturnType]):
    """An `async def` function of no parameter."""

    def __call__(self) -> Awaitable[ProtocolReturnType]: ...


class CallableSyncNoParam(Protocol[ProtocolReturnType]):
    """A `def` function of no parameter."""

    def __call__(self) -> ProtocolReturnType: ...


class CallableAsyncSingleParam(Protocol[ProtocolParamType, ProtocolReturnType]):
    """An `async def` function of one parameter."""

    def __call__(self, arg: ProtocolParamType, /) -> Awaitable[ProtocolReturnType]: ...


class CallableSyncSingleParam(Protocol[ProtocolParamType, ProtocolReturnType]):
    """A `def` function of one parameter."""

    def __call__(self, arg: ProtocolParamType, /) -> ProtocolReturnType: ...


class MethodAsyncNoParam(Protocol[ProtocolSelfType, ProtocolReturnType]):
    """An `async def` method of no parameter but self, taken from its class (`MyWorkflow.run`)."""

    def __call__(self, instance: ProtocolSelfType, /) -> Awaitable[ProtocolReturnType]: ...


class MethodSyncNoParam(Protocol[ProtocolSelfType, ProtocolReturnType]):
    """A `def` method of no parameter but self, taken from its class."""

    def __call__(self, instance: ProtocolSelfType, /) -> ProtocolReturnType: ...


class MethodAsyncSingleParam(Protocol[ProtocolSelfType, ProtocolParamType, ProtocolReturnType]):
    """An `async def` method of one parameter after self, taken from its class."""

    def __call__(self, instance: ProtocolSelfType, arg: ProtocolParamType, /) -> Awaitable[ProtocolReturnType]: ...


class MethodSyncSingleParam(Protocol[ProtocolSelfType, ProtocolParamType, ProtocolReturnType]):
    """A `def` method of one parameter after self, taken from its class."""

    def __call__(self, instance: ProtocolSelfType, arg: ProtocolParamType, /) -> ProtocolReturnType: ...


class MethodSyncOrAsyncNoParam(Protocol[ProtocolSelfType, ProtocolReturnType]):
    """A `def` or `async def` method of no parameter but self (a signal or query handler)."""

    def __call__(self, instance: ProtocolSelfType, /) -> ProtocolReturnType | Awaitable[ProtocolReturnType]: ...


class MethodSyncOrAsyncSingleParam(Protocol[ProtocolSelfType, ProtocolParamType, ProtocolReturnType]):
    """A `def` or `async def` method of one parameter after self (a signal or query handler)."""

    def __call__(self, instance: ProtocolSelfType, arg: ProtocolParamType, /) -> ProtocolReturnType | Awaitable[ProtocolReturnType]: ...
