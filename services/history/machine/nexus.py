"""Nexus operations (docs/decisions/0008-nexus.md): scheduled by a workflow task through an
endpoint, started by a handler in a worker of the endpoint's task queue, which answers at once (a
sync operation) or starts a handler workflow whose close is reported back (an asynchronous one);
retried while the schedule-to-close timeout allows, canceled on request."""

from __future__ import annotations

from typing import cast

from kadence.common import next_attempt_backoff_ms
from kadence.protocol.events import CLOSE_STATUS, FOLLOWING_EVENT, NEXUS_RESULT_FOR_STATUS, NEXUS_RESULTS, close_failure
from kadence.protocol.limits import payload_problem
from kadence.protocol.names import CommandType, EffectType, EventType, TaskCommandType, TimerKind
from kadence.protocol.nexus_token import token_workflow_id
from kadence.protocol.records import (
    Failure,
    NexusOperationAttemptFailed,
    NexusOperationCanceled,
    NexusOperationCancelRequested,
    NexusOperationScheduled,
    RecordNexusOperationClosed,
    RequestCancelNexusOperation,
    RespondNexusTaskCompleted,
    RespondNexusTaskFailed,
    ScheduleNexusOperation,
    TimeoutFired,
)
from services.history.machine.effects import drop, outbound, timer
from services.history.machine.execution import Execution, NexusOperationState, Pending
from services.history.machine.records import Effect, EventAttributes, HistoryEvent, Record, attributes
from services.history.machine.tables import Apply, Decide, EffectsOf, Planned, TaskCommand, Timeout
from services.history.machine.transition import Rejected, Transition, engine_failure

# How long a handler's answer to one attempt counts, as Temporal's Nexus request timeout: a sync
# operation answers within it; without an answer by then the next attempt is dispatched.
REQUEST_TIMEOUT_MS = 10_000


def request_id(ex: Execution, scheduled_event_id: int) -> str:
    """The operation's request id, the same on every attempt: the start request id of a handler
    workflow, so however often an attempt runs one workflow starts."""
    return f"nexus/{ex.workflow_id}/{ex.run_id}/{scheduled_event_id}"


# ---- apply


def _scheduled(ex: Execution, event: HistoryEvent) -> None:
    attrs = cast(NexusOperationScheduled, attributes(event))
    ex.nexus_operations[event["event_id"]] = NexusOperationState(
        scheduled_event_id=event["event_id"], endpoint=attrs["endpoint"], service=attrs["service"], operation=attrs["operation"],
        task_queue=attrs["task_queue"], input=attrs["input"], nexus_header=dict(attrs["nexus_header"]),
        request_id=attrs["request_id"], schedule_to_close_timeout_ms=attrs["schedule_to_close_timeout_ms"],
        scheduled_time_ms=event["event_time_ms"], dispatch_due_ms=event["event_time_ms"],
    )


def _started(ex: Execution, event: HistoryEvent) -> None:
    """Buffered (a workflow task in flight), it is applied again when written, after the operation may
    have ended in the buffer too: then there is nothing to start."""
    attrs = attributes(event)
    operation = ex.nexus_operations.get(attrs["scheduled_event_id"])
    if operation is not None:
        operation.operation_token = attrs["operation_token"]
        operation.started = True


def _attempt_failed(ex: Execution, event: HistoryEvent) -> None:
    attrs = cast(NexusOperationAttemptFailed, attributes(event))
    operation = ex.nexus_operations[attrs["scheduled_event_id"]]
    operation.attempt = attrs["attempt"] + 1
    operation.dispatch_due_ms = event["event_time_ms"] + next_attempt_backoff_ms(None, attrs["attempt"], attrs["failure"])


def _cancel_requested(ex: Execution, event: HistoryEvent) -> None:
    ex.nexus_operations[attributes(event)["scheduled_event_id"]].cancel_requested_event_id = event["event_id"]


def _ended(ex: Execution, event: HistoryEvent) -> None:
    ex.nexus_operations.pop(attributes(event)["scheduled_event_id"], None)


APPLY: dict[str, Apply] = {
    EventType.NexusOperationScheduled: _scheduled, EventType.NexusOperationStarted: _started,
    EventType.NexusOperationAttemptFailed: _attempt_failed, EventType.NexusOperationCancelRequested: _cancel_requested,
    **{kind: _ended for kind in NEXUS_RESULTS},
}

