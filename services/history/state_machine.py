"""The per-execution state machine: `decide` turns a command into a transition, `evolve` folds a
history batch into the execution's state.

Live processing and recovery share `evolve`, so the state rebuilt from the log is the state the
live service had. `decide` never mutates; it raises `Rejected` for stale or invalid commands.

Workflow-visible events (an activity's final result) that arrive while a workflow task is in
flight are buffered and written after the task completes, so the history a worker saw when its
task was dispatched is exactly the history before that task's WorkflowTaskStarted event.
Attempt-level events (ActivityTaskStarted, a failure that will be retried) are written at once.
"""

from __future__ import annotations

import collections
import functools
from dataclasses import dataclass, field
from typing import Any

from kadence.common import DEFAULT_INITIAL_INTERVAL_MS, retry_backoff_ms
from kadence.protocol.codec import command_codec
from kadence.protocol.cron import CronError, parse_cron
from kadence.protocol.events import (
    ACTIVITY_RESULTS,
    CHILD_RESULT_FOR_STATUS,
    CHILD_RESULTS,
    CLOSE_COMMANDS,
    CLOSE_STATUS,
    EVENT_FOR_COMMAND,
    WORKFLOW_TASK_TOO_LARGE,
    failure_record,
)
from kadence.protocol.ids import continued_run_id, run_id_for
from kadence.protocol.limits import (
    MAX_HISTORY_BYTES,
    MAX_HISTORY_EVENTS,
    MAX_PENDING_ACTIVITIES,
    MAX_PENDING_CHILDREN,
    MAX_PENDING_EXTERNAL_REQUESTS,
    MAX_PENDING_SIGNALS,
    MAX_RECORD_VALUE_BYTES,
    encoded_bytes_bound,
    name_problem,
    payload_bytes,
    payload_problem,
)
from kadence.protocol.task_token import TaskToken

Record = dict[str, Any]

RUNNING = "Running"
HISTORY_IDENTITY = "kadence-history"

DEFAULT_WORKFLOW_TASK_TIMEOUT_MS = 10_000
MAX_WORKFLOW_TASK_BACKOFF_MS = 60_000
# A workflow or activity task dispatched and not started is dispatched again after this long, then
# after as long again as it has waited (at most the cap), until a worker starts it: a task record
# lost on its way to a worker must not leave the workflow waiting for ever.
TASK_REDISPATCH_MS = 10_000
MAX_TASK_REDISPATCH_MS = 300_000


class Rejected(Exception):
    """The command does not apply to the execution's current state; the message says why, and
    `cause` says it in a word a client can act on."""

    def __init__(self, reason: str, cause: str = "INVALID_ARGUMENT") -> None:
        super().__init__(reason)
        self.cause = cause


@dataclass
class ActivityState:
    scheduled_event_id: int
    activity_id: str
    activity_type: str
    task_queue: str
    input: list[Record]
    schedule_to_close_timeout_ms: int
    start_to_close_timeout_ms: int
    retry_policy: Record | None
    scheduled_time_ms: int
    heartbeat_timeout_ms: int = 0
    schedule_to_start_timeout_ms: int = 0
    attempt: int = 1
    started_event_id: int = 0  # 0 while scheduled or backing off before the next attempt
    dispatch_due_ms: int = 0  # when the current attempt went, or goes, to a worker: its scheduling or its backoff's end
    started_identity: str = ""
    heartbeat: Record | None = None  # the latest ActivityHeartbeat; its details go to the next attempt
    last_heartbeat_ms: int = 0  # the current attempt's start or latest heartbeat
    cancel_requested_event_id: int = 0


@dataclass
class ChildState:
    """A child workflow this run started and has not heard the end of."""

    initiated_event_id: int
    workflow_id: str
    workflow_type: str
    parent_close_policy: str
    run_id: str = ""  # known once ChildWorkflowExecutionStarted is recorded
    started_event_id: int = 0


@dataclass
class ExternalRequest:
    """A signal or cancel request this run sent to another workflow and awaits the answer to."""

    kind: str  # "signal" or "cancel"
    workflow_id: str
    run_id: str


@dataclass
class WorkflowTaskState:
    scheduled_event_id: int
    attempt: int
    started_event_id: int = 0
    started_identity: str = ""


@dataclass
class Execution:
    workflow_id: str
    run_id: str
    workflow_type: str
    task_queue: str
    workflow_task_timeout_ms: int = DEFAULT_WORKFLOW_TASK_TIMEOUT_MS
    start_request_id: str = ""
    status: str = RUNNING
    cancel_requested: bool = False
    history_bytes: int = 0  # payload bytes in the history: the 50 MB limit
    next_event_id: int = 1
    history: list[Record] = field(default_factory=list)
    workflow_task: WorkflowTaskState | None = None
    activities: dict[int, ActivityState] = field(default_factory=dict)
    timers: dict[str, int] = field(default_factory=dict)  # user timer id -> its TimerStarted event id
    buffered: list[Record] = field(default_factory=list)
    parent: Record | None = None  # InitiatedBy of a child run: where its close is reported
    children: dict[int, ChildState] = field(default_factory=dict)  # by initiated event id
    external_requests: dict[int, ExternalRequest] = field(default_factory=dict)  # by initiated event id
    signal_request_ids: set[str] = field(default_factory=set)  # a signal sent again with its request id applies once
    update_ids: set[str] = field(default_factory=set)  # every update admitted: one sent again applies once
    updates: dict[str, str] = field(default_factory=dict)  # update id -> "admitted" or "accepted", until it ends
    # Queries waiting for the workflow task in flight: memory only (a restart loses them; callers time out).
    pending_queries: list[Record] = field(default_factory=list, compare=False)

    @property
    def quiescent(self) -> bool:
        """No workflow task pending and nothing buffered: a query now sees everything recorded."""
        return self.status != RUNNING or (self.workflow_task is None and not self.buffered)


@dataclass
class Pending:
    """What an execution had pending before a transition: the effects drop what it no longer has."""

    activities: dict[int, ActivityState] = field(default_factory=dict)
    timers: set[int] = field(default_factory=set)  # TimerStarted event ids
    children: dict[int, ChildState] = field(default_factory=dict)

    @classmethod
    def of(cls, ex: Execution) -> Pending:
        return cls(dict(ex.activities), set(ex.timers.values()), dict(ex.children))


@dataclass(frozen=True)
class Redispatch:
    """A task dispatched again because no worker started it (its record lost, or no worker polling)."""

    task: str  # "workflow" or "activity"
    scheduled_event_id: int
    waited_ms: int  # since the workflow task was scheduled, or the activity attempt was due


@dataclass
class Transition:
    """What one command does to one execution: the content of one HistoryBatch."""

    execution: Execution
    now_ms: int
    events: list[Record] = field(default_factory=list)
    buffered: list[Record] = field(default_factory=list)
    effects: list[tuple[str, Record]] = field(default_factory=list)
    heartbeats: list[Record] = field(default_factory=list)
    next_run: "Transition | None" = None  # the run a continue-as-new starts in the same record
    redispatch: "Redispatch | None" = None
    first_event_id: int = field(init=False)  # the run's next event id when it was decided

    def __post_init__(self) -> None:
        self.first_event_id = self.execution.next_event_id

    @property
    def next_event_id(self) -> int:
        return self.first_event_id + len(self.events)

    @functools.cached_property
    def record_bytes_bound(self) -> int:
        """An upper bound of the encoded HistoryBatch this transition makes (taken before it applies)."""
        return batch_bytes_bound(self)

    def add(self, event_type: str, attributes: Record, event_time_ms: int | None = None) -> int:
        event_id = self.next_event_id
        time_ms = self.now_ms if event_time_ms is None else event_time_ms
        self.events.append({"event_id": event_id, "event_time_ms": time_ms, "attributes": (event_type, attributes)})
        return event_id

    def add_workflow_visible(self, event_type: str, attributes: Record) -> None:
        """Buffer the event while a workflow task is in flight, else write it and schedule a task
        (one per transition, after its last workflow-visible event)."""
        if self.execution.workflow_task is not None:
            self.buffered.append({"event_id": 0, "event_time_ms": self.now_ms, "attributes": (event_type, attributes)})
            return
        if self.events and self.events[-1]["attributes"] == ("WorkflowTaskScheduled", self._first_task_attributes()):
            self.events.pop()
        self.add(event_type, attributes)
        self.add("WorkflowTaskScheduled", self._first_task_attributes())

    def _first_task_attributes(self) -> Record:
        return {"task_queue": self.execution.task_queue, "attempt": 1}

    def flush_buffered(self) -> None:
        for event in self.execution.buffered:
            event_type, attributes = event["attributes"]
            self.add(event_type, attributes)

    def batch(
        self, source_partition: int, source_offset: int, effects: list[tuple[str, Record]] | None = None,
        next_run_effects: list[tuple[str, Record]] | None = None, request_ids: list[str] | None = None,
    ) -> Record:
        """The HistoryBatch of this transition, with the effects derived once it applied."""
        ex = self.execution
        following = None if self.next_run is None else {
            "run_id": self.next_run.execution.run_id, "events": self.next_run.events, "effects": next_run_effects or [],
        }
        return history_batch(
            ex.workflow_id, ex.run_id, self.first_event_id, source_partition, source_offset, events=self.events,
            buffered=self.buffered, effects=effects or [], heartbeats=self.heartbeats, next_run=following,
            request_ids=request_ids or [],
        )


def history_batch(
    workflow_id: str, run_id: str, first_event_id: int, source_partition: int, source_offset: int, *,
    events: list[Record] | None = None, buffered: list[Record] | None = None, effects: list[tuple[str, Record]] | None = None,
    heartbeats: list[Record] | None = None, next_run: Record | None = None, request_ids: list[str] | None = None,
    rejection: Record | None = None,
) -> Record:
    """A HistoryBatch record (schemas/HistoryBatch.avsc): every batch the history service writes is made here."""
    return {
        "workflow_id": workflow_id, "run_id": run_id, "first_event_id": first_event_id,
        "events": events or [], "buffered": buffered or [], "effects": effects or [], "heartbeats": heartbeats or [],
        "next_run": next_run, "request_ids": request_ids or [], "rejection": rejection,
        "source_partition": source_partition, "source_offset": source_offset,
    }


def event_type(event: Record) -> str:
    return event["attributes"][0]


def attributes(event: Record) -> Record:
    return event["attributes"][1]


# ---- evolve: fold a batch into state (live and recovery) -------------------------------------


