"""The live step: one command in, one finished HistoryBatch out.

`step` decides the command against its partition's state, folds the batch into that state (the
fold recovery repeats from the log), derives the batch's effects and answers, and returns the batch
as it is written, one record per command.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kadence.protocol.limits import (
    MAX_HISTORY_BYTES,
    MAX_HISTORY_EVENTS,
    MAX_RECORD_VALUE_BYTES,
    WARN_HISTORY_BYTES,
    WARN_HISTORY_EVENTS,
    command_problem,
    encoded_bytes_bound,
    text_problem,
)
from kadence.protocol.names import WITH_START, CommandType, EffectType
from kadence.protocol.records import EagerWorkflowTask
from services.history.machine.clock import check_command as check_time_skipping
from services.history.machine.clock import start_of
from services.history.machine.dispatch import decide, derive_effects
from services.history.machine.effects import rejection_answer
from services.history.machine.execution import RUNNING, Execution, Pending
from services.history.machine.lifecycle import decide_signal_with_start, decide_start, decide_update_with_start
from services.history.machine.limits import within_record_limit
from services.history.machine.records import Effect, HistoryBatch, Record, Rejection, history_batch
from services.history.machine.reset import decide_reset, resumed_effects
from services.history.machine.schedule import decide_create
from services.history.machine.transition import Redispatch, Rejected, Transition
from services.history.machine.workflow_task import eager_workflow_task
from services.history.partition import PartitionState

log = logging.getLogger("kadence.history")

EVENTLESS_BATCH_BYTES = 4096  # a batch's ids, offsets and rejection besides its effects


@dataclass(frozen=True)
class Step:
    """What one command wrote: its batch (None when nothing is written: a rejection nobody waits
    for, a query held or dropped, a request answered again), and what the service counts."""

    batch: HistoryBatch | None
    rejected: Rejected | None = None
    redispatch: Redispatch | None = None
    # A request answered before and sent again (a client's retry, a relay's redelivery): the batch
    # that would say so, its answer only. It is not written: the log holds the first answer, and
    # the partition's checkpoint records that the command was read (PartitionState.resume_offset).
    answered_again: HistoryBatch | None = None
    # The first workflow task of the run an eager start began, which goes in the start's answer
    # rather than to the task queue (services/history/replies.py).
    eager_workflow_task: EagerWorkflowTask | None = None


# (current run, workflow id, command, identity, now_ms, partition, offset) -> the transition; the
# command is its branch's TypedDict of kadence.protocol.records (as tables.Decide's).
_STARTS: dict[str, Callable[[Execution | None, str, Any, str, int, int, int], Transition]] = {
    CommandType.StartWorkflowExecution: decide_start, CommandType.SignalWithStartWorkflowExecution: decide_signal_with_start,
    CommandType.UpdateWithStartWorkflowExecution: decide_update_with_start,
    # What makes an execution from no current run, as a start does: a schedule; a reset's new run.
    CommandType.CreateSchedule: decide_create, CommandType.ResetWorkflowExecution: decide_reset,
}


def decide_command(state: PartitionState, command: Record, now_ms: int, partition: int, offset: int) -> Transition:
    """What a command (not a query) does to its workflow's current run, within the record limit,
    decided at `now_ms` (the command's log-append time) on the run's clock; raises Rejected with the cause."""
    workflow_id, (kind, body) = command["workflow_id"], command["command"]
    check_time_skipping(kind, body)
    current = state.executions.get(workflow_id)
    now_ms += _clock_offset_ms(current, kind, body)
    if kind in _STARTS:
        transition = _STARTS[kind](current, workflow_id, body, command["identity"], now_ms, partition, offset)
    else:
        if current is None:
            raise Rejected("workflow execution not found", "WORKFLOW_NOT_FOUND")
        transition = decide(current, kind, body, command["identity"], now_ms)
    return within_record_limit(transition, kind)


def _clock_offset_ms(current: Execution | None, kind: str, body: Record) -> int:
    """The clock the command is decided on (docs/decisions/0006-time-skipping.md): the one a start
    gives the run it starts, else the workflow id's current run's; 0 unless time is skipped."""
    start = start_of(kind, body)
    if start is not None and (current is None or current.status != RUNNING):
        return int(start.get("clock_offset_ms", 0))
    return current.clock_offset_ms if current is not None else 0


def request_id_of(kind: str, body: Record) -> str:
    """The request id a client, workflow or worker waits on for the command's answer ('' for none):
    a workflow task completion's is its eager activity starts'."""
    if kind in WITH_START:
        return body["start"]["request_id"]
    return body.get("eager_request_id" if kind == CommandType.RespondWorkflowTaskCompleted else "request_id", "")


def step(state: PartitionState, command: Record, now_ms: int, partition: int, offset: int, *, whole_histories: bool = False) -> Step:
    """Decide `command` (read at `offset` of `partition`), fold it into `state` and return what it writes.
    `whole_histories`: workflow tasks carry their run's whole history (a schema pin to a release
    whose workers expect it)."""
    workflow_id, (kind, body) = command["workflow_id"], command["command"]
    problem = command_problem(command)  # refused whatever the state: a bad id, name or search attribute
    if kind == CommandType.QueryWorkflow and problem is None:
        return _query(state, workflow_id, body, partition, offset)
    request_id = request_id_of(kind, body)
    try:
        if problem is not None:
            raise Rejected(problem)
        transition = decide_command(state, command, now_ms, partition, offset)
    except Rejected as reason:
        log.info(
            "event=command_rejected workflow_id=%s run_id=%s command=%s partition=%d offset=%d cause=%s reason=%r",
            workflow_id if problem is None else ascii(workflow_id[:200]), str(body.get("run_id", ""))[:200], kind,
            partition, offset, reason.cause, str(reason),
        )
        # A client or a workflow waits for the answer (none can, under a request id that is itself bad).
        answered = request_id and text_problem("request_id", request_id) is None
        written = _rejection(state, workflow_id, kind, body, request_id, reason, partition, offset) if answered else Step(None)
        return Step(written.batch, rejected=reason)
    return commit(state, transition, partition, offset, request_id, whole_histories=whole_histories)


def commit(
    state: PartitionState, transition: Transition, partition: int, offset: int, request_id: str = "", *,
    whole_histories: bool = False,
) -> Step:
    """Fold a decided transition into `state` and finish its batch: the effects its events call for,
    the queries it lets through, the request id it answers."""
    asked = transition.execution
    bytes_before = asked.history_bytes
    before = Pending.of(asked)
    assert state.apply(transition.batch(partition, offset)), "a live batch always continues its run"
    current = state.executions[asked.workflow_id]  # a new run, or the next after a continue-as-new
    next_run_effects = None
    if transition.next_run is None:
        effects = _effects(current, transition, before)
    else:  # the closed run was evolved in place
        effects = transition.effects + derive_effects(asked, transition, before)
        next_run_effects = _effects(current, transition.next_run, Pending())
    if whole_histories:
        _carry_whole_histories(effects, asked)
    queries = _released_queries(asked, transition.record_bytes_bound)
    accepted = [request_id] if request_id and transition.refused is None else []
    batch = transition.batch(partition, offset, effects + queries, next_run_effects, accepted)
    if transition.repeat and _only_answers(batch):
        return Step(None, answered_again=batch)
    _warn_of_long_history(batch, current, bytes_before)
    eager = eager_workflow_task(current, transition.next_run or transition)
    return Step(batch, redispatch=transition.redispatch, eager_workflow_task=eager)


def _effects(ex: Execution, t: Transition, before: Pending) -> list[Effect]:
    """The effects of `t` on `ex` (applied): its own and those its events call for; for a reset's
    new run, also what was pending at the point it copied."""
    effects = t.effects + derive_effects(ex, t, before)
    return effects + resumed_effects(ex, t) if t.copied_events else effects


def _only_answers(batch: HistoryBatch) -> bool:
    """Whether an accepted batch holds nothing but its answers."""
    return bool(batch["request_ids"]) and not (
        batch["events"] or batch["buffered"] or batch["effects"] or batch["heartbeats"] or batch.get("next_run")
        or batch.get("refusals") or batch["rejection"] or batch.get("workflow_task")
    )


def _released_queries(asked: Execution, size: int) -> list[Effect]:
    """The queries held for the workflow task just done, as QueryTask effects within the record
    limit (`size`: the bound of the batch without them)."""
    if not (asked.pending_queries and asked.quiescent):
        return []
    released: list[Effect] = []
    for query in asked.pending_queries:
        query_size = encoded_bytes_bound(query)
        if size + query_size > MAX_RECORD_VALUE_BYTES:
            _drop_query(asked.workflow_id, query, "its arguments do not fit in the history record that carries it")
            continue
        released.append((EffectType.QueryTask, query))
        size += query_size
    asked.pending_queries = []
    return released


def _carry_whole_histories(effects: list[Effect], execution: Execution) -> None:
    """Workflow tasks of the batch's run with the run's whole history, as releases before
    first_event_id expect."""
    for kind, effect in effects:
        if kind == EffectType.WorkflowTask:
            effect["history"] = [e for e in execution.history if e["event_id"] <= effect["scheduled_event_id"]]
            effect["first_event_id"] = 1


def _warn_of_long_history(batch: HistoryBatch, execution: Execution, bytes_before: int) -> None:
    if execution.schedule is not None:
        return  # a schedule keeps no history: its event ids only count its changes
    if batch["first_event_id"] <= WARN_HISTORY_EVENTS < execution.next_event_id:
        log.warning("event=long_history workflow_id=%s run_id=%s events=%d limit=%d",
                    execution.workflow_id, execution.run_id, execution.next_event_id - 1, MAX_HISTORY_EVENTS)
    if bytes_before <= WARN_HISTORY_BYTES < execution.history_bytes:
        log.warning("event=large_history workflow_id=%s run_id=%s bytes=%d limit=%d",
                    execution.workflow_id, execution.run_id, execution.history_bytes, MAX_HISTORY_BYTES)


def _query(state: PartitionState, workflow_id: str, body: Record, partition: int, offset: int) -> Step:
    """Pass the query on once the run has no workflow task pending, so its answer sees every
    event recorded before it (a signal just sent, say)."""
    execution = state.executions.get(workflow_id)
    if execution is None or body["run_id"] not in ("", execution.run_id):
        log.info("event=query_dropped workflow_id=%s run_id=%s reason=%r", workflow_id, body["run_id"],
                 "only the current run of a known workflow id can be queried")
        return Step(None)
    query = body["query"]
    if encoded_bytes_bound(query) + EVENTLESS_BATCH_BYTES > MAX_RECORD_VALUE_BYTES:
        _drop_query(workflow_id, query, "its arguments do not fit in a history record")
    elif execution.quiescent:
        return eventless(state, workflow_id, partition, offset, effects=[(EffectType.QueryTask, query)])
    elif all(held["query_id"] != query["query_id"] for held in execution.pending_queries):
        # Held in memory only: the client sends a query again until it is answered, so a
        # restart of this service costs the caller a resend, not a timeout.
        log.info("event=query_held workflow_id=%s run_id=%s query_id=%s reason=%r", workflow_id, execution.run_id,
                 query["query_id"], "a workflow task is in flight: answered once it is done")
        execution.pending_queries.append(query)
    return Step(None)


def _drop_query(workflow_id: str, query: Record, reason: str) -> None:
    log.warning("event=query_dropped workflow_id=%s query_id=%s query_type=%s reason=%r",
                workflow_id, query["query_id"], query["query_type"], reason)


def _rejection(
    state: PartitionState, workflow_id: str, command: str, body: Record, request_id: str, reason: Rejected,
    partition: int, offset: int,
) -> Step:
    """Answer the client (or, through an outbound command, the workflow) that sent the command."""
    answer = rejection_answer(workflow_id, body, reason)
    return eventless(state, workflow_id, partition, offset, effects=[answer] if answer else [], rejection={
        "request_id": request_id, "command": command, "cause": reason.cause, "reason": str(reason),
    })


def eventless(
    state: PartitionState, workflow_id: str, partition: int, offset: int, *,
    effects: list[Effect], rejection: Rejection | None = None,
) -> Step:
    """A batch without events: effects and answers only. It also moves recovery past the command."""
    current = state.executions.get(workflow_id)
    batch = history_batch(
        workflow_id, current.run_id if current else "", current.next_event_id if current else 0, partition, offset,
        effects=effects, rejection=rejection,
    )
    state.apply(batch)
    return Step(batch)
