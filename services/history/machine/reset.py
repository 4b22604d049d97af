"""Reset (docs/decisions/0005-reset.md): a new run of the workflow id, whose history is the current
run's up to a workflow task's start, then that task failed with cause RESET_WORKFLOW, the signals
and updates the run received after it, and a new workflow task; the current run is terminated in
the same batch, as a continue-as-new closes a run and starts its successor in one record. A closed
current run is reset within the reset retention, and left as it closed.

The requests pending at the point (child workflows, signals and cancel requests to other workflows)
go on, as Temporal's allowResetWithPendingChildren: those the base run heard answered after the
point are answered in the new run too (the answer events follow the reset's WorkflowTaskFailed, as
the reapplied signals), and the others' answers, addressed to the base run, are the new run's
(`child.answers_a_reset_run`); the base run's termination leaves those children running. A closed
run is not reset to a point that leaves pending a request still pending at its close: an answer
that came after the close is lost.

The copied events are the new run's past, not new work: no effect is derived from them
(`Transition.copied_events`). What was pending at the point is set going again from the events
that last touched it: each activity's last event (its dispatch, its start's timeouts, its retry),
each user timer's start, the run's timeout; each deadline keeps the time it had in the base run.
"""

from __future__ import annotations

import functools
import os
from typing import cast

from kadence.protocol.cron import go_duration_ms
from kadence.protocol.events import RESET_CAUSE
from kadence.protocol.ids import run_id_for
from kadence.protocol.names import EventType
from kadence.protocol.records import ResetWorkflowExecution, WorkflowExecutionStarted, WorkflowTaskScheduled
from kadence.protocol.settings import SettingError
from services.history.machine import activity, child, lifecycle, nexus, timer
from services.history.machine.dispatch import execution_from_events
from services.history.machine.execution import RUNNING, Execution
from services.history.machine.records import Effect, HistoryEvent, attributes, event_type
from services.history.machine.tables import EffectsOf
from services.history.machine.transition import Rejected, Transition, engine_failure

RESET_TYPES = ("FIRST_WORKFLOW_TASK", "LAST_WORKFLOW_TASK")
REAPPLIED = {"SIGNAL": EventType.WorkflowExecutionSignaled, "UPDATE": EventType.WorkflowExecutionUpdateAdmitted}
_TASK_ENDS = (EventType.WorkflowTaskCompleted, EventType.WorkflowTaskFailed, EventType.WorkflowTaskTimedOut)
# What sets pending work going again, by the kind of the event that last touched it.
_RESUMES: dict[str, EffectsOf] = {**activity.EFFECTS, **timer.EFFECTS, **lifecycle.EFFECTS}
DEFAULT_RESET_RETENTION = "168h"


@functools.cache
def reset_retention_ms() -> int:
    """How long after its close a run can be reset (KADENCE_RESET_RETENTION, a duration such as
    168h): the history service keeps a closed run's events that long. Every instance must be set alike."""
    raw = os.environ.get("KADENCE_RESET_RETENTION") or DEFAULT_RESET_RETENTION
    try:
        return go_duration_ms(raw)
    except ValueError:
        raise SettingError(f"KADENCE_RESET_RETENTION={raw!r} is not a duration: set it as 168h, 72h or 30m "
                           f"(default {DEFAULT_RESET_RETENTION})") from None


