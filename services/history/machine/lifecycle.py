"""The execution's lifecycle: its start (a client's, a signal-with-start, a parent's, a cron
schedule's, a continue-as-new's), a cancel request, and its close, by a workflow task's command,
a termination or its run timeout."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, TypeGuard, cast

from kadence.exceptions import RetryState
from kadence.protocol.codec import codec, writes_field
from kadence.protocol.cron import CronError, parse_cron
from kadence.protocol.events import CLOSE_COMMANDS, CLOSE_STATUS, memo_upserted
from kadence.protocol.ids import continued_run_id, run_id_for
from kadence.protocol.limits import name_problem, payload_problem
from kadence.protocol.names import ACTIVITY_KEY_PREFIX, NEXUS_KEY_PREFIX, CommandType, EventType, TaskCommandType, TimerKind
from kadence.protocol.records import (
    ContinueAsNewWorkflowExecution,
    Payload,
    RequestCancelWorkflowExecution,
    ScheduleActivityTask,
    ScheduleNexusOperation,
    SignalWorkflowExecution,
    TerminateWorkflowExecution,
    TimeoutFired,
    WorkflowExecutionContinuedAsNew,
    WorkflowExecutionSignaled,
    WorkflowExecutionStarted,
    WorkflowTaskScheduled,
)
from services.history.machine import activity, child, clock, messages, nexus
from services.history.machine.effects import answer, drop, outbound, scheduled_run_report, timer
from services.history.machine.execution import DEFAULT_WORKFLOW_TASK_TIMEOUT_MS, RUNNING, Execution, run_timeout_ms
from services.history.machine.limits import within_history_limit
from services.history.machine.records import Effect, EventAttributes, HistoryEvent, Record, attributes, event_type
from services.history.machine.tables import Apply, Decide, EffectsOf, TaskCommand, Timeout, record_alone, recorded_as_given
from services.history.machine.transition import Rejected, Transition

# ---- starts


# The event a with-start command records right after the run's WorkflowExecutionStarted, before its
# first workflow task (which it starts at once): a signal-with-start's signal, an update-with-start's update.
FirstEvent = tuple[str, EventAttributes]


def decide_start(
    current: Execution | None, workflow_id: str, start: Record, identity: str,
    now_ms: int, source_partition: int, source_offset: int, first: FirstEvent | None = None,
) -> Transition:
    if started_by(current, start["request_id"]):
        return Transition(current, now_ms, repeat=True)  # the same start again (a retry, a relay's redelivery): answered with its run
    if current is not None and current.status == RUNNING:
        run_id = run_id_for(workflow_id, source_partition, source_offset)
        return _start_while_running(current, workflow_id, start, identity, now_ms, run_id, first)
    if current is not None:
        reuse = start["id_reuse_policy"]
        if reuse == "REJECT_DUPLICATE" or (reuse == "ALLOW_DUPLICATE_FAILED_ONLY" and current.status == "Completed"):
            raise Rejected(
                f"workflow id reuse policy {reuse} refuses a new run after run {current.run_id} ({current.status})",
                "WORKFLOW_ALREADY_STARTED",
            )
    if not start["workflow_type"] or not start["task_queue"]:
        raise Rejected("StartWorkflowExecution needs a workflow_type and a task_queue")
    problem = (name_problem(workflow_id, start) or payload_problem(start["input"], "workflow input") or _cron_problem(start)
               or _standalone_problem(workflow_id, start, first))
    if problem:
        raise Rejected(problem)
    return _new_run(workflow_id, run_id_for(workflow_id, source_partition, source_offset), start, identity, now_ms, first)


def started_by(current: Execution | None, request_id: str) -> TypeGuard[Execution]:
    """Whether the workflow id's current run was started by the request `request_id` (a start, a
    reset): the same request again is answered with that run."""
    return current is not None and bool(request_id) and request_id == current.start_request_id


def _start_while_running(
    current: Execution, workflow_id: str, start: Record, identity: str, now_ms: int, run_id: str, first: FirstEvent | None,
) -> Transition:
    """The start's id conflict policy: answered with the running run, or that run terminated and a
    new one started in the same record, or refused."""
    if start["id_conflict_policy"] == "USE_EXISTING":
        return Transition(current, now_ms)
    if start["id_conflict_policy"] != "TERMINATE_EXISTING":
        raise Rejected(f"workflow execution already started (run_id={current.run_id})", "WORKFLOW_ALREADY_STARTED")
    t = Transition(current, now_ms)
    t.flush_buffered()
    t.add(EventType.WorkflowExecutionTerminated, {
        "reason": "terminated by a start with id conflict policy TERMINATE_EXISTING", "details": [], "identity": identity,
        "new_execution_run_id": "",
    })
    t.next_run = _new_run(workflow_id, run_id, start, identity, now_ms, first)
    return t


def _cron_problem(start: Record) -> str | None:
    if not start.get("cron_schedule"):
        return None
    if start.get("start_delay_ms"):
        return "a start delay and a cron schedule may not be used together (the schedule says when each run starts)"
    try:
        parse_cron(start["cron_schedule"])
    except CronError as err:
        return str(err)
    return None


def _first_task_backoff_ms(start: Record, now_ms: int, first: FirstEvent | None) -> int:
    """How long the first workflow task waits: until the cron schedule's next time, or the start delay."""
    if first is not None:
        return 0  # a signal or an update starts it at once
    if start.get("cron_schedule"):
        return parse_cron(start["cron_schedule"]).next_after_ms(now_ms) - now_ms
    return start.get("start_delay_ms", 0)