# ---- the workflow task's commands


def _check_schedule(ex: Execution, attrs: ScheduleNexusOperation, planned: Planned) -> str | None:
    if not attrs["task_queue"]:
        return (f"Nexus endpoint {attrs['endpoint']!r} is not registered: create it with "
                f"`kadence nexus endpoint create --name {attrs['endpoint']} --target-task-queue <queue>`")
    return None


def _scheduled_event(t: Transition, attrs: ScheduleNexusOperation, completed_id: int, identity: str) -> NexusOperationScheduled:
    return {
        "endpoint": attrs["endpoint"], "service": attrs["service"], "operation": attrs["operation"], "input": attrs.get("input"),
        "schedule_to_close_timeout_ms": attrs.get("schedule_to_close_timeout_ms", 0), "nexus_header": attrs.get("nexus_header", {}),
        "workflow_task_completed_event_id": completed_id, "request_id": request_id(t.execution, t.next_event_id),
        "task_queue": attrs["task_queue"],
    }


def _check_cancel(ex: Execution, attrs: RequestCancelNexusOperation, planned: Planned) -> str | None:
    operation = ex.nexus_operations.get(attrs["scheduled_event_id"])
    if operation is None:
        return f"Nexus operation {attrs['scheduled_event_id']} is not pending"
    if operation.cancel_requested_event_id:
        return f"Nexus operation {attrs['scheduled_event_id']} was asked to cancel already"
    return None


def _cancel_requested_event(
    t: Transition, attrs: RequestCancelNexusOperation, completed_id: int, identity: str,
) -> NexusOperationCancelRequested:
    return {"scheduled_event_id": attrs["scheduled_event_id"], "workflow_task_completed_event_id": completed_id}


def _canceled_if_not_started(t: Transition, attrs: RequestCancelNexusOperation, requested_id: int) -> None:
    """An operation no handler started asynchronously is canceled at once (FOLLOWING_EVENT), and the
    workflow hears of it in a task of its own; a started one's handler workflow is asked to cancel
    (`_on_cancel_requested`), and its close says how it ended."""
    scheduled_event_id = attrs["scheduled_event_id"]
    operation = t.execution.nexus_operations[scheduled_event_id]
    if not operation.started:
        t.add(FOLLOWING_EVENT[TaskCommandType.RequestCancelNexusOperation], NexusOperationCanceled(
            scheduled_event_id=scheduled_event_id, failure=_canceled_failure(), request_id=operation.request_id,
        ))
        t.wake_workflow = True


def cancel_standalone(t: Transition) -> None:
    """A cancel request to a standalone Nexus operation's run asks its operation to cancel: one no
    handler started asynchronously is canceled at once, which closes the run; a started one's
    handler workflow is asked (`_on_cancel_requested`), and its close ends the operation."""
    for scheduled_event_id, operation in t.execution.nexus_operations.items():
        t.add(EventType.NexusOperationCancelRequested, {"scheduled_event_id": scheduled_event_id, "workflow_task_completed_event_id": 0})
        if not operation.started:
            t.add_workflow_visible(EventType.NexusOperationCanceled, {
                "scheduled_event_id": scheduled_event_id, "failure": _canceled_failure(), "request_id": operation.request_id,
            })


def _canceled_failure() -> Failure:
    return engine_failure("Nexus operation canceled", "CancelledError")


TASK_COMMANDS: dict[str, TaskCommand] = {
    TaskCommandType.ScheduleNexusOperation: TaskCommand(
        "BAD_SCHEDULE_NEXUS_OPERATION_ATTRIBUTES", _scheduled_event, _check_schedule, required=("endpoint", "service", "operation"),
    ),
    TaskCommandType.RequestCancelNexusOperation: TaskCommand(
        "BAD_REQUEST_CANCEL_NEXUS_OPERATION_ATTRIBUTES", _cancel_requested_event, _check_cancel, then=_canceled_if_not_started,
    ),
}

# ---- commands: a handler's answers, and a handler workflow's close


def _current_attempt(ex: Execution, cmd: RespondNexusTaskCompleted | RespondNexusTaskFailed) -> NexusOperationState:
    """The operation an answer is for, if it answers the current attempt of an operation not yet
    started asynchronously: a late answer to an attempt that timed out counts for nothing."""
    operation = ex.nexus_operations.get(cmd["scheduled_event_id"])
    if operation is None or operation.started or operation.attempt != cmd["attempt"]:
        raise Rejected(f"no Nexus operation attempt awaits an answer: scheduled_event_id={cmd['scheduled_event_id']} "
                       f"attempt={cmd['attempt']}")
    return operation