def decide_reset(
    current: Execution | None, workflow_id: str, cmd: ResetWorkflowExecution, identity: str, now_ms: int,
    source_partition: int, source_offset: int,
) -> Transition:
    """The reset of the workflow id's current run: a start's path, the new run's id derived from the
    command's position. A running run is terminated in the same batch; a closed one, within the
    reset retention, is left as it is. Raises Rejected with the cause."""
    if lifecycle.started_by(current, cmd["request_id"]):
        return Transition(current, now_ms, repeat=True)  # the same reset again: answered with the run it made
    if current is None or current.schedule is not None:
        raise Rejected("workflow execution not found", "WORKFLOW_NOT_FOUND")
    if cmd["run_id"] not in ("", current.run_id):
        raise Rejected(f"run {cmd['run_id']} is not the current run ({current.run_id}): only the current run can be reset",
                       "WORKFLOW_NOT_FOUND")
    if current.status != RUNNING:
        _check_retained(current, now_ms)
    run_id = run_id_for(workflow_id, source_partition, source_offset)
    excluded = set(cmd["reapply_exclude_types"])
    if unknown := excluded - REAPPLIED.keys():
        raise Rejected(f"reapply_exclude_types {sorted(unknown)}: use {sorted(REAPPLIED)}")
    point = _point(current, cmd)
    ended = attributes(point)
    copied = [e for e in current.history if e["event_id"] <= ended["started_event_id"]]
    at_point = execution_from_events(workflow_id, run_id, copied)
    awaited = set(at_point.children) | set(at_point.external_requests)
    later = [e for e in current.history if e["event_id"] > point["event_id"]] + current.buffered
    if current.status != RUNNING and (lost := awaited - child.ended(later, awaited)):
        raise Rejected(
            f"event {point['event_id']} leaves the requests initiated at events {sorted(lost)} (child workflows, signals or "
            f"cancel requests to other workflows) pending, which were still pending when run {current.run_id} closed: an "
            "answer that came after its close is lost, so the new run could wait on it for ever. Pick a point before they "
            "were initiated or after they were answered", "WORKFLOW_CLOSED")
    following = _new_run(current, run_id, copied, point, cmd, identity, now_ms, excluded, awaited, later)
    if current.status != RUNNING:
        return following  # nothing is written for a closed run: the new run becomes current, as a start's
    reason = cmd["reason"] or "reset"
    t = Transition(current, now_ms)
    t.flush_buffered()
    t.add(EventType.WorkflowExecutionTerminated, {
        "reason": f"reset to event {point['event_id']} as run {run_id}: {reason}", "details": [], "identity": identity,
        "new_execution_run_id": run_id,
    })
    t.next_run = following
    return t


def _check_retained(closed: Execution, now_ms: int) -> None:
    """A closed run can be reset within the reset retention, judged by the decision time against
    its close, never by whether its events are still at hand, so every instance decides alike."""
    if not closed.history:
        raise Rejected(f"run {closed.run_id} is {closed.status}, and its events are not kept (it closed longer ago than the reset "
                       "retention, or before this release kept closed runs' events): start a new run instead", "WORKFLOW_CLOSED")
    closed_ago_ms = now_ms - closed.history[-1]["event_time_ms"]
    if closed_ago_ms > reset_retention_ms():
        raise Rejected(
            f"run {closed.run_id} closed {closed_ago_ms / 3_600_000:.1f} h ago, past the reset retention "
            f"(KADENCE_RESET_RETENTION, {reset_retention_ms() / 3_600_000:.1f} h): start a new run instead", "WORKFLOW_CLOSED",
        )


def _point(ex: Execution, cmd: ResetWorkflowExecution) -> HistoryEvent:
    """The workflow task end the reset goes back to."""
    if cmd["event_id"]:
        found = next((e for e in ex.history if e["event_id"] == cmd["event_id"]), None)
        if found is None or event_type(found) not in _TASK_ENDS:
            raise Rejected(f"event {cmd['event_id']} of run {ex.run_id} is not a WorkflowTaskCompleted, WorkflowTaskFailed or "
                           "WorkflowTaskTimedOut: a reset goes back to the end of a workflow task")
        return found
    if cmd["reset_type"] not in RESET_TYPES:
        raise Rejected(f"reset type {cmd['reset_type']!r}: give an event_id, or a reset_type of {', '.join(RESET_TYPES)}")
    completed = [e for e in ex.history if event_type(e) == EventType.WorkflowTaskCompleted]
    if not completed:
        raise Rejected(f"run {ex.run_id} has completed no workflow task yet: there is nothing to reset to")
    return completed[0] if cmd["reset_type"] == "FIRST_WORKFLOW_TASK" else completed[-1]


