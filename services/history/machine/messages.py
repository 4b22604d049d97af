"""What a run receives from outside while it runs: signals, and updates (admitted, then accepted or
rejected and completed by its workflow tasks). Queries record nothing: `services/history/step.py`
holds them until the run is quiescent."""

from __future__ import annotations

from kadence.protocol.limits import MAX_PENDING_SIGNALS, name_problem, payload_problem
from kadence.protocol.names import CommandType, EventType, TaskCommandType
from kadence.protocol.records import (
    AcceptWorkflowUpdate,
    CompleteWorkflowUpdate,
    RejectWorkflowUpdate,
    SignalWorkflowExecution,
    UpdateWorkflowExecution,
    WorkflowExecutionUpdateAdmitted,
)
from services.history.machine.effects import answer
from services.history.machine.execution import Execution
from services.history.machine.records import HistoryEvent, attributes, event_type
from services.history.machine.tables import Apply, Decide, Planned, TaskCommand, recorded_as_given
from services.history.machine.transition import Rejected, Transition

# ---- apply


def _signaled(ex: Execution, event: HistoryEvent) -> None:
    if request_id := attributes(event)["request_id"]:
        ex.signal_request_ids.add(request_id)


def _update_admitted(ex: Execution, event: HistoryEvent) -> None:
    update_id = attributes(event)["update_id"]
    ex.update_ids.add(update_id)
    ex.updates[update_id] = "admitted"


def _update_accepted(ex: Execution, event: HistoryEvent) -> None:
    ex.updates[attributes(event)["update_id"]] = "accepted"


def _update_ended(ex: Execution, event: HistoryEvent) -> None:
    ex.updates.pop(attributes(event)["update_id"], None)


APPLY: dict[str, Apply] = {
    EventType.WorkflowExecutionSignaled: _signaled, EventType.WorkflowExecutionUpdateAdmitted: _update_admitted,
    EventType.WorkflowExecutionUpdateAccepted: _update_accepted, EventType.WorkflowExecutionUpdateRejected: _update_ended,
    EventType.WorkflowExecutionUpdateCompleted: _update_ended,
}

# ---- commands


def signaled(ex: Execution, cmd: SignalWorkflowExecution, identity: str, now_ms: int) -> Transition:
    if not cmd["signal_name"]:
        raise Rejected("SignalWorkflowExecution needs a signal_name")
    problem = name_problem(ex.workflow_id, cmd) or payload_problem(cmd["input"], "signal input")
    if problem:
        raise Rejected(problem)
    if cmd["request_id"] and cmd["request_id"] in ex.signal_request_ids:
        return Transition(ex, now_ms, repeat=True)  # the same signal again (a client's retry, a relay's redelivery): applied once
    t = Transition(ex, now_ms)
    if sum(event_type(e) == EventType.WorkflowExecutionSignaled for e in ex.buffered) >= MAX_PENDING_SIGNALS:
        raise Rejected(f"{MAX_PENDING_SIGNALS} signals already wait for the workflow to take them; try again later")
    requester = cmd.get("initiated_by")
    t.add_workflow_visible(EventType.WorkflowExecutionSignaled, {
        "signal_name": cmd["signal_name"], "input": cmd["input"], "identity": identity, "request_id": cmd["request_id"],
        "external_workflow_id": requester["workflow_id"] if requester else "", "external_run_id": requester["run_id"] if requester else "",
        "header": cmd.get("header", {}),
    })
    if requester is not None:
        t.effects.append(answer(requester, ""))
    return t


def check_update(workflow_id: str, cmd: UpdateWorkflowExecution) -> None:
    """Raises Rejected when the update cannot be admitted to any run: no id or name, a bad name, a payload too large."""
    if not cmd["update_id"] or not cmd["name"]:
        raise Rejected("UpdateWorkflowExecution needs an update_id and a name")
    problem = name_problem(workflow_id, cmd) or payload_problem(cmd["args"], "update arguments")
    if problem:
        raise Rejected(problem)


def admitted_event(cmd: UpdateWorkflowExecution, identity: str) -> WorkflowExecutionUpdateAdmitted:
    return {"update_id": cmd["update_id"], "name": cmd["name"], "args": cmd["args"], "identity": identity, "header": cmd.get("header", {})}


def update_admitted(ex: Execution, cmd: UpdateWorkflowExecution, identity: str, now_ms: int) -> Transition:
    """The update admitted to the run (once per update id), checked as check_update checks it."""
    check_update(ex.workflow_id, cmd)
    if cmd["update_id"] in ex.update_ids:  # the same update again: answered, applied once
        return Transition(ex, now_ms, repeat=True)
    t = Transition(ex, now_ms)
    t.add_workflow_visible(EventType.WorkflowExecutionUpdateAdmitted, admitted_event(cmd, identity))
    return t


COMMANDS: dict[str, Decide] = {CommandType.SignalWorkflowExecution: signaled, CommandType.UpdateWorkflowExecution: update_admitted}

# ---- the workflow task's commands


def _update_step(command: str, needed: str, leaves: str | None) -> TaskCommand:
    """A command that moves an update from the state `needed` to `leaves` (None: it ends)."""
    def check(ex: Execution, attrs: AcceptWorkflowUpdate | RejectWorkflowUpdate | CompleteWorkflowUpdate, planned: Planned) -> str | None:
        update_id = attrs["update_id"]
        if planned.updates.get(update_id) != needed:
            return f"{command}: update {update_id} is not {needed}"
        if leaves is None:
            planned.updates.pop(update_id)
        else:
            planned.updates[update_id] = leaves
        return None

    given = recorded_as_given("BAD_UPDATE_WORKFLOW_EXECUTION_MESSAGE")
    return TaskCommand(given.bad_attributes, given.event, check)


TASK_COMMANDS: dict[str, TaskCommand] = {
    TaskCommandType.AcceptWorkflowUpdate: _update_step(TaskCommandType.AcceptWorkflowUpdate, "admitted", "accepted"),
    TaskCommandType.RejectWorkflowUpdate: _update_step(TaskCommandType.RejectWorkflowUpdate, "admitted", None),
    TaskCommandType.CompleteWorkflowUpdate: _update_step(TaskCommandType.CompleteWorkflowUpdate, "accepted", None),
}
