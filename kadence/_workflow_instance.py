"""One workflow run inside a worker: a deterministic asyncio event loop driven by history.

The loop runs callbacks only when an activation runs, and an activation runs only at a
workflow task boundary: for each past task that completed (replay) and for the task being
worked on now. Events resolve futures (activity results) in history order before the
activation that saw them, so replaying a history makes the same decisions it made live.
Commands produced by an activation must match the events that follow its WorkflowTaskCompleted;
any difference is a NondeterminismError.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import dataclasses
import enum
import functools
import inspect
import json
import logging
import random
import traceback
import warnings
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVarTuple, Unpack

from kadence._worker_interceptor import (
    ExecuteWorkflowInput,
    HandleQueryInput,
    HandleSignalInput,
    HandleUpdateInput,
    WorkflowInboundInterceptor,
    WorkflowOutboundInterceptor,
)
from kadence.api.common.v1 import Payload
from kadence.common import RawValue
from kadence.converter import DataConverter, callable_arg_types, type_hints
from kadence.exceptions import (
    ActivityError,
    ApplicationError,
    FailureError,
    NondeterminismError,
    ReadOnlyContextError,
    RetryState,
    WorkflowAlreadyStartedError,
)
from kadence.protocol.codec import Record
from kadence.protocol.events import EVENT_FOR_COMMAND
from kadence.protocol.limits import WARN_HISTORY_BYTES, WARN_HISTORY_EVENTS, payload_bytes
from kadence.protocol.names import EventType, TaskCommandType

log = logging.getLogger("kadence.worker")

Command = tuple[str, Record]

PATCH_MARKER = "core_patch"  # temporalio's name for the marker patched() records
LOCAL_ACTIVITY_MARKER = "core_local_activity"  # temporalio's name for a local activity's recorded outcome
STACK_TRACE_QUERY = "__stack_trace"  # built in, as temporalio's: where the run's coroutines wait


def _command_key(attrs: Record) -> str:
    """What must match between a command and its event besides the type."""
    return (
        attrs.get("activity_type") or attrs.get("timer_id") or attrs.get("workflow_id") or attrs.get("marker_name")
        or attrs.get("update_id") or str(attrs.get("scheduled_event_id", ""))
    )


class WorkflowTaskError(Exception):
    """The workflow code raised something other than a FailureError: fail the task, not the workflow."""


class ContinueAsNewError(BaseException):
    """Raised by workflow.continue_as_new(): ends this run and starts a new one with fresh history.
    A BaseException, so `except Exception` in workflow code does not swallow it (as temporalio)."""

    def __init__(self, attributes: Record) -> None:
        super().__init__("continue as new")
        self.attributes = attributes


class CacheInvalid(Exception):
    """This cached run acted on a task that history says failed; rebuild it from history."""


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
class RunningHandler:
    kind: str  # "signal" or "update"
    name: str
    update_id: str
    unfinished_policy: HandlerUnfinishedPolicy


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

    def arg_types(self) -> list[Any]:
        return method_arg_types(self.run_fn)

    def result_type(self) -> Any:
        return type_hints(self.run_fn).get("return")


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
    event, so the same on every replay. Immutable but for search_attributes, which upserts update."""

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
    parent: ParentInfo | None = None
    root: RootInfo | None = None
    raw_memo: Mapping[str, Any] = field(default_factory=dict)  # Kadence has no memo
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

    def get_current_history_length(self) -> int:
        """Events in this run's history as of the current workflow task."""
        return _running_instance().history_length

    def get_current_history_size(self) -> int:
        """Payload bytes in this run's history as of the current workflow task."""
        return _running_instance().history_bytes

    def is_continue_as_new_suggested(self) -> bool:
        """Whether the history is past the history service's warning thresholds."""
        return _running_instance().continue_as_new_suggested()

    def _logger_details(self) -> dict[str, Any]:
        """What workflow.logger adds to each record (temporalio's keys)."""
        return {
            "attempt": self.attempt, "namespace": self.namespace, "run_id": self.run_id, "task_queue": self.task_queue,
            "workflow_id": self.workflow_id, "workflow_type": self.workflow_type,
        }


class DurableTimerHandle(asyncio.TimerHandle):
    """A loop timer backed by a StartTimer command; it fires when history says TimerFired."""

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...], loop: "WorkflowInstance",
                 context: contextvars.Context | None, start_command: Command) -> None:
        super().__init__(when, callback, args, loop, context)
        self.start_command = start_command
        self.timer_id: str = start_command[1]["timer_id"]


@dataclass
class LocalActivity:
    """A local activity the workflow awaits: run by the worker within the workflow task, its outcome
    recorded as a marker (replay reads the marker instead of running it again)."""

    seq: int
    attributes: Record  # activity_type, input, timeouts, retry_policy
    future: asyncio.Future[Any]


@dataclass
class PendingCommand:
    command: Command
    future: asyncio.Future[Any] | None = None  # its result: an activity's, a child's, a signal's delivery
    scheduled: Record = field(default_factory=dict)
    scheduled_event_id: int = 0  # the event that recorded the command (scheduled, initiated)
    started: asyncio.Future[str] | None = None  # a child's run id, once it started


_Ts = TypeVarTuple("_Ts")