def _new_run(
    base: Execution, run_id: str, copied: list[HistoryEvent], point: HistoryEvent, cmd: ResetWorkflowExecution, identity: str,
    now_ms: int, excluded: set[str], awaited: set[int], later: list[HistoryEvent],
) -> Transition:
    following = Execution(workflow_id=base.workflow_id, run_id=run_id, workflow_type=base.workflow_type, task_queue=base.task_queue)
    t = Transition(following, now_ms)
    started = cast(WorkflowExecutionStarted, dict(attributes(copied[0])))
    # The copy's one change: who first wrote it (the SDK seeds from it), and the reset's request id,
    # which answers the same reset sent again with this run.
    started["original_execution_run_id"] = started.get("original_execution_run_id") or base.run_id
    started["request_id"] = cmd["request_id"]
    t.add(EventType.WorkflowExecutionStarted, started, event_time_ms=copied[0]["event_time_ms"])
    for event in copied[1:]:
        t.add(event_type(event), event["attributes"][1], event_time_ms=event["event_time_ms"])
    t.copied_events = len(copied)
    ended = attributes(point)
    t.add(EventType.WorkflowTaskFailed, {
        "scheduled_event_id": ended["scheduled_event_id"], "started_event_id": ended["started_event_id"], "cause": RESET_CAUSE,
        "failure": engine_failure(cmd["reason"] or "reset", "ResetWorkflow"),
        "identity": identity, "base_run_id": base.run_id, "new_run_id": run_id,
    })
    reapplied = {kind for name, kind in REAPPLIED.items() if name not in excluded}
    for event in later:  # what the base run heard after the point
        if event_type(event) in reapplied or child.is_answer(event, awaited):
            t.add(event_type(event), event["attributes"][1])
    t.add(EventType.WorkflowTaskScheduled, WorkflowTaskScheduled(task_queue=following.task_queue, attempt=1))
    return t


def resumed_effects(ex: Execution, t: Transition) -> list[Effect]:
    """What the new run had pending at the point, set going again (its state `ex` applied): the
    run's start (its timeout, a schedule's report); each pending activity's attempt (a started one's
    timeouts, and its cancellation if one was asked; else its dispatch or its retry's timer, from its
    last scheduling or retried failure), and its schedule-to-close deadline; each user timer's start;
    each pending Nexus operation's current attempt (one not started) and its schedule-to-close deadline.
    Every deadline counts from the copied event that set it, not from the reset (fired at once if
    past), as Temporal's are."""
    copied = {e["event_id"]: e for e in t.events[:t.copied_events]}
    live = [copied[1]]
    for sid, pending in sorted(ex.activities.items()):
        if pending.started_event_id:
            live.append(copied[pending.started_event_id])
            if pending.cancel_requested_event_id:
                live.append(copied[pending.cancel_requested_event_id])
        else:
            live.append(max((e for e in copied.values() if _last_dispatch_of(e, sid)), key=lambda e: e["event_id"]))
    live += [copied[started] for started in sorted(ex.timers.values())]
    resumed: list[Effect] = []
    for event in live:
        resumed.extend(_RESUMES[event_type(event)](ex, t, event))
    for pending in (a for _, a in sorted(ex.activities.items()) if a.started_event_id or a.attempt > 1):
        resumed += activity.schedule_to_close_timer(ex, pending)  # else set with its scheduling, resumed above
    for _, operation in sorted(ex.nexus_operations.items()):
        resumed += nexus.resumed_effects(ex, t, operation)
    return resumed


def _last_dispatch_of(event: HistoryEvent, scheduled_event_id: int) -> bool:
    """Whether `event` scheduled the activity, or failed or timed out one of its attempts (a retry follows)."""
    kind = event_type(event)
    if kind == EventType.ActivityTaskScheduled:
        return event["event_id"] == scheduled_event_id
    retried = kind in (EventType.ActivityTaskFailed, EventType.ActivityTaskTimedOut)
    return retried and attributes(event)["scheduled_event_id"] == scheduled_event_id