def _new_run(
    workflow_id: str, run_id: str, start: Record, identity: str, now_ms: int, first: FirstEvent | None,
) -> Transition:
    ex = Execution(workflow_id=workflow_id, run_id=run_id, workflow_type=start["workflow_type"], task_queue=start["task_queue"])
    parent = start.get("initiated_by")
    backoff_ms = _first_task_backoff_ms(start, now_ms, first)
    t = Transition(ex, now_ms)
    # Cast: the parent's and root's fields are spread in.
    t.add(EventType.WorkflowExecutionStarted, cast(WorkflowExecutionStarted, {
        "workflow_type": start["workflow_type"], "task_queue": start["task_queue"],
        "input": start["input"], "request_id": start["request_id"], "identity": identity,
        "workflow_task_timeout_ms": start["workflow_task_timeout_ms"] or DEFAULT_WORKFLOW_TASK_TIMEOUT_MS,
        "workflow_execution_timeout_ms": start["execution_timeout_ms"], "workflow_run_timeout_ms": start["run_timeout_ms"],
        "continued_execution_run_id": "", "search_attributes": start["search_attributes"], **_parent_attributes(parent),
        "first_workflow_task_backoff_ms": backoff_ms,
        "cron_schedule": start.get("cron_schedule", ""), "initiator": "",
        "first_execution_run_id": run_id, **_root_attributes(parent, workflow_id, run_id),
        "header": start.get("header", {}), "memo": start.get("memo", {}), "scheduled_by": start.get("scheduled_by"),
        "original_execution_run_id": "", "time_skipping": start.get("time_skipping"), "clock_offset_ms": start.get("clock_offset_ms", 0),
        "nexus_caller": start.get("nexus_caller"),
    }))
    if first is not None:
        t.add(*first)
    if ex.standalone_activity:
        kind = TaskCommandType.ScheduleActivityTask
        record_alone(t, kind, activity.TASK_COMMANDS[kind], _standalone_activity(workflow_id, start))
    elif ex.standalone_nexus_operation:
        kind = TaskCommandType.ScheduleNexusOperation
        record_alone(t, kind, nexus.TASK_COMMANDS[kind], _standalone_nexus_operation(start))
    else:
        scheduled_event_id = t.add(EventType.WorkflowTaskScheduled, WorkflowTaskScheduled(task_queue=start["task_queue"], attempt=1))
        if first is None and not backoff_ms:  # as Temporal's: not with a signal or an update, nor for a task not due yet
            _start_eagerly(t, start, scheduled_event_id)
    if parent is not None:
        t.effects.append(outbound(parent["workflow_id"], CommandType.RecordChildExecutionStarted, {
            "run_id": parent["run_id"], "initiated_event_id": parent["initiated_event_id"], "child_run_id": run_id,
        }))
    return t


