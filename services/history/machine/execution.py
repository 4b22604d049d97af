"""The state of one execution (Temporal's mutable state): what its events left pending."""

from __future__ import annotations

from dataclasses import dataclass, field

from kadence.protocol.names import ACTIVITY_KEY_PREFIX, NEXUS_KEY_PREFIX, EventType
from kadence.protocol.records import Failure, Payload, Schedule, ScheduleInfo
from kadence.protocol.records import TimeSkipping as TimeSkippingRecord
from services.history.machine.records import ActivityHeartbeat, HistoryEvent, Record, TransientWorkflowTask, attributes, event_type

RUNNING = "Running"
HISTORY_IDENTITY = "kadence-history"
DEFAULT_WORKFLOW_TASK_TIMEOUT_MS = 10_000


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
    heartbeat: ActivityHeartbeat | None = None  # the latest; its details go to the next attempt
    last_heartbeat_ms: int = 0  # the current attempt's start or latest heartbeat
    cancel_requested_event_id: int = 0
    header: Record = field(default_factory=dict)  # the ActivityTaskScheduled's, sent with each attempt


@dataclass
class NexusOperationState:
    """A Nexus operation this run scheduled and has not heard the end of (machine/nexus.py)."""

    scheduled_event_id: int
    endpoint: str
    service: str
    operation: str
    task_queue: str  # the endpoint's, when the operation was scheduled
    input: Payload | None
    nexus_header: dict[str, str]
    request_id: str
    schedule_to_close_timeout_ms: int
    scheduled_time_ms: int
    attempt: int = 1
    dispatch_due_ms: int = 0  # when the current attempt went, or goes, to a worker
    operation_token: str = ""  # an asynchronous operation's, once started
    started: bool = False  # NexusOperationStarted applied (buffered, it has no event id yet)
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

    initiated: str  # the event type that sent it: its key in kadence.protocol.events.INITIATED
    workflow_id: str
    run_id: str


@dataclass
class WorkflowTaskState:
    """The run's workflow task. A transient one (a retry after the task failed or timed out) has no
    events until an attempt completes: its ids are those its WorkflowTaskScheduled and Started would
    take, and the batches carry it as state (docs/architecture.md, "Transient workflow tasks")."""

    scheduled_event_id: int
    attempt: int
    started_event_id: int = 0
    started_identity: str = ""
    transient: bool = False
    scheduled_time_ms: int = 0  # a transient task's: when its WorkflowTaskScheduled would have been written
    started_time_ms: int = 0  # a transient task's start, recorded with its events once an attempt completes
    last_cause: str = ""  # why the previous attempt failed (a transient task's)
    last_failure: Failure | None = None

    @classmethod
    def from_transient(cls, task: TransientWorkflowTask) -> WorkflowTaskState:
        started = task["started_time_ms"] > 0
        return cls(
            task["scheduled_event_id"], task["attempt"], task["scheduled_event_id"] + 1 if started else 0, task["started_identity"],
            transient=True, scheduled_time_ms=task["scheduled_time_ms"], started_time_ms=task["started_time_ms"],
            last_cause=task["last_cause"], last_failure=task["last_failure"],
        )

    def as_transient(self) -> TransientWorkflowTask:
        return {
            "scheduled_event_id": self.scheduled_event_id, "attempt": self.attempt, "scheduled_time_ms": self.scheduled_time_ms,
            "started_time_ms": self.started_time_ms, "started_identity": self.started_identity,
            "last_cause": self.last_cause, "last_failure": self.last_failure,
        }


