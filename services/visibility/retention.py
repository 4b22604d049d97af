"""Deleting command outcomes nobody will ask for again.

`kadence_command_outcomes` gets a row per start, signal, activity start and update. The client or
worker waiting for one reads it within seconds (after a Postgres outage, when Postgres is back);
an update sent again with the same id reads its row later. A row older than the retention
(KADENCE_COMMAND_OUTCOME_RETENTION_HOURS, 7 days: kadence.commands' retention, so no command that
could be read again is older) is not needed. Each visibility instance deletes them every few
minutes, in batches, so a pass never holds long locks; instances running it at once skip each
other's rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

import psycopg
from prometheus_client import Counter
from psycopg_pool import AsyncConnectionPool

from kadence.protocol.postgres import describe
from kadence.protocol.settings import SettingError, env_int

log = logging.getLogger("kadence.visibility.retention")

DEFAULT_RETENTION_HOURS = 7 * 24
INTERVAL_S = 300.0
DELETE_BATCH = 10_000

DELETED = Counter("kadence_command_outcomes_deleted_total", "Command outcome rows deleted past their retention")


def outcome_retention() -> timedelta:
    hours = env_int("KADENCE_COMMAND_OUTCOME_RETENTION_HOURS", DEFAULT_RETENTION_HOURS)
    if hours < 1:
        raise SettingError(
            f"KADENCE_COMMAND_OUTCOME_RETENTION_HOURS={hours}: command outcomes must be kept at least an hour "
            f"(clients and workers read them after a Postgres outage); unset it for the default, {DEFAULT_RETENTION_HOURS}"
        )
    return timedelta(hours=hours)


async def delete_expired_outcomes(pool: AsyncConnectionPool, retention: timedelta, batch: int = DELETE_BATCH) -> int:
    """One pass: every row recorded more than `retention` ago, `batch` rows per transaction; how many."""
    deleted = 0
    while True:
        async with pool.connection() as conn:
            cursor = await conn.execute(
                "DELETE FROM kadence_command_outcomes WHERE request_id IN (SELECT request_id FROM kadence_command_outcomes "
                "WHERE recorded_at < now() - %s LIMIT %s FOR UPDATE SKIP LOCKED)",
                (retention, batch),
            )
        deleted += cursor.rowcount
        DELETED.inc(cursor.rowcount)
        if cursor.rowcount < batch:
            return deleted


async def expire_outcomes(
    pool: AsyncConnectionPool, retention: timedelta, stop: asyncio.Event, interval_s: float = INTERVAL_S,
    batch: int = DELETE_BATCH,
) -> None:
    """A pass every `interval_s` until `stop`; a pass Postgres does not answer waits for the next."""
    while not stop.is_set():
        try:
            deleted = await delete_expired_outcomes(pool, retention, batch)
        except psycopg.OperationalError as exc:
            log.warning("event=command_outcomes_expiry_postponed error=%r", describe(exc))
        else:
            if deleted:
                log.info("event=command_outcomes_expired rows=%d retention_hours=%.0f", deleted, retention / timedelta(hours=1))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