def _start_eagerly(t: Transition, start: Record, scheduled_event_id: int) -> None:
    """Temporal's eager workflow start: a start that names a worker of its client's process (one
    with a slot for the run's first workflow task) has that task recorded started by the worker in
    its own batch, and the task goes to the worker in the start's answer on kadence.replies rather
    than to the task queue (`workflow_task.eager_workflow_task`). Its start-to-close timeout covers
    the worker's crash or the answer's loss, as any started task's. A build whose Reply cannot carry
    the task (pinned to an earlier release) dispatches it, as any start's."""
    identity = start.get("eager_worker_identity", "")
    if identity and _answers_carry_eager_tasks():
        t.add(EventType.WorkflowTaskStarted, {"scheduled_event_id": scheduled_event_id, "identity": identity})


@functools.cache
def _answers_carry_eager_tasks() -> bool:
    return writes_field(codec("Reply"), "CommandAnswer", "eager_workflow_task")


# The standalone runs (decisions 0007 and 0008): their key's prefix, the start's field that carries
# the run's only work, and what they are called, one and many.
_STANDALONE_KEYS = (
    (ACTIVITY_KEY_PREFIX, "activity", "standalone activity", "standalone activities"),
    (NEXUS_KEY_PREFIX, "nexus_operation", "standalone Nexus operation", "standalone Nexus operations"),
)


def _standalone_problem(workflow_id: str, start: Record, first: FirstEvent | None) -> str | None:
    """Why a start does not fit its key: a standalone run's key needs its work and a plain start,
    and only that key takes that work."""
    for prefix, work, one, many in _STANDALONE_KEYS:
        if not workflow_id.startswith(prefix):
            if start.get(work) is not None:
                return f"a {one} starts under the key {prefix}<id>, not {workflow_id!r}"
            continue
        if start.get(work) is None:
            return f"workflow ids beginning with {prefix!r} are reserved for {many}"
        if first is not None or start.get("cron_schedule") or start.get("start_delay_ms") or start.get("initiated_by"):
            return f"a {one} is started alone: no signal or update with it, no cron schedule, start delay or parent"
    operation = start.get("nexus_operation")
    if operation is not None and operation["endpoint"] != start["task_queue"]:
        return (f"a standalone Nexus operation's task_queue names its endpoint ({operation['endpoint']!r}), "
                f"not {start['task_queue']!r}")
    return None


def _standalone_activity(workflow_id: str, start: Record) -> ScheduleActivityTask:
    """The activity a standalone activity's start carries, as a workflow task would schedule it."""
    options = start["activity"]
    return cast(ScheduleActivityTask, {
        "activity_id": workflow_id.removeprefix(ACTIVITY_KEY_PREFIX), "activity_type": start["workflow_type"],
        "task_queue": start["task_queue"], "input": start["input"], "header": start.get("header", {}),
        **{name: options.get(name, 0) for name in (
            "schedule_to_close_timeout_ms", "schedule_to_start_timeout_ms", "start_to_close_timeout_ms", "heartbeat_timeout_ms",
        )},
        "retry_policy": options.get("retry_policy"),
    })


def _standalone_nexus_operation(start: Record) -> ScheduleNexusOperation:
    """The operation a standalone Nexus operation's start carries, as a workflow task would schedule it."""
    operation = start["nexus_operation"]
    return {
        "endpoint": operation["endpoint"], "service": operation["service"], "operation": start["workflow_type"],
        "input": start["input"][0] if start["input"] else None,
        "schedule_to_close_timeout_ms": operation.get("schedule_to_close_timeout_ms", 0),
        "nexus_header": operation.get("nexus_header", {}), "task_queue": operation.get("task_queue", ""),
    }