def _task_completed(ex: Execution, cmd: RespondNexusTaskCompleted, identity: str, now_ms: int) -> Transition:
    operation = _current_attempt(ex, cmd)
    t = Transition(ex, now_ms)
    result = [cmd["result"]] if cmd.get("result") is not None else []
    too_large = payload_problem(result, f"result of Nexus operation {operation.operation}")
    if too_large:  # as an activity's: the operation fails for good, and the workflow hears why
        t.add_workflow_visible(EventType.NexusOperationFailed, {
            "scheduled_event_id": operation.scheduled_event_id, "request_id": operation.request_id,
            "failure": {**engine_failure(too_large, "BlobSizeLimitError"), "non_retryable": True},
        })
    elif cmd.get("operation_token"):
        t.add_workflow_visible(EventType.NexusOperationStarted, {
            "scheduled_event_id": operation.scheduled_event_id, "operation_token": cmd["operation_token"],
            "request_id": operation.request_id,
        })
    else:
        t.add_workflow_visible(EventType.NexusOperationCompleted, {
            "scheduled_event_id": operation.scheduled_event_id, "result": cmd.get("result"), "request_id": operation.request_id,
        })
    return t


def _task_failed(ex: Execution, cmd: RespondNexusTaskFailed, identity: str, now_ms: int) -> Transition:
    operation = _current_attempt(ex, cmd)
    t = Transition(ex, now_ms)
    failure = cmd["failure"]
    if cmd.get("canceled"):
        t.add_workflow_visible(EventType.NexusOperationCanceled, {
            "scheduled_event_id": operation.scheduled_event_id, "failure": failure, "request_id": operation.request_id,
        })
    elif cmd.get("retryable"):
        _attempt_ended(t, operation, failure)
    else:
        t.add_workflow_visible(EventType.NexusOperationFailed, {
            "scheduled_event_id": operation.scheduled_event_id, "failure": failure, "request_id": operation.request_id,
        })
    return t


def _attempt_ended(t: Transition, operation: NexusOperationState, failure: Failure) -> None:
    """Another attempt follows after its backoff, unless the schedule-to-close deadline comes first:
    then that deadline ends the operation (its timer is set)."""
    t.add(EventType.NexusOperationAttemptFailed, {
        "scheduled_event_id": operation.scheduled_event_id, "attempt": operation.attempt, "failure": failure,
    })


def _handler_closed(ex: Execution, cmd: RecordNexusOperationClosed, identity: str, now_ms: int) -> Transition:
    """A workflow-run operation's handler workflow closed. Its report may come before the handler's
    answer that started the operation: the close implies the start."""
    operation = ex.nexus_operations.get(cmd["scheduled_event_id"])
    status = cmd["status"]
    if operation is None:
        raise Rejected(f"no pending Nexus operation with scheduled_event_id={cmd['scheduled_event_id']}")
    if status not in NEXUS_RESULT_FOR_STATUS:
        raise Rejected(f"handler workflow close status {status!r}: expected one of {sorted(NEXUS_RESULT_FOR_STATUS)}")
    t = Transition(ex, now_ms)
    sid, rid = operation.scheduled_event_id, operation.request_id
    if not operation.started:
        t.add_workflow_visible(EventType.NexusOperationStarted, {
            "scheduled_event_id": sid, "operation_token": cmd["operation_token"], "request_id": rid,
        })
    kind = NEXUS_RESULT_FOR_STATUS[status]
    attrs: Record = {"scheduled_event_id": sid, "request_id": rid}
    if kind == EventType.NexusOperationCompleted:
        attrs["result"] = cmd.get("result")
    else:
        attrs["failure"] = cmd.get("failure") or engine_failure(f"Nexus operation's handler workflow {status}", status)
    t.add_workflow_visible(kind, cast(EventAttributes, attrs))
    return t


COMMANDS: dict[str, Decide] = {
    CommandType.RespondNexusTaskCompleted: _task_completed,
    CommandType.RespondNexusTaskFailed: _task_failed,
    CommandType.RecordNexusOperationClosed: _handler_closed,
}

# ---- timeouts


