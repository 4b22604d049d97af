"""What a transition may not pass: the history's event and size limits, and one Kafka record."""

from __future__ import annotations

from kadence.protocol.limits import MAX_HISTORY_BYTES, MAX_HISTORY_EVENTS, MAX_RECORD_VALUE_BYTES, payload_bytes
from kadence.protocol.names import CommandType, EffectType, EventType
from services.history.machine.execution import HISTORY_IDENTITY
from services.history.machine.records import event_type
from services.history.machine.transition import Rejected, Transition

# Commands a client or another workflow sends: refused, with the reason, when their record would be
# too large. Refusing a worker's or the engine's command would leave the run stuck: the run ends.
_REFUSED_WHEN_TOO_LARGE = {
    CommandType.StartWorkflowExecution, CommandType.SignalWithStartWorkflowExecution, CommandType.SignalWorkflowExecution,
    CommandType.UpdateWorkflowExecution, CommandType.UpdateWithStartWorkflowExecution,
    CommandType.RequestCancelWorkflowExecution, CommandType.ResetWorkflowExecution,
}


def within_history_limit(t: Transition) -> Transition:
    """A run whose history would pass a limit is terminated instead, with the reason. A schedule
    keeps no history (its last event is its state), so no limit of a history applies to it."""
    ex = t.execution
    if ex.schedule is not None:
        return t
    size = ex.history_bytes + payload_bytes([e["attributes"][1] for e in t.events + t.buffered])
    if t.next_event_id - 1 > MAX_HISTORY_EVENTS:
        exceeded = f"the {MAX_HISTORY_EVENTS}-event limit"
    elif size > MAX_HISTORY_BYTES:
        exceeded = f"the {MAX_HISTORY_BYTES // (1024 * 1024)} MB limit"
    else:
        return t
    terminated = _ending_in_place_of(t)
    terminated.flush_buffered()
    terminated.add(EventType.WorkflowExecutionTerminated, {
        "reason": f"history would exceed {exceeded}; continue-as-new long-running workflows",
        "details": [], "identity": HISTORY_IDENTITY, "new_execution_run_id": "",
    })
    return terminated


def within_record_limit(t: Transition, command: str) -> Transition:
    """Keep the HistoryBatch of `t` within one Kafka record, as Temporal keeps a transaction within
    its limits: a client's command that would not fit is refused; any other ends the run with the
    reason (Temporal terminates a run whose workflow task completion is too large to send); a
    schedule's command is refused. The buffered events are not written then: they may be what is
    too large."""
    size = t.record_bytes_bound
    if size <= MAX_RECORD_VALUE_BYTES:
        return t
    too_large = (
        f"{command} would write a history record of up to {size / 1e6:.1f} MB; "
        f"a kadence.history record holds at most {MAX_RECORD_VALUE_BYTES / 1e6:.1f} MB"
    )
    if command in _REFUSED_WHEN_TOO_LARGE or t.execution.schedule is not None:  # a schedule is never terminated
        raise Rejected(too_large)
    return terminated_as_too_large(t, f"{too_large}: keep large data out of workflow history "
                                   "(pass a reference to it) or spread it over more workflow tasks")


def terminated_as_too_large(t: Transition, reason: str) -> Transition:
    """The run ends with the reason, instead of what `t` decided: only the workflow task start an
    answer carried is kept (as a start sent before it would have been recorded); the rest, and
    the buffered events, are left out (they may be what is too large)."""
    terminated = _ending_in_place_of(t)
    terminated.add(EventType.WorkflowExecutionTerminated, {
        "reason": reason, "details": [], "identity": HISTORY_IDENTITY, "new_execution_run_id": "",
    })
    return terminated


def _ending_in_place_of(t: Transition) -> Transition:
    """The start of a transition that ends the run instead of `t`. It keeps the workflow task start
    an answer carried (a transient task's WorkflowTaskScheduled with it), with the timer drops `t`
    made (the start's re-dispatch timer), as a start sent before the answer was recorded; the rest
    of `t` is left out, so eager activity starts it recorded are refused (their worker cancels them)."""
    ending = Transition(t.execution, t.now_ms)
    if t.refused is not None:
        ending.refused = t.refused
    elif t.eager_request_id:
        ending.refuse_eager_starts(t.eager_request_id, "the run was terminated instead")
    for event in t.events:  # a transient task's WorkflowTaskScheduled first, then the start
        if event_type(event) not in (EventType.WorkflowTaskScheduled, EventType.WorkflowTaskStarted):
            break
        ending.add(event_type(event), event["attributes"][1], event_time_ms=event["event_time_ms"])
        if event_type(event) == EventType.WorkflowTaskStarted:
            break
    ending.effects.extend(effect for effect in t.effects if effect[0] == EffectType.DropTimer)
    return ending
