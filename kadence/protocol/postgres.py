"""Postgres helpers shared by the services and the client."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

_DDL_LOCK = 0x6B6164656E6365  # any constant: serializes schema setup across processes


async def apply_ddl(conn: psycopg.AsyncConnection[Any], statements: Sequence[str]) -> None:
    """Run idempotent DDL under an advisory lock: concurrent CREATE ... IF NOT EXISTS races in Postgres."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
        for statement in statements:
            await conn.execute(statement)