def execution_from_start(workflow_id: str, run_id: str, started: Record) -> Execution:
    attrs = attributes(started)
    parent = None
    if attrs["parent_workflow_id"]:
        parent = {
            "workflow_id": attrs["parent_workflow_id"], "run_id": attrs["parent_run_id"],
            "initiated_event_id": attrs["parent_initiated_event_id"],
        }
    return Execution(
        workflow_id=workflow_id, run_id=run_id, workflow_type=attrs["workflow_type"], task_queue=attrs["task_queue"],
        workflow_task_timeout_ms=attrs["workflow_task_timeout_ms"], start_request_id=attrs["request_id"], parent=parent,
    )


def closed_execution(workflow_id: str, run_id: str, status: str, start_request_id: str) -> Execution:
    """What a closed run keeps: what a later start's id reuse policy and request id check need."""
    return Execution(
        workflow_id=workflow_id, run_id=run_id, workflow_type="", task_queue="", status=status, start_request_id=start_request_id,
    )


def execution_from_events(workflow_id: str, run_id: str, events: list[Record]) -> Execution:
    """A run's state from its events, the first being WorkflowExecutionStarted."""
    ex = execution_from_start(workflow_id, run_id, events[0])
    evolve(ex, {"events": events, "buffered": []})
    return ex


def evolve(ex: Execution, batch: Record) -> None:
    for event in batch["buffered"]:
        _apply(ex, event)
        ex.buffered.append(event)
    for event in batch["events"]:
        _apply(ex, event)
        ex.history.append(event)
        ex.next_event_id = event["event_id"] + 1
        ex.history_bytes += payload_bytes(event["attributes"][1])
    for heartbeat in batch.get("heartbeats", ()):
        apply_heartbeat(ex, heartbeat)
    if ex.status != RUNNING:
        ex.history = []  # a closed run takes no more workflow tasks


def apply_heartbeat(ex: Execution, heartbeat: Record) -> None:
    """Keep the latest heartbeat, whichever attempt sent it (the next attempt resumes from it);
    only the current attempt's heartbeat holds off its heartbeat timeout."""
    activity = ex.activities.get(heartbeat["scheduled_event_id"])
    if activity is None:
        return
    activity.heartbeat = heartbeat
    if activity.attempt == heartbeat["attempt"]:
        activity.last_heartbeat_ms = heartbeat["recorded_at_ms"]


def _apply(ex: Execution, event: Record) -> None:
    """State effect of one event. Buffered events are applied twice (when buffered, when written):
    only events whose effect is idempotent (removing a finished activity) are ever buffered."""
    kind, attrs = event["attributes"]
    if kind == "WorkflowTaskScheduled":
        ex.workflow_task = WorkflowTaskState(event["event_id"], attrs["attempt"])
    elif kind == "WorkflowTaskStarted":
        assert ex.workflow_task is not None
        ex.workflow_task.started_event_id = event["event_id"]
        ex.workflow_task.started_identity = attrs["identity"]
    elif kind in ("WorkflowTaskCompleted", "WorkflowTaskFailed", "WorkflowTaskTimedOut"):
        ex.workflow_task = None
        ex.buffered = []  # the same batch writes them next
    elif kind == "TimerStarted":
        ex.timers[attrs["timer_id"]] = event["event_id"]
    elif kind in ("TimerFired", "TimerCanceled"):
        ex.timers.pop(attrs["timer_id"], None)
    elif kind == "ActivityTaskScheduled":
        ex.activities[event["event_id"]] = ActivityState(
            scheduled_event_id=event["event_id"],
            activity_id=attrs["activity_id"],
            activity_type=attrs["activity_type"],
            task_queue=attrs["task_queue"],
            input=attrs["input"],
            schedule_to_close_timeout_ms=attrs["schedule_to_close_timeout_ms"],
            start_to_close_timeout_ms=attrs["start_to_close_timeout_ms"],
            heartbeat_timeout_ms=attrs["heartbeat_timeout_ms"],
            schedule_to_start_timeout_ms=attrs["schedule_to_start_timeout_ms"],
            retry_policy=attrs["retry_policy"],
            scheduled_time_ms=event["event_time_ms"],
            dispatch_due_ms=event["event_time_ms"],
        )
    elif kind == "ActivityTaskStarted":
        activity = ex.activities[attrs["scheduled_event_id"]]
        activity.started_event_id = event["event_id"]
        activity.attempt = attrs["attempt"]
        activity.started_identity = attrs["identity"]
        activity.last_heartbeat_ms = event["event_time_ms"]
    elif kind in ("ActivityTaskFailed", "ActivityTaskTimedOut") and attrs["retry_state"] == "IN_PROGRESS":
        activity = ex.activities[attrs["scheduled_event_id"]]
        backoff_ms = next_attempt_backoff_ms(activity, attrs["failure"])
        activity.attempt += 1
        activity.started_event_id = 0
        activity.dispatch_due_ms = event["event_time_ms"] + backoff_ms
    elif kind == "ActivityTaskCancelRequested":
        ex.activities[attrs["scheduled_event_id"]].cancel_requested_event_id = event["event_id"]
    elif kind in ACTIVITY_RESULTS:
        ex.activities.pop(attrs["scheduled_event_id"], None)
    elif kind == "WorkflowExecutionCancelRequested":
        ex.cancel_requested = True
    elif kind == "WorkflowExecutionSignaled" and attrs["request_id"]:
        ex.signal_request_ids.add(attrs["request_id"])
    elif kind == "WorkflowExecutionUpdateAdmitted":
        ex.update_ids.add(attrs["update_id"])
        ex.updates[attrs["update_id"]] = "admitted"
    elif kind == "WorkflowExecutionUpdateAccepted":
        ex.updates[attrs["update_id"]] = "accepted"
    elif kind in ("WorkflowExecutionUpdateRejected", "WorkflowExecutionUpdateCompleted"):
        ex.updates.pop(attrs["update_id"], None)
    elif kind == "StartChildWorkflowExecutionInitiated":
        ex.children[event["event_id"]] = ChildState(
            event["event_id"], attrs["workflow_id"], attrs["workflow_type"], attrs["parent_close_policy"],
        )
    elif kind == "ChildWorkflowExecutionStarted":
        if (child := ex.children.get(attrs["initiated_event_id"])) is not None:
            child.run_id = attrs["run_id"]
            child.started_event_id = event["event_id"]
    elif kind in CHILD_RESULTS or kind == "StartChildWorkflowExecutionFailed":
        ex.children.pop(attrs["initiated_event_id"], None)
    elif kind in _EXTERNAL_INITIATED:
        ex.external_requests[event["event_id"]] = ExternalRequest(_EXTERNAL_INITIATED[kind], attrs["workflow_id"], attrs["run_id"])
    elif kind in _EXTERNAL_ANSWERS:
        ex.external_requests.pop(attrs["initiated_event_id"], None)
    elif kind in CLOSE_STATUS:
        ex.status = CLOSE_STATUS[kind]
        ex.workflow_task = None
        ex.activities.clear()  # pending work is dropped with the run
        ex.timers.clear()
        ex.children.clear()  # the parent close policy applies to them
        ex.external_requests.clear()
        ex.updates.clear()


_EXTERNAL_INITIATED = {
    "SignalExternalWorkflowExecutionInitiated": "signal", "RequestCancelExternalWorkflowExecutionInitiated": "cancel",
}
# The events answering an external request, by (kind, whether it applied).
_EXTERNAL_ANSWER_EVENT = {
    ("signal", True): "ExternalWorkflowExecutionSignaled",
    ("signal", False): "SignalExternalWorkflowExecutionFailed",
    ("cancel", True): "ExternalWorkflowExecutionCancelRequested",
    ("cancel", False): "RequestCancelExternalWorkflowExecutionFailed",
}
_EXTERNAL_ANSWERS = set(_EXTERNAL_ANSWER_EVENT.values())


# ---- decide: command -> transition -------------------------------------------------------------


def decide_start(
    current: Execution | None, workflow_id: str, start: Record, identity: str,
    now_ms: int, source_partition: int, source_offset: int, signal: Record | None = None,
) -> Transition:
    if current is not None and start["request_id"] and start["request_id"] == current.start_request_id:
        return Transition(current, now_ms)  # the same start again (a retry, a relay's redelivery): answered with its run
    if current is not None and current.status == RUNNING:
        if start["id_conflict_policy"] == "USE_EXISTING":
            return Transition(current, now_ms)
        if start["id_conflict_policy"] == "TERMINATE_EXISTING":
            t = Transition(current, now_ms)
            t.flush_buffered()
            t.add("WorkflowExecutionTerminated", {
                "reason": "terminated by a start with id conflict policy TERMINATE_EXISTING", "details": [], "identity": identity,
            })
            t.next_run = _new_run(workflow_id, run_id_for(workflow_id, source_partition, source_offset), start, identity, now_ms, signal)
            return t
        raise Rejected(f"workflow execution already started (run_id={current.run_id})", "WORKFLOW_ALREADY_STARTED")
    if current is not None:
        reuse = start["id_reuse_policy"]
        if reuse == "REJECT_DUPLICATE" or (reuse == "ALLOW_DUPLICATE_FAILED_ONLY" and current.status == "Completed"):
            raise Rejected(
                f"workflow id reuse policy {reuse} refuses a new run after run {current.run_id} ({current.status})",
                "WORKFLOW_ALREADY_STARTED",
            )
    if not start["workflow_type"] or not start["task_queue"]:
        raise Rejected("StartWorkflowExecution needs a workflow_type and a task_queue")
    problem = name_problem(workflow_id, start) or payload_problem(start["input"], "workflow input") or _cron_problem(start)
    if problem:
        raise Rejected(problem)
    return _new_run(workflow_id, run_id_for(workflow_id, source_partition, source_offset), start, identity, now_ms, signal)


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


def _first_task_backoff_ms(start: Record, now_ms: int, signal: Record | None) -> int:
    """How long the first workflow task waits: until the cron schedule's next time, or the start delay."""
    if signal is not None:
        return 0  # a signal starts it at once
    if start.get("cron_schedule"):
        return parse_cron(start["cron_schedule"]).next_after_ms(now_ms) - now_ms
    return start.get("start_delay_ms", 0)


