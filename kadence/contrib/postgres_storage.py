"""A storage driver for external payload storage (kadence.converter.ExternalStorage) that keeps
payloads in a PostgreSQL table: the database a Kadence deployment already runs, or another.

    converter = dataclasses.replace(DataConverter.default, external_storage=ExternalStorage(
        drivers=[PostgresStorageDriver("postgresql://kadence@db/kadence")]))

A payload is stored under the SHA-256 of its bytes, so storing it again (a command sent twice, the
same value in two runs) writes nothing new, and a claim can only ever name those bytes. Rows are
never deleted by Kadence: delete those older than the histories that may still name them
(`DELETE FROM kadence_external_payloads WHERE stored_at < now() - interval '...'`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from kadence.api.common.v1 import Payload
from kadence.converter import StorageDriver, StorageDriverClaim, StorageDriverRetrieveContext, StorageDriverStoreContext

DEFAULT_TABLE = "kadence_external_payloads"


class PostgresStorageDriver(StorageDriver):
    def __init__(self, dsn: str, *, table: str = DEFAULT_TABLE, driver_name: str = "postgres", max_connections: int = 4) -> None:
        self._dsn = dsn
        self._table = sql.Identifier(table)
        self._name = driver_name
        self._max_connections = max_connections
        self._pool: AsyncConnectionPool | None = None

    def name(self) -> str:
        return self._name

    async def store(self, context: StorageDriverStoreContext, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        rows = [(hashlib.sha256(p.SerializeToString(deterministic=True)).hexdigest(), p.SerializeToString(deterministic=True))
                for p in payloads]
        async with (await self._connections()).connection() as conn, conn.cursor() as cursor:
            await cursor.executemany(
                sql.SQL("INSERT INTO {} (key, payload) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING").format(self._table), rows,
            )
        return [StorageDriverClaim({"key": key}) for key, _ in rows]

    async def retrieve(self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        keys = [claim.claim_data["key"] for claim in claims]
        async with (await self._connections()).connection() as conn:
            rows = await (await conn.execute(
                sql.SQL("SELECT key, payload FROM {} WHERE key = ANY(%s)").format(self._table), (keys,),
            )).fetchall()
        found = {key: bytes(payload) for key, payload in rows}
        missing = [key for key in keys if key not in found]
        if missing:
            raise LookupError(
                f"external payloads {missing} are not in the table {self._table.as_string()} of {self._name!r}: "
                "they were deleted, or stored in another database (check the driver's DSN and table)"
            )
        return [Payload.FromString(found[key]) for key in keys]

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def _connections(self) -> AsyncConnectionPool:
        """The pool, opened with the table made on first use."""
        if self._pool is None:
            pool = AsyncConnectionPool(self._dsn, min_size=1, max_size=self._max_connections, open=False,
                                       kwargs={"autocommit": True})
            await pool.open(wait=True)
            async with pool.connection() as conn:
                try:
                    await conn.execute(sql.SQL(
                        "CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, payload bytea NOT NULL, "
                        "stored_at timestamptz NOT NULL DEFAULT now())"
                    ).format(self._table))
                except psycopg.errors.UniqueViolation:  # another process made it at the same moment
                    pass
            self._pool = pool
        return self._pool
