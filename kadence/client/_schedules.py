"""Schedules through the client (temporalio's create_schedule, ScheduleHandle, list_schedules): each
call is a command to the schedule's key, `kadence-schedule:<id>`, answered under its request id;
describe and list read the read model's kadence_schedules (docs/decisions/0004-schedules-in-the-history-service.md)."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

import psycopg

from kadence.client._read_model import TABLES_MISSING, ReadModel
from kadence.client._schedule_types import (
    Schedule,
    ScheduleBackfill,
    ScheduleDescription,
    ScheduleListActionStartWorkflow,
    ScheduleListDescription,
    ScheduleListInfo,
    ScheduleListSchedule,
    ScheduleListState,
    ScheduleOverlapPolicy,
    ScheduleUpdate,
    ScheduleUpdateInput,
    info_from_record,
    patch_record,
    schedule_from_record,
    schedule_record,
)
from kadence.converter import DataConverter
from kadence.exceptions import CommandRejectedError, KadenceError
from kadence.protocol.codec import codec
from kadence.protocol.names import SCHEDULE_KEY_PREFIX, CommandType
from kadence.protocol.postgres import until_answered
from kadence.protocol.schedule_spec import schedule_problem


class ScheduleAlreadyRunningError(KadenceError):
    """A schedule with this id exists (as temporalio.client.ScheduleAlreadyRunningError)."""

    def __init__(self) -> None:
        super().__init__("Schedule already running")


class ScheduleNotFoundError(KadenceError):
    """No schedule has this id (or it was deleted); temporalio raises an RPCError of status NOT_FOUND."""


class ScheduleClient(Protocol):
    """The client, as schedules use it."""

    @property
    def data_converter(self) -> DataConverter: ...

    async def _request(self, workflow_id: str, kind: str, body: dict[str, Any], request_id: str) -> str: ...

    async def _read_model(self) -> ReadModel: ...

    async def _read_model_caught_up(self, workflow_id: str | None = None) -> None: ...


def schedule_key(schedule_id: str) -> str:
    return f"{SCHEDULE_KEY_PREFIX}{schedule_id}"


async def schedule_request(client: ScheduleClient, schedule_id: str, kind: str, body: dict[str, Any]) -> None:
    """Send a schedule command and wait for its answer; refusals as temporalio raises them."""
    request_id = str(uuid.uuid4())
    try:
        await client._request(schedule_key(schedule_id), kind, {**body, "request_id": request_id}, request_id)
    except CommandRejectedError as err:
        if err.cause == "SCHEDULE_ALREADY_RUNNING":
            raise ScheduleAlreadyRunningError() from err
        if err.cause == "WORKFLOW_NOT_FOUND":
            raise ScheduleNotFoundError(f"schedule {schedule_id!r} not found: {err.reason}") from err
        raise


def checked_record(client: ScheduleClient, schedule_id: str, schedule: Schedule) -> dict[str, Any]:
    """The Schedule record to send, refused here as the history service would refuse it."""
    record = schedule_record(schedule, client.data_converter.payload_converter)
    if problem := schedule_problem(record):
        raise CommandRejectedError(schedule_key(schedule_id), "INVALID_ARGUMENT", problem)
    return record


async def create_schedule(
    client: ScheduleClient, schedule_id: str, schedule: Schedule, *, trigger_immediately: bool, backfill: Sequence[ScheduleBackfill],
) -> ScheduleHandle:
    await schedule_request(client, schedule_id, CommandType.CreateSchedule, {
        "schedule": checked_record(client, schedule_id, schedule),
        "patch": patch_record(trigger_immediately=trigger_immediately, backfills=backfill),
    })
    return ScheduleHandle(client, schedule_id)


async def _schedule_rows(client: ScheduleClient, schedule_id: str | None) -> list[tuple[str, bytes]]:
    pool = (await client._read_model()).pool
    where, args = ("AND schedule_id = %s", (schedule_id,)) if schedule_id is not None else ("", ())

    async def rows() -> list[tuple[str, bytes]]:
        async with pool.connection() as conn, conn.cursor() as cur:
            await cur.execute(f"SELECT schedule_id, state FROM kadence_schedules WHERE status = 'Running' {where} "
                              "ORDER BY schedule_id", args)
            return list(await cur.fetchall())
    try:
        return await until_answered("client_schedules", rows)
    except psycopg.errors.UndefinedTable as exc:
        raise ScheduleNotFoundError(f"no schedules are recorded: {TABLES_MISSING}") from exc


async def _decoded(client: ScheduleClient, state: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """(schedule, info) of a schedule's last event, its payloads through the client's codec (as
    they were encoded when the schedule was sent)."""
    attrs = codec("HistoryEvent").decode(state)["attributes"][1]
    await client.data_converter.decode_payloads(attrs["schedule"])
    return attrs["schedule"], attrs["info"]


async def list_schedules(client: ScheduleClient, query: str | None) -> AsyncIterator[ScheduleListDescription]:
    if query:
        raise KadenceError(f"list_schedules takes no query ({query!r}): Kadence lists every schedule; filter the results yourself")
    await client._read_model_caught_up()
    payloads = client.data_converter.payload_converter
    for schedule_id, state in await _schedule_rows(client, None):
        schedule, info = await _decoded(client, state)
        described = schedule_from_record(schedule, payloads)
        full = info_from_record(schedule, info)  # type: ignore[arg-type]
        yield ScheduleListDescription(
            schedule_id,
            ScheduleListSchedule(ScheduleListActionStartWorkflow(described.action.workflow), described.spec,
                                 ScheduleListState(described.state.note, described.state.paused)),
            ScheduleListInfo(full.recent_actions, full.next_action_times),
        )


class ScheduleHandle:
    """A schedule by its id (as temporalio.client.ScheduleHandle)."""

    def __init__(self, client: ScheduleClient, id: str) -> None:
        self._client = client
        self.id = id

    async def describe(self) -> ScheduleDescription:
        """The schedule as the read model holds it: its definition, its recent and running actions and its next times."""
        await self._client._read_model_caught_up(schedule_key(self.id))
        rows = await _schedule_rows(self._client, self.id)
        if not rows:
            raise ScheduleNotFoundError(f"schedule {self.id!r} not found")
        schedule, info = await _decoded(self._client, rows[0][1])
        return ScheduleDescription(
            self.id, schedule_from_record(schedule, self._client.data_converter.payload_converter),
            info_from_record(schedule, info), info["conflict_token"],  # type: ignore[arg-type]
        )

    async def update(
        self, updater: Callable[[ScheduleUpdateInput], ScheduleUpdate | None | Awaitable[ScheduleUpdate | None]],
    ) -> None:
        """Describe, let `updater` change the schedule (None: no change), and send it; refused
        (CommandRejectedError, cause CONFLICT) if another update came in between."""
        description = await self.describe()
        update = updater(ScheduleUpdateInput(description))
        if inspect.isawaitable(update):
            update = await update
        if update is None:
            return
        await schedule_request(self._client, self.id, CommandType.UpdateSchedule, {
            "run_id": "", "schedule": checked_record(self._client, self.id, update.schedule),
            "conflict_token": description.conflict_token,
        })

    async def pause(self, *, note: str | None = None) -> None:
        await self._patch(pause=True, note=note or "Paused via Python SDK")

    async def unpause(self, *, note: str | None = None) -> None:
        await self._patch(unpause=True, note=note or "Unpaused via Python SDK")

    async def trigger(self, *, overlap: ScheduleOverlapPolicy | None = None) -> None:
        """Take an action now (the schedule's overlap policy unless `overlap`)."""
        await self._patch(trigger_immediately=True, trigger_overlap=overlap)

    async def backfill(self, *backfill: ScheduleBackfill) -> None:
        """Take the nominal times of each range now, whatever the catch-up window."""
        if not backfill:
            raise ValueError("backfill needs at least one ScheduleBackfill")
        await self._patch(backfills=backfill)

    async def delete(self) -> None:
        """The schedule stops; the runs it started go on."""
        await schedule_request(self._client, self.id, CommandType.DeleteSchedule, {"run_id": ""})

    async def _patch(self, **patch: Any) -> None:
        await schedule_request(self._client, self.id, CommandType.PatchSchedule, {"run_id": "", "patch": patch_record(**patch)})


async def schedule_clock_offset_ms(client: ScheduleClient, schedule_id: str) -> int:
    """How far ahead of the wall clock the schedule's clock is, as its last event left it (0 unless
    it skips time: kadence.testing.TimeSkipper)."""
    await client._read_model_caught_up(schedule_key(schedule_id))
    rows = await _schedule_rows(client, schedule_id)
    if not rows:
        raise ScheduleNotFoundError(f"schedule {schedule_id!r} not found")
    _, info = await _decoded(client, rows[0][1])
    return int(info.get("clock_offset_ms", 0))