def _root_attributes(parent: Record | None, workflow_id: str, run_id: str) -> Record:
    """A child's root is its parent's (the parent itself in records sent before roots were); a run
    without a parent is its own root (as Temporal)."""
    if parent is None:
        return {"root_workflow_id": workflow_id, "root_run_id": run_id}
    if parent.get("root_workflow_id"):
        return {"root_workflow_id": parent["root_workflow_id"], "root_run_id": parent["root_run_id"]}
    return {"root_workflow_id": parent["workflow_id"], "root_run_id": parent["run_id"]}


def _parent_attributes(parent: Record | None) -> Record:
    if parent is None:
        return {"parent_workflow_id": "", "parent_run_id": "", "parent_initiated_event_id": 0}
    return {
        "parent_workflow_id": parent["workflow_id"], "parent_run_id": parent["run_id"],
        "parent_initiated_event_id": parent["initiated_event_id"],
    }


def decide_signal_with_start(
    current: Execution | None, workflow_id: str, cmd: Record, identity: str,
    now_ms: int, source_partition: int, source_offset: int,
) -> Transition:
    """Signal the running run, or start a new one whose first event after the start is the signal.
    The start's request id names the whole request: sent again, it signals (or starts) once."""
    signal = SignalWorkflowExecution(signal_name=cmd["signal_name"], input=cmd["signal_input"], header=cmd["start"].get("header", {}))
    request_id = cmd["start"]["request_id"]
    if current is not None and current.status == RUNNING:
        if request_id and request_id == current.start_request_id:
            return Transition(current, now_ms, repeat=True)  # this request started the run, with its signal
        return within_history_limit(messages.signaled(current, {**signal, "run_id": "", "request_id": request_id}, identity, now_ms))
    if not cmd["signal_name"]:
        raise Rejected("SignalWithStartWorkflowExecution needs a signal_name")
    problem = payload_problem(cmd["signal_input"], "signal input")
    if problem:
        raise Rejected(problem)
    signaled = cast(WorkflowExecutionSignaled, {
        **signal, "identity": identity, "request_id": "", "external_workflow_id": "", "external_run_id": "",
    })
    first = (EventType.WorkflowExecutionSignaled, signaled)
    return decide_start(current, workflow_id, cmd["start"], identity, now_ms, source_partition, source_offset, first)


def decide_update_with_start(
    current: Execution | None, workflow_id: str, cmd: Record, identity: str,
    now_ms: int, source_partition: int, source_offset: int,
) -> Transition:
    """Temporal's update-with-start: admit the update to the running run when the start's conflict
    policy is USE_EXISTING; else start a run (per the start's policies: FAIL refuses while one
    runs, TERMINATE_EXISTING ends it) whose first event after the start is the update. Either way
    one batch. The start's request id names the whole request: sent again, it applies once."""
    start, update = cmd["start"], cmd["update"]
    messages.check_update(workflow_id, update)
    if start.get("cron_schedule") or start.get("start_delay_ms"):
        raise Rejected("an update-with-start takes no cron schedule nor start delay (as Temporal): the update needs the run at once")
    request_id = start["request_id"]
    if current is not None and current.status == RUNNING:
        if request_id and request_id == current.start_request_id:
            return Transition(current, now_ms, repeat=True)  # this request started the run, with its update
        if start["id_conflict_policy"] == "USE_EXISTING":
            return within_history_limit(messages.update_admitted(current, update, identity, now_ms))
    first = (EventType.WorkflowExecutionUpdateAdmitted, messages.admitted_event(update, identity))
    return decide_start(current, workflow_id, start, identity, now_ms, source_partition, source_offset, first)


# ---- closes


# A cron run that ends so is followed by the next; one canceled or terminated ends the schedule.
_CRON_CONTINUES = {EventType.WorkflowExecutionCompleted, EventType.WorkflowExecutionFailed, EventType.WorkflowExecutionTimedOut}