def _timed_operation(ex: Execution, cmd: TimeoutFired) -> NexusOperationState:
    operation = ex.nexus_operations.get(cmd["scheduled_event_id"])
    if operation is None or operation.started or operation.attempt != cmd["attempt"]:
        raise Rejected(f"stale {cmd['kind']} timer")
    return operation


def _retry_due(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    """The backoff before an attempt ended: the attempt goes to a worker."""
    operation = _timed_operation(ex, cmd)
    t = Transition(ex, now_ms)
    t.effects.append(_task(ex, operation))
    return t


def _attempt_timed_out(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    """No answer to the attempt by its request deadline (its worker died, its record was lost, the
    handler is slow): the next attempt follows."""
    operation = _timed_operation(ex, cmd)
    t = Transition(ex, now_ms)
    failure: Failure = {**engine_failure("Nexus operation attempt got no answer within its request timeout", ""),
                        "timeout_type": "START_TO_CLOSE"}
    _attempt_ended(t, operation, failure)
    return t


def _schedule_to_close_timed_out(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    operation = ex.nexus_operations.get(cmd["scheduled_event_id"])
    if operation is None:
        raise Rejected(f"stale {cmd['kind']} timer")
    failure: Failure = {**engine_failure("operation timed out", "TimeoutError"), "timeout_type": "SCHEDULE_TO_CLOSE"}
    t = Transition(ex, now_ms)
    t.add_workflow_visible(EventType.NexusOperationTimedOut, {
        "scheduled_event_id": operation.scheduled_event_id, "failure": failure, "request_id": operation.request_id,
    })
    return t


TIMEOUTS: dict[str, Timeout] = {
    TimerKind.NEXUS_RETRY: _retry_due,
    TimerKind.NEXUS_ATTEMPT: _attempt_timed_out,
    TimerKind.NEXUS_SCHEDULE_TO_CLOSE: _schedule_to_close_timed_out,
}

# ---- effects


def _task(ex: Execution, operation: NexusOperationState, due_ms: int | None = None) -> Effect:
    """The current attempt's task for a worker of the endpoint's queue, due at `due_ms` (default:
    when the attempt was due). Deadlines in wall-clock time."""
    due_ms = operation.dispatch_due_ms if due_ms is None else due_ms
    deadline = operation.scheduled_time_ms + operation.schedule_to_close_timeout_ms if operation.schedule_to_close_timeout_ms else 0
    return (EffectType.NexusTask, {
        "task_queue": operation.task_queue, "scheduled_event_id": operation.scheduled_event_id, "attempt": operation.attempt,
        "endpoint": operation.endpoint, "service": operation.service, "operation": operation.operation,
        "input": operation.input, "nexus_header": operation.nexus_header, "request_id": operation.request_id,
        "scheduled_time_ms": operation.scheduled_time_ms,
        "schedule_to_close_deadline_ms": deadline - ex.clock_offset_ms if deadline else 0,
        "request_deadline_ms": due_ms + REQUEST_TIMEOUT_MS - ex.clock_offset_ms,
    })


def _attempt_timers(ex: Execution, operation: NexusOperationState, due_ms: int | None = None) -> list[Effect]:
    """The attempt's request deadline, from when it is due to a worker (`_task`'s `due_ms`)."""
    due_ms = operation.dispatch_due_ms if due_ms is None else due_ms
    return [timer(ex, TimerKind.NEXUS_ATTEMPT, due_ms + REQUEST_TIMEOUT_MS, operation.scheduled_event_id, operation.attempt)]


def _on_scheduled(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    operation = ex.nexus_operations.get(event["event_id"])
    if operation is None:  # ended in the same transition
        return []
    return [_task(ex, operation), *_attempt_timers(ex, operation), *_schedule_to_close_timer(ex, operation)]


def _schedule_to_close_timer(ex: Execution, operation: NexusOperationState) -> list[Effect]:
    """The operation's schedule-to-close deadline, from its scheduling, if it has one."""
    if not operation.schedule_to_close_timeout_ms:
        return []
    fire_at = operation.scheduled_time_ms + operation.schedule_to_close_timeout_ms
    return [timer(ex, TimerKind.NEXUS_SCHEDULE_TO_CLOSE, fire_at, operation.scheduled_event_id, 1)]


def _on_attempt_failed(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    """The failed attempt's deadline goes; the next attempt is dispatched when its backoff ends."""
    operation = ex.nexus_operations.get(attributes(event)["scheduled_event_id"])
    if operation is None:
        return []
    sid = operation.scheduled_event_id
    return [
        drop(ex, TimerKind.NEXUS_ATTEMPT, sid, operation.attempt - 1),
        timer(ex, TimerKind.NEXUS_RETRY, operation.dispatch_due_ms, sid, operation.attempt), *_attempt_timers(ex, operation),
    ]


def _on_started(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    """Started asynchronously: no attempt is awaited any more; the handler workflow's close is."""
    operation = ex.nexus_operations.get(attributes(event)["scheduled_event_id"])
    if operation is None:
        return []
    effects = [drop(ex, TimerKind.NEXUS_ATTEMPT, operation.scheduled_event_id, operation.attempt)]
    if operation.cancel_requested_event_id:  # asked to cancel before it started: its workflow is asked now
        effects.extend(_cancel_handler_workflow(ex, operation))
    return effects


def _on_cancel_requested(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    operation = ex.nexus_operations.get(attributes(event)["scheduled_event_id"])
    if operation is None or not operation.started:
        return []
    return _cancel_handler_workflow(ex, operation)


def _cancel_handler_workflow(ex: Execution, operation: NexusOperationState) -> list[Effect]:
    """A started workflow-run operation is canceled by asking its handler workflow (the operation
    token names it) to cancel, as a child's would be."""
    workflow_id = token_workflow_id(operation.operation_token)
    if workflow_id is None:  # a handler's own asynchronous operation: nothing Kadence can ask (decision 0008)
        return []
    reason = f"Nexus operation {operation.service}/{operation.operation} canceled by its caller {ex.workflow_id} (run {ex.run_id})"
    return [outbound(workflow_id, CommandType.RequestCancelWorkflowExecution, {
        "run_id": "", "reason": reason, "request_id": f"{operation.request_id}/cancel", "initiated_by": None,
    })]


EFFECTS: dict[str, EffectsOf] = {
    EventType.NexusOperationScheduled: _on_scheduled, EventType.NexusOperationAttemptFailed: _on_attempt_failed,
    EventType.NexusOperationStarted: _on_started, EventType.NexusOperationCancelRequested: _on_cancel_requested,
}


def resumed_effects(ex: Execution, t: Transition, operation: NexusOperationState) -> list[Effect]:
    """A reset's new run sets going an operation its copied past left pending: its schedule-to-close
    deadline, and an attempt not started asynchronously, dispatched anew now. A started one's handler
    workflow reports its close to the run that scheduled it, which the reset ended: the new run
    hears of it only by its timeout (docs/temporal-differences.md, "Nexus")."""
    effects = _schedule_to_close_timer(ex, operation)
    if not operation.started:
        effects += [_task(ex, operation, t.now_ms), *_attempt_timers(ex, operation, t.now_ms)]
    return effects


def released_effects(ex: Execution, t: Transition, before: Pending) -> list[Effect]:
    """The timers of the operations the transition ended (or dropped with the run) go."""
    effects: list[Effect] = []
    for operation in (op for sid, op in before.nexus_operations.items() if sid not in ex.nexus_operations):
        sid = operation.scheduled_event_id
        if operation.schedule_to_close_timeout_ms:
            effects.append(drop(ex, TimerKind.NEXUS_SCHEDULE_TO_CLOSE, sid, 1))
        if not operation.started:
            effects.append(drop(ex, TimerKind.NEXUS_ATTEMPT, sid, operation.attempt))
            if operation.attempt > 1:
                effects.append(drop(ex, TimerKind.NEXUS_RETRY, sid, operation.attempt))
    return effects


def close_report(ex: Execution, kind: str, attrs: Record) -> Effect:
    """A handler workflow's close, told to the operation's caller (a continue-as-new passes the duty on)."""
    caller = ex.nexus_caller
    assert caller is not None
    result = attrs.get("result") if kind == EventType.WorkflowExecutionCompleted else None
    status = CLOSE_STATUS[kind]
    failure = None if status == "Completed" else close_failure(kind, attrs)
    return outbound(caller["workflow_id"], CommandType.RecordNexusOperationClosed, {
        "run_id": caller["run_id"], "scheduled_event_id": caller["scheduled_event_id"],
        "operation_token": caller["operation_token"] or ex.workflow_id, "status": status,
        "result": result[0] if isinstance(result, list) and result else result, "failure": failure,
    })

