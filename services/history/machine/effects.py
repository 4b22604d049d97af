"""The effects every family makes: timers set and dropped, commands for other executions, and
the re-dispatch of tasks no worker started."""

from __future__ import annotations

from kadence.protocol.codec import command_codec
from kadence.protocol.names import CommandType, EffectType
from kadence.protocol.records import InitiatedBy
from services.history.machine.execution import HISTORY_IDENTITY, RUNNING, Execution
from services.history.machine.records import Effect, Record
from services.history.machine.transition import Rejected

# A workflow or activity task dispatched and not started is dispatched again after this long, then
# after as long again as it has waited (at most the cap), until a worker starts it: a task record
# lost on its way to a worker must not leave the workflow waiting for ever.
TASK_REDISPATCH_MS = 10_000
MAX_TASK_REDISPATCH_MS = 300_000


def redispatch_delay_ms(waited_ms: int) -> int:
    """A task no worker started goes out again 10 s after its dispatch, then after as long again as
    it has waited, at most every 5 minutes."""
    return min(max(TASK_REDISPATCH_MS, waited_ms), MAX_TASK_REDISPATCH_MS)


def timer_id(ex: Execution, kind: str, scheduled_event_id: int, attempt: int) -> str:
    return f"{ex.run_id}/{kind}/{scheduled_event_id}/{attempt}"


def timer(ex: Execution, kind: str, fire_at_ms: int, scheduled_event_id: int, attempt: int) -> Effect:
    """A timer due at `fire_at_ms` in the run's time, which the timer service is told in wall-clock
    time: less the run's clock offset, zero unless the run skips time (machine/clock.py)."""
    return (EffectType.Timer, {
        "timer_id": timer_id(ex, kind, scheduled_event_id, attempt), "kind": kind,
        "fire_at_ms": fire_at_ms - ex.clock_offset_ms, "scheduled_event_id": scheduled_event_id, "attempt": attempt,
    })


def drop(ex: Execution, kind: str, scheduled_event_id: int, attempt: int) -> Effect:
    return (EffectType.DropTimer, {"timer_id": timer_id(ex, kind, scheduled_event_id, attempt)})


def outbound(workflow_id: str, kind: str, body: Record) -> Effect:
    """An effect the matching service produces to kadence.commands: a command for another execution."""
    commands = command_codec()
    command = {"workflow_id": workflow_id, "identity": HISTORY_IDENTITY, "command": (kind, body)}
    return (EffectType.OutboundCommand, {
        "workflow_id": workflow_id, "command": commands.encode(command), "schema_fingerprint": commands.fingerprint,
    })


def answer(requester: InitiatedBy, cause: str) -> Effect:
    """Tell the workflow that sent a command (a child start, a signal, a cancel request) whether it applied."""
    return outbound(requester["workflow_id"], CommandType.RecordExternalRequestOutcome, {
        "run_id": requester["run_id"], "initiated_event_id": requester["initiated_event_id"], "cause": cause,
    })


START_FAILED = "StartFailed"  # the close a schedule hears of an action whose start was refused


def rejection_answer(workflow_id: str, body: Record, reason: Rejected) -> Effect | None:
    """The effect that tells a requesting workflow its command was rejected, if a workflow sent it,
    or a schedule that its action's start was refused."""
    requester, schedule = body.get("initiated_by"), body.get("scheduled_by")
    if schedule is not None:
        return scheduled_run_report(schedule, workflow_id, "", START_FAILED)
    return None if requester is None else answer(requester, reason.cause)


def scheduled_run_report(scheduled_by: Record, workflow_id: str, run_id: str, status: str) -> Effect:
    """Tell the schedule whose action started `workflow_id` that its run started (status Running)
    or closed (a close status, or StartFailed)."""
    target, nominal_ms = scheduled_by["schedule_workflow_id"], scheduled_by["nominal_ms"]
    if status == RUNNING:
        return outbound(target, CommandType.RecordScheduledRunStarted, {
            "run_id": scheduled_by["schedule_run_id"], "nominal_ms": nominal_ms, "workflow_id": workflow_id, "started_run_id": run_id,
        })
    return outbound(target, CommandType.RecordScheduledRunClosed, {
        "run_id": scheduled_by["schedule_run_id"], "nominal_ms": nominal_ms, "workflow_id": workflow_id, "closed_run_id": run_id,
        "status": status,
    })