class WorkflowInstance(asyncio.AbstractEventLoop):
    """One run's deterministic event loop. It implements the subset of asyncio.AbstractEventLoop
    workflow code may use; typeshed marks the rest abstract (at run time it raises
    NotImplementedError), hence the type: ignore[abstract] where an instance is made."""

    def __init__(
        self, definition: WorkflowDefinition, info: WorkflowInfo, converter: DataConverter,
        interceptor_classes: Sequence[type[WorkflowInboundInterceptor]] = (),
    ) -> None:
        self.definition = definition
        self.info = info
        self.converter = converter
        self.processed_event_id = 0
        self.last_activated_task = 0  # scheduled_event_id of the task this instance ran live
        self.closed = False
        self._ready: collections.deque[asyncio.Handle] = collections.deque()
        self._time_ms = 0
        self._unmatched: collections.deque[PendingCommand] = collections.deque()
        self._eager_disabled: set[str] = set()  # activity ids: see eager_execution_disabled
        self._new_commands: list[Command] = []
        self._activities: dict[int, PendingCommand] = {}
        self._activity_seq = 0
        self._timers: dict[str, DurableTimerHandle] = {}
        self._timer_seq = 0
        self._main: asyncio.Task[Any] | None = None
        self._object: Any = None
        self._unhandled_signals: list[tuple[str, list[Record], Record]] = []  # no handler yet: kept until one is set
        self.signals = {name: Handler(fn, dynamic=name is None) for name, fn in definition.signals.items()}
        self.queries = {name: Handler(fn, dynamic=name is None) for name, fn in definition.queries.items()}
        self.updates = {
            name: Handler(fn, validator=validator, dynamic=name is None) for name, (fn, validator) in definition.updates.items()
        }
        self.running_handlers: list[RunningHandler] = []  # signal and update handlers not finished
        self._conditions: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._initiated: dict[int, PendingCommand] = {}  # children and external requests by initiated event id
        self._replaying = False
        self.read_only = False  # in a query handler or update validator
        self.replay_only = False  # rebuilt to answer a query or check a history: every activation is a replay
        self._upcoming: list[Record] = []  # the history after the event being applied
        self._patches: dict[str, bool] = {}
        self._local_activities: list[LocalActivity] = []
        self._local_seq = 0
        self._random: random.Random | None = None  # made at its first use: seeding costs 20-30 µs an instance
        self.history_bytes = 0
        self.history_length = 0  # as of the workflow task being run: up to its WorkflowTaskStarted
        self._task_started_ms = 0  # when the workflow task being run started
        self._close_issued = False  # the command that ends the run is issued: no second one
        self._handler_failure: FailureError | None = None  # raised by a signal handler: fails the run
        self._task_error: WorkflowTaskError | None = None  # raised by a signal handler: fails the workflow task
        # As temporalio: the first interceptor is the outermost; init hands each the outbound chain.
        from kadence.workflow import _WorkflowOutboundImpl  # kadence.workflow imports this module

        inbound: WorkflowInboundInterceptor = _WorkflowInboundImpl(self)
        for cls in reversed(interceptor_classes):
            inbound = cls(inbound)
        self._inbound = inbound
        self.outbound: WorkflowOutboundInterceptor = _WorkflowOutboundImpl(self)
        inbound.init(self.outbound)

    # ---- driving the run ---------------------------------------------------------------------

    def activate(self, history: list[Record], scheduled_event_id: int, started_time_ms: int) -> list[Command]:
        """Apply the events not seen yet, run the activation for task `scheduled_event_id`
        started at `started_time_ms` (its WorkflowTaskStarted time, not in `history` yet),
        and return the commands to send with its completion."""
        self._task_started_ms = started_time_ms
        try:
            for index, event in enumerate(history):
                if event["event_id"] > self.processed_event_id:
                    self._upcoming = history[index + 1:]
                    self._apply(event)
                    self.processed_event_id = event["event_id"]
            self._upcoming = []
            self.history_length = scheduled_event_id + 1  # its WorkflowTaskStarted is recorded, not sent
            self._time_ms = started_time_ms
            commands = self._run_activation()
        except BaseException:
            self._close_unstarted_tasks()
            raise
        self.last_activated_task = scheduled_event_id
        return commands

    def _close_unstarted_tasks(self) -> None:
        """A run whose activation failed is dropped: the tasks it created and never ran (a signal's
        handler, say, when a later event did not match the code) have their coroutines closed, so
        none is collected unawaited (Python's "coroutine ... was never awaited" warning)."""
        for task in asyncio.all_tasks(self):  # first: a task's step in the ready queue is what holds it
            coro = task.get_coro()
            if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                coro.close()
        while self._ready:
            self._ready.popleft().cancel()

    def _apply(self, event: Record) -> None:
        kind, attrs = event["attributes"]
        self.history_bytes += payload_bytes(attrs)
        apply = _APPLY.get(kind)
        if apply is not None:  # the rest (WorkflowTaskScheduled, ActivityTaskStarted ...) change nothing the code sees
            apply(self, kind, attrs, event)

    # Each _apply_<event> takes the event's type, its attributes and the event; _APPLY, after the
    # class, names the one for each event type.

    def _apply_workflow_execution_started(self, kind: str, attrs: Record, event: Record) -> None:
        self._time_ms = event["event_time_ms"]
        self.info = self._started_info(attrs, event["event_time_ms"])
        self._start(attrs["input"])

    def _apply_workflow_task_started(self, kind: str, attrs: Record, event: Record) -> None:
        self._time_ms = event["event_time_ms"]
        self.history_length = event["event_id"]

    def _apply_workflow_task_completed(self, kind: str, attrs: Record, event: Record) -> None:
        if attrs["scheduled_event_id"] != self.last_activated_task:
            self._replaying = True  # a past task: replay it
            try:
                self._run_activation()
            finally:
                self._replaying = False

    def _apply_workflow_task_failed(self, kind: str, attrs: Record, event: Record) -> None:
        """A WorkflowTaskFailed or WorkflowTaskTimedOut."""
        if attrs["scheduled_event_id"] == self.last_activated_task:
            raise CacheInvalid(f"workflow task {attrs['scheduled_event_id']}: {kind}")

    def _apply_workflow_execution_cancel_requested(self, kind: str, attrs: Record, event: Record) -> None:
        if self._main is not None and not self._main.done():
            self._main.cancel()  # reaches the workflow as asyncio.CancelledError where it awaits

    def _apply_workflow_execution_signaled(self, kind: str, attrs: Record, event: Record) -> None:
        self._deliver_signal(attrs["signal_name"], attrs["input"], attrs.get("header") or {})

    def _apply_timer_command(self, kind: str, attrs: Record, event: Record) -> None:
        """A TimerStarted or TimerCanceled: the StartTimer or CancelTimer the code issued."""
        self._match(kind, attrs["timer_id"])

    def _apply_timer_fired(self, kind: str, attrs: Record, event: Record) -> None:
        handle = self._timers.pop(attrs["timer_id"], None)
        if handle is not None and not handle.cancelled():
            self._ready.append(handle)

    def _apply_activity_task_scheduled(self, kind: str, attrs: Record, event: Record) -> None:
        pending = self._match(kind, attrs["activity_type"])
        pending.scheduled = attrs
        pending.scheduled_event_id = event["event_id"]
        self._activities[event["event_id"]] = pending

    def _apply_activity_task_cancel_requested(self, kind: str, attrs: Record, event: Record) -> None:
        self._match(kind, str(attrs["scheduled_event_id"]))

    def _apply_upsert_workflow_search_attributes(self, kind: str, attrs: Record, event: Record) -> None:
        self._match(kind, "")

    def _apply_marker_recorded(self, kind: str, attrs: Record, event: Record) -> None:
        self._match(kind, attrs["marker_name"])

    def _apply_workflow_execution_update_admitted(self, kind: str, attrs: Record, event: Record) -> None:
        self.call_soon(self._admit_update, attrs)  # runs in the activation, like a signal handler

    def _apply_update_command(self, kind: str, attrs: Record, event: Record) -> None:
        """An update's WorkflowExecutionUpdateAccepted, Rejected or Completed: the command the code issued."""
        self._match(kind, attrs["update_id"])

    def _apply_initiated(self, kind: str, attrs: Record, event: Record) -> None:
        """A request to another workflow (kadence.protocol.events.INITIATED): answered later by the
        events INITIATED_BY_ANSWER names, which carry this event's id."""
        pending = self._match(kind, attrs["workflow_id"])
        pending.scheduled_event_id = event["event_id"]
        self._initiated[event["event_id"]] = pending

    def _apply_child_workflow_execution_started(self, kind: str, attrs: Record, event: Record) -> None:
        _resolve(self._initiated[attrs["initiated_event_id"]].started, attrs["run_id"])

    def _apply_start_child_workflow_execution_failed(self, kind: str, attrs: Record, event: Record) -> None:
        pending = self._initiated.pop(attrs["initiated_event_id"])
        _fail(pending.started, WorkflowAlreadyStartedError(
            attrs["workflow_id"], attrs["workflow_type"], reason="child workflow already started", cause=attrs["cause"],
        ))

    def _apply_child_workflow_execution_completed(self, kind: str, attrs: Record, event: Record) -> None:
        _resolve(self._initiated.pop(attrs["initiated_event_id"]).future, attrs["result"])

    def _apply_child_workflow_execution_closed(self, kind: str, attrs: Record, event: Record) -> None:
        """A child that failed, was canceled, timed out or was terminated."""
        pending = self._initiated.pop(attrs["initiated_event_id"])
        _fail(pending.future, self.converter.failure_converter.child_workflow_error(kind, attrs, self.converter.payload_converter))

    def _apply_external_request_applied(self, kind: str, attrs: Record, event: Record) -> None:
        """An ExternalWorkflowExecutionSignaled or ExternalWorkflowExecutionCancelRequested."""
        _resolve(self._initiated.pop(attrs["initiated_event_id"]).future, None)

    def _apply_signal_external_workflow_execution_failed(self, kind: str, attrs: Record, event: Record) -> None:
        self._fail_external_request("signal", attrs)

    def _apply_request_cancel_external_workflow_execution_failed(self, kind: str, attrs: Record, event: Record) -> None:
        self._fail_external_request("cancel", attrs)

    def _fail_external_request(self, verb: str, attrs: Record) -> None:
        _fail(self._initiated.pop(attrs["initiated_event_id"]).future, ApplicationError(
            f"unable to {verb} external workflow {attrs['workflow_id']}: {attrs['cause']}", type=attrs["cause"], non_retryable=True,
        ))

    def _apply_activity_task_canceled(self, kind: str, attrs: Record, event: Record) -> None:
        self._activities.pop(attrs["scheduled_event_id"], None)  # its future was cancelled when asked

    def _apply_activity_task_completed(self, kind: str, attrs: Record, event: Record) -> None:
        pending = self._activities.pop(attrs["scheduled_event_id"])
        assert pending.future is not None
        if not pending.future.done():
            pending.future.set_result(attrs["result"])

    def _apply_activity_task_failed(self, kind: str, attrs: Record, event: Record) -> None:
        """An ActivityTaskFailed or ActivityTaskTimedOut: the activity's error unless only an attempt ended."""
        if attrs["retry_state"] == RetryState.IN_PROGRESS:
            return
        pending = self._activities.pop(attrs["scheduled_event_id"])
        assert pending.future is not None
        if not pending.future.done():
            pending.future.set_exception(self.converter.failure_converter.activity_error(
                kind, pending.scheduled, attrs, self.converter.payload_converter))

    def _apply_workflow_execution_closed(self, kind: str, attrs: Record, event: Record) -> None:
        """The event of a command that closed the run (kadence.protocol.events.CLOSE_COMMANDS)."""
        self._match(kind, "")
        self.closed = True

    def _match(self, event_type: str, key: str) -> PendingCommand:
        if not self._unmatched:
            raise NondeterminismError(f"history has {event_type} {key} but the workflow code issued no such command")
        pending = self._unmatched.popleft()
        kind, attrs = pending.command
        if EVENT_FOR_COMMAND[kind] != event_type or _command_key(attrs) != key:
            raise NondeterminismError(f"history has {event_type} {key} where the workflow code issued {kind} {_command_key(attrs)}")
        return pending

    def _run_activation(self) -> list[Command]:
        if self._unmatched:
            extra = ", ".join(p.command[0] for p in self._unmatched)
            raise NondeterminismError(f"workflow code issued commands that history does not have: {extra}")
        self._new_commands = []
        self._drive()
        return self._new_commands

    def _drive(self) -> None:
        """Run until the workflow waits on history; a replayed task's local activities are resolved
        from its markers as the live run resolved them: once the code ran dry."""
        self._run_ready()
        while self._replaying and self._local_activities:
            recorded = self._recorded_local_outcomes()
            for local in list(self._local_activities):
                if local.seq not in recorded:
                    raise NondeterminismError(
                        f"local activity {local.attributes['activity_type']} (#{local.seq}) has no recorded outcome in history"
                    )
                self._record_local_outcome(local, recorded[local.seq])
            self._run_ready()
        if self._task_error is not None:
            error, self._task_error = self._task_error, None
            raise error
        if self.closed or self._close_issued:
            return
        if self._handler_failure is not None:
            self._close_issued = True
            self._issue((TaskCommandType.FailWorkflowExecution, {"failure": self.converter.to_failure(self._handler_failure)}), None)
        elif self._main is not None and self._main.done():
            command = self._close_command(self._main)
            self._close_issued = True
            self._issue(command, None)
        else:
            return
        if not self.is_replaying():
            self._warn_of_unfinished_handlers()

    def _warn_of_unfinished_handlers(self) -> None:
        """The run ends with handlers still running: warn of those whose policy asks (as temporalio)."""
        warned = [h for h in self.running_handlers if h.unfinished_policy is HandlerUnfinishedPolicy.WARN_AND_ABANDON]
        updates = [{"name": h.name, "id": h.update_id} for h in warned if h.kind == "update"]
        if updates:
            warnings.warn(UnfinishedUpdateHandlersWarning(
                f"[TMPRL1102] Workflow {self.info.workflow_id} finished while update handlers are still running: their callers "
                "get no result. Wait for them with `await workflow.wait_condition(workflow.all_handlers_finished)`, or "
                "declare the handler with @workflow.update(unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON). "
                f"Unfinished updates: {json.dumps(updates)}"
            ), stacklevel=1)
        signals = collections.Counter(h.name for h in warned if h.kind == "signal")
        if signals:
            warnings.warn(UnfinishedSignalHandlersWarning(
                f"[TMPRL1102] Workflow {self.info.workflow_id} finished while signal handlers are still running. Wait for "
                "them with `await workflow.wait_condition(workflow.all_handlers_finished)`, or declare the handler with "
                "@workflow.signal(unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON). "
                f"Unfinished signals: {json.dumps([{'name': n, 'count': c} for n, c in signals.most_common()])}"
            ), stacklevel=1)

    def local_activities_to_run(self) -> list[LocalActivity]:
        return list(self._local_activities)

    def resolve_local_activities(self, outcomes: Mapping[int, Mapping[str, Sequence[Record]]]) -> list[Command]:
        """Record the outcomes (marker details by seq) the worker got, and run on; the new commands."""
        self._new_commands = []
        for local in list(self._local_activities):
            if local.seq in outcomes:
                self._record_local_outcome(local, outcomes[local.seq])
        self._drive()
        return self._new_commands

    def _record_local_outcome(self, local: LocalActivity, details: Mapping[str, Sequence[Record]]) -> None:
        self._local_activities.remove(local)
        self._issue((TaskCommandType.RecordMarker, {"marker_name": LOCAL_ACTIVITY_MARKER, "details": details}), None)
        if "result" in details:
            _resolve(local.future, details["result"][0])
            return
        failed = self.converter.payload_converter.from_payload(details["failure"][0])
        error = ActivityError(
            "Local activity failed", scheduled_event_id=0, started_event_id=0, identity="", activity_type=local.attributes["activity_type"],
            activity_id=str(local.seq), retry_state=RetryState(failed["retry_state"]),
        )
        error.__cause__ = ApplicationError(failed["message"], type=failed["type"] or None, non_retryable=failed["non_retryable"])
        _fail(local.future, error)

    def _recorded_local_outcomes(self) -> dict[int, dict[str, list[Record]]]:
        """Local activity outcomes (marker details by seq) the replayed task recorded."""
        payloads = self.converter.payload_converter
        return {payloads.from_payload(details["seq"][0]): details for details in self._recorded_markers(LOCAL_ACTIVITY_MARKER)}

    def _recorded_markers(self, marker_name: str) -> list[dict[str, list[Record]]]:
        """Details of the markers named so that the replayed task recorded: the events after its
        WorkflowTaskCompleted, up to the next workflow task."""
        found = []
        for event in self._upcoming:
            kind, attrs = event["attributes"]
            if kind in (EventType.WorkflowTaskScheduled, EventType.WorkflowTaskStarted):
                break
            if kind == EventType.MarkerRecorded and attrs["marker_name"] == marker_name:
                found.append(attrs["details"])
        return found

    def schedule_local_activity(self, attributes: Record) -> asyncio.Future[Any]:
        self.assert_not_read_only("start local activity")
        self._local_seq += 1
        local = LocalActivity(self._local_seq, attributes, self.create_future())
        self._local_activities.append(local)
        return local.future

    def _close_command(self, main: asyncio.Task[Any]) -> Command:
        if main.cancelled():
            return (TaskCommandType.CancelWorkflowExecution, {"details": []})
        exc = main.exception()
        if isinstance(exc, ContinueAsNewError):
            return (TaskCommandType.ContinueAsNewWorkflowExecution, exc.attributes)
        if exc is None:
            return (TaskCommandType.CompleteWorkflowExecution, {"result": self.converter.payload_converter.to_payload(main.result())})
        if isinstance(exc, FailureError):
            return (TaskCommandType.FailWorkflowExecution, {"failure": self.converter.to_failure(exc)})
        raise WorkflowTaskError(f"{type(exc).__name__}: {exc}") from exc

    def _deliver_signal(self, name: str, payloads: list[Record], header: Record) -> None:
        handler = _lookup(self.signals, name)
        if handler is None:
            self._unhandled_signals.append((name, payloads, header))  # as temporalio: kept until a handler is set
            return
        try:
            call, args = self._bind(handler, name, payloads)
        except Exception as exc:  # as temporalio: logged and dropped, the run goes on
            log.exception("event=signal_dropped workflow_id=%s run_id=%s signal_name=%s reason=undecodable_input error=%r",
                          self.info.workflow_id, self.info.run_id, name, str(exc))
            return
        running = RunningHandler("signal", name, "", handler.unfinished_policy)
        self.running_handlers.append(running)
        signal = HandleSignalInput(signal=name, args=args, headers=_headers(header))
        self.create_task(self._run_signal(running, signal), name=f"signal:{name}")

    def _bind(self, handler: Handler, name: str, payloads: list[Record]) -> tuple[Callable[..., Any], list[Any]]:
        """The handler to call for `name` and its arguments: a dynamic one gets the name and the
        payloads unconverted (as temporalio)."""
        call = self.callable(handler)
        if handler.dynamic and handler.takes_varargs():  # temporalio's deprecated form: (name, *args), converted
            return call, [name, *self.converter.payload_converter.from_payloads(payloads, [handler.arg_types()[-1]] * len(payloads))]
        if handler.dynamic:
            return call, [name, [RawValue(payload) for payload in payloads]]
        return call, self.converter.payload_converter.from_payloads(payloads, handler.arg_types())

    def callable(self, handler: Handler) -> Callable[..., Any]:
        """What to call for a handler: a method with the workflow object, else the callable as it is."""
        return functools.partial(handler.fn, self._object) if handler.is_method else handler.fn

    def set_signal_handler(self, name: str | None, fn: Callable[..., Any] | None) -> None:
        """Set (or with None remove) a signal handler; the signals kept for want of one reach it now."""
        self.assert_not_read_only("set signal handler")
        if fn is None:
            self.signals.pop(name, None)
            return
        self.signals[name] = Handler(fn, is_method=False, dynamic=name is None)
        kept, self._unhandled_signals = self._unhandled_signals, []
        for signal_name, payloads, header in kept:
            if name is None or signal_name == name:
                self._deliver_signal(signal_name, payloads, header)
            else:
                self._unhandled_signals.append((signal_name, payloads, header))

    def set_query_handler(self, name: str | None, fn: Callable[..., Any] | None) -> None:
        self.assert_not_read_only("set query handler")
        if fn is None:
            self.queries.pop(name, None)
        else:
            self.queries[name] = Handler(fn, is_method=False, dynamic=name is None)

    def set_update_handler(self, name: str | None, fn: Callable[..., Any] | None, validator: Callable[..., Any] | None) -> None:
        self.assert_not_read_only("set update handler")
        if fn is None:
            self.updates.pop(name, None)
        else:
            self.updates[name] = Handler(fn, is_method=False, validator=validator, dynamic=name is None)

    async def _run_signal(self, running: RunningHandler, signal: HandleSignalInput) -> None:
        """Run a signal handler (through the interceptors) as a task of the workflow (as temporalio):
        a FailureError it raises fails the workflow, any other exception fails the workflow task."""
        try:
            await self._inbound.handle_signal(signal)
        except FailureError as exc:
            if self._handler_failure is None:
                self._handler_failure = exc
        except Exception as exc:
            if self._task_error is None:
                self._task_error = WorkflowTaskError(f"signal handler {running.name!r} failed: {type(exc).__name__}: {exc}")
                self._task_error.__cause__ = exc
        finally:
            self.running_handlers.remove(running)

    def _admit_update(self, attrs: Record) -> None:
        """Validate the update and accept or reject it; an accepted one runs as a task of the workflow."""
        update_id = attrs["update_id"]
        current_update.set(UpdateInfo(update_id, attrs["name"]))  # this callback's own context, which its task copies
        handler = _lookup(self.updates, attrs["name"])
        try:
            if handler is None:
                raise ApplicationError(
                    f"workflow {self.definition.name} has no update {attrs['name']!r} (known updates: {_names(self.updates)})",
                    type="UpdateNotRegistered", non_retryable=True,
                )
            _, args = self._bind(handler, attrs["name"], attrs["args"])
            update = HandleUpdateInput(id=update_id, update=attrs["name"], args=args, headers=_headers(attrs.get("header") or {}))
            if handler.validator is not None:
                self.read_only = True
                try:
                    self._inbound.handle_update_validator(update)
                finally:
                    self.read_only = False
        except Exception as exc:  # the validator said no: the caller hears why
            self._issue((TaskCommandType.RejectWorkflowUpdate, {"update_id": update_id, "failure": self.converter.to_failure(exc)}), None)
            return
        self._issue((TaskCommandType.AcceptWorkflowUpdate, {"update_id": update_id}), None)
        running = RunningHandler("update", attrs["name"], update_id, handler.unfinished_policy)
        self.running_handlers.append(running)
        self.create_task(self._run_update(running, update), name=f"update:{attrs['name']}")

    async def _run_update(self, running: RunningHandler, update: HandleUpdateInput) -> None:
        update_id = running.update_id
        try:
            result = await self._inbound.handle_update_handler(update)
            encoded = self.converter.payload_converter.to_payload(result)
        except Exception as exc:  # the update failed (its result too, when it cannot be encoded); the workflow goes on
            self._issue((TaskCommandType.CompleteWorkflowUpdate, {"update_id": update_id, "result": None,
                                                    "failure": self.converter.to_failure(exc)}), None)
            return
        finally:
            self.running_handlers.remove(running)
        self._issue((TaskCommandType.CompleteWorkflowUpdate, {"update_id": update_id, "result": encoded, "failure": None}), None)

    def _started_info(self, attrs: Record, started_ms: int) -> WorkflowInfo:
        """The info the WorkflowExecutionStarted event gives; the first workflow task's start is the
        next WorkflowTaskStarted recorded, else the task being run now."""
        first_task_ms = next(
            (e["event_time_ms"] for e in self._upcoming if e["attributes"][0] == EventType.WorkflowTaskStarted), self._task_started_ms,
        )
        parent = None
        if attrs["parent_workflow_id"]:
            parent = ParentInfo(self.info.namespace, attrs["parent_run_id"], attrs["parent_workflow_id"])
        search_attributes = {
            name: value if isinstance(value, list) else [value]
            for name, value in ((name, self.converter.payload_converter.from_payload(p)) for name, p in attrs["search_attributes"].items())
        }
        return dataclasses.replace(
            self.info,
            continued_run_id=attrs["continued_execution_run_id"] or None,
            cron_schedule=attrs.get("cron_schedule") or None,
            execution_timeout=_duration(attrs["workflow_execution_timeout_ms"]),
            # Histories written before the chain's first run was recorded know it only for a first run.
            first_execution_run_id=attrs["first_execution_run_id"] or ("" if attrs["continued_execution_run_id"] else self.info.run_id),
            parent=parent,
            root=RootInfo(attrs["root_run_id"], attrs["root_workflow_id"]) if attrs["root_workflow_id"] else None,
            run_timeout=_duration(attrs["workflow_run_timeout_ms"]),
            search_attributes=search_attributes,
            headers=_headers(attrs.get("header") or {}),
            start_time=datetime.fromtimestamp(first_task_ms / 1000, UTC),
            task_timeout=timedelta(milliseconds=attrs["workflow_task_timeout_ms"]),
            workflow_start_time=datetime.fromtimestamp(started_ms / 1000, UTC),
        )

    def _start(self, input_payloads: list[Record]) -> None:
        """Make the workflow object and start its run method, through the interceptors, as the main task."""
        try:
            args = self.converter.payload_converter.from_payloads(input_payloads, self.definition.arg_types())
        except FailureError:
            raise
        except Exception as exc:  # fails the workflow task (as temporalio's "Failed decoding arguments")
            raise WorkflowTaskError(
                f"failed decoding the arguments of workflow {self.definition.name}: {type(exc).__name__}: {exc}"
            ) from exc
        name = f"workflow:{self.info.workflow_id}"
        with self._running():  # the constructor may use the workflow API (set handlers, read info)
            try:
                self._object = self.definition.cls(*args) if self.definition.init_takes_args else self.definition.cls()
            except Exception as exc:  # ends the run (or fails the task) as if the run method raised it
                self._main = self.create_task(_raise(exc), name=name)
                return
        execution = ExecuteWorkflowInput(type=self.definition.cls, run_fn=self.definition.run_fn, args=args, headers=self.info.headers)
        self._main = self.create_task(self._inbound.execute_workflow(execution), name=name)

    def assert_not_read_only(self, action: str) -> None:
        if self.read_only:
            raise ReadOnlyContextError(f"While in read-only function, action attempted: {action}")

    def _issue(self, command: Command, future: asyncio.Future[Any] | None) -> PendingCommand:
        self.assert_not_read_only(command[0])
        pending = PendingCommand(command, future)
        self._unmatched.append(pending)
        self._new_commands.append(command)
        return pending

    def _run_ready(self) -> None:
        with self._running():
            while self._ready or self._resolve_conditions():
                handle = self._ready.popleft()
                if not handle._cancelled:
                    handle._run()

    @contextlib.contextmanager
    def _running(self, read_only: bool = False) -> Iterator[None]:
        """Workflow code runs with this run as the running loop (what the workflow API looks up);
        a query handler or update validator runs read-only."""
        previous = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(self)
        self.read_only = read_only
        try:
            yield
        finally:
            self.read_only = False
            asyncio.events._set_running_loop(previous)

    # ---- the workflow API's view of the run --------------------------------------------------

    def schedule_activity(self, attrs: Record, *, disable_eager_execution: bool = False) -> asyncio.Future[Any]:
        self._activity_seq += 1
        attrs = {**attrs, "activity_id": attrs["activity_id"] or str(self._activity_seq)}
        if disable_eager_execution:
            self._eager_disabled.add(attrs["activity_id"])
        future = self.create_future()
        pending = self._issue((TaskCommandType.ScheduleActivityTask, attrs), future)
        future.add_done_callback(lambda done: self._activity_settled(pending, done))
        return future

    def has_pending_activities(self) -> bool:
        """Whether an activity an earlier workflow task scheduled is still pending (its attempts'
        starts and retried failures are written while a workflow task runs)."""
        return bool(self._activities)

    def eager_execution_disabled(self, activity_id: str) -> bool:
        """Whether the workflow code asked that this activity go through the task queue, never run
        eagerly by the worker that schedules it (temporalio's `disable_eager_execution`)."""
        return activity_id in self._eager_disabled

    def _activity_settled(self, pending: PendingCommand, future: asyncio.Future[Any]) -> None:
        """A cancelled activity (by workflow code, or with the workflow) is withdrawn if it was
        never sent, else its cancellation is requested (Temporal's TRY_CANCEL)."""
        self._eager_disabled.discard(pending.command[1]["activity_id"])
        if not future.cancelled() or self._withdraw(pending.command):
            return
        if pending.scheduled_event_id in self._activities:
            self._issue((TaskCommandType.RequestCancelActivityTask, {"scheduled_event_id": pending.scheduled_event_id}), None)

    def wait_condition(self, condition: Callable[[], bool]) -> asyncio.Future[None]:
        self.assert_not_read_only("wait condition")
        future = self.create_future()
        self._conditions.append((condition, future))
        return future

    def _resolve_conditions(self) -> bool:
        """Once callbacks ran dry, wake the waiters whose condition now holds; True if any woke."""
        woke = False
        for entry in list(self._conditions):
            condition, future = entry
            if future.done():
                self._conditions.remove(entry)
            elif condition():
                self._conditions.remove(entry)
                future.set_result(None)
                woke = True
        return woke

    def _withdraw(self, command: Command) -> bool:
        """Take back a command of the current activation that was not sent yet."""
        for pending in self._unmatched:
            if pending.command is command and any(c is command for c in self._new_commands):
                self._unmatched.remove(pending)
                self._new_commands = [c for c in self._new_commands if c is not command]
                return True
        return False

    def start_child_workflow(self, attrs: Record) -> PendingCommand:
        """Issue StartChildWorkflowExecution; `started` resolves to the child's run id, `future` to its result."""
        pending = self._issue((TaskCommandType.StartChildWorkflowExecution, attrs), self.create_future())
        pending.started = self.create_future()
        return pending

    def cancel_child_workflow(self, pending: PendingCommand) -> None:
        """Withdraw a child start not sent yet, else ask the child to cancel (its parent hears how it ends)."""
        if not self._withdraw(pending.command):
            self.request_cancel_external(pending.command[1]["workflow_id"], "", child_workflow_only=True)

    def signal_external(
        self, workflow_id: str, run_id: str, signal_name: str, payloads: Sequence[Record], child_workflow_only: bool, header: Record,
    ) -> asyncio.Future[None]:
        return self._issue((TaskCommandType.SignalExternalWorkflowExecution, {
            "workflow_id": workflow_id, "run_id": run_id, "signal_name": signal_name, "input": payloads,
            "child_workflow_only": child_workflow_only, "header": header,
        }), self.create_future()).future  # type: ignore[return-value]

    def request_cancel_external(self, workflow_id: str, run_id: str, child_workflow_only: bool = False) -> asyncio.Future[None]:
        return self._issue((TaskCommandType.RequestCancelExternalWorkflowExecution, {
            "workflow_id": workflow_id, "run_id": run_id, "child_workflow_only": child_workflow_only, "reason": "",
        }), self.create_future()).future  # type: ignore[return-value]

    def patched(self, patch_id: str, deprecated: bool = False) -> bool:
        """Whether code after this patch runs: always when running live (a marker records it); on
        replay, only if the task being replayed recorded the marker. Memoized per run."""
        if patch_id not in self._patches:
            use_patch = not self._replaying or patch_id in self._recorded_patch_ids()
            self._patches[patch_id] = use_patch
            if use_patch:
                payloads = self.converter.payload_converter
                details = {"patch_id": payloads.to_payloads([patch_id]), "deprecated": payloads.to_payloads([deprecated])}
                self._issue((TaskCommandType.RecordMarker, {"marker_name": PATCH_MARKER, "details": details}), None)
        return self._patches[patch_id]

    def _recorded_patch_ids(self) -> set[str]:
        payloads = self.converter.payload_converter
        return {payloads.from_payload(details["patch_id"][0]) for details in self._recorded_markers(PATCH_MARKER)}

    def upsert_search_attributes(self, attributes: dict[str, Any]) -> None:
        payloads = {name: self.converter.payload_converter.to_payload(value) for name, value in attributes.items()}
        self.info.search_attributes.update({name: v if isinstance(v, list) else [v] for name, v in attributes.items()})
        self._issue((TaskCommandType.UpsertWorkflowSearchAttributes, {"search_attributes": payloads}), None)

    def query(self, name: str, payloads: list[Record], header: Record | None = None, query_id: str = "") -> Record:
        """Run the query handler `name` (through the interceptors) on the current state; its result as a payload.
        The built-in `__stack_trace` (as temporalio's) comes before any handler, a dynamic one included."""
        if name == STACK_TRACE_QUERY:
            return self.converter.payload_converter.to_payload(self.stack_trace())
        handler = _lookup(self.queries, name)
        if handler is None:
            raise ApplicationError(
                f"workflow {self.definition.name} has no query {name!r} (known queries: {_names(self.queries)})",
                type="QueryNotRegistered", non_retryable=True,
            )
        _, args = self._bind(handler, name, payloads)
        query = HandleQueryInput(id=query_id, query=name, args=args, headers=_headers(header or {}))
        with self._running(read_only=True):
            result = _run_to_end(self._inbound.handle_query(query), f"query {name!r}")
        return self.converter.payload_converter.to_payload(result)

    def stack_trace(self) -> str:
        """Where each of the run's coroutines waits (its main one, signal and update handlers, the
        tasks it created), one stack per task, as temporalio's `__stack_trace` query answers."""
        stacks: list[str] = []
        for task in sorted(asyncio.all_tasks(self), key=lambda t: t.get_name()):
            # Down the chain of awaits (Task.print_stack shows the task's own coroutine only, so
            # an interceptor's execute_workflow, not the run method it awaits).
            frames: list[traceback.FrameSummary] = []
            coro: Any = task.get_coro()  # then what it awaits: a coroutine, generator or future
            while coro is not None:
                frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
                if frame is not None:  # named as the coroutine (`ApprovalWorkflow.run()`), as a task's repr names it
                    frames.append(traceback.FrameSummary(frame.f_code.co_filename, frame.f_lineno, f"{frame.f_code.co_qualname}()"))
                coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
            lines = "".join(traceback.StackSummary.from_list(frames).format())
            stacks.append(f"Stack for {task!r} (most recent call last):\n{lines}".rstrip())
        return "\n\n".join(stacks)

    def continue_as_new_suggested(self) -> bool:
        """Past the history service's warning thresholds: a long-running workflow should continue as new."""
        return self.history_length >= WARN_HISTORY_EVENTS or self.history_bytes >= WARN_HISTORY_BYTES

    def is_replaying(self) -> bool:
        """Whether the code runs again for history already recorded (its commands were sent before)."""
        return self._replaying or self.replay_only

    def now(self) -> datetime:
        return datetime.fromtimestamp(self._time_ms / 1000, UTC)

    # ---- the subset of asyncio.AbstractEventLoop workflow code may use ----------------------

    def call_soon(
        self, callback: Callable[[Unpack[_Ts]], object], *args: Unpack[_Ts], context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        handle = asyncio.Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def call_later(
        self, delay: float, callback: Callable[[Unpack[_Ts]], object], *args: Unpack[_Ts], context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """asyncio.sleep and wait_for timeouts become durable timers (StartTimer commands)."""
        self._timer_seq += 1
        timer_id = str(self._timer_seq)
        start = (TaskCommandType.StartTimer, {"timer_id": timer_id, "start_to_fire_timeout_ms": max(1, round(delay * 1000))})
        handle = DurableTimerHandle(self.time() + delay, callback, args, self, context, start)
        self._timers[timer_id] = handle
        self._issue(start, None)
        return handle

    def call_at(
        self, when: float, callback: Callable[[Unpack[_Ts]], object], *args: Unpack[_Ts], context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        return self.call_later(when - self.time(), callback, *args, context=context)

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        if not isinstance(handle, DurableTimerHandle) or self._timers.pop(handle.timer_id, None) is None:
            return  # already fired
        if not self._withdraw(handle.start_command):
            self._issue((TaskCommandType.CancelTimer, {"timer_id": handle.timer_id}), None)

    @property
    def random(self) -> random.Random:
        """Seeded by the run id alone, so the sequence is the same on every replay of the run,
        whenever it is first drawn from."""
        if self._random is None:
            self._random = random.Random(self.info.run_id)
        return self._random

    def time(self) -> float:
        return self._time_ms / 1000

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(self, coro: Any, *, name: str | None = None, context: contextvars.Context | None = None) -> asyncio.Task[Any]:
        return asyncio.Task(coro, loop=self, name=name, context=context)

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return asyncio.events._get_running_loop() is self

    def is_closed(self) -> bool:
        return False

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if exc is not None and not isinstance(exc, asyncio.CancelledError):
            raise WorkflowTaskError(context.get("message", "workflow callback failed")) from exc

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.call_exception_handler(context)


_Apply = Callable[[WorkflowInstance, str, Record, Record], None]

# What each history event does to a run, as temporalio's _WorkflowInstance._apply by activation
# job. Every event a command records (kadence.protocol.events.EVENT_FOR_COMMAND) and every answer
# to an initiated request (INITIATED_BY_ANSWER) has its row: tests/test_names.py checks.
_APPLY: dict[str, _Apply] = {
    EventType.WorkflowExecutionStarted: WorkflowInstance._apply_workflow_execution_started,
    EventType.WorkflowExecutionSignaled: WorkflowInstance._apply_workflow_execution_signaled,
    EventType.WorkflowExecutionCancelRequested: WorkflowInstance._apply_workflow_execution_cancel_requested,
    EventType.WorkflowTaskStarted: WorkflowInstance._apply_workflow_task_started,
    EventType.WorkflowTaskCompleted: WorkflowInstance._apply_workflow_task_completed,
    EventType.WorkflowTaskFailed: WorkflowInstance._apply_workflow_task_failed,
    EventType.WorkflowTaskTimedOut: WorkflowInstance._apply_workflow_task_failed,
    EventType.ActivityTaskScheduled: WorkflowInstance._apply_activity_task_scheduled,
    EventType.ActivityTaskCompleted: WorkflowInstance._apply_activity_task_completed,
    EventType.ActivityTaskFailed: WorkflowInstance._apply_activity_task_failed,
    EventType.ActivityTaskTimedOut: WorkflowInstance._apply_activity_task_failed,
    EventType.ActivityTaskCancelRequested: WorkflowInstance._apply_activity_task_cancel_requested,
    EventType.ActivityTaskCanceled: WorkflowInstance._apply_activity_task_canceled,
    EventType.WorkflowExecutionCompleted: WorkflowInstance._apply_workflow_execution_closed,
    EventType.WorkflowExecutionFailed: WorkflowInstance._apply_workflow_execution_closed,
    EventType.UpsertWorkflowSearchAttributes: WorkflowInstance._apply_upsert_workflow_search_attributes,
    EventType.TimerStarted: WorkflowInstance._apply_timer_command,
    EventType.TimerFired: WorkflowInstance._apply_timer_fired,
    EventType.TimerCanceled: WorkflowInstance._apply_timer_command,
    EventType.WorkflowExecutionCanceled: WorkflowInstance._apply_workflow_execution_closed,
    EventType.WorkflowExecutionContinuedAsNew: WorkflowInstance._apply_workflow_execution_closed,
    EventType.MarkerRecorded: WorkflowInstance._apply_marker_recorded,
    EventType.StartChildWorkflowExecutionInitiated: WorkflowInstance._apply_initiated,
    EventType.StartChildWorkflowExecutionFailed: WorkflowInstance._apply_start_child_workflow_execution_failed,
    EventType.ChildWorkflowExecutionStarted: WorkflowInstance._apply_child_workflow_execution_started,
    EventType.ChildWorkflowExecutionCompleted: WorkflowInstance._apply_child_workflow_execution_completed,
    EventType.ChildWorkflowExecutionFailed: WorkflowInstance._apply_child_workflow_execution_closed,
    EventType.ChildWorkflowExecutionCanceled: WorkflowInstance._apply_child_workflow_execution_closed,
    EventType.ChildWorkflowExecutionTimedOut: WorkflowInstance._apply_child_workflow_execution_closed,
    EventType.ChildWorkflowExecutionTerminated: WorkflowInstance._apply_child_workflow_execution_closed,
    EventType.SignalExternalWorkflowExecutionInitiated: WorkflowInstance._apply_initiated,
    EventType.SignalExternalWorkflowExecutionFailed: WorkflowInstance._apply_signal_external_workflow_execution_failed,
    EventType.ExternalWorkflowExecutionSignaled: WorkflowInstance._apply_external_request_applied,
    EventType.RequestCancelExternalWorkflowExecutionInitiated: WorkflowInstance._apply_initiated,
    EventType.RequestCancelExternalWorkflowExecutionFailed: WorkflowInstance._apply_request_cancel_external_workflow_execution_failed,
    EventType.ExternalWorkflowExecutionCancelRequested: WorkflowInstance._apply_external_request_applied,
    EventType.WorkflowExecutionUpdateAdmitted: WorkflowInstance._apply_workflow_execution_update_admitted,
    EventType.WorkflowExecutionUpdateAccepted: WorkflowInstance._apply_update_command,
    EventType.WorkflowExecutionUpdateRejected: WorkflowInstance._apply_update_command,
    EventType.WorkflowExecutionUpdateCompleted: WorkflowInstance._apply_update_command,
}


def replay(
    definition: WorkflowDefinition, info: WorkflowInfo, converter: DataConverter, history: list[Record],
    interceptor_classes: Sequence[type[WorkflowInboundInterceptor]] = (),
) -> WorkflowInstance:
    """The run rebuilt from its recorded history (its payloads decoded); raises NondeterminismError
    where the workflow code issues other commands than the history recorded. The commands of a
    workflow task not recorded yet are dropped."""
    instance = WorkflowInstance(definition, info, converter, interceptor_classes)  # type: ignore[abstract]  # see WorkflowInstance
    instance.replay_only = True
    last = history[-1]
    instance.activate(history, last["event_id"], last["event_time_ms"])
    return instance


def _running_instance() -> WorkflowInstance:
    """The run whose workflow code is running now."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if not isinstance(loop, WorkflowInstance):
        raise RuntimeError("not in a workflow: this call is only valid in workflow code run by a Worker")
    return loop


def _duration(ms: int) -> timedelta | None:
    return timedelta(milliseconds=ms) if ms else None


def _lookup(handlers: dict[str | None, Handler], name: str) -> Handler | None:
    """The handler of `name`, else the dynamic one."""
    return handlers.get(name) or handlers.get(None)


def _names(handlers: dict[str | None, Handler]) -> list[str]:
    return sorted(name for name in handlers if name is not None)


async def _raise(error: Exception) -> None:
    raise error


def _resolve(future: asyncio.Future[Any] | None, value: Any) -> None:
    if future is not None and not future.done():  # a future the workflow cancelled takes no result
        future.set_result(value)


def _fail(future: asyncio.Future[Any] | None, error: BaseException) -> None:
    if future is not None and not future.done():
        future.set_exception(error)


class _WorkflowInboundImpl(WorkflowInboundInterceptor):
    """The innermost inbound interceptor: calls the workflow's run method and handlers."""

    def __init__(self, instance: WorkflowInstance) -> None:  # no next: this is the end of the chain
        self._instance = instance

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        self._instance.outbound = outbound

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        return await input.run_fn(self._instance._object, *input.args)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        result = self._handler(self._instance.signals, input.signal)(*input.args)
        if inspect.isawaitable(result):
            await result

    async def handle_query(self, input: HandleQueryInput) -> Any:
        return self._handler(self._instance.queries, input.query)(*input.args)

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        handler = _lookup(self._instance.updates, input.update)
        if handler is not None and handler.validator is not None:
            validator = functools.partial(handler.validator, self._instance._object) if handler.is_method else handler.validator
            validator(*input.args)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        result = self._handler(self._instance.updates, input.update)(*input.args)
        return await result if inspect.isawaitable(result) else result

    def _handler(self, handlers: dict[str | None, Handler], name: str) -> Callable[..., Any]:
        handler = _lookup(handlers, name)
        assert handler is not None, f"no handler for {name!r}"  # looked up before the interceptors were called
        return self._instance.callable(handler)


def _headers(header: Mapping[str, Record]) -> dict[str, Payload]:
    """A record's header field as temporalio's Mapping[str, Payload]."""
    return {name: Payload.of(payload) for name, payload in header.items()}


def _run_to_end(coro: Coroutine[Any, Any, Any], what: str) -> Any:
    """Run a coroutine that must not wait (a query through the interceptors) to its result."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise ReadOnlyContextError(f"{what} waited on something: a query handler, and its interceptors, must not wait")
