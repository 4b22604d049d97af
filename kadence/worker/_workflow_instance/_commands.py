"""What a run waits on: each command the workflow code issued, as a handle of its kind, until the
event that records it is matched (history records commands in the order issued, each matched by
its event type and its key), and the local activities it awaits.

The handles of commands answered later (an activity's result, a child's start and result, an
external request's outcome) keep the future the workflow code awaits."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kadence.protocol.codec import Record
from kadence.protocol.records import ActivityTaskScheduled

Command = tuple[str, Record]


@dataclass(eq=False)
class PendingCommand:
    """A command whose event has no key besides its type: an upsert of search attributes, the command that closes the run."""

    command: Command

    @property
    def key(self) -> str:
        """What must match between the command and its event besides the type."""
        return ""


class StartTimerCommand(PendingCommand):
    @property
    def key(self) -> str:
        return str(self.command[1]["timer_id"])


class CancelTimerCommand(PendingCommand):
    @property
    def key(self) -> str:
        return str(self.command[1]["timer_id"])


@dataclass(eq=False)
class ScheduleActivityCommand(PendingCommand):
    future: asyncio.Future[Any]  # the activity's result payload
    scheduled: ActivityTaskScheduled | None = None  # its ActivityTaskScheduled attributes, once recorded
    scheduled_event_id: int = 0

    @property
    def key(self) -> str:
        return str(self.command[1]["activity_type"])


class RequestCancelActivityCommand(PendingCommand):
    @property
    def key(self) -> str:
        return str(self.command[1]["scheduled_event_id"])


class RecordMarkerCommand(PendingCommand):
    @property
    def key(self) -> str:
        return str(self.command[1]["marker_name"])


class UpdateResponseCommand(PendingCommand):
    """An update's acceptance, rejection or completion."""

    @property
    def key(self) -> str:
        return str(self.command[1]["update_id"])


@dataclass(eq=False)
class InitiatedCommand(PendingCommand):
    """A request to another workflow: its Initiated event is answered later by events that carry
    that event's id (kadence.protocol.events.INITIATED_BY_ANSWER)."""

    future: asyncio.Future[Any]  # the answer: a child's result, a signal's or cancellation request's delivery

    @property
    def key(self) -> str:
        return str(self.command[1]["workflow_id"])


@dataclass(eq=False)
class StartChildWorkflowCommand(InitiatedCommand):
    started: asyncio.Future[str] = field(kw_only=True)  # the child's run id, once it started


class SignalExternalCommand(InitiatedCommand):
    """A signal to another workflow (a child's included)."""


class RequestCancelExternalCommand(InitiatedCommand):
    """A request that another workflow (a child's included) cancel."""


@dataclass
class LocalActivity:
    """A local activity the workflow awaits: run by the worker within the workflow task, its outcome
    recorded as a marker (replay reads the marker instead of running it again)."""

    seq: int
    attributes: Record  # activity_type, input, timeouts, retry_policy
    future: asyncio.Future[Any]