def close(t: Transition, kind: str, attrs: Mapping[str, Any]) -> None:
    """Close the run with the close event `kind` (its attributes but new_execution_run_id)."""
    t.add(kind, close_event(t, kind, attrs))


def close_event(t: Transition, kind: str, attrs: Mapping[str, Any]) -> EventAttributes:
    """The attributes of the event that closes the run, taking the run's next event id. A run of a
    cron schedule that completed, failed or timed out starts the next run in the same record, its
    first workflow task at the schedule's next time (as Temporal)."""
    ex = t.execution
    started = ex.started
    cron_schedule = started.get("cron_schedule", "")
    if not cron_schedule or kind not in _CRON_CONTINUES:
        return cast(EventAttributes, {**attrs, "new_execution_run_id": ""})
    following = Execution(
        workflow_id=ex.workflow_id, run_id=continued_run_id(ex.run_id, t.next_event_id), workflow_type=ex.workflow_type,
        task_queue=ex.task_queue,
    )
    t.next_run = Transition(following, t.now_ms)
    t.next_run.add(EventType.WorkflowExecutionStarted, cast(WorkflowExecutionStarted, {
        **started, "request_id": "", "continued_execution_run_id": ex.run_id, "initiator": "CRON_SCHEDULE", "original_execution_run_id": "",
        "first_workflow_task_backoff_ms": parse_cron(cron_schedule).next_after_ms(t.now_ms) - t.now_ms, **clock.inherited(ex, t.now_ms),
    }))
    t.next_run.add(EventType.WorkflowTaskScheduled, WorkflowTaskScheduled(task_queue=following.task_queue, attempt=1))
    return cast(EventAttributes, {**attrs, "new_execution_run_id": following.run_id})


def _continued_as_new_event(
    t: Transition, attrs: ContinueAsNewWorkflowExecution, completed_id: int, identity: str,
) -> WorkflowExecutionContinuedAsNew:
    """The run closes and its successor starts in the same transition (one record: atomic)."""
    ex = t.execution
    following = Execution(
        workflow_id=ex.workflow_id, run_id=continued_run_id(ex.run_id, completed_id),
        workflow_type=attrs["workflow_type"] or ex.workflow_type, task_queue=attrs["task_queue"] or ex.task_queue,
    )
    started = ex.started
    # As Temporal: a command that sets no memo keeps the run's.
    memo = attrs.get("memo")
    if memo is None:
        memo = _memo_now(ex, t)
    t.next_run = Transition(following, t.now_ms)
    # Cast: the parent's and the chain's fields are spread in.
    t.next_run.add(EventType.WorkflowExecutionStarted, cast(WorkflowExecutionStarted, {
        "workflow_type": following.workflow_type, "task_queue": following.task_queue, "input": attrs["input"],
        "request_id": "", "identity": identity,
        # As Temporal: what the command leaves unset is the current run's, and the execution
        # timeout bounds the whole chain (the new run gets what is left of it).
        "workflow_task_timeout_ms": attrs["workflow_task_timeout_ms"] or ex.workflow_task_timeout_ms,
        "workflow_execution_timeout_ms": _execution_time_left_ms(ex, t.now_ms),
        "workflow_run_timeout_ms": attrs["run_timeout_ms"] or started.get("workflow_run_timeout_ms", 0),
        "continued_execution_run_id": ex.run_id, "search_attributes": _search_attributes_now(ex, t), **_parent_attributes(ex.parent),
        "first_workflow_task_backoff_ms": 0, "cron_schedule": started.get("cron_schedule", ""), "initiator": "WORKFLOW",
        **_chain_attributes(ex), "header": attrs.get("header", {}), "memo": memo, "scheduled_by": ex.scheduled_by,
        "original_execution_run_id": "", **clock.inherited(ex, t.now_ms), "nexus_caller": ex.nexus_caller,
    }))
    t.next_run.add(EventType.WorkflowTaskScheduled, WorkflowTaskScheduled(task_queue=following.task_queue, attempt=1))
    return {
        **attrs, "new_execution_run_id": following.run_id, "workflow_type": following.workflow_type,
        "task_queue": following.task_queue, "workflow_task_completed_event_id": completed_id, "header": attrs.get("header", {}),
        "memo": memo,
    }