def _new_run(workflow_id: str, run_id: str, start: Record, identity: str, now_ms: int, signal: Record | None) -> Transition:
    ex = Execution(workflow_id=workflow_id, run_id=run_id, workflow_type=start["workflow_type"], task_queue=start["task_queue"])
    parent = start.get("initiated_by")
    t = Transition(ex, now_ms)
    t.add("WorkflowExecutionStarted", {
        "workflow_type": start["workflow_type"], "task_queue": start["task_queue"],
        "input": start["input"], "request_id": start["request_id"], "identity": identity,
        "workflow_task_timeout_ms": start["workflow_task_timeout_ms"] or DEFAULT_WORKFLOW_TASK_TIMEOUT_MS,
        "workflow_execution_timeout_ms": start["execution_timeout_ms"], "workflow_run_timeout_ms": start["run_timeout_ms"],
        "continued_execution_run_id": "", "search_attributes": start["search_attributes"], **_parent_attributes(parent),
        "first_workflow_task_backoff_ms": _first_task_backoff_ms(start, now_ms, signal),
        "cron_schedule": start.get("cron_schedule", ""), "initiator": "",
        "first_execution_run_id": run_id, **_root_attributes(parent, workflow_id, run_id),
    })
    if signal is not None:
        t.add("WorkflowExecutionSignaled", {
            **signal, "identity": identity, "request_id": "", "external_workflow_id": "", "external_run_id": "",
        })
    t.add("WorkflowTaskScheduled", {"task_queue": start["task_queue"], "attempt": 1})
    if parent is not None:
        t.effects.append(outbound(parent["workflow_id"], "RecordChildExecutionStarted", {
            "run_id": parent["run_id"], "initiated_event_id": parent["initiated_event_id"], "child_run_id": run_id,
        }))
    return t


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


def outbound(workflow_id: str, kind: str, body: Record) -> tuple[str, Record]:
    """An effect the matching service produces to kadence.commands: a command for another execution."""
    commands = command_codec()
    command = {"workflow_id": workflow_id, "identity": HISTORY_IDENTITY, "command": (kind, body)}
    return ("OutboundCommand", {
        "workflow_id": workflow_id, "command": commands.encode(command), "schema_fingerprint": commands.fingerprint,
    })


def _answer(requester: Record, cause: str) -> tuple[str, Record]:
    """Tell the workflow that sent a command (a child start, a signal, a cancel request) whether it applied."""
    return outbound(requester["workflow_id"], "RecordExternalRequestOutcome", {
        "run_id": requester["run_id"], "initiated_event_id": requester["initiated_event_id"], "cause": cause,
    })


def rejection_answer(body: Record, reason: Rejected) -> tuple[str, Record] | None:
    """The effect that tells a requesting workflow its command was rejected, if a workflow sent it."""
    requester = body.get("initiated_by")
    return None if requester is None else _answer(requester, reason.cause)


def decide_signal_with_start(
    current: Execution | None, workflow_id: str, cmd: Record, identity: str,
    now_ms: int, source_partition: int, source_offset: int,
) -> Transition:
    """Signal the running run, or start a new one whose first event after the start is the signal.
    The start's request id names the whole request: sent again, it signals (or starts) once."""
    signal = {"signal_name": cmd["signal_name"], "input": cmd["signal_input"]}
    request_id = cmd["start"]["request_id"]
    if current is not None and current.status == RUNNING:
        if request_id and request_id == current.start_request_id:
            return Transition(current, now_ms)  # this request started the run, with its signal
        return decide(current, "SignalWorkflowExecution", {**signal, "run_id": "", "request_id": request_id}, identity, now_ms)
    if not cmd["signal_name"]:
        raise Rejected("SignalWithStartWorkflowExecution needs a signal_name")
    problem = payload_problem(cmd["signal_input"], "signal input")
    if problem:
        raise Rejected(problem)
    return decide_start(current, workflow_id, cmd["start"], identity, now_ms, source_partition, source_offset, signal)


# A worker's, or a client's async activity handle's, report on an activity attempt.
_ACTIVITY_REPORTS = {
    "RecordActivityTaskHeartbeat", "RespondActivityTaskCompleted", "RespondActivityTaskFailed", "RespondActivityTaskCanceled",
}
_CURRENT_RUN_COMMANDS = {
    "SignalWorkflowExecution", "RequestCancelWorkflowExecution", "TerminateWorkflowExecution", "UpdateWorkflowExecution",
}


def decide(ex: Execution, kind: str, cmd: Record, identity: str, now_ms: int) -> Transition:
    by_activity_id = kind in _ACTIVITY_REPORTS and cmd.get("activity_id")  # an async handle without a run id: the current run
    if cmd["run_id"] != ex.run_id and not ((kind in _CURRENT_RUN_COMMANDS or by_activity_id) and cmd["run_id"] == ""):
        raise Rejected(f"run {cmd['run_id']} is not the current run ({ex.run_id})", "WORKFLOW_NOT_FOUND")
    if ex.status != RUNNING:
        raise Rejected(f"workflow execution is {ex.status}", "WORKFLOW_CLOSED")
    handler = _HANDLERS.get(kind)
    if handler is None:
        raise Rejected(f"unknown command {kind}")
    return _within_history_limit(handler(ex, cmd, identity, now_ms))


def _within_history_limit(t: Transition) -> Transition:
    """A run whose history would pass a limit is terminated instead, with the reason."""
    ex = t.execution
    size = ex.history_bytes + payload_bytes([e["attributes"][1] for e in t.events + t.buffered])
    if t.next_event_id - 1 > MAX_HISTORY_EVENTS:
        exceeded = f"the {MAX_HISTORY_EVENTS}-event limit"
    elif size > MAX_HISTORY_BYTES:
        exceeded = f"the {MAX_HISTORY_BYTES // (1024 * 1024)} MB limit"
    else:
        return t
    terminated = Transition(ex, t.now_ms)
    terminated.flush_buffered()
    terminated.add("WorkflowExecutionTerminated", {
        "reason": f"history would exceed {exceeded}; continue-as-new long-running workflows",
        "details": [], "identity": "kadence-history",
    })
    return terminated


# Commands a client or another workflow sends: refused, with the reason, when their record would be
# too large. Refusing a worker's or the engine's command would leave the run stuck: the run ends.
_REFUSED_WHEN_TOO_LARGE = {
    "StartWorkflowExecution", "SignalWithStartWorkflowExecution", "SignalWorkflowExecution", "UpdateWorkflowExecution",
    "RequestCancelWorkflowExecution",
}


def within_record_limit(t: Transition, command: str) -> Transition:
    """Keep the HistoryBatch of `t` within one Kafka record, as Temporal keeps a transaction within
    its limits: a client's command that would not fit is refused; any other ends the run with the
    reason (Temporal terminates a run whose workflow task completion is too large to send). The
    buffered events are not written then: they may be what is too large."""
    size = t.record_bytes_bound
    if size <= MAX_RECORD_VALUE_BYTES:
        return t
    too_large = (
        f"{command} would write a history record of up to {size / 1e6:.1f} MB; "
        f"a kadence.history record holds at most {MAX_RECORD_VALUE_BYTES / 1e6:.1f} MB"
    )
    if command in _REFUSED_WHEN_TOO_LARGE:
        raise Rejected(too_large)
    return _terminated_as_too_large(t.execution, t.now_ms, f"{too_large}: keep large data out of workflow history "
                                    "(pass a reference to it) or spread it over more workflow tasks")


def _terminated_as_too_large(ex: Execution, now_ms: int, reason: str) -> Transition:
    """The run ends with the reason; its buffered events are left out (they may be what is too large)."""
    terminated = Transition(ex, now_ms)
    terminated.add("WorkflowExecutionTerminated", {"reason": reason, "details": [], "identity": HISTORY_IDENTITY})
    return terminated


def batch_bytes_bound(t: Transition) -> int:
    """An upper bound of the encoded HistoryBatch `t` makes, its workflow tasks' events left out
    (the history service drops those from a record that would not fit: the worker reads them)."""
    ex = t.execution
    size = encoded_bytes_bound([ex.workflow_id, ex.run_id, t.buffered, t.heartbeats]) + 1024
    for run in (t, t.next_run):
        if run is None:
            continue
        ids = encoded_bytes_bound([run.execution.workflow_id, run.execution.run_id]) + 64
        # Each event sets at most a few timers or drops them, or sends a task: ids and names.
        per_event = 4 * ids + encoded_bytes_bound([run.execution.task_queue, run.execution.workflow_type])
        size += encoded_bytes_bound(run.events) + per_event * len(run.events)
        size += encoded_bytes_bound([e for e in run.events if _repeated_by_effect(run.execution, e)])
        size += encoded_bytes_bound([
            (kind, {**effect, "history": []} if kind == "WorkflowTask" else effect) for kind, effect in run.effects
        ])
        if any(event_type(e) in CLOSE_STATUS for e in run.events):  # what a close cancels, drops and tells children
            size += sum(encoded_bytes_bound(a.task_queue) + 4 * ids for a in run.execution.activities.values())
            size += ids * len(run.execution.timers)
            size += sum(2 * encoded_bytes_bound(c.workflow_id) + ids + 256 for c in run.execution.children.values())
    return size


def _repeated_by_effect(ex: Execution, event: Record) -> bool:
    """Whether an effect of `event` repeats its content: the task or command it sends."""
    kind = event_type(event)
    return kind == "ActivityTaskScheduled" or kind in _OUTBOUND_FOR_INITIATED or (kind in CLOSE_STATUS and ex.parent is not None)


def _started_workflow_task(ex: Execution, scheduled_event_id: int, identity: str) -> WorkflowTaskState:
    wt = ex.workflow_task
    if wt is None or wt.scheduled_event_id != scheduled_event_id or wt.started_event_id == 0:
        raise Rejected(f"no started workflow task with scheduled_event_id={scheduled_event_id}")
    if wt.started_identity != identity:
        raise Rejected(f"workflow task {scheduled_event_id} was started by {wt.started_identity!r}, not {identity!r}")
    return wt


