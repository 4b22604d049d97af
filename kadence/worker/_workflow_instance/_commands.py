"""What a run waits on: each command the workflow code issued, as a handle of its kind, until the
event that records it is matched (history records commands in the order issued, each matched by
its event type and its key), and the local activities it awaits.

The handles of commands answered later (an activity's result, a child's start and result, an
external request's outcome) keep the future the workflow code awaits."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from kadence.protocol.codec import Record
from kadence.protocol.records import (
    AcceptWorkflowUpdate,
    ActivityTaskScheduled,
    CancelTimer,
    CompleteWorkflowUpdate,
    NexusOperationScheduled,
    RecordMarker,
    RejectWorkflowUpdate,
    RequestCancelActivityTask,
    RequestCancelExternalWorkflowExecution,
    RequestCancelNexusOperation,
    RespondWorkflowTaskCompletedCommands,
    ScheduleActivityTask,
    ScheduleNexusOperation,
    SignalExternalWorkflowExecution,
    StartChildWorkflowExecution,
    StartTimer,
)

# (kind, attributes), as a workflow task's completion carries it. A command's kind is written as the
# Literal name the generated union tags its branch with, which mypy matches to the attributes'
# TypedDict (it does not match a TaskCommandType member, the same string).
Command = RespondWorkflowTaskCompletedCommands

# Each handle below narrows `command` to the commands of its kind (a dataclass, so its constructor
# checks the command given): what its key reads.


@dataclass(eq=False)
class PendingCommand:
    """A command whose event has no key besides its type: an upsert of search attributes, the command that closes the run."""

    command: Command

    @property
    def key(self) -> str:
        """What must match between the command and its event besides the type."""
        return ""


@dataclass(eq=False)
class StartTimerCommand(PendingCommand):
    command: tuple[Literal["StartTimer"], StartTimer]

    @property
    def key(self) -> str:
        return self.command[1]["timer_id"]


@dataclass(eq=False)
class CancelTimerCommand(PendingCommand):
    command: tuple[Literal["CancelTimer"], CancelTimer]

    @property
    def key(self) -> str:
        return self.command[1]["timer_id"]


@dataclass(eq=False)
class ScheduleActivityCommand(PendingCommand):
    command: tuple[Literal["ScheduleActivityTask"], ScheduleActivityTask]
    future: asyncio.Future[Any]  # the activity's result payload
    scheduled: ActivityTaskScheduled | None = None  # its ActivityTaskScheduled attributes, once recorded
    scheduled_event_id: int = 0

    @property
    def key(self) -> str:
        return self.command[1]["activity_type"]


@dataclass(eq=False)
class RequestCancelActivityCommand(PendingCommand):
    command: tuple[Literal["RequestCancelActivityTask"], RequestCancelActivityTask]

    @property
    def key(self) -> str:
        return str(self.command[1]["scheduled_event_id"])


@dataclass(eq=False)
class ScheduleNexusCommand(PendingCommand):
    """A Nexus operation: `started` resolves once it started (its token; '' for one that completed
    or ended at once), `future` to its result payload."""

    command: tuple[Literal["ScheduleNexusOperation"], ScheduleNexusOperation]
    future: asyncio.Future[Any]
    started: asyncio.Future[str] = field(kw_only=True)
    scheduled: NexusOperationScheduled | None = None  # its NexusOperationScheduled attributes, once recorded
    scheduled_event_id: int = 0
    operation_token: str = ""
    cancel_requested: asyncio.Future[None] | None = None  # a WAIT_REQUESTED cancel's: resolved once history recorded it

    @property
    def key(self) -> str:
        return self.command[1]["operation"]


@dataclass(eq=False)
class RequestCancelNexusCommand(PendingCommand):
    command: tuple[Literal["RequestCancelNexusOperation"], RequestCancelNexusOperation]

    @property
    def key(self) -> str:
        return str(self.command[1]["scheduled_event_id"])


@dataclass(eq=False)
class RecordMarkerCommand(PendingCommand):
    command: tuple[Literal["RecordMarker"], RecordMarker]

    @property
    def key(self) -> str:
        return self.command[1]["marker_name"]


@dataclass(eq=False)
class UpdateResponseCommand(PendingCommand):
    """An update's acceptance, rejection or completion."""

    command: (
        tuple[Literal["AcceptWorkflowUpdate"], AcceptWorkflowUpdate] | tuple[Literal["RejectWorkflowUpdate"], RejectWorkflowUpdate]
        | tuple[Literal["CompleteWorkflowUpdate"], CompleteWorkflowUpdate]
    )

    @property
    def key(self) -> str:
        return self.command[1]["update_id"]


@dataclass(eq=False)
class InitiatedCommand(PendingCommand):
    """A request to another workflow: its Initiated event is answered later by events that carry
    that event's id (kadence.protocol.events.INITIATED_BY_ANSWER)."""

    command: (
        tuple[Literal["StartChildWorkflowExecution"], StartChildWorkflowExecution]
        | tuple[Literal["SignalExternalWorkflowExecution"], SignalExternalWorkflowExecution]
        | tuple[Literal["RequestCancelExternalWorkflowExecution"], RequestCancelExternalWorkflowExecution]
    )
    future: asyncio.Future[Any]  # the answer: a child's result, a signal's or cancellation request's delivery

    @property
    def key(self) -> str:
        return self.command[1]["workflow_id"]


@dataclass(eq=False)
class StartChildWorkflowCommand(InitiatedCommand):
    command: tuple[Literal["StartChildWorkflowExecution"], StartChildWorkflowExecution]
    started: asyncio.Future[str] = field(kw_only=True)  # the child's run id, once it started


@dataclass(eq=False)
class SignalExternalCommand(InitiatedCommand):
    """A signal to another workflow (a child's included)."""

    command: tuple[Literal["SignalExternalWorkflowExecution"], SignalExternalWorkflowExecution]


@dataclass(eq=False)
class RequestCancelExternalCommand(InitiatedCommand):
    """A request that another workflow (a child's included) cancel."""

    command: tuple[Literal["RequestCancelExternalWorkflowExecution"], RequestCancelExternalWorkflowExecution]


@dataclass
class LocalActivity:
    """A local activity the workflow awaits: run by the worker within the workflow task, its outcome
    recorded as a marker (replay reads the marker instead of running it again)."""

    seq: int
    attributes: Record  # activity_type, input, timeouts, retry_policy
    future: asyncio.Future[Any]
