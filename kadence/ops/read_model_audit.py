"""The read-model audit: fold kadence.history into a scratch schema with the visibility
projector's own code, and compare it row by row with the live read model (executions, events,
search attributes, command outcomes). With repair, the live rows that differ are replaced by the
log's (docs/operations.md, "The read model disagrees with the log").

The live read model moves on while the audit runs: the log is folded up to the positions the live
projector had stored when the audit began, and runs the projector has written since are left out of
the comparison (counted as changed during the audit).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from kadence.protocol import topics
from kadence.protocol.codec import UndecodableRecord, history_batch_codec
from kadence.protocol.fence import PartitionFences
from kadence.protocol.kafka import position, read_to_end
from kadence.protocol.settings import KafkaSettings
from services.projection import MAX_CHUNK_RECORDS, LogRecord
from services.visibility.projector import VisibilityProjector

# Each table the projector writes: its key, and the columns the log decides.
TABLES = {
    "kadence_executions": (("workflow_id", "run_id"), ("workflow_type", "task_queue", "status", "start_time", "close_time",
                                                       "history_length", "result", "failure", "next_run_id", "search_attributes",
                                                       "memo")),
    "kadence_events": (("workflow_id", "run_id", "event_id"), ("event_type", "event_time", "event")),
    "kadence_command_outcomes": (("request_id",), ("workflow_id", "run_id", "accepted", "cause", "reason", "result", "failure")),
}
# The visibility service deletes answers past their retention: one the log gives and the live read
# model lacks is not a difference.
RETAINED = "kadence_command_outcomes"


@dataclass(frozen=True)
class Difference:
    table: str
    key: tuple[str, ...]
    what: str  # "missing in the live read model", "not in the log", or the columns that differ

    def __str__(self) -> str:
        return f"{self.table} {'/'.join(self.key)}: {self.what}"


@dataclass
class ReadModelReport:
    records: int = 0
    compared: dict[str, int] = field(default_factory=dict)  # rows the log gives, by table
    differences: list[Difference] = field(default_factory=list)
    changed_during_audit: int = 0  # workflow ids the live projector wrote after the audit began
    repaired: int = 0

    def summary(self) -> dict[str, object]:
        return {"records": self.records, "compared": self.compared, "differences": [str(d) for d in self.differences],
                "changed_during_audit": self.changed_during_audit, "repaired": self.repaired}


async def audit_read_model(settings: KafkaSettings, dsn: str, *, repair: bool = False) -> ReadModelReport:
    report = ReadModelReport()
    scratch = f"kadence_audit_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        began = await _live_positions(conn)
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(scratch)))
        try:
            await _fold(conn, scratch, settings, began, report)
            async with conn.transaction():
                now = await _live_positions(conn)
                changed = _workflow_ids_between(settings, began, now)
                report.changed_during_audit = len(changed)
                for table, (key, columns) in TABLES.items():
                    differences, compared = await _compare(conn, scratch, table, key, columns, changed)
                    report.compared[table] = compared
                    report.differences += differences
                    if repair:
                        report.repaired += await _repair(conn, scratch, table, key, columns, differences)
        finally:
            await conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(scratch)))
    return report


async def _live_positions(conn: psycopg.AsyncConnection) -> dict[int, int]:
    """How far the live visibility projector has folded each partition."""
    rows = await (await conn.execute(
        "SELECT partition, next_offset FROM kadence_consumer_offsets WHERE consumer = %s", (VisibilityProjector.name,),
    )).fetchall()
    return dict(rows)


async def _fold(conn: psycopg.AsyncConnection, scratch: str, settings: KafkaSettings, to: dict[int, int], report: ReadModelReport) -> None:
    """The log up to `to`, folded into the scratch schema as the live projector folds it."""
    projector = VisibilityProjector(notify=False)
    await conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(scratch)))
    for statement in projector.ddl:
        await conn.execute(statement)
    fences = PartitionFences()
    codec = history_batch_codec()
    chunk: list[LogRecord] = []
    for msg in read_to_end(settings, topics.HISTORY, {p: 0 for p, end in to.items() if end > 0}):
        partition, offset = position(msg)
        if offset >= to[partition]:
            continue
        report.records += 1
        try:
            batch = codec.decode(msg.value(), msg.headers())
        except UndecodableRecord:  # the live projector dead-letters it too; `kadence audit replay` reports it
            continue
        if fences.admit(partition, offset, batch):
            chunk.append(LogRecord(partition, offset, batch))
        if len(chunk) >= MAX_CHUNK_RECORDS:
            await _apply(conn, projector, chunk)
    await _apply(conn, projector, chunk)
    await conn.execute("RESET search_path")


async def _apply(conn: psycopg.AsyncConnection, projector: VisibilityProjector, chunk: list[LogRecord]) -> None:
    async with conn.transaction():
        await projector.apply(conn, chunk)
    chunk.clear()


def _workflow_ids_between(settings: KafkaSettings, began: dict[int, int], now: dict[int, int]) -> set[str]:
    """The workflow ids of the records the live projector folded while the audit ran."""
    moved = {p: began.get(p, 0) for p, offset in now.items() if offset > began.get(p, 0)}
    codec = history_batch_codec()
    workflow_ids: set[str] = set()
    for msg in read_to_end(settings, topics.HISTORY, moved):
        partition, offset = position(msg)
        if offset < now[partition]:
            workflow_ids.add(codec.decode(msg.value(), msg.headers())["workflow_id"])
    return workflow_ids


async def _compare(conn: psycopg.AsyncConnection, scratch: str, table: str, key: tuple[str, ...], columns: tuple[str, ...],
                   changed: set[str]) -> tuple[list[Difference], int]:
    log_table, live_table = sql.Identifier(scratch, table), sql.Identifier("public", table)
    keys = sql.SQL(", ").join(sql.Identifier(k) for k in key)
    differs = sql.SQL(" OR ").join(
        sql.SQL("log.{c} IS DISTINCT FROM live.{c}").format(c=sql.Identifier(c)) for c in columns)
    names = sql.SQL(", ").join(sql.Literal(c) for c in columns)
    flags = sql.SQL(", ").join(sql.SQL("log.{c} IS DISTINCT FROM live.{c}").format(c=sql.Identifier(c)) for c in columns)
    query = sql.SQL(
        "SELECT {coalesced}, log.{first} IS NULL, live.{first} IS NULL, ARRAY[{names}], ARRAY[{flags}] "
        "FROM {log} AS log FULL OUTER JOIN {live} AS live USING ({keys}) "
        "WHERE (log.{first} IS NULL OR live.{first} IS NULL OR {differs}) AND NOT (COALESCE(log.workflow_id, live.workflow_id) = ANY(%s))"
    ).format(
        coalesced=sql.SQL(", ").join(sql.Identifier(k) for k in key), first=sql.Identifier(key[0]), names=names, flags=flags,
        log=log_table, live=live_table, keys=keys, differs=differs,
    )
    differences = []
    for row in await (await conn.execute(query, (list(changed),))).fetchall():
        row_key, not_in_log, not_live, column_names, flagged = tuple(str(v) for v in row[:len(key)]), *row[len(key):]
        if not_live:
            if table == RETAINED:
                continue
            what = "missing in the live read model"
        elif not_in_log:
            what = "not in the log"
        else:
            what = "differs in " + ", ".join(name for name, flag in zip(column_names, flagged, strict=True) if flag)
        differences.append(Difference(table, row_key, what))
    compared = (await (await conn.execute(sql.SQL("SELECT count(*) FROM {}").format(log_table))).fetchone())[0]  # type: ignore[index]
    return differences, compared


async def _repair(conn: psycopg.AsyncConnection, scratch: str, table: str, key: tuple[str, ...], columns: tuple[str, ...],
                  differences: Iterable[Difference]) -> int:
    """Replace the live rows that differ with the log's (a live row the log lacks is deleted)."""
    matches = sql.SQL(" AND ").join(sql.SQL("{k} = %s").format(k=sql.Identifier(k)) for k in key)
    every = sql.SQL(", ").join(sql.Identifier(c) for c in (*key, *columns))
    repaired = 0
    for difference in differences:
        await conn.execute(sql.SQL("DELETE FROM {} WHERE {}").format(sql.Identifier("public", table), matches), difference.key)
        await conn.execute(sql.SQL("INSERT INTO {live} ({every}) SELECT {every} FROM {log} WHERE {matches}").format(
            live=sql.Identifier("public", table), every=every, log=sql.Identifier(scratch, table), matches=matches), difference.key)
        repaired += 1
    return repaired