def _execution_time_left_ms(ex: Execution, now_ms: int) -> int:
    """What the run's execution timeout leaves for the run it continues as (0: none; at least 1 ms)."""
    timeout = ex.started.get("workflow_execution_timeout_ms") or 0
    if not timeout:
        return 0
    return max(1, timeout - (now_ms - ex.history[0]["event_time_ms"]))


def _search_attributes_now(ex: Execution, t: Transition) -> Record:
    """The run's search attributes: those it started with, as its upserts (this transition's too) left them."""
    values = dict(ex.started.get("search_attributes") or {})
    for event in ex.history + t.events:
        if event_type(event) == EventType.UpsertWorkflowSearchAttributes:
            values.update(attributes(event)["search_attributes"])
    return values


def _memo_now(ex: Execution, t: Transition) -> dict[str, Payload]:
    """The run's memo: what it started with, as its upserts (this transition's too) left it."""
    memo = dict(ex.started.get("memo") or {})
    for event in ex.history + t.events:
        if event_type(event) == EventType.WorkflowPropertiesModified:
            memo = memo_upserted(memo, attributes(event)["upserted_memo"])
    return memo


def _chain_attributes(ex: Execution) -> Record:
    """What the run that continues `ex` keeps of its chain: the first run and the root."""
    root_workflow_id, root_run_id = ex.root
    return {
        "first_execution_run_id": ex.started.get("first_execution_run_id") or ex.run_id,
        "root_workflow_id": root_workflow_id, "root_run_id": root_run_id,
    }


def _closing(command: str, bad_attributes: str) -> TaskCommand:
    def event(t: Transition, attrs: Mapping[str, Any], completed_id: int, identity: str) -> EventAttributes:
        return close_event(t, CLOSE_COMMANDS[command], {**attrs, "workflow_task_completed_event_id": completed_id})

    return TaskCommand(bad_attributes, event)


TASK_COMMANDS: dict[str, TaskCommand] = {
    TaskCommandType.CompleteWorkflowExecution: _closing(
        TaskCommandType.CompleteWorkflowExecution, "BAD_COMPLETE_WORKFLOW_EXECUTION_ATTRIBUTES",
    ),
    TaskCommandType.FailWorkflowExecution: _closing(TaskCommandType.FailWorkflowExecution, "BAD_FAIL_WORKFLOW_EXECUTION_ATTRIBUTES"),
    TaskCommandType.CancelWorkflowExecution: _closing(TaskCommandType.CancelWorkflowExecution, "BAD_CANCEL_WORKFLOW_EXECUTION_ATTRIBUTES"),
    TaskCommandType.ContinueAsNewWorkflowExecution: TaskCommand("BAD_CONTINUE_AS_NEW_ATTRIBUTES", _continued_as_new_event),
    TaskCommandType.UpsertWorkflowSearchAttributes: recorded_as_given("BAD_SEARCH_ATTRIBUTES"),
    TaskCommandType.ModifyWorkflowProperties: recorded_as_given("BAD_MODIFY_WORKFLOW_PROPERTIES_ATTRIBUTES"),
}

# ---- commands


def _cancel_requested(ex: Execution, cmd: RequestCancelWorkflowExecution, identity: str, now_ms: int) -> Transition:
    t = Transition(ex, now_ms)
    requester = cmd.get("initiated_by")
    if not ex.cancel_requested and ex.standalone:  # no workflow to tell: its work cancels (its activity, or its operation)
        t.add(EventType.WorkflowExecutionCancelRequested, {"cause": cmd["reason"], "identity": identity, "external_workflow_id": "",
                                                           "external_run_id": "", "external_initiated_event_id": 0})
        activity.cancel_standalone(t)
        nexus.cancel_standalone(t)
    elif not ex.cancel_requested:  # asking twice is answered, not recorded twice
        t.add_workflow_visible(EventType.WorkflowExecutionCancelRequested, {
            "cause": cmd["reason"], "identity": identity, "external_workflow_id": requester["workflow_id"] if requester else "",
            "external_run_id": requester["run_id"] if requester else "",
            "external_initiated_event_id": requester["initiated_event_id"] if requester else 0,
        })
    if requester is not None:
        t.effects.append(answer(requester, ""))
    return t