@dataclass
class TimeSkipping:
    """Whether the run's clock may jump while nothing is in flight (docs/decisions/0006-time-skipping.md)."""

    enabled: bool
    until_ms: int = 0  # the fast-forward's bound, in the run's virtual time; 0: none
    request_id: str = ""  # the update that set the bound: its sender waits for the skip that reaches it
    disable_propagation: bool = False

    def passed_on(self) -> TimeSkippingRecord | None:
        """The skipping a run this one starts gets (a child, a schedule's action): on, unbounded, if
        this one's is on and propagates (as Temporal's TimeSkippingConfig); else none."""
        if not self.enabled or self.disable_propagation:
            return None
        return {"enabled": True, "fast_forward_ms": 0, "disable_propagation": False}


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
    history: list[HistoryEvent] = field(default_factory=list)
    workflow_task: WorkflowTaskState | None = None
    activities: dict[int, ActivityState] = field(default_factory=dict)
    timers: dict[str, int] = field(default_factory=dict)  # user timer id -> its TimerStarted event id
    buffered: list[HistoryEvent] = field(default_factory=list)
    parent: Record | None = None  # InitiatedBy of a child run: where its close is reported
    scheduled_by: Record | None = None  # ScheduledBy of a run a schedule started: where its start and close are reported
    children: dict[int, ChildState] = field(default_factory=dict)  # by initiated event id
    external_requests: dict[int, ExternalRequest] = field(default_factory=dict)  # by initiated event id
    nexus_operations: dict[int, NexusOperationState] = field(default_factory=dict)  # by scheduled event id
    nexus_caller: Record | None = None  # NexusCaller of a workflow-run operation's handler run: where its close is reported
    signal_request_ids: set[str] = field(default_factory=set)  # a signal sent again with its request id applies once
    update_ids: set[str] = field(default_factory=set)  # every update admitted: one sent again applies once
    updates: dict[str, str] = field(default_factory=dict)  # update id -> "admitted" or "accepted", until it ends
    # A schedule's definition and what it has done (machine/schedule.py); None for a run.
    schedule: Schedule | None = None
    schedule_info: ScheduleInfo | None = None
    # The run's clock: its commands are decided at the log-append time plus this (machine/clock.py).
    clock_offset_ms: int = 0
    time_skipping: TimeSkipping | None = None
    # Queries waiting for the workflow task in flight: memory only (a restart loses them; callers time out).
    pending_queries: list[Record] = field(default_factory=list, compare=False)

    def clock_for_started_run(self) -> Record:
        """The clock and skipping of a run this one starts (a child, a schedule's action): its clock
        always (the run's virtual start time is this one's), its skipping as it passes it on."""
        skipping = self.time_skipping.passed_on() if self.time_skipping is not None else None
        return {"time_skipping": skipping, "clock_offset_ms": self.clock_offset_ms}

    @property
    def standalone_activity(self) -> bool:
        """A standalone activity's run: its only work is its activity (decision 0007)."""
        return self.workflow_id.startswith(ACTIVITY_KEY_PREFIX)

    @property
    def standalone_nexus_operation(self) -> bool:
        """A standalone Nexus operation's run: its only work is its operation (decision 0008)."""
        return self.workflow_id.startswith(NEXUS_KEY_PREFIX)

    @property
    def standalone(self) -> bool:
        """A run with no workflow: what would tell a workflow of its work's end closes it instead."""
        return self.standalone_activity or self.standalone_nexus_operation

    @property
    def quiescent(self) -> bool:
        """No workflow task pending and nothing buffered: a query now sees everything recorded."""
        return self.status != RUNNING or (self.workflow_task is None and not self.buffered)

    @property
    def started(self) -> Record:
        """The run's WorkflowExecutionStarted attributes (a running run holds its whole history)."""
        return attributes(self.history[0]) if self.history else {}

    @property
    def first_task_backoff_ms(self) -> int:
        """How long the run's first workflow task waits before it goes to a worker: its start delay,
        or its cron schedule's wait for the next time (0: none)."""
        if not self.history or event_type(self.history[0]) != EventType.WorkflowExecutionStarted:
            return 0
        return self.started.get("first_workflow_task_backoff_ms") or 0

    @property
    def root(self) -> tuple[str, str]:
        """The root of the run's chain of parents (the run itself in histories written before roots were)."""
        started = self.started
        return started.get("root_workflow_id") or self.workflow_id, started.get("root_run_id") or self.run_id


@dataclass
class Pending:
    """What an execution had pending before a transition: the effects drop what it no longer has."""

    activities: dict[int, ActivityState] = field(default_factory=dict)
    timers: set[int] = field(default_factory=set)  # TimerStarted event ids
    children: dict[int, ChildState] = field(default_factory=dict)
    nexus_operations: dict[int, NexusOperationState] = field(default_factory=dict)

    @classmethod
    def of(cls, ex: Execution) -> Pending:
        return cls(dict(ex.activities), set(ex.timers.values()), dict(ex.children), dict(ex.nexus_operations))


def execution_from_start(workflow_id: str, run_id: str, started: HistoryEvent) -> Execution:
    attrs = attributes(started)
    parent = None
    if attrs["parent_workflow_id"]:
        parent = {
            "workflow_id": attrs["parent_workflow_id"], "run_id": attrs["parent_run_id"],
            "initiated_event_id": attrs["parent_initiated_event_id"],
        }
    skipping = attrs.get("time_skipping")
    return Execution(
        workflow_id=workflow_id, run_id=run_id, workflow_type=attrs["workflow_type"], task_queue=attrs["task_queue"],
        workflow_task_timeout_ms=attrs["workflow_task_timeout_ms"], start_request_id=attrs["request_id"], parent=parent,
        scheduled_by=attrs.get("scheduled_by"), clock_offset_ms=attrs.get("clock_offset_ms", 0), nexus_caller=attrs.get("nexus_caller"),
        time_skipping=None if skipping is None else TimeSkipping(
            skipping["enabled"], _bound(started, skipping["fast_forward_ms"]), disable_propagation=skipping["disable_propagation"],
        ),
    )


def _bound(started: HistoryEvent, fast_forward_ms: int) -> int:
    return started["event_time_ms"] + fast_forward_ms if fast_forward_ms else 0


def closed_execution(workflow_id: str, run_id: str, status: str, start_request_id: str) -> Execution:
    """What a closed run keeps: what a later start's id reuse policy and request id check need."""
    return Execution(
        workflow_id=workflow_id, run_id=run_id, workflow_type="", task_queue="", status=status, start_request_id=start_request_id,
    )


def run_timeout_ms(started: Record) -> int:
    """A run's timeout from its WorkflowExecutionStarted attributes: the sooner of its run timeout and
    what is left of its execution timeout (0: none)."""
    limits = [ms for ms in (started.get("workflow_run_timeout_ms", 0), started.get("workflow_execution_timeout_ms", 0)) if ms > 0]
    return min(limits) if limits else 0
