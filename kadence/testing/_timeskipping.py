"""Time skipping per workflow, as temporalio.testing.TimeSkipper (Temporal's V2): a client that
starts every run with a TimeSkippingConfig, and a run's fast-forward and clock. The clock is the
history service's (docs/decisions/0006-time-skipping.md): these send UpdateWorkflowTimeSkipping and
read the run's history."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from kadence.client import Client, Interceptor, OutboundInterceptor, ScheduleHandle, StartWorkflowInput, WorkflowHandle
from kadence.client._inputs import StartWorkflowUpdateWithStartInput
from kadence.client._schedule_types import patch_record
from kadence.client._schedules import schedule_clock_offset_ms, schedule_key
from kadence.client._types import FastForwardConfig, TimeSkippingConfig
from kadence.exceptions import CommandRejectedError
from kadence.protocol.names import CommandType, EventType
from kadence.protocol.read_model import fast_forward_request_id

__all__ = ["FastForwardConfig", "TimeSkipper", "TimeSkippingConfig", "clock_offset_ms", "set_time_skipping"]


class TimeSkipper:
    """A client whose started runs carry `config` (temporalio.testing.TimeSkipper), and the calls
    that move and read one run's clock. Only a stack that allows time skipping takes such runs
    (KADENCE_TIME_SKIPPING=1: WorkflowEnvironment.start_time_skipping_v2, `kadence dev --time-skipping`)."""

    def __init__(self, client: Client, config: TimeSkippingConfig | None = None) -> None:
        self.config = config or TimeSkippingConfig()
        self._stamping = True
        self._client = client.with_interceptors(_StampingInterceptor(self))

    @property
    def client(self) -> Client:
        """The client that starts runs with the config (unless inside with_time_skipping_disabled)."""
        return self._client

    @contextmanager
    def with_time_skipping_disabled(self) -> Iterator[None]:
        """Runs started inside carry no time skipping: they run on this host's clock."""
        before, self._stamping = self._stamping, False
        try:
            yield None
        finally:
            self._stamping = before

    def stamp(self) -> TimeSkippingConfig | None:
        return self.config if self._stamping else None

    async def fast_forward(self, handle: WorkflowHandle, duration: timedelta) -> None:
        """Move the run's clock `duration` ahead, firing its timers on the way, and wait until it
        got there (or the run closed). Skipping then stops, as Temporal's does."""
        config = TimeSkippingConfig(enabled=True, fast_forward_config=FastForwardConfig(duration))
        await set_time_skipping(self._client, handle, config)

    async def get_current_time(self, handle: WorkflowHandle) -> datetime:
        """The run's time: this host's clock plus how far the run skipped."""
        return _at(await clock_offset_ms(handle))

    async def fast_forward_schedule(self, handle: ScheduleHandle, duration: timedelta) -> None:
        """Move the schedule's clock `duration` ahead and wait until it got there: its actions due
        on the way are taken, one after another (it moves on once the runs it started closed), and
        the runs start on its clock, skipping theirs unless the config disables propagation."""
        setting = TimeSkippingConfig(
            enabled=True, fast_forward_config=FastForwardConfig(duration), disable_propagation=self.config.disable_propagation,
        ).record()
        request_id = str(uuid.uuid4())
        client = handle._client  # the client that made the handle: it knows what the read model has yet to record
        read_model = await client._read_model()
        reached = read_model.expect_outcome(fast_forward_request_id(request_id))
        try:
            await client._request(schedule_key(handle.id), CommandType.PatchSchedule, {
                "run_id": "", "patch": patch_record(time_skipping=setting), "request_id": request_id,
            }, request_id)
        except BaseException:
            read_model.forget_outcome(fast_forward_request_id(request_id), reached)
            raise
        await reached

    async def get_schedule_current_time(self, handle: ScheduleHandle) -> datetime:
        """The schedule's time: this host's clock plus how far it skipped."""
        return _at(await schedule_clock_offset_ms(handle._client, handle.id))


class _StampingInterceptor(Interceptor):
    def __init__(self, skipper: TimeSkipper) -> None:
        self.skipper = skipper

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _StampingOutbound(next, self.skipper)


class _StampingOutbound(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, skipper: TimeSkipper) -> None:
        super().__init__(next)
        self.skipper = skipper

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle:
        input.time_skipping = input.time_skipping or self.skipper.stamp()
        return await super().start_workflow(input)

    async def start_update_with_start_workflow(self, input: StartWorkflowUpdateWithStartInput) -> Any:
        start = input.start_workflow_input
        start.time_skipping = start.time_skipping or self.skipper.stamp()
        return await super().start_update_with_start_workflow(input)


async def set_time_skipping(client: Client, handle: WorkflowHandle, config: TimeSkippingConfig, *, fast_forward_ms: int = 0) -> bool:
    """Set the time skipping of the handle's run (UpdateWorkflowTimeSkipping); with a fast-forward
    (the config's, or `fast_forward_ms`), wait until the run's clock reached its bound or the run
    closed. False if the run was closed already."""
    setting = config.record()
    setting["fast_forward_ms"] = fast_forward_ms or setting["fast_forward_ms"]
    request_id = str(uuid.uuid4())
    read_model = await client._read_model()
    # Asked for before the send, so the answer cannot be missed.
    reached = read_model.expect_outcome(fast_forward_request_id(request_id)) if setting["fast_forward_ms"] else None
    try:
        await handle._request_in_chain(CommandType.UpdateWorkflowTimeSkipping, {"time_skipping": setting}, request_id)
    except CommandRejectedError as exc:
        if reached is not None:
            read_model.forget_outcome(fast_forward_request_id(request_id), reached)
        if exc.cause == "WORKFLOW_CLOSED":
            return False
        raise
    if reached is not None:
        await _until_reached_or_closed(client, handle, reached)
    return True


async def _until_reached_or_closed(client: Client, handle: WorkflowHandle, reached: asyncio.Future[Any]) -> None:
    closed = asyncio.ensure_future(client._closed_execution(handle.id, None))
    try:
        await asyncio.wait([reached, closed], return_when=asyncio.FIRST_COMPLETED)
    finally:
        closed.cancel()
        reached.cancel()


def _at(clock_offset_ms: int) -> datetime:
    return datetime.fromtimestamp((time.time() * 1000 + clock_offset_ms) / 1000, UTC)


async def clock_offset_ms(handle: WorkflowHandle) -> int:
    """How far ahead of the host's clock the handle's run is: where it started, and every skip since
    (its history says both)."""
    offset = 0
    for event in (await handle.fetch_history()).events:
        kind, attrs = event["attributes"]
        if kind == EventType.WorkflowExecutionStarted:
            offset = attrs.get("clock_offset_ms", 0)
        elif kind == EventType.WorkflowExecutionTimeSkipped:
            offset += attrs["skipped_ms"]
    return offset
