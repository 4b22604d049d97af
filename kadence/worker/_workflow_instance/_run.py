"""One workflow run inside a worker: its state, the commands its code issues and how they are
matched to the events that record them, and the runtime (kadence.workflow's _Runtime) the
workflow API calls, on its deterministic loop (WorkflowLoop).

An activation runs the code until it waits on history and collects the commands it issued; the
history (kadence.worker._workflow_instance._history) resolves what they wait on. Commands produced
by an activation must match the events that follow its WorkflowTaskCompleted; any difference is a
NondeterminismError.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import dataclasses
import json
import random
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar, TypeVarTuple, Unpack, cast

from kadence.api.common.v1 import Payload
from kadence.common import (
    ActivityCancellationType,
    ChildWorkflowCancellationType,
    MetricMeter,
    ParentClosePolicy,
    RetryPolicy,
    WorkflowIDReusePolicy,
)
from kadence.converter import DataConverter, Failure
from kadence.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    FailureError,
    NondeterminismError,
    ReadOnlyContextError,
    RetryState,
    is_cancelled_exception,
)
from kadence.protocol.codec import Record
from kadence.protocol.events import EVENT_FOR_COMMAND, LOCAL_ACTIVITY_MARKER, PATCH_MARKER, memo_upserted
from kadence.protocol.limits import WARN_HISTORY_BYTES, WARN_HISTORY_EVENTS
from kadence.protocol.names import EventType
from kadence.protocol.records import (
    CancelWorkflowExecution,
    CompleteWorkflowExecution,
    FailWorkflowExecution,
    HistoryEvent,
    ModifyWorkflowProperties,
    RecordMarker,
    RequestCancelActivityTask,
    RequestCancelNexusOperation,
    ScheduleActivityTask,
    ScheduleNexusOperation,
    StartChildWorkflowExecution,
    UpsertWorkflowSearchAttributesCommand,
    WorkflowExecutionStarted,
)
from kadence.protocol.records import Failure as FailureRecord
from kadence.protocol.records import Payload as PayloadRecord
from kadence.worker._interceptor import (
    ContinueAsNewInput,
    ExecuteWorkflowInput,
    SignalChildWorkflowInput,
    SignalExternalWorkflowInput,
    StartActivityInput,
    StartChildWorkflowInput,
    StartLocalActivityInput,
    StartNexusOperationInput,
    WorkflowInboundInterceptor,
    WorkflowOutboundInterceptor,
)
from kadence.worker._workflow_instance._commands import (
    CancelTimerCommand,
    Command,
    InitiatedCommand,
    LocalActivity,
    PendingCommand,
    RecordMarkerCommand,
    RequestCancelActivityCommand,
    RequestCancelExternalCommand,
    RequestCancelNexusCommand,
    ScheduleActivityCommand,
    ScheduleNexusCommand,
    SignalExternalCommand,
    StartChildWorkflowCommand,
    StartTimerCommand,
)
from kadence.worker._workflow_instance._loop import WorkflowLoop, WorkflowTaskError
from kadence.workflow import (
    ChildWorkflowHandle,
    ContinueAsNewError,
    HandlerUnfinishedPolicy,
    ParentInfo,
    RootInfo,
    UnfinishedSignalHandlersWarning,
    UnfinishedUpdateHandlersWarning,
)
from kadence.workflow._definition import Handler, WorkflowDefinition
from kadence.workflow._runtime import NexusOperationCancellationType, NexusOperationHandle, WorkflowInfo, _Runtime

# A local activity's outcome as its marker's details: the worker's payloads, or those its marker recorded.
LocalOutcome = Mapping[str, Sequence[Mapping[str, Any]]]

_Ts = TypeVarTuple("_Ts")
_Pending = TypeVar("_Pending", bound=PendingCommand)


@dataclass(frozen=True)
class RunningHandler:
    kind: str  # "signal" or "update"
    name: str
    update_id: str
    unfinished_policy: HandlerUnfinishedPolicy


class DurableTimerHandle(asyncio.TimerHandle):
    """A loop timer backed by a StartTimer command; it fires when history says TimerFired."""

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...], loop: WorkflowRun,
                 context: contextvars.Context | None, start: StartTimerCommand) -> None:
        super().__init__(when, callback, args, loop, context)
        self.start = start
        self.timer_id: str = start.key


class WorkflowRun(WorkflowLoop, _Runtime):
    """One run's state, its commands and the runtime its workflow code calls. WorkflowHandlers adds
    the handlers' dispatch; WorkflowInstance wires the interceptor chains (inbound, outbound) and
    applies the history."""

    inbound: WorkflowInboundInterceptor  # the chain signals, queries and updates reach the code through
    outbound: WorkflowOutboundInterceptor  # the chain what the code sends goes through

    def __init__(
        self, definition: WorkflowDefinition, info: WorkflowInfo, converter: DataConverter, metric_meter: MetricMeter,
    ) -> None:
        super().__init__()
        self.definition = definition
        self.info = info
        self.converter = converter
        # As temporalio's workflow.metric_meter(): the run's attributes, and nothing recorded on replay.
        self.metric_meter = metric_meter.with_additional_attributes({
            "namespace": info.namespace, "task_queue": info.task_queue, "workflow_type": info.workflow_type,
        }).recording_only_when(lambda: not self.is_replaying())
        self.processed_event_id = 0
        self.last_activated_task = 0  # scheduled_event_id of the task this run ran live
        self.closed = False
        self._unmatched: collections.deque[PendingCommand] = collections.deque()
        self._eager_disabled: set[str] = set()  # activity ids: see eager_execution_disabled
        self._new_commands: list[Command] = []
        self.activities: dict[int, ScheduleActivityCommand] = {}  # by scheduled event id, until they end
        self._activity_seq = 0
        self.timers: dict[str, DurableTimerHandle] = {}
        self._timer_seq = 0
        self.main: asyncio.Task[Any] | None = None
        self.workflow_object: Any = None
        self.signals = {name: Handler(fn, dynamic=name is None) for name, fn in definition.signals.items()}
        self.queries = {name: Handler(fn, dynamic=name is None) for name, fn in definition.queries.items()}
        self.updates = {
            name: Handler(fn, validator=validator, dynamic=name is None) for name, (fn, validator) in definition.updates.items()
        }
        self.running_handlers: list[RunningHandler] = []  # signal and update handlers not finished
        self.initiated: dict[int, InitiatedCommand] = {}  # children and external requests by initiated event id
        self.nexus_operations: dict[int, ScheduleNexusCommand] = {}  # by scheduled event id, until they end
        self.replaying = False
        self.replay_only = False  # rebuilt to answer a query or check a history: every activation is a replay
        self.upcoming: list[HistoryEvent] = []  # the history after the event being applied
        self._patches: dict[str, bool] = {}
        self._local_activities: list[LocalActivity] = []
        self._local_seq = 0
        self._random: random.Random | None = None  # made at its first use: seeding costs 20-30 µs a run
        self._seed: str | None = None  # what seeds it: the run id, or the run that first wrote a reset run's past
        self.history_bytes = 0
        self.history_length = 0  # as of the workflow task being run: up to its WorkflowTaskStarted
        self.task_started_ms = 0  # when the workflow task being run started
        self._close_issued = False  # the command that ends the run is issued: no second one
        self.cancel_requested = False  # history recorded WorkflowExecutionCancelRequested: a cancellation error ends it canceled
        self._handler_failure: BaseException | None = None  # raised by a signal handler: fails the run
        self._task_error: WorkflowTaskError | None = None  # raised by a signal handler: fails the workflow task

    # ---- activations -------------------------------------------------------------------------

    def match(self, event_type: str, key: str, expected: type[_Pending]) -> _Pending:
        """The oldest command not matched yet, which must be the one the event (of `event_type`, with `key`) records."""
        if not self._unmatched:
            raise NondeterminismError(f"history has {event_type} {key} but the workflow code issued no such command")
        pending = self._unmatched.popleft()
        kind = pending.command[0]
        if EVENT_FOR_COMMAND[kind] != event_type or pending.key != key:
            raise NondeterminismError(f"history has {event_type} {key} where the workflow code issued {kind} {pending.key}")
        assert isinstance(pending, expected), f"{kind} matched {event_type}"  # EVENT_FOR_COMMAND pairs each event with one command kind
        return pending

    def run_activation(self) -> list[Command]:
        if self._unmatched:
            extra = ", ".join(p.command[0] for p in self._unmatched)
            raise NondeterminismError(f"workflow code issued commands that history does not have: {extra}")
        self._new_commands = []
        self._drive()
        return list(self._new_commands)

    def _drive(self) -> None:
        """Run until the workflow waits on history; a replayed task's local activities are resolved
        from its markers as the live run resolved them: once the code ran dry. Those still pending
        when the run ends are abandoned, as temporalio's: they never ran live, so nothing recorded them."""
        self.run_ready()
        while self.replaying and self._local_activities and not self._ending():
            recorded = self._recorded_local_outcomes()
            for local in list(self._local_activities):
                if local.seq not in recorded:
                    raise NondeterminismError(
                        f"local activity {local.attributes['activity_type']} (#{local.seq}) has no recorded outcome in history"
                    )
                self._record_local_outcome(local, recorded[local.seq])
            self.run_ready()
        if self._task_error is not None:
            error, self._task_error = self._task_error, None
            raise error
        if self.closed or self._close_issued:
            return
        if self._handler_failure is not None:
            self._close_issued = True
            self.issue(PendingCommand(self._ended_by(self._handler_failure)))
        elif self.main is not None and self.main.done():
            command = self._close_command(self.main)
            self._close_issued = True
            self.issue(PendingCommand(command))
        else:
            return
        self._local_activities.clear()
        if not self.is_replaying():
            self._warn_of_unfinished_handlers()

    def _ending(self) -> bool:
        """Whether the run ends with this activation: its code returned or raised, or a signal handler failed it."""
        return self._handler_failure is not None or (self.main is not None and self.main.done())

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

    def resolve_local_activities(self, outcomes: Mapping[int, LocalOutcome]) -> list[Command]:
        """Record the outcomes (marker details by seq) the worker got, and run on; the task's
        commands, of every round: a command an earlier round issued may have been withdrawn since."""
        for local in list(self._local_activities):
            if local.seq in outcomes:
                self._record_local_outcome(local, outcomes[local.seq])
        self._drive()
        return list(self._new_commands)

    def _record_local_outcome(self, local: LocalActivity, details: LocalOutcome) -> None:
        self._local_activities.remove(local)
        # The details as given: the worker's payloads, or those the marker recorded (the same dicts).
        marker: RecordMarker = {"marker_name": LOCAL_ACTIVITY_MARKER, "details": cast(dict[str, list[PayloadRecord]], details)}
        self.issue(RecordMarkerCommand(("RecordMarker", marker)))
        if "result" in details:
            set_result_unless_done(local.future, details["result"][0])
            return
        failed = self.converter.payload_converter.from_payload(details["failure"][0])
        error = ActivityError(
            "Local activity failed", scheduled_event_id=0, started_event_id=0, identity="", activity_type=local.attributes["activity_type"],
            activity_id=str(local.seq), retry_state=RetryState(failed["retry_state"]),
        )
        error.__cause__ = ApplicationError(failed["message"], type=failed["type"] or None, non_retryable=failed["non_retryable"])
        set_exception_unless_done(local.future, error)

    def _recorded_local_outcomes(self) -> dict[int, dict[str, list[PayloadRecord]]]:
        """Local activity outcomes (marker details by seq) the replayed task recorded."""
        payloads = self.converter.payload_converter
        return {payloads.from_payload(details["seq"][0]): details for details in self.recorded_markers(LOCAL_ACTIVITY_MARKER)}

    def recorded_markers(self, marker_name: str) -> list[dict[str, list[PayloadRecord]]]:
        """Details of the markers named so that the replayed task recorded: the events after its
        WorkflowTaskCompleted, up to the next workflow task."""
        found = []
        for event in self.upcoming:
            match event["attributes"]:
                case ("WorkflowTaskScheduled" | "WorkflowTaskStarted", _):
                    break
                case ("MarkerRecorded", marker) if marker["marker_name"] == marker_name:
                    found.append(marker["details"])
        return found

    def schedule_local_activity(self, attributes: Record) -> LocalActivity:
        self.assert_not_read_only("start local activity")
        self._local_seq += 1
        local = LocalActivity(self._local_seq, attributes, self.create_future())
        self._local_activities.append(local)
        return local

    def cancel_local_activity(self, local: LocalActivity, cancellation_type: ActivityCancellationType) -> None:
        """A local activity runs only once the workflow code waits, so one cancelled has not run yet:
        it never will, unless ABANDON lets it run (its outcome is recorded and ignored). It is
        resolved now with the error temporalio's core makes of a cancelled local activity: an
        ActivityError "Local Activity cancelled" (retry state CANCEL_REQUESTED) caused by a
        CancelledError "Activity cancelled"."""
        if cancellation_type is not ActivityCancellationType.ABANDON:
            self._local_activities.remove(local)
        error = self.converter.failure_converter.from_failure({
            "message": "Local Activity cancelled", "type": ActivityError.__name__, "source": "", "stack_trace": "",
            "cause": {"message": "Activity cancelled", "type": CancelledError.__name__, "source": "", "stack_trace": "",
                      "details": [], "canceled_failure_info": {"identity": ""}},
            "activity_failure_info": {
                "scheduled_event_id": 0, "started_event_id": 0, "identity": "", "activity_type": local.attributes["activity_type"],
                "activity_id": str(local.seq), "retry_state": RetryState.CANCEL_REQUESTED.value,
            },
        }, self.converter.payload_converter)
        set_exception_unless_done(local.future, error)

    def _close_command(self, main: asyncio.Task[Any]) -> Command:
        exc = asyncio.CancelledError() if main.cancelled() else main.exception()
        if isinstance(exc, ContinueAsNewError):
            return ("ContinueAsNewWorkflowExecution", exc.attributes)
        if exc is None:
            complete: CompleteWorkflowExecution = {"result": payload_record(self.converter.payload_converter.to_payload(main.result()))}
            return ("CompleteWorkflowExecution", complete)
        return self._ended_by(exc)

    def _ended_by(self, exc: BaseException) -> Command:
        """The command that ends the run whose code (the run method, or a signal handler) raised
        `exc`, by temporalio's rule: an asyncio.CancelledError counts as a CancelledError; a run
        whose cancellation was requested ends canceled when the error is a cancellation
        (`is_cancelled_exception`: a CancelledError, or an ActivityError, ChildWorkflowError or
        NexusOperationError caused by one); else a FailureError (or one of the definition's
        failure_exception_types) fails the run, and any other error fails the workflow task."""
        if isinstance(exc, asyncio.CancelledError):
            exc = CancelledError(str(exc))
        if self.cancel_requested and is_cancelled_exception(exc):
            cancel: CancelWorkflowExecution = {"details": []}
            return ("CancelWorkflowExecution", cancel)
        if isinstance(exc, (FailureError, *self.definition.failure_exception_types)):
            fail: FailWorkflowExecution = {"failure": failure_record(self.converter.to_failure(exc))}
            return ("FailWorkflowExecution", fail)
        raise WorkflowTaskError(f"{type(exc).__name__}: {exc}") from exc

    def started_info(self, attrs: WorkflowExecutionStarted, started_ms: int) -> WorkflowInfo:
        """The info the WorkflowExecutionStarted event gives; the first workflow task's start is the
        next WorkflowTaskStarted recorded, else the task being run now."""
        first_task_ms = next(
            (e["event_time_ms"] for e in self.upcoming if e["attributes"][0] == EventType.WorkflowTaskStarted), self.task_started_ms,
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
            original_execution_run_id=attrs.get("original_execution_run_id") or self.info.run_id,
            parent=parent,
            root=RootInfo(attrs["root_run_id"], attrs["root_workflow_id"]) if attrs["root_workflow_id"] else None,
            run_timeout=_duration(attrs["workflow_run_timeout_ms"]),
            search_attributes=search_attributes,
            raw_memo={key: Payload.of(payload) for key, payload in (attrs.get("memo") or {}).items()},
            headers=payload_headers(attrs.get("header") or {}),
            start_time=datetime.fromtimestamp(first_task_ms / 1000, UTC),
            task_timeout=timedelta(milliseconds=attrs["workflow_task_timeout_ms"]),
            workflow_start_time=datetime.fromtimestamp(started_ms / 1000, UTC),
        )

    def start(self, input_payloads: list[PayloadRecord]) -> None:
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
        with self.running():  # the constructor may use the workflow API (set handlers, read info)
            try:
                self.workflow_object = self.definition.cls(*args) if self.definition.init_takes_args else self.definition.cls()
            except Exception as exc:  # ends the run (or fails the task) as if the run method raised it
                self.main = self.create_task(_raise(exc), name=name)
                return
        execution = ExecuteWorkflowInput(type=self.definition.cls, run_fn=self.definition.run_fn, args=args, headers=self.info.headers)
        self.main = self.create_task(self.inbound.execute_workflow(execution), name=name)

    def assert_not_read_only(self, action: str) -> None:
        if self.read_only:
            raise ReadOnlyContextError(f"While in read-only function, action attempted: {action}")

    def issue(self, pending: _Pending) -> _Pending:
        self.assert_not_read_only(pending.command[0])
        self._unmatched.append(pending)
        self._new_commands.append(pending.command)
        return pending

    def _withdraw(self, pending: PendingCommand) -> bool:
        """Take back a command of the current workflow task (any of its local-activity rounds), not sent yet."""
        command = pending.command
        if pending in self._unmatched and any(c is command for c in self._new_commands):
            self._unmatched.remove(pending)
            self._new_commands = [c for c in self._new_commands if c is not command]
            return True
        return False

    # ---- what the workflow code asks of the run ----------------------------------------------

    def schedule_activity(self, attrs: ScheduleActivityTask, *, disable_eager_execution: bool = False) -> ScheduleActivityCommand:
        self._activity_seq += 1
        activity_id = attrs["activity_id"] or str(self._activity_seq)
        if disable_eager_execution:
            self._eager_disabled.add(activity_id)
        future = self.create_future()
        future.add_done_callback(lambda _: self._eager_disabled.discard(activity_id))
        scheduled: ScheduleActivityTask = {**attrs, "activity_id": activity_id}
        return self.issue(ScheduleActivityCommand(("ScheduleActivityTask", scheduled), future))

    def has_pending_activities(self) -> bool:
        """Whether an activity an earlier workflow task scheduled is still pending (its attempts'
        starts and retried failures are written while a workflow task runs)."""
        return bool(self.activities)

    def eager_execution_disabled(self, activity_id: str) -> bool:
        """Whether the workflow code asked that this activity go through the task queue, never run
        eagerly by the worker that schedules it (temporalio's `disable_eager_execution`)."""
        return activity_id in self._eager_disabled

    def cancel_activity(self, pending: ScheduleActivityCommand, cancellation_type: ActivityCancellationType) -> None:
        """The workflow code cancelled the activity's task (or the workflow was cancelled): one never
        sent is withdrawn. Else TRY_CANCEL and WAIT_CANCELLATION_COMPLETED request its cancellation
        and ABANDON does not; all but WAIT_CANCELLATION_COMPLETED resolve it now, which leaves it to
        the event that records how the activity ended. Resolved so, it raises temporalio core's
        ActivityError caused by a CancelledError (`activity_canceled_error`)."""
        if self._withdraw(pending):
            set_exception_unless_done(pending.future, self.activity_canceled_error(pending))
            return
        if cancellation_type is not ActivityCancellationType.ABANDON and pending.scheduled_event_id in self.activities:
            request: RequestCancelActivityTask = {"scheduled_event_id": pending.scheduled_event_id}
            self.issue(RequestCancelActivityCommand(("RequestCancelActivityTask", request)))
        if cancellation_type is not ActivityCancellationType.WAIT_CANCELLATION_COMPLETED:
            set_exception_unless_done(pending.future, self.activity_canceled_error(pending))

    def activity_canceled_error(self, pending: ScheduleActivityCommand) -> FailureError:
        """What an activity resolved as cancelled without waiting for ActivityTaskCanceled raises
        (TRY_CANCEL, ABANDON, or one cancelled before it was sent), as temporalio's core makes it
        from no event: "Activity cancelled", retry state CANCEL_REQUESTED, no event ids and no
        identity, caused by a CancelledError."""
        return self.converter.failure_converter.activity_error(
            EventType.ActivityTaskCanceled, pending.scheduled or pending.command[1],
            {"scheduled_event_id": 0, "started_event_id": 0, "identity": "", "details": []}, self.converter.payload_converter,
        )

    def schedule_nexus_operation(self, attrs: ScheduleNexusOperation) -> ScheduleNexusCommand:
        return self.issue(ScheduleNexusCommand(("ScheduleNexusOperation", attrs), self.create_future(), started=self.create_future()))

    def cancel_nexus_operation(self, pending: ScheduleNexusCommand, cancellation_type: NexusOperationCancellationType) -> None:
        """The workflow code cancelled the operation (or the task awaiting it): one never sent is
        withdrawn. Else all but ABANDON ask history to cancel it; ABANDON and TRY_CANCEL resolve it
        as canceled now, WAIT_REQUESTED once history recorded the request, WAIT_COMPLETED when the
        operation ends (as temporalio's)."""
        if self._withdraw(pending):
            set_exception_unless_done(pending.future, self.nexus_canceled_error(pending))
            return
        if cancellation_type is not NexusOperationCancellationType.ABANDON and pending.scheduled_event_id in self.nexus_operations:
            request: RequestCancelNexusOperation = {"scheduled_event_id": pending.scheduled_event_id}
            self.issue(RequestCancelNexusCommand(("RequestCancelNexusOperation", request)))
        if cancellation_type is NexusOperationCancellationType.WAIT_REQUESTED:
            pending.cancel_requested = self.create_future()
        elif cancellation_type is not NexusOperationCancellationType.WAIT_COMPLETED:
            set_exception_unless_done(pending.future, self.nexus_canceled_error(pending))

    def nexus_canceled_error(self, pending: ScheduleNexusCommand) -> FailureError:
        attrs = pending.command[1]
        scheduled = pending.scheduled or attrs
        return self.converter.failure_converter.nexus_operation_error(
            EventType.NexusOperationCanceled, scheduled, {"scheduled_event_id": pending.scheduled_event_id, "failure": None},
            pending.operation_token, self.converter.payload_converter,
        )

    def issue_child_workflow_start(self, attrs: StartChildWorkflowExecution) -> StartChildWorkflowCommand:
        """Issue StartChildWorkflowExecution; `started` resolves to the child's run id, `future` to its result."""
        return self.issue(StartChildWorkflowCommand(
            ("StartChildWorkflowExecution", attrs), self.create_future(), started=self.create_future(),
        ))

    def cancel_child_workflow(
        self, pending: StartChildWorkflowCommand,
        cancellation_type: ChildWorkflowCancellationType = ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED,
    ) -> None:
        """Withdraw a child start not sent yet. Else all but ABANDON ask the child to cancel; ABANDON
        and TRY_CANCEL resolve it as canceled now, WAIT_CANCELLATION_REQUESTED once the child's
        history recorded the request, WAIT_CANCELLATION_COMPLETED when the child ends (as temporalio's)."""
        if self._withdraw(pending):
            return
        if cancellation_type is not ChildWorkflowCancellationType.ABANDON:
            requested = self.request_cancel_external(pending.command[1]["workflow_id"], "", child_workflow_only=True)
            if cancellation_type is ChildWorkflowCancellationType.WAIT_CANCELLATION_REQUESTED:
                requested.add_done_callback(lambda answer: self._child_cancel_requested(pending, answer))
        if cancellation_type in (ChildWorkflowCancellationType.ABANDON, ChildWorkflowCancellationType.TRY_CANCEL):
            set_exception_unless_done(pending.future, self._child_canceled_error(pending))

    def _child_cancel_requested(self, pending: StartChildWorkflowCommand, answer: asyncio.Future[None]) -> None:
        """The child's history took the cancel request (or the child had ended, whose close resolves it)."""
        if not answer.cancelled() and answer.exception() is None:
            set_exception_unless_done(pending.future, self._child_canceled_error(pending))

    def _child_canceled_error(self, pending: StartChildWorkflowCommand) -> FailureError:
        """The ChildWorkflowError (caused by CancelledError) a child cancelled without waiting for its end raises."""
        attrs = pending.command[1]
        initiated = next((event_id for event_id, command in self.initiated.items() if command is pending), 0)
        run_id = pending.started.result() if pending.started.done() and not pending.started.exception() else ""
        return self.converter.failure_converter.child_workflow_error(EventType.ChildWorkflowExecutionCanceled, {
            "workflow_id": attrs["workflow_id"], "run_id": run_id, "workflow_type": attrs["workflow_type"],
            "initiated_event_id": initiated, "started_event_id": 0, "details": [],
        }, self.converter.payload_converter)

    def signal_external(
        self, workflow_id: str, run_id: str, signal_name: str, payloads: list[PayloadRecord], child_workflow_only: bool,
        header: dict[str, PayloadRecord],
    ) -> asyncio.Future[None]:
        return self.issue(SignalExternalCommand(("SignalExternalWorkflowExecution", {
            "workflow_id": workflow_id, "run_id": run_id, "signal_name": signal_name, "input": payloads,
            "child_workflow_only": child_workflow_only, "header": header,
        }), self.create_future())).future

    def request_cancel_external(self, workflow_id: str, run_id: str, child_workflow_only: bool = False) -> asyncio.Future[None]:
        return self.issue(RequestCancelExternalCommand(("RequestCancelExternalWorkflowExecution", {
            "workflow_id": workflow_id, "run_id": run_id, "child_workflow_only": child_workflow_only, "reason": "",
        }), self.create_future())).future

    def patched(self, patch_id: str, deprecated: bool = False) -> bool:
        """Whether code after this patch runs: always when running live (a marker records it); on
        replay, only if the task being replayed recorded the marker. Memoized per run."""
        if patch_id not in self._patches:
            use_patch = not self.replaying or patch_id in self._recorded_patch_ids()
            self._patches[patch_id] = use_patch
            if use_patch:
                payloads = self.converter.payload_converter
                details = {"patch_id": payload_records(payloads.to_payloads([patch_id])),
                           "deprecated": payload_records(payloads.to_payloads([deprecated]))}
                self.issue(RecordMarkerCommand(("RecordMarker", {"marker_name": PATCH_MARKER, "details": details})))
        return self._patches[patch_id]

    def _recorded_patch_ids(self) -> set[str]:
        payloads = self.converter.payload_converter
        return {payloads.from_payload(details["patch_id"][0]) for details in self.recorded_markers(PATCH_MARKER)}

    def upsert_search_attributes(self, attributes: dict[str, Any]) -> None:
        payloads = {name: payload_record(self.converter.payload_converter.to_payload(value)) for name, value in attributes.items()}
        self.info.search_attributes.update({name: v if isinstance(v, list) else [v] for name, v in attributes.items()})
        upsert: UpsertWorkflowSearchAttributesCommand = {"search_attributes": payloads}
        self.issue(PendingCommand(("UpsertWorkflowSearchAttributes", upsert)))

    def upsert_memo(self, updates: Mapping[str, Any]) -> None:
        """As temporalio's: a value of None removes its key, sent as the null payload (recorded even
        when the key is absent); the payloads are made before anything changes, so a value the
        converter refuses leaves the memo as it was."""
        converter = self.converter.payload_converter
        upserted = {key: converter.to_payload(value) for key, value in updates.items()}
        if not upserted:
            return
        memo = memo_upserted(self.info.raw_memo, upserted)
        self.info.raw_memo.clear()  # in place, as temporalio: an Info read before sees the upsert
        self.info.raw_memo.update(memo)
        modify: ModifyWorkflowProperties = {"upserted_memo": {key: payload_record(payload) for key, payload in upserted.items()}}
        self.issue(PendingCommand(("ModifyWorkflowProperties", modify)))

    def wait_condition(self, condition: Callable[[], bool]) -> asyncio.Future[None]:
        self.assert_not_read_only("wait condition")
        return self.add_condition(condition)

    def continue_as_new_suggested(self) -> bool:
        """Past the history service's warning thresholds: a long-running workflow should continue as new."""
        return self.history_length >= WARN_HISTORY_EVENTS or self.history_bytes >= WARN_HISTORY_BYTES

    def is_replaying(self) -> bool:
        """Whether the code runs again for history already recorded (its commands were sent before)."""
        return self.replaying or self.replay_only

    def call_later(
        self, delay: float, callback: Callable[[Unpack[_Ts]], object], *args: Unpack[_Ts], context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        """asyncio.sleep and wait_for timeouts become durable timers (StartTimer commands)."""
        self._timer_seq += 1
        timer_id = str(self._timer_seq)
        timeout_ms = max(1, round(delay * 1000))
        start = StartTimerCommand(("StartTimer", {"timer_id": timer_id, "start_to_fire_timeout_ms": timeout_ms}))
        handle = DurableTimerHandle(self.time() + delay, callback, args, self, context, start)
        self.timers[timer_id] = handle
        self.issue(start)
        return handle

    def _timer_handle_cancelled(self, handle: asyncio.TimerHandle) -> None:
        if not isinstance(handle, DurableTimerHandle) or self.timers.pop(handle.timer_id, None) is None:
            return  # already fired
        if not self._withdraw(handle.start):
            self.issue(CancelTimerCommand(("CancelTimer", {"timer_id": handle.timer_id})))

    @property
    def random(self) -> random.Random:
        """Seeded by the run id alone, so the sequence is the same on every replay of the run,
        whenever it is first drawn from. A reset run's copied past draws from the run that wrote it,
        and what runs after the reset from the new run (`reseed`), as sdk-core's UpdateRandomSeed."""
        if self._random is None:
            self._random = random.Random(self._seed or self.info.run_id)
        return self._random

    def reseed(self, seed: str) -> None:
        """Draw from `seed` from here on (a reset's WorkflowTaskFailed, a copied start's original run)."""
        self._seed, self._random = seed, None

    # ---- the runtime's calls out, through the outbound interceptors ---------------------------

    def workflow_info(self) -> WorkflowInfo:
        return self.outbound.info()

    def all_handlers_finished(self) -> bool:
        return not self.running_handlers

    def start_activity(
        self, activity: str, args: Sequence[Any], *, activity_id: str | None, task_queue: str | None,
        schedule_to_close_timeout: timedelta | None, schedule_to_start_timeout: timedelta | None,
        start_to_close_timeout: timedelta | None, heartbeat_timeout: timedelta | None, retry_policy: RetryPolicy | None,
        cancellation_type: ActivityCancellationType, disable_eager_execution: bool, result_type: type | None,
    ) -> asyncio.Task[Any]:
        return self.outbound.start_activity(StartActivityInput(
            activity=activity, args=args, activity_id=activity_id, task_queue=task_queue,
            schedule_to_close_timeout=schedule_to_close_timeout, schedule_to_start_timeout=schedule_to_start_timeout,
            start_to_close_timeout=start_to_close_timeout, heartbeat_timeout=heartbeat_timeout, retry_policy=retry_policy,
            cancellation_type=cancellation_type, headers={}, disable_eager_execution=disable_eager_execution, versioning_intent=None,
            summary=None, arg_types=None, ret_type=result_type,
        ))

    def start_local_activity(
        self, activity: str, args: Sequence[Any], *, schedule_to_close_timeout: timedelta | None,
        start_to_close_timeout: timedelta | None, retry_policy: RetryPolicy | None, cancellation_type: ActivityCancellationType,
        result_type: type | None,
    ) -> asyncio.Task[Any]:
        return self.outbound.start_local_activity(StartLocalActivityInput(
            activity=activity, args=args, activity_id=None, schedule_to_close_timeout=schedule_to_close_timeout,
            schedule_to_start_timeout=None, start_to_close_timeout=start_to_close_timeout, retry_policy=retry_policy,
            local_retry_threshold=None, cancellation_type=cancellation_type, headers={}, summary=None, arg_types=None,
            ret_type=result_type,
        ))

    async def start_child_workflow(
        self, workflow: str, args: Sequence[Any], *, id: str, task_queue: str | None, execution_timeout: timedelta | None,
        run_timeout: timedelta | None, task_timeout: timedelta | None, id_reuse_policy: WorkflowIDReusePolicy,
        parent_close_policy: ParentClosePolicy, search_attributes: dict[str, Any] | None, memo: Mapping[str, Any] | None,
        result_type: type | None, cancellation_type: ChildWorkflowCancellationType,
    ) -> ChildWorkflowHandle:
        return await self.outbound.start_child_workflow(StartChildWorkflowInput(
            workflow=workflow, args=args, id=id, task_queue=task_queue, cancellation_type=cancellation_type,
            parent_close_policy=parent_close_policy, execution_timeout=execution_timeout, run_timeout=run_timeout,
            task_timeout=task_timeout, id_reuse_policy=id_reuse_policy, retry_policy=None, cron_schedule="", memo=memo,
            search_attributes=search_attributes, headers={}, versioning_intent=None, static_summary=None, static_details=None,
            arg_types=None, ret_type=result_type,
        ))

    async def start_nexus_operation(
        self, endpoint: str, service: str, operation: str, input: Any, *, output_type: type | None,
        schedule_to_close_timeout: timedelta | None, cancellation_type: NexusOperationCancellationType, headers: dict[str, str],
    ) -> NexusOperationHandle[Any]:
        return await self.outbound.start_nexus_operation(StartNexusOperationInput(
            endpoint=endpoint, service=service, operation=operation, input=input, schedule_to_close_timeout=schedule_to_close_timeout,
            cancellation_type=cancellation_type, headers=headers, output_type=output_type,
        ))

    async def signal_child_workflow(self, workflow_id: str, signal: str, args: Sequence[Any]) -> None:
        await self.outbound.signal_child_workflow(SignalChildWorkflowInput(
            signal=signal, args=args, child_workflow_id=workflow_id, headers={},
        ))

    async def signal_external_workflow(self, workflow_id: str, run_id: str | None, signal: str, args: Sequence[Any]) -> None:
        await self.outbound.signal_external_workflow(SignalExternalWorkflowInput(
            signal=signal, args=args, namespace="default", workflow_id=workflow_id, workflow_run_id=run_id, headers={},
        ))

    async def cancel_external_workflow(self, workflow_id: str, run_id: str | None) -> None:
        await self.request_cancel_external(workflow_id, run_id or "")

    def continue_as_new(
        self, workflow: str | None, args: Sequence[Any], *, task_queue: str | None, run_timeout: timedelta | None,
        task_timeout: timedelta | None, memo: Mapping[str, Any] | None,
    ) -> NoReturn:
        self.outbound.continue_as_new(ContinueAsNewInput(
            workflow=workflow, args=args, task_queue=task_queue, run_timeout=run_timeout, task_timeout=task_timeout,
            backoff_start_interval=None, retry_policy=None, memo=memo, search_attributes=None, headers={},
            versioning_intent=None, arg_types=None,
        ))


def _duration(ms: int) -> timedelta | None:
    return timedelta(milliseconds=ms) if ms else None


async def _raise(error: Exception) -> None:
    raise error


def set_result_unless_done(future: asyncio.Future[Any] | None, value: Any) -> None:
    if future is not None and not future.done():  # a future the workflow cancelled takes no result
        future.set_result(value)


def set_exception_unless_done(future: asyncio.Future[Any] | None, error: BaseException) -> None:
    if future is not None and not future.done():
        future.set_exception(error)


def payload_headers(header: Mapping[str, PayloadRecord]) -> dict[str, Payload]:
    """A record's header field as temporalio's Mapping[str, Payload]."""
    return {name: Payload.of(payload) for name, payload in header.items()}


# What the converter makes, as a command's fields: its Payload (kadence.api.common.v1) is the
# Payload record's dict, and its Failure the Failure record's.


def payload_record(payload: Payload) -> PayloadRecord:
    return cast(PayloadRecord, payload)


def payload_records(payloads: list[Payload]) -> list[PayloadRecord]:
    return cast(list[PayloadRecord], payloads)


def header_record(headers: Mapping[str, Payload]) -> dict[str, PayloadRecord]:
    """Headers as the interceptors give them, as a command's header field."""
    return cast(dict[str, PayloadRecord], dict(headers))


def failure_record(failure: Failure) -> FailureRecord:
    return cast(FailureRecord, failure)