def _workflow_task_started(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    wt = ex.workflow_task
    if wt is None or wt.scheduled_event_id != cmd["scheduled_event_id"] or wt.started_event_id != 0:
        raise Rejected(f"no pending workflow task with scheduled_event_id={cmd['scheduled_event_id']}")
    t = Transition(ex, now_ms)
    # The worker's start time, which its workflow code already read as workflow.now(): a replay reads the same.
    t.add("WorkflowTaskStarted", {"scheduled_event_id": wt.scheduled_event_id, "identity": identity},
          event_time_ms=cmd.get("started_time_ms") or None)
    return t


def _workflow_task_completed(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    wt = _started_workflow_task(ex, cmd["scheduled_event_id"], identity)
    t = Transition(ex, now_ms)
    closes = any(kind in CLOSE_COMMANDS for kind, _ in cmd["commands"])
    if closes and ex.buffered:
        # New events arrived while the task ran: the workflow must see them before it may close.
        _fail_workflow_task(t, wt, "UNHANDLED_COMMAND", None, identity, next_attempt=1)
        return t
    problem = _invalid_commands(ex, cmd["commands"])
    if problem:
        cause, message = problem
        failure = {**_failure(message, "BadCommandAttributes"), "non_retryable": True}
        _fail_workflow_task(t, wt, cause, failure, identity, next_attempt=wt.attempt + 1)
        return t
    completed_id = t.add("WorkflowTaskCompleted", {
        "scheduled_event_id": wt.scheduled_event_id, "started_event_id": wt.started_event_id, "identity": identity,
    })
    for kind, attrs in cmd["commands"]:
        if kind == "ScheduleActivityTask":
            t.add("ActivityTaskScheduled", {
                **attrs, "task_queue": attrs["task_queue"] or ex.task_queue,
                # As Temporal: an attempt without its own limit is bounded by the whole schedule-to-close.
                "start_to_close_timeout_ms": attrs["start_to_close_timeout_ms"] or attrs["schedule_to_close_timeout_ms"],
                "workflow_task_completed_event_id": completed_id,
            })
        elif kind == "RequestCancelActivityTask":
            _request_cancel_activity(t, attrs["scheduled_event_id"], completed_id)
        elif kind in _RECORDED_AS_GIVEN:
            t.add(EVENT_FOR_COMMAND[kind], {**attrs, "workflow_task_completed_event_id": completed_id})
        elif kind == "StartChildWorkflowExecution":
            t.add("StartChildWorkflowExecutionInitiated", {
                "workflow_id": attrs["workflow_id"], "workflow_type": attrs["workflow_type"],
                "task_queue": attrs["task_queue"] or ex.task_queue, "input": attrs["input"],
                "workflow_execution_timeout_ms": attrs["execution_timeout_ms"], "workflow_run_timeout_ms": attrs["run_timeout_ms"],
                "workflow_task_timeout_ms": attrs["workflow_task_timeout_ms"], "id_reuse_policy": attrs["id_reuse_policy"],
                "parent_close_policy": attrs["parent_close_policy"], "search_attributes": attrs["search_attributes"],
                "workflow_task_completed_event_id": completed_id,
            })
        elif kind == "StartTimer":
            t.add("TimerStarted", {**attrs, "workflow_task_completed_event_id": completed_id})
        elif kind == "CancelTimer":
            t.add("TimerCanceled", {
                "timer_id": attrs["timer_id"], "started_event_id": ex.timers[attrs["timer_id"]],
                "workflow_task_completed_event_id": completed_id,
            })
        elif kind == "ContinueAsNewWorkflowExecution":
            _continue_as_new(t, attrs, completed_id, identity)
            return t
        elif kind in CLOSE_COMMANDS:
            _close(t, CLOSE_COMMANDS[kind], {**attrs, "workflow_task_completed_event_id": completed_id})
            return t
    if ex.buffered:
        t.flush_buffered()
        t.add("WorkflowTaskScheduled", {"task_queue": ex.task_queue, "attempt": 1})
    return t


# Commands whose event carries their attributes as they are (plus the completing task's event id).
_RECORDED_AS_GIVEN = {
    "UpsertWorkflowSearchAttributes", "RecordMarker", "AcceptWorkflowUpdate", "RejectWorkflowUpdate", "CompleteWorkflowUpdate",
    "SignalExternalWorkflowExecution", "RequestCancelExternalWorkflowExecution",
}
# The state an update must be in for each command, and the state it leaves (None: ended).
_UPDATE_TRANSITIONS = {
    "AcceptWorkflowUpdate": ("admitted", "accepted"),
    "RejectWorkflowUpdate": ("admitted", None),
    "CompleteWorkflowUpdate": ("accepted", None),
}

_BAD_ATTRIBUTES_CAUSE = {
    "RecordMarker": "BAD_RECORD_MARKER_ATTRIBUTES",
    "AcceptWorkflowUpdate": "BAD_UPDATE_WORKFLOW_EXECUTION_MESSAGE",
    "RejectWorkflowUpdate": "BAD_UPDATE_WORKFLOW_EXECUTION_MESSAGE",
    "CompleteWorkflowUpdate": "BAD_UPDATE_WORKFLOW_EXECUTION_MESSAGE",
    "StartChildWorkflowExecution": "BAD_START_CHILD_EXECUTION_ATTRIBUTES",
    "SignalExternalWorkflowExecution": "BAD_SIGNAL_WORKFLOW_EXECUTION_ATTRIBUTES",
    "RequestCancelExternalWorkflowExecution": "BAD_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_ATTRIBUTES",
    "ScheduleActivityTask": "BAD_SCHEDULE_ACTIVITY_ATTRIBUTES",
    "StartTimer": "BAD_START_TIMER_ATTRIBUTES",
    "CancelTimer": "BAD_CANCEL_TIMER_ATTRIBUTES",
    "RequestCancelActivityTask": "BAD_REQUEST_CANCEL_ACTIVITY_ATTRIBUTES",
    "UpsertWorkflowSearchAttributes": "BAD_SEARCH_ATTRIBUTES",
    "ContinueAsNewWorkflowExecution": "BAD_CONTINUE_AS_NEW_ATTRIBUTES",
    "CompleteWorkflowExecution": "BAD_COMPLETE_WORKFLOW_EXECUTION_ATTRIBUTES",
    "FailWorkflowExecution": "BAD_FAIL_WORKFLOW_EXECUTION_ATTRIBUTES",
    "CancelWorkflowExecution": "BAD_CANCEL_WORKFLOW_EXECUTION_ATTRIBUTES",
}


def _request_cancel_activity(t: Transition, scheduled_event_id: int, completed_id: int) -> None:
    """An attempt not started is canceled at once; a started one hears of it through its worker."""
    requested_id = t.add("ActivityTaskCancelRequested", {
        "scheduled_event_id": scheduled_event_id, "workflow_task_completed_event_id": completed_id,
    })
    activity = t.execution.activities[scheduled_event_id]
    if not activity.started_event_id:
        t.add("ActivityTaskCanceled", {
            "scheduled_event_id": scheduled_event_id, "started_event_id": 0,
            "latest_cancel_requested_event_id": requested_id, "details": [], "identity": "",
        })


def _continue_as_new(t: Transition, attrs: Record, completed_id: int, identity: str) -> None:
    """Close the run and start its successor in the same transition (one record: atomic)."""
    ex = t.execution
    following = Execution(
        workflow_id=ex.workflow_id, run_id=continued_run_id(ex.run_id, completed_id),
        workflow_type=attrs["workflow_type"] or ex.workflow_type, task_queue=attrs["task_queue"] or ex.task_queue,
    )
    t.add("WorkflowExecutionContinuedAsNew", {
        **attrs, "new_execution_run_id": following.run_id, "workflow_type": following.workflow_type,
        "task_queue": following.task_queue, "workflow_task_completed_event_id": completed_id,
    })
    started = _started(ex)
    t.next_run = Transition(following, t.now_ms)
    t.next_run.add("WorkflowExecutionStarted", {
        "workflow_type": following.workflow_type, "task_queue": following.task_queue, "input": attrs["input"],
        "request_id": "", "identity": identity,
        # As Temporal: what the command leaves unset is the current run's, and the execution
        # timeout bounds the whole chain (the new run gets what is left of it).
        "workflow_task_timeout_ms": attrs["workflow_task_timeout_ms"] or ex.workflow_task_timeout_ms,
        "workflow_execution_timeout_ms": _execution_time_left_ms(ex, t.now_ms),
        "workflow_run_timeout_ms": attrs["run_timeout_ms"] or started.get("workflow_run_timeout_ms", 0),
        "continued_execution_run_id": ex.run_id, "search_attributes": _search_attributes_now(ex, t), **_parent_attributes(ex.parent),
        "first_workflow_task_backoff_ms": 0, "cron_schedule": _started(ex).get("cron_schedule", ""), "initiator": "WORKFLOW",
        **_chain_attributes(ex),
    })
    t.next_run.add("WorkflowTaskScheduled", {"task_queue": following.task_queue, "attempt": 1})


def _execution_time_left_ms(ex: Execution, now_ms: int) -> int:
    """What the run's execution timeout leaves for the run it continues as (0: none; at least 1 ms)."""
    timeout = _started(ex).get("workflow_execution_timeout_ms") or 0
    if not timeout:
        return 0
    return max(1, timeout - (now_ms - ex.history[0]["event_time_ms"]))


def _search_attributes_now(ex: Execution, t: Transition) -> Record:
    """The run's search attributes: those it started with, as its upserts (this transition's too) left them."""
    values = dict(_started(ex).get("search_attributes") or {})
    for event in ex.history + t.events:
        if event_type(event) == "UpsertWorkflowSearchAttributes":
            values.update(attributes(event)["search_attributes"])
    return values


# A cron run that ends so is followed by the next; one canceled or terminated ends the schedule.
_CRON_CONTINUES = {"WorkflowExecutionCompleted", "WorkflowExecutionFailed", "WorkflowExecutionTimedOut"}


def _close(t: Transition, kind: str, attrs: Record) -> None:
    """Close the run; a run of a cron schedule that completed, failed or timed out starts the next
    run in the same record, its first workflow task at the schedule's next time (as Temporal)."""
    ex = t.execution
    started = _started(ex)
    cron_schedule = started.get("cron_schedule", "")
    if not cron_schedule or kind not in _CRON_CONTINUES:
        t.add(kind, {**attrs, "new_execution_run_id": ""})
        return
    following = Execution(
        workflow_id=ex.workflow_id, run_id=continued_run_id(ex.run_id, t.next_event_id), workflow_type=ex.workflow_type,
        task_queue=ex.task_queue,
    )
    t.add(kind, {**attrs, "new_execution_run_id": following.run_id})
    t.next_run = Transition(following, t.now_ms)
    t.next_run.add("WorkflowExecutionStarted", {
        **started, "request_id": "", "continued_execution_run_id": ex.run_id, "initiator": "CRON_SCHEDULE",
        "first_workflow_task_backoff_ms": parse_cron(cron_schedule).next_after_ms(t.now_ms) - t.now_ms,
    })
    t.next_run.add("WorkflowTaskScheduled", {"task_queue": following.task_queue, "attempt": 1})


def _chain_attributes(ex: Execution) -> Record:
    """What the run that continues `ex` keeps of its chain: the first run and the root."""
    started = _started(ex)
    root_workflow_id, root_run_id = _root(ex)
    return {
        "first_execution_run_id": started.get("first_execution_run_id") or ex.run_id,
        "root_workflow_id": root_workflow_id, "root_run_id": root_run_id,
    }


def _root(ex: Execution) -> tuple[str, str]:
    """The root of a run's chain of parents (the run itself in histories written before roots were)."""
    started = _started(ex)
    return started.get("root_workflow_id") or ex.workflow_id, started.get("root_run_id") or ex.run_id


def _started(ex: Execution) -> Record:
    """The run's WorkflowExecutionStarted attributes (a running run holds its whole history)."""
    return attributes(ex.history[0]) if ex.history else {}


def _invalid_commands(ex: Execution, commands: list[tuple[str, Record]]) -> tuple[str, str] | None:
    """The first command that cannot apply, as (Temporal's WorkflowTaskFailedCause, message)."""
    timers = set(ex.timers)
    updates = dict(ex.updates)
    counts = collections.Counter(kind for kind, _ in commands)
    if len(ex.activities) + counts["ScheduleActivityTask"] > MAX_PENDING_ACTIVITIES:
        return "PENDING_ACTIVITIES_LIMIT_EXCEEDED", f"at most {MAX_PENDING_ACTIVITIES} activities may be pending"
    if len(ex.children) + counts["StartChildWorkflowExecution"] > MAX_PENDING_CHILDREN:
        return "PENDING_CHILD_WORKFLOWS_LIMIT_EXCEEDED", f"at most {MAX_PENDING_CHILDREN} child workflows may be pending"
    external = counts["SignalExternalWorkflowExecution"] + counts["RequestCancelExternalWorkflowExecution"]
    if len(ex.external_requests) + external > MAX_PENDING_EXTERNAL_REQUESTS:
        return "PENDING_SIGNALS_LIMIT_EXCEEDED", (
            f"at most {MAX_PENDING_EXTERNAL_REQUESTS} signals and cancel requests to other workflows may await their answer"
        )
    for kind, attrs in commands:
        problem = name_problem(ex.workflow_id, attrs) or payload_problem(attrs, kind)
        if problem:
            return _BAD_ATTRIBUTES_CAUSE[kind], problem
        if kind == "ScheduleActivityTask":
            if not attrs["activity_type"]:
                return "BAD_SCHEDULE_ACTIVITY_ATTRIBUTES", "ScheduleActivityTask needs an activity_type"
            if attrs["start_to_close_timeout_ms"] <= 0 and attrs["schedule_to_close_timeout_ms"] <= 0:
                return "BAD_SCHEDULE_ACTIVITY_ATTRIBUTES", (
                    f"activity {attrs['activity_type']}: set start_to_close_timeout or schedule_to_close_timeout"
                )
        elif kind == "StartTimer":
            if attrs["start_to_fire_timeout_ms"] <= 0:
                return "BAD_START_TIMER_ATTRIBUTES", f"timer {attrs['timer_id']}: start_to_fire_timeout must be positive"
            if attrs["timer_id"] in timers:
                return "BAD_START_TIMER_ATTRIBUTES", f"timer {attrs['timer_id']} is already pending"
            timers.add(attrs["timer_id"])
        elif kind == "CancelTimer" and attrs["timer_id"] not in ex.timers:
            return "BAD_CANCEL_TIMER_ATTRIBUTES", f"timer {attrs['timer_id']} is not pending"
        elif kind == "RequestCancelActivityTask" and attrs["scheduled_event_id"] not in ex.activities:
            return "BAD_REQUEST_CANCEL_ACTIVITY_ATTRIBUTES", f"activity {attrs['scheduled_event_id']} is not pending"
        elif kind in _UPDATE_TRANSITIONS:
            needed, leaves = _UPDATE_TRANSITIONS[kind]
            if updates.get(attrs["update_id"]) != needed:
                return _BAD_ATTRIBUTES_CAUSE[kind], f"{kind}: update {attrs['update_id']} is not {needed}"
            if leaves is None:
                updates.pop(attrs["update_id"])
            else:
                updates[attrs["update_id"]] = leaves
        elif kind in _REQUIRED_FIELDS and (missing := [f for f in _REQUIRED_FIELDS[kind] if not attrs[f]]):
            return _BAD_ATTRIBUTES_CAUSE[kind], f"{kind} needs {' and '.join(missing)}"
    return None


_REQUIRED_FIELDS = {
    "RecordMarker": ("marker_name",),
    "StartChildWorkflowExecution": ("workflow_id", "workflow_type"),
    "SignalExternalWorkflowExecution": ("workflow_id", "signal_name"),
    "RequestCancelExternalWorkflowExecution": ("workflow_id",),
}


def _workflow_task_failed(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    wt = _started_workflow_task(ex, cmd["scheduled_event_id"], identity)
    if cmd["cause"] == WORKFLOW_TASK_TOO_LARGE:  # every attempt would fail alike
        return _terminated_as_too_large(ex, now_ms, cmd["failure"]["message"][:10_000])
    t = Transition(ex, now_ms)
    _fail_workflow_task(t, wt, cmd["cause"], cmd["failure"], identity, next_attempt=wt.attempt + 1)
    return t


def _fail_workflow_task(
    t: Transition, wt: WorkflowTaskState, cause: str, failure: Record | None, identity: str, next_attempt: int,
) -> None:
    t.add("WorkflowTaskFailed", {
        "scheduled_event_id": wt.scheduled_event_id, "started_event_id": wt.started_event_id,
        "cause": cause, "failure": failure, "identity": identity,
    })
    _retry_workflow_task(t, next_attempt)


def _retry_workflow_task(t: Transition, next_attempt: int) -> None:
    t.flush_buffered()
    t.add("WorkflowTaskScheduled", {"task_queue": t.execution.task_queue, "attempt": next_attempt})


def _activity_task_started(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    activity = ex.activities.get(cmd["scheduled_event_id"])
    if activity is None or activity.attempt != cmd["attempt"] or activity.started_event_id != 0:
        raise Rejected(f"no pending activity attempt scheduled_event_id={cmd['scheduled_event_id']} attempt={cmd['attempt']}")
    t = Transition(ex, now_ms)
    t.add("ActivityTaskStarted", {"scheduled_event_id": activity.scheduled_event_id, "attempt": activity.attempt, "identity": identity})
    return t


def _started_activity(ex: Execution, cmd: Record, identity: str) -> ActivityState:
    """The started attempt a report is for. A worker's report counts only from the worker that
    started the attempt; a client's, by task token or activity id, from anyone (async completion)."""
    if cmd.get("activity_id"):
        return _started_activity_by_id(ex, cmd["activity_id"])
    if cmd.get("task_token"):
        return _started_activity_by_token(ex, cmd["task_token"])
    activity = ex.activities.get(cmd["scheduled_event_id"])
    if activity is None or activity.attempt != cmd["attempt"] or activity.started_event_id == 0:
        raise Rejected(f"no started activity attempt scheduled_event_id={cmd['scheduled_event_id']} attempt={cmd['attempt']}")
    if activity.started_identity != identity:
        raise Rejected(f"activity attempt was started by {activity.started_identity!r}, not {identity!r}")
    return activity


def _started_activity_by_id(ex: Execution, activity_id: str) -> ActivityState:
    for activity in ex.activities.values():
        if activity.activity_id == activity_id:
            if activity.started_event_id == 0:
                raise Rejected(f"activity {activity_id!r} of run {ex.run_id} has no started attempt "
                               f"(attempt {activity.attempt} waits for a worker)", "ACTIVITY_NOT_FOUND")
            return activity
    raise Rejected(f"run {ex.run_id} has no pending activity {activity_id!r} (it completed, failed or timed out, "
                   "or was never scheduled)", "ACTIVITY_NOT_FOUND")


def _started_activity_by_token(ex: Execution, token_bytes: bytes) -> ActivityState:
    try:
        token = TaskToken.decode(token_bytes)
    except ValueError as exc:
        raise Rejected(str(exc)) from None
    if (token.workflow_id, token.run_id) != (ex.workflow_id, ex.run_id):
        raise Rejected(f"the task token names run {token.run_id} of {token.workflow_id}, not this one", "ACTIVITY_NOT_FOUND")
    activity = ex.activities.get(token.scheduled_event_id)
    if activity is None or activity.attempt != token.attempt or activity.started_event_id == 0:
        now = "is over" if activity is None else f"is over (attempt {activity.attempt} is current)"
        raise Rejected(f"stale task token: attempt {token.attempt} of activity {token.activity_id!r} "
                       f"(scheduled_event_id={token.scheduled_event_id}) {now}", "ACTIVITY_NOT_FOUND")
    return activity


def _activity_task_heartbeat(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    activity = _started_activity(ex, cmd, identity)
    problem = payload_problem(cmd["details"], "heartbeat details")
    if problem:
        raise Rejected(problem)
    t = Transition(ex, now_ms)
    t.heartbeats.append({
        "scheduled_event_id": activity.scheduled_event_id, "attempt": activity.attempt,
        "details": cmd["details"], "recorded_at_ms": now_ms,
    })
    if activity.cancel_requested_event_id:  # told again, in case the first notice missed its worker
        t.effects.append(("ActivityCancellation", activity_cancellation_effect(activity)))
    if activity.heartbeat_timeout_ms:  # re-armed: the same timer id, a later fire time
        fire_at = now_ms + activity.heartbeat_timeout_ms
        t.effects.append(_timer(ex, "ACTIVITY_HEARTBEAT", fire_at, activity.scheduled_event_id, activity.attempt))
    return t


def _activity_task_canceled(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    activity = _started_activity(ex, cmd, identity)
    if not activity.cancel_requested_event_id:
        raise Rejected("activity cancellation was not requested")
    t = Transition(ex, now_ms)
    t.add_workflow_visible("ActivityTaskCanceled", {
        "scheduled_event_id": activity.scheduled_event_id, "started_event_id": activity.started_event_id,
        "latest_cancel_requested_event_id": activity.cancel_requested_event_id, "details": cmd["details"], "identity": identity,
    })
    return t


def _activity_task_completed(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    activity = _started_activity(ex, cmd, identity)
    too_large = payload_problem(cmd["result"], f"result of activity {activity.activity_type}")
    if too_large:  # as Temporal: the attempt fails for good, and the workflow hears why
        failure = {**_failure(too_large, "BlobSizeLimitError"), "non_retryable": True}
        return _activity_task_failed(ex, {**cmd, "failure": failure}, identity, now_ms)
    t = Transition(ex, now_ms)
    t.add_workflow_visible("ActivityTaskCompleted", {
        "scheduled_event_id": activity.scheduled_event_id, "started_event_id": activity.started_event_id,
        "result": cmd["result"], "identity": identity,
    })
    return t


def _activity_task_failed(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    activity = _started_activity(ex, cmd, identity)
    problem = payload_problem(cmd["failure"], "activity failure")
    if problem:  # keep the failure, drop what is too large to keep
        cmd = {**cmd, "failure": {**cmd["failure"], "details": [], "stack_trace": "", "cause": None,
                                  "message": f"{cmd['failure']['message'][:1000]} ({problem}; details dropped)"}}
    t = Transition(ex, now_ms)
    retry_state = activity_retry_state(activity, cmd["failure"], now_ms)
    attrs = {
        "scheduled_event_id": activity.scheduled_event_id, "started_event_id": activity.started_event_id,
        "failure": cmd["failure"], "retry_state": retry_state, "identity": identity,
    }
    if retry_state == "IN_PROGRESS":
        t.add("ActivityTaskFailed", attrs)
    else:
        t.add_workflow_visible("ActivityTaskFailed", attrs)
    return t


def _timeout_fired(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    """A timer's firing, and the timer dropped in the same record: the timer service, reading the
    log again after a restart or a rebalance, forgets the timer there rather than fire it again. A
    timer the transition sets again under the same id (a re-dispatch) comes after the drop and stands."""
    t = _fire(ex, cmd, now_ms)
    t.effects.insert(0, ("DropTimer", {"timer_id": cmd["timer_id"]}))
    return t


def _fire(ex: Execution, cmd: Record, now_ms: int) -> Transition:
    kind = cmd["kind"]
    t = Transition(ex, now_ms)
    if kind == "WORKFLOW_RUN_TIMEOUT":
        t.flush_buffered()
        _close(t, "WorkflowExecutionTimedOut", {"retry_state": "TIMEOUT"})
        return t
    if kind == "WORKFLOW_TASK_START_TO_CLOSE":
        wt = ex.workflow_task
        if wt is None or wt.scheduled_event_id != cmd["scheduled_event_id"] or not wt.started_event_id:
            raise Rejected("stale workflow task timeout")
        t.add("WorkflowTaskTimedOut", {
            "scheduled_event_id": wt.scheduled_event_id, "started_event_id": wt.started_event_id, "timeout_type": "START_TO_CLOSE",
        })
        _retry_workflow_task(t, wt.attempt + 1)
        return t
    if kind == "USER_TIMER":
        timer = next((tid for tid, started in ex.timers.items() if started == cmd["scheduled_event_id"]), None)
        if timer is None:
            raise Rejected("stale user timer")
        t.add_workflow_visible("TimerFired", {"timer_id": timer, "started_event_id": cmd["scheduled_event_id"]})
        return t
    if kind == "WORKFLOW_TASK_RETRY":
        wt = ex.workflow_task
        if wt is None or wt.scheduled_event_id != cmd["scheduled_event_id"] or wt.attempt != cmd["attempt"] or wt.started_event_id:
            raise Rejected("stale workflow task retry timer")
        t.effects.extend(_dispatch_workflow_task(ex, wt, now_ms))
        if _waited_ms(ex, wt, now_ms) >= _first_dispatch_delay_ms(ex, wt) + TASK_REDISPATCH_MS:
            t.redispatch = Redispatch("workflow", wt.scheduled_event_id, _waited_ms(ex, wt, now_ms))
        return t
    activity = ex.activities.get(cmd["scheduled_event_id"])
    if activity is None or (kind != "ACTIVITY_SCHEDULE_TO_CLOSE" and activity.attempt != cmd["attempt"]):
        raise Rejected(f"stale {kind} timer")
    if kind == "ACTIVITY_RETRY":  # the backoff before this attempt ended, or no worker started it yet
        if activity.started_event_id:
            raise Rejected("activity attempt already started")
        t.effects.extend(_dispatch_activity_task(ex, activity, now_ms))
        if now_ms - activity.dispatch_due_ms >= TASK_REDISPATCH_MS:
            t.redispatch = Redispatch("activity", activity.scheduled_event_id, now_ms - activity.dispatch_due_ms)
        return t
    if kind == "ACTIVITY_SCHEDULE_TO_START":
        if activity.started_event_id:
            raise Rejected("activity attempt already started")
        # As Temporal: not retried, another attempt would wait in the same queue.
        failure = {**_failure("activity ScheduleToStart timeout", ""), "timeout_type": "SCHEDULE_TO_START"}
        t.add_workflow_visible("ActivityTaskTimedOut", {
            "scheduled_event_id": activity.scheduled_event_id, "started_event_id": 0, "failure": failure, "retry_state": "TIMEOUT",
        })
        return t
    if kind == "ACTIVITY_SCHEDULE_TO_CLOSE":
        failure = {**_failure("activity ScheduleToClose timeout", ""), "timeout_type": "SCHEDULE_TO_CLOSE"}
        t.add_workflow_visible("ActivityTaskTimedOut", {
            "scheduled_event_id": activity.scheduled_event_id, "started_event_id": activity.started_event_id,
            "failure": failure, "retry_state": "TIMEOUT",
        })
        return t
    if not activity.started_event_id:
        raise Rejected("activity attempt not started")
    if kind == "ACTIVITY_HEARTBEAT" and activity.last_heartbeat_ms + activity.heartbeat_timeout_ms > now_ms:
        raise Rejected("a heartbeat arrived since the heartbeat timer was set")
    timeout_type = "HEARTBEAT" if kind == "ACTIVITY_HEARTBEAT" else "START_TO_CLOSE"
    failure = {**_failure(f"activity {timeout_type} timeout", ""), "timeout_type": timeout_type,
               "details": activity.heartbeat["details"] if activity.heartbeat else []}
    retry_state = activity_retry_state(activity, failure, now_ms)
    attrs = {
        "scheduled_event_id": activity.scheduled_event_id, "started_event_id": activity.started_event_id,
        "failure": failure, "retry_state": retry_state,
    }
    if retry_state == "IN_PROGRESS":
        t.add("ActivityTaskTimedOut", attrs)
    else:
        t.add_workflow_visible("ActivityTaskTimedOut", attrs)
    return t


def _signaled(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    if not cmd["signal_name"]:
        raise Rejected("SignalWorkflowExecution needs a signal_name")
    problem = name_problem(ex.workflow_id, cmd) or payload_problem(cmd["input"], "signal input")
    if problem:
        raise Rejected(problem)
    t = Transition(ex, now_ms)
    if cmd["request_id"] and cmd["request_id"] in ex.signal_request_ids:
        return t  # the same signal again (a client's retry, a relay's redelivery): applied once
    if sum(event_type(e) == "WorkflowExecutionSignaled" for e in ex.buffered) >= MAX_PENDING_SIGNALS:
        raise Rejected(f"{MAX_PENDING_SIGNALS} signals already wait for the workflow to take them; try again later")
    requester = cmd.get("initiated_by")
    t.add_workflow_visible("WorkflowExecutionSignaled", {
        "signal_name": cmd["signal_name"], "input": cmd["input"], "identity": identity, "request_id": cmd["request_id"],
        "external_workflow_id": requester["workflow_id"] if requester else "", "external_run_id": requester["run_id"] if requester else "",
    })
    if requester is not None:
        t.effects.append(_answer(requester, ""))
    return t


def _cancel_requested(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    t = Transition(ex, now_ms)
    requester = cmd.get("initiated_by")
    if not ex.cancel_requested:  # asking twice is answered, not recorded twice
        t.add_workflow_visible("WorkflowExecutionCancelRequested", {
            "cause": cmd["reason"], "identity": identity, "external_workflow_id": requester["workflow_id"] if requester else "",
            "external_run_id": requester["run_id"] if requester else "",
            "external_initiated_event_id": requester["initiated_event_id"] if requester else 0,
        })
    if requester is not None:
        t.effects.append(_answer(requester, ""))
    return t


def _update_requested(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    if not cmd["update_id"] or not cmd["name"]:
        raise Rejected("UpdateWorkflowExecution needs an update_id and a name")
    problem = name_problem(ex.workflow_id, cmd) or payload_problem(cmd["args"], "update arguments")
    if problem:
        raise Rejected(problem)
    t = Transition(ex, now_ms)
    if cmd["update_id"] not in ex.update_ids:  # the same update again: answered, applied once
        t.add_workflow_visible("WorkflowExecutionUpdateAdmitted", {
            "update_id": cmd["update_id"], "name": cmd["name"], "args": cmd["args"], "identity": identity,
        })
    return t


def _child_started(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    child = ex.children.get(cmd["initiated_event_id"])
    if child is None or child.run_id:
        raise Rejected(f"no child workflow awaits its start with initiated_event_id={cmd['initiated_event_id']}")
    t = Transition(ex, now_ms)
    _record_child_started(t, child, cmd["child_run_id"])
    return t


def _record_child_started(t: Transition, child: ChildState, run_id: str) -> None:
    t.add_workflow_visible("ChildWorkflowExecutionStarted", {
        "workflow_id": child.workflow_id, "run_id": run_id, "workflow_type": child.workflow_type,
        "initiated_event_id": child.initiated_event_id,
    })


def _child_closed(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    child = ex.children.get(cmd["initiated_event_id"])
    if child is None:
        raise Rejected(f"no pending child workflow with initiated_event_id={cmd['initiated_event_id']}")
    status = cmd["status"]
    if status not in CHILD_RESULT_FOR_STATUS or (status == "Failed" and cmd["failure"] is None):
        raise Rejected(f"child close status {status!r}: expected one of {sorted(CHILD_RESULT_FOR_STATUS)}, Failed with its failure")
    t = Transition(ex, now_ms)
    if not child.run_id:  # the start's answer is missing: the close implies it
        _record_child_started(t, child, cmd["child_run_id"])
    attrs: Record = {
        "workflow_id": child.workflow_id, "run_id": cmd["child_run_id"], "workflow_type": child.workflow_type,
        "initiated_event_id": child.initiated_event_id, "started_event_id": child.started_event_id,
    }
    if status == "Completed":
        attrs["result"] = cmd["result"]
    elif status == "Failed":
        attrs.update(failure=cmd["failure"], retry_state=cmd["retry_state"])
    elif status == "Canceled":
        attrs["details"] = cmd["details"]
    elif status == "TimedOut":
        attrs["retry_state"] = cmd["retry_state"]
    t.add_workflow_visible(CHILD_RESULT_FOR_STATUS[status], attrs)
    return t


# The cause a parent records when its command did not apply at the target.
_START_CHILD_FAILED_CAUSE = {"WORKFLOW_ALREADY_STARTED": "WORKFLOW_ALREADY_EXISTS"}
_EXTERNAL_FAILED_CAUSE = {
    "WORKFLOW_NOT_FOUND": "EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND", "WORKFLOW_CLOSED": "EXTERNAL_WORKFLOW_EXECUTION_NOT_FOUND",
}


def _external_outcome(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    initiated, cause = cmd["initiated_event_id"], cmd["cause"]
    t = Transition(ex, now_ms)
    child = ex.children.get(initiated)
    if child is not None and not child.run_id and cause:
        t.add_workflow_visible("StartChildWorkflowExecutionFailed", {
            "workflow_id": child.workflow_id, "workflow_type": child.workflow_type,
            "cause": _START_CHILD_FAILED_CAUSE.get(cause, cause), "initiated_event_id": initiated,
        })
        return t
    request = ex.external_requests.get(initiated)
    if request is None:
        raise Rejected(f"no request awaits an answer with initiated_event_id={initiated}")
    attrs: Record = {"workflow_id": request.workflow_id, "run_id": request.run_id, "initiated_event_id": initiated}
    if cause:
        attrs["cause"] = _EXTERNAL_FAILED_CAUSE.get(cause, cause)
    t.add_workflow_visible(_EXTERNAL_ANSWER_EVENT[(request.kind, not cause)], attrs)
    return t


def _terminated(ex: Execution, cmd: Record, identity: str, now_ms: int) -> Transition:
    problem = payload_problem(cmd["details"], "termination details")
    if problem:
        raise Rejected(problem)
    t = Transition(ex, now_ms)
    t.flush_buffered()  # what arrived is kept in the history; nothing runs after this
    t.add("WorkflowExecutionTerminated", {"reason": cmd["reason"], "details": cmd["details"], "identity": identity})
    return t


_HANDLERS = {
    "RequestCancelWorkflowExecution": _cancel_requested,
    "TerminateWorkflowExecution": _terminated,
    "SignalWorkflowExecution": _signaled,
    "RecordWorkflowTaskStarted": _workflow_task_started,
    "RespondWorkflowTaskCompleted": _workflow_task_completed,
    "RespondWorkflowTaskFailed": _workflow_task_failed,
    "RecordActivityTaskStarted": _activity_task_started,
    "RecordActivityTaskHeartbeat": _activity_task_heartbeat,
    "RespondActivityTaskCanceled": _activity_task_canceled,
    "RespondActivityTaskCompleted": _activity_task_completed,
    "RespondActivityTaskFailed": _activity_task_failed,
    "TimeoutFired": _timeout_fired,
    "RecordChildExecutionStarted": _child_started,
    "UpdateWorkflowExecution": _update_requested,
    "RecordChildExecutionClosed": _child_closed,
    "RecordExternalRequestOutcome": _external_outcome,
}


def _failure(message: str, failure_type: str) -> Record:
    return failure_record(message, failure_type, "kadence-history")


# ---- retry policy ------------------------------------------------------------------------------


def activity_retry_state(activity: ActivityState, failure: Record, now_ms: int) -> str:
    policy = activity.retry_policy or {}
    if failure["non_retryable"] or failure["type"] in policy.get("non_retryable_error_types", ()):
        return "NON_RETRYABLE_FAILURE"
    maximum_attempts = policy.get("maximum_attempts") or 0
    if maximum_attempts and activity.attempt >= maximum_attempts:
        return "MAXIMUM_ATTEMPTS_REACHED"
    if activity.schedule_to_close_timeout_ms:
        next_start = now_ms + next_attempt_backoff_ms(activity, failure)
        if next_start >= activity.scheduled_time_ms + activity.schedule_to_close_timeout_ms:
            return "TIMEOUT"
    return "IN_PROGRESS"


def next_attempt_backoff_ms(activity: ActivityState, failure: Record) -> int:
    """The wait before the attempt after the current one failed with `failure`: the delay its
    ApplicationError(next_retry_delay=...) asked for, else the retry policy's backoff."""
    asked = failure.get("next_retry_delay_ms")
    return max(0, asked) if asked is not None else retry_backoff_ms(activity.retry_policy, activity.attempt)


# ---- effects: derived from the transition once it is applied -----------------------------------


def timer_id(ex: Execution, kind: str, scheduled_event_id: int, attempt: int) -> str:
    return f"{ex.run_id}/{kind}/{scheduled_event_id}/{attempt}"


def workflow_task_effect(ex: Execution, wt: WorkflowTaskState) -> Record:
    """The task carries the events after the previous started workflow task's WorkflowTaskScheduled:
    what a worker that ran that task (and caches the run) lacks; a worker without the run reads the
    earlier events from the read model. So a task's size follows what happened since the previous
    one, not the whole history (Temporal sends a sticky worker the same part)."""
    known = 0  # the last event a worker that ran the previous task has
    for event in reversed(ex.history):
        if event_type(event) == "WorkflowTaskStarted" and event["event_id"] < wt.scheduled_event_id:
            known = attributes(event)["scheduled_event_id"]
            break
    history = []
    for event in reversed(ex.history):
        if event["event_id"] <= known:
            break
        if event["event_id"] <= wt.scheduled_event_id:
            history.append(event)
    history.reverse()
    return {
        "task_queue": ex.task_queue, "workflow_type": ex.workflow_type,
        "scheduled_event_id": wt.scheduled_event_id, "attempt": wt.attempt, "first_event_id": known + 1, "history": history,
    }


def _dispatch_workflow_task(ex: Execution, wt: WorkflowTaskState, now_ms: int) -> list[tuple[str, Record]]:
    """The task for a worker, and the timer that dispatches it again if no worker starts it (the
    retry timer: when it fires, a task still not started is dispatched again)."""
    return [("WorkflowTask", workflow_task_effect(ex, wt)),
            _timer(ex, "WORKFLOW_TASK_RETRY", now_ms + _redispatch_delay_ms(_waited_ms(ex, wt, now_ms)), wt.scheduled_event_id, wt.attempt)]


def _dispatch_activity_task(ex: Execution, activity: ActivityState, now_ms: int) -> list[tuple[str, Record]]:
    """The attempt's task for a worker, and its retry timer, which dispatches it again if no worker
    starts it (as a workflow task's)."""
    delay = _redispatch_delay_ms(now_ms - activity.dispatch_due_ms)
    return [("ActivityTask", activity_task_effect(ex, activity)),
            _timer(ex, "ACTIVITY_RETRY", now_ms + delay, activity.scheduled_event_id, activity.attempt)]


def _redispatch_delay_ms(waited_ms: int) -> int:
    """A task no worker started goes out again 10 s after its dispatch, then after as long again as
    it has waited, at most every 5 minutes."""
    return min(max(TASK_REDISPATCH_MS, waited_ms), MAX_TASK_REDISPATCH_MS)


def _waited_ms(ex: Execution, wt: WorkflowTaskState, now_ms: int) -> int:
    """How long the workflow task has waited since it was scheduled (0 if its event is not in memory)."""
    scheduled = ex.history[wt.scheduled_event_id - 1] if len(ex.history) >= wt.scheduled_event_id else None
    return now_ms - scheduled["event_time_ms"] if scheduled and scheduled["event_id"] == wt.scheduled_event_id else 0


def _first_dispatch_delay_ms(ex: Execution, wt: WorkflowTaskState) -> int:
    """How long after it was scheduled the workflow task was first dispatched: the start delay of a
    first task, the backoff of a retried one. Its retry timer firing 10 s or more after that is a
    re-dispatch (a backoff timer fired that late counts as one too)."""
    if wt.attempt > 1:
        return min(DEFAULT_INITIAL_INTERVAL_MS * 2 ** (wt.attempt - 2), MAX_WORKFLOW_TASK_BACKOFF_MS)
    if wt.scheduled_event_id == 2 and ex.history and event_type(ex.history[0]) == "WorkflowExecutionStarted":
        return attributes(ex.history[0]).get("first_workflow_task_backoff_ms") or 0
    return 0


def activity_task_effect(ex: Execution, activity: ActivityState) -> Record:
    timeout = activity.schedule_to_start_timeout_ms
    return {
        "task_queue": activity.task_queue, "workflow_type": ex.workflow_type,
        "scheduled_event_id": activity.scheduled_event_id, "attempt": activity.attempt,
        "activity_id": activity.activity_id, "activity_type": activity.activity_type, "input": activity.input,
        "start_to_close_timeout_ms": activity.start_to_close_timeout_ms,
        "scheduled_time_ms": activity.scheduled_time_ms,
        "heartbeat_timeout_ms": activity.heartbeat_timeout_ms,
        "heartbeat_details": activity.heartbeat["details"] if activity.heartbeat else [],
        "schedule_to_start_deadline_ms": activity.dispatch_due_ms + timeout if timeout else 0,
    }


def activity_cancellation_effect(activity: ActivityState) -> Record:
    return {"task_queue": activity.task_queue, "scheduled_event_id": activity.scheduled_event_id, "attempt": activity.attempt}


def _timer(ex: Execution, kind: str, fire_at_ms: int, scheduled_event_id: int, attempt: int) -> tuple[str, Record]:
    return ("Timer", {
        "timer_id": timer_id(ex, kind, scheduled_event_id, attempt), "kind": kind,
        "fire_at_ms": fire_at_ms, "scheduled_event_id": scheduled_event_id, "attempt": attempt,
    })


def _schedule_to_start_timer(ex: Execution, activity: ActivityState) -> list[tuple[str, Record]]:
    """The attempt's schedule-to-start deadline, counted from when it is due to a worker (so set
    with the backoff before it, and not moved by a re-dispatch)."""
    if not activity.schedule_to_start_timeout_ms:
        return []
    fire_at = activity.dispatch_due_ms + activity.schedule_to_start_timeout_ms
    return [_timer(ex, "ACTIVITY_SCHEDULE_TO_START", fire_at, activity.scheduled_event_id, activity.attempt)]


def _drop(ex: Execution, kind: str, scheduled_event_id: int, attempt: int) -> tuple[str, Record]:
    return ("DropTimer", {"timer_id": timer_id(ex, kind, scheduled_event_id, attempt)})


def derive_effects(ex: Execution, t: Transition, before: Pending) -> list[tuple[str, Record]]:
    """The tasks, timers and outbound commands the transition's events call for. `ex` has the
    transition applied; `before` is what it had pending: the timers of what it no longer has go."""
    effects: list[tuple[str, Record]] = []
    for event in t.events:
        kind, attrs = event["attributes"]
        if kind in CLOSE_STATUS and not attrs.get("new_execution_run_id") and ex.parent is not None:  # the chain goes on
            effects.append(_close_report(ex, kind, attrs))
        if kind in _OUTBOUND_FOR_INITIATED:
            effects.append(_initiated_command(ex, event))
        elif kind == "WorkflowExecutionStarted":
            limits = [ms for ms in (attrs["workflow_run_timeout_ms"], attrs["workflow_execution_timeout_ms"]) if ms > 0]
            if limits:
                effects.append(_timer(ex, "WORKFLOW_RUN_TIMEOUT", t.now_ms + min(limits), event["event_id"], 1))
        elif kind in CLOSE_STATUS and kind != "WorkflowExecutionTimedOut":
            effects.append(_drop(ex, "WORKFLOW_RUN_TIMEOUT", 1, 1))
        elif kind == "WorkflowTaskStarted":
            fire_at = t.now_ms + ex.workflow_task_timeout_ms
            effects.append(_timer(ex, "WORKFLOW_TASK_START_TO_CLOSE", fire_at, attrs["scheduled_event_id"], 1))
            if ex.workflow_task is not None:  # its re-dispatch
                effects.append(_drop(ex, "WORKFLOW_TASK_RETRY", attrs["scheduled_event_id"], ex.workflow_task.attempt))
        elif kind in ("WorkflowTaskCompleted", "WorkflowTaskFailed", "WorkflowTaskTimedOut"):
            effects.append(_drop(ex, "WORKFLOW_TASK_START_TO_CLOSE", attrs["scheduled_event_id"], 1))
        elif kind == "TimerStarted":
            fire_at = t.now_ms + attrs["start_to_fire_timeout_ms"]
            effects.append(_timer(ex, "USER_TIMER", fire_at, event["event_id"], 1))
        elif kind == "WorkflowTaskScheduled" and ex.workflow_task and ex.workflow_task.scheduled_event_id == event["event_id"]:
            wt = ex.workflow_task
            started = next((attributes(e) for e in t.events if event_type(e) == "WorkflowExecutionStarted"), None)
            if started is not None and started.get("first_workflow_task_backoff_ms"):  # a start delay
                fire_at = t.now_ms + started["first_workflow_task_backoff_ms"]
                effects.append(_timer(ex, "WORKFLOW_TASK_RETRY", fire_at, wt.scheduled_event_id, wt.attempt))
            elif wt.attempt == 1:
                effects.extend(_dispatch_workflow_task(ex, wt, t.now_ms))
            else:
                fire_at = t.now_ms + _first_dispatch_delay_ms(ex, wt)
                effects.append(_timer(ex, "WORKFLOW_TASK_RETRY", fire_at, wt.scheduled_event_id, wt.attempt))
        elif kind == "ActivityTaskScheduled" and event["event_id"] in ex.activities:
            activity = ex.activities[event["event_id"]]
            effects.extend(_dispatch_activity_task(ex, activity, t.now_ms))
            if activity.schedule_to_close_timeout_ms:
                fire_at = t.now_ms + activity.schedule_to_close_timeout_ms
                effects.append(_timer(ex, "ACTIVITY_SCHEDULE_TO_CLOSE", fire_at, activity.scheduled_event_id, 1))
            effects.extend(_schedule_to_start_timer(ex, activity))
        elif kind == "ActivityTaskCancelRequested" and attrs["scheduled_event_id"] in ex.activities:
            effects.append(("ActivityCancellation", activity_cancellation_effect(ex.activities[attrs["scheduled_event_id"]])))
        elif kind == "ActivityTaskStarted":
            activity = ex.activities.get(attrs["scheduled_event_id"])
            if activity:  # its re-dispatch
                effects.append(_drop(ex, "ACTIVITY_RETRY", activity.scheduled_event_id, activity.attempt))
            if activity and activity.schedule_to_start_timeout_ms:
                effects.append(_drop(ex, "ACTIVITY_SCHEDULE_TO_START", activity.scheduled_event_id, activity.attempt))
            if activity and activity.start_to_close_timeout_ms:
                fire_at = t.now_ms + activity.start_to_close_timeout_ms
                effects.append(_timer(ex, "ACTIVITY_START_TO_CLOSE", fire_at, activity.scheduled_event_id, activity.attempt))
            if activity and activity.heartbeat_timeout_ms:
                fire_at = t.now_ms + activity.heartbeat_timeout_ms
                effects.append(_timer(ex, "ACTIVITY_HEARTBEAT", fire_at, activity.scheduled_event_id, activity.attempt))
        elif kind in ("ActivityTaskFailed", "ActivityTaskTimedOut") and attrs["retry_state"] == "IN_PROGRESS":
            activity = ex.activities[attrs["scheduled_event_id"]]
            effects.append(_drop(ex, "ACTIVITY_START_TO_CLOSE", activity.scheduled_event_id, activity.attempt - 1))
            if activity.heartbeat_timeout_ms:
                effects.append(_drop(ex, "ACTIVITY_HEARTBEAT", activity.scheduled_event_id, activity.attempt - 1))
            effects.append(_timer(ex, "ACTIVITY_RETRY", activity.dispatch_due_ms, activity.scheduled_event_id, activity.attempt))
            effects.extend(_schedule_to_start_timer(ex, activity))
    finished = {e["attributes"][1]["scheduled_event_id"] for e in t.events + t.buffered if event_type(e) in ACTIVITY_RESULTS}
    removed = [activity for sid, activity in before.activities.items() if sid not in ex.activities]
    for activity in removed:
        if ex.status != RUNNING and activity.started_event_id and activity.scheduled_event_id not in finished:
            # dropped with its run: tell the worker to stop rather than let it run to a timeout
            effects.append(("ActivityCancellation", activity_cancellation_effect(activity)))
        if activity.schedule_to_close_timeout_ms:
            effects.append(_drop(ex, "ACTIVITY_SCHEDULE_TO_CLOSE", activity.scheduled_event_id, 1))
        if activity.started_event_id:
            effects.append(_drop(ex, "ACTIVITY_START_TO_CLOSE", activity.scheduled_event_id, activity.attempt))
            if activity.heartbeat_timeout_ms:
                effects.append(_drop(ex, "ACTIVITY_HEARTBEAT", activity.scheduled_event_id, activity.attempt))
        else:
            effects.append(_drop(ex, "ACTIVITY_RETRY", activity.scheduled_event_id, activity.attempt))
            if activity.schedule_to_start_timeout_ms:
                effects.append(_drop(ex, "ACTIVITY_SCHEDULE_TO_START", activity.scheduled_event_id, activity.attempt))
    for started_event_id in sorted(before.timers - set(ex.timers.values())):
        effects.append(_drop(ex, "USER_TIMER", started_event_id, 1))
    if ex.status != RUNNING:
        answered = {attributes(e)["initiated_event_id"] for e in t.events if event_type(e) in CHILD_RESULTS}
        for child in before.children.values():
            if child.initiated_event_id not in answered:
                effects.extend(_parent_close_policy(ex, child))
    return effects


_OUTBOUND_FOR_INITIATED = {
    "StartChildWorkflowExecutionInitiated": "StartWorkflowExecution",
    "SignalExternalWorkflowExecutionInitiated": "SignalWorkflowExecution",
    "RequestCancelExternalWorkflowExecutionInitiated": "RequestCancelWorkflowExecution",
}


def _initiated_command(ex: Execution, event: Record) -> tuple[str, Record]:
    """The command an *Initiated event sends to its target; its request id makes a redelivery apply once."""
    kind, attrs = event["attributes"]
    common = {
        "request_id": f"{ex.run_id}/{event['event_id']}",
        "initiated_by": {"workflow_id": ex.workflow_id, "run_id": ex.run_id, "initiated_event_id": event["event_id"]},
    }
    if kind == "StartChildWorkflowExecutionInitiated":
        body = {
            "workflow_type": attrs["workflow_type"], "task_queue": attrs["task_queue"], "input": attrs["input"],
            "execution_timeout_ms": attrs["workflow_execution_timeout_ms"], "run_timeout_ms": attrs["workflow_run_timeout_ms"],
            "workflow_task_timeout_ms": attrs["workflow_task_timeout_ms"], "id_reuse_policy": attrs["id_reuse_policy"],
            "id_conflict_policy": "FAIL", "search_attributes": attrs["search_attributes"],
        }
        root_workflow_id, root_run_id = _root(ex)
        common["initiated_by"] = {**common["initiated_by"], "root_workflow_id": root_workflow_id, "root_run_id": root_run_id}
    elif kind == "SignalExternalWorkflowExecutionInitiated":
        body = {"run_id": attrs["run_id"], "signal_name": attrs["signal_name"], "input": attrs["input"]}
    else:
        body = {"run_id": attrs["run_id"], "reason": attrs["reason"]}
    return outbound(attrs["workflow_id"], _OUTBOUND_FOR_INITIATED[kind], {**body, **common})


def _close_report(ex: Execution, kind: str, attrs: Record) -> tuple[str, Record]:
    """A child run's close, told to its parent (a continue-as-new passes the duty to the next run)."""
    assert ex.parent is not None
    status = CLOSE_STATUS[kind]
    return outbound(ex.parent["workflow_id"], "RecordChildExecutionClosed", {
        "run_id": ex.parent["run_id"], "initiated_event_id": ex.parent["initiated_event_id"], "child_run_id": ex.run_id,
        "status": status, "result": attrs.get("result"), "failure": attrs.get("failure"),
        "details": attrs["details"] if status == "Canceled" else [], "retry_state": attrs.get("retry_state", "RETRY_POLICY_NOT_SET"),
    })


def _parent_close_policy(ex: Execution, child: ChildState) -> list[tuple[str, Record]]:
    """What a closing parent does to a child still running. The current run of the child's id is
    addressed (run_id empty): a child that continued as new is still the parent's child."""
    reason = f"parent {ex.workflow_id} (run {ex.run_id}) closed as {ex.status}; parent close policy {child.parent_close_policy}"
    if child.parent_close_policy == "TERMINATE":
        return [outbound(child.workflow_id, "TerminateWorkflowExecution", {
            "run_id": "", "reason": reason, "details": [], "request_id": "",
        })]
    if child.parent_close_policy == "REQUEST_CANCEL":
        return [outbound(child.workflow_id, "RequestCancelWorkflowExecution", {
            "run_id": "", "reason": reason, "request_id": "", "initiated_by": None,
        })]
    return []