def _terminated(ex: Execution, cmd: TerminateWorkflowExecution, identity: str, now_ms: int) -> Transition:
    problem = payload_problem(cmd["details"], "termination details")
    if problem:
        raise Rejected(problem)
    t = Transition(ex, now_ms)
    t.flush_buffered()  # what arrived is kept in the history; nothing runs after this
    t.add(EventType.WorkflowExecutionTerminated, {
        "reason": cmd["reason"], "details": cmd["details"], "identity": identity, "new_execution_run_id": "",
    })
    return t


COMMANDS: dict[str, Decide] = {
    CommandType.RequestCancelWorkflowExecution: _cancel_requested, CommandType.TerminateWorkflowExecution: _terminated,
}

# ---- timeouts


def _run_timed_out(ex: Execution, cmd: TimeoutFired, now_ms: int) -> Transition:
    t = Transition(ex, now_ms)
    t.flush_buffered()
    close(t, EventType.WorkflowExecutionTimedOut, {"retry_state": RetryState.TIMEOUT.value})
    return t


TIMEOUTS: dict[str, Timeout] = {TimerKind.WORKFLOW_RUN_TIMEOUT: _run_timed_out}

# ---- apply


def _closed(ex: Execution, event: HistoryEvent) -> None:
    ex.status = CLOSE_STATUS[event_type(event)]
    ex.workflow_task = None
    ex.activities.clear()  # pending work is dropped with the run
    ex.timers.clear()
    ex.children.clear()  # the parent close policy applies to them
    ex.external_requests.clear()
    ex.nexus_operations.clear()
    ex.updates.clear()


def _cancel_recorded(ex: Execution, event: HistoryEvent) -> None:
    ex.cancel_requested = True


APPLY: dict[str, Apply] = {EventType.WorkflowExecutionCancelRequested: _cancel_recorded, **{kind: _closed for kind in CLOSE_STATUS}}

# ---- effects


def _on_started(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    """The run's timeout: the sooner of its run timeout and what is left of its execution timeout;
    a run a schedule started (or continues one) tells the schedule its run id."""
    timeout_ms = run_timeout_ms(attributes(event))
    effects = [timer(ex, TimerKind.WORKFLOW_RUN_TIMEOUT, t.now_ms + timeout_ms, event["event_id"], 1)] if timeout_ms else []
    if ex.scheduled_by is not None:
        effects.append(scheduled_run_report(ex.scheduled_by, ex.workflow_id, ex.run_id, RUNNING))
    return effects


def _on_closed(ex: Execution, t: Transition, event: HistoryEvent) -> list[Effect]:
    """A child run's close is told to its parent, a scheduled run's to its schedule (unless the chain
    goes on); the run timeout goes (unless it is what fired)."""
    kind, attrs = event_type(event), attributes(event)
    chain_ends = not attrs.get("new_execution_run_id")
    effects = [child.close_report(ex, kind, attrs)] if chain_ends and ex.parent is not None else []
    if chain_ends and ex.scheduled_by is not None:
        effects.append(scheduled_run_report(ex.scheduled_by, ex.workflow_id, ex.run_id, CLOSE_STATUS[kind]))
    if chain_ends and ex.nexus_caller is not None:
        effects.append(nexus.close_report(ex, kind, attrs))
    if kind != EventType.WorkflowExecutionTimedOut:
        effects.append(drop(ex, TimerKind.WORKFLOW_RUN_TIMEOUT, 1, 1))
    return effects


EFFECTS: dict[str, EffectsOf] = {EventType.WorkflowExecutionStarted: _on_started, **{kind: _on_closed for kind in CLOSE_STATUS}}
