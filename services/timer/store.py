"""Pending timers: near-term ones in memory, long ones in Postgres.

Most timers (workflow task, start-to-close and heartbeat timeouts) are dropped within
milliseconds because the work finished, so they must not cost a Postgres round trip each. A
timer due within the memory horizon is held in memory only; a later one is upserted into
`kadence_timers`. Memory is rebuilt from the log: the stored position of a partition never
passes the record that set a timer still held in memory (the timer *pins* it), so after a crash
or a rebalance the owner re-reads from there and holds the same timers again. A timer fired since
is forgotten again as the re-read reaches its drop: history drops each timer whose firing it
accepts, in the same record. The drop may come reads after the timer, so nothing of a partition
fires until the partition is read to its end after its assignment, and what was read of it applied
(timers due meanwhile fire that much late). Only a timer whose firing history had not applied yet
fires again, and history rejects that second firing as stale.

A timer held in memory may fire as soon as it is held, before its chunk's transaction commits:
the firing loop is woken for it then. Fired, it no longer pins its record; a chunk applied again
(its transaction failed) holds it again, and history rejects the second firing as stale.

A timer set again with the same id (a heartbeat re-arming its timeout) replaces the earlier one
where it lives; if it moves from Postgres to memory the stored row is left to fire as a stale timer.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import time
from dataclasses import astuple, dataclass
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from kadence.protocol.events import run_sections
from kadence.protocol.names import EffectType
from services.projection import LogRecord
from services.timer.progress import HistoryProgress

TIMERS_DDL = [
    """
    CREATE TABLE IF NOT EXISTS kadence_timers (
        timer_id text PRIMARY KEY,
        partition int NOT NULL,
        workflow_id text NOT NULL,
        run_id text NOT NULL,
        kind text NOT NULL,
        fire_at_ms bigint NOT NULL,
        scheduled_event_id bigint NOT NULL,
        attempt int NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS kadence_timers_due ON kadence_timers (partition, fire_at_ms)",
    # Added for tracing: a table of an earlier release gains it, its timers fire untraced.
    "ALTER TABLE kadence_timers ADD COLUMN IF NOT EXISTS traceparent text NOT NULL DEFAULT ''",
]

DEFAULT_MEMORY_HORIZON_MS = 60_000
_NEVER = 2**62


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Timer:
    """One pending timer (columns in the order of `kadence_timers`)."""

    timer_id: str
    partition: int
    workflow_id: str
    run_id: str
    kind: str
    fire_at_ms: int
    scheduled_event_id: int
    attempt: int
    traceparent: str = ""  # of the record that set it, when the service traces: its firing continues that trace


class TimerStore:
    """The timer service's projection of kadence.history, and the source of due timers."""

    name = "timer"
    ddl = TIMERS_DDL

    def __init__(self, memory_horizon_ms: int = DEFAULT_MEMORY_HORIZON_MS) -> None:
        self.memory_horizon_ms = memory_horizon_ms
        self.owned: frozenset[int] = frozenset()
        # Owned partitions read to their end since assigned: only their timers fire.
        self.caught_up: set[int] = set()
        self._held_back: dict[int, list[tuple[int, str]]] = collections.defaultdict(list)  # heap entries, till caught up
        self.wake = asyncio.Event()
        self.in_memory: dict[str, Timer] = {}
        self._due: list[tuple[int, str]] = []  # heap of (fire_at_ms, timer_id); entries of replaced timers are skipped
        # Per partition, the timers held in memory and the offset of the record that set each, oldest first.
        self._pins: dict[int, collections.OrderedDict[str, int]] = collections.defaultdict(collections.OrderedDict)
        self.stored_due_ms: int | None = None  # earliest fire time in Postgres; None: not known, ask
        self._stored_version = 0  # bumped by every commit that stored timers
        self._stored_in_chunk: list[Timer] = []
        self._changed = False
        # How far history has decided each partition: timeouts wait for it while it works through a backlog.
        self.progress = HistoryProgress()
        self._decided_in_chunk: dict[int, int] = {}
        self._loop = asyncio.get_running_loop()

    # ---- the projection ---------------------------------------------------------------------

    async def apply(self, conn: psycopg.AsyncConnection, records: list[LogRecord]) -> None:
        # Last word per timer wins, so a timer set and dropped in the same chunk costs nothing.
        final: dict[str, tuple[Timer, int] | None] = {}
        decided: dict[int, int] = {}
        for record in records:
            decided[record.partition] = max(decided.get(record.partition, 0), record.decided_ms)
            for section in run_sections(record.batch):
                for effect_type, effect in section.effects:
                    if effect_type == EffectType.Timer:
                        timer = Timer(
                            effect["timer_id"], record.partition, record.batch["workflow_id"], section.run_id, effect["kind"],
                            effect["fire_at_ms"], effect["scheduled_event_id"], effect["attempt"], record.traceparent or "",
                        )
                        final[timer.timer_id] = (timer, record.offset)
                    elif effect_type == EffectType.DropTimer:
                        final[effect["timer_id"]] = None
        horizon = now_ms() + self.memory_horizon_ms
        stored: list[Timer] = []
        deleted: list[str] = []
        for timer_id, entry in final.items():
            if entry is None:
                if not self._forget(timer_id):
                    deleted.append(timer_id)
            elif entry[0].fire_at_ms <= horizon:
                self._hold(*entry)
            else:
                self._forget(timer_id)
                stored.append(entry[0])
        async with conn.cursor() as cur:
            if deleted:
                await cur.execute("DELETE FROM kadence_timers WHERE timer_id = ANY(%s)", (deleted,))
            if stored:
                await cur.executemany(
                    "INSERT INTO kadence_timers (timer_id, partition, workflow_id, run_id, kind, fire_at_ms, scheduled_event_id, attempt, "
                    "traceparent) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (timer_id) DO UPDATE SET fire_at_ms = EXCLUDED.fire_at_ms, traceparent = EXCLUDED.traceparent",
                    [astuple(t) for t in stored],
                )
        self._stored_in_chunk = stored
        self._changed = bool(final)
        self._decided_in_chunk = decided

    async def salvage(self, conn: psycopg.AsyncConnection, record: LogRecord) -> None:
        """Nothing: no caller waits on a timer; its run's timeouts stay unset (the dead letter says so)."""

    def resume_offset(self, partition: int, next_offset: int) -> int:
        """Where to resume this partition: before the oldest record whose timer is still in memory."""
        pins = self._pins.get(partition)
        return min(next_offset, next(iter(pins.values()))) if pins else next_offset

    def on_commit(self) -> None:
        self.progress.observed(self._decided_in_chunk, now_ms())
        self._decided_in_chunk = {}  # a commit of no records (all fenced out, say) says nothing of history
        # Only now may the firing loop read the new stored timers (a read before the commit misses
        # them): their earliest fire time joins what it knows of the stored ones.
        if self._stored_in_chunk:
            self._stored_version += 1
            if self.stored_due_ms is not None:
                self.stored_due_ms = min(self.stored_due_ms, min(t.fire_at_ms for t in self._stored_in_chunk))
        if self._changed:
            self.wake.set()

    def on_assign(self, partitions: set[int]) -> None:
        self.owned = self.owned | partitions
        self._loop.call_soon_threadsafe(self._assigned, partitions)

    def on_caught_up(self, partition: int) -> None:
        # Timers read again are now dropped if they fired (their drop is read too): they may fire.
        if partition not in self.owned or partition in self.caught_up:
            return
        self.caught_up.add(partition)
        for entry in self._held_back.pop(partition, []):
            heapq.heappush(self._due, entry)
        self._forget_stored_due()

    def on_revoke(self, partitions: set[int]) -> None:
        # The new owner re-reads the log from the pinned position and holds these timers itself.
        self.owned = self.owned - partitions
        self._loop.call_soon_threadsafe(self._release, partitions)

    def _assigned(self, partitions: set[int]) -> None:
        self.caught_up -= partitions
        self._forget_stored_due()

    def _forget_stored_due(self) -> None:
        self.stored_due_ms = None
        self.wake.set()

    def _release(self, partitions: set[int]) -> None:
        self.caught_up -= partitions
        self.progress.forget(partitions)
        for partition in partitions:
            self._held_back.pop(partition, None)
            for timer_id in self._pins.pop(partition, {}):
                self.in_memory.pop(timer_id, None)

    def _hold(self, timer: Timer, set_at_offset: int) -> None:
        # An equal timer held already (a chunk applied again after its transaction failed) stays as
        # it is: the firing loop may be sending it, and `fired` forgets only the object it sent.
        if self.in_memory.get(timer.timer_id) != timer:
            if not self._due or timer.fire_at_ms < self._due[0][0]:
                # The firing loop may sleep past it: woken now, not at the chunk's commit, it fires
                # at its time however long the chunk's transaction takes (fired before the commit,
                # it unpins its record; a chunk applied again holds it again, and history refuses
                # the second firing as stale).
                self.wake.set()
            self.in_memory[timer.timer_id] = timer
            heapq.heappush(self._due, (timer.fire_at_ms, timer.timer_id))
        pins = self._pins[timer.partition]
        pins.pop(timer.timer_id, None)
        pins[timer.timer_id] = set_at_offset

    def _forget(self, timer_id: str) -> bool:
        timer = self.in_memory.pop(timer_id, None)
        if timer is None:
            return False
        self._pins[timer.partition].pop(timer_id, None)
        return True

    # ---- due timers, for the firing loop ------------------------------------------------------

    def take_due_in_memory(self, now: int, limit: int) -> list[Timer]:
        """Near-term timers due at `now` (they stay pinned until `fired` says they were sent); a
        timeout due while history works through a backlog waits for it (services/timer/progress.py)."""
        now_s = time.monotonic()
        for entry in self.progress.released(now_s):
            heapq.heappush(self._due, entry)
        due: list[Timer] = []
        while self._due and self._due[0][0] <= now and len(due) < limit:
            fire_at, timer_id = heapq.heappop(self._due)
            timer = self.in_memory.get(timer_id)
            if timer is None or timer.fire_at_ms != fire_at or timer.partition not in self.owned:
                continue
            if timer.partition not in self.caught_up:
                self._held_back[timer.partition].append((fire_at, timer_id))
            elif self.progress.waits(timer.partition, timer.kind, fire_at, now_s):
                self.progress.wait(timer.partition, fire_at, timer_id)
            else:
                due.append(timer)
        return due

    def fired(self, timers: list[Timer]) -> None:
        for timer in timers:
            if self.in_memory.get(timer.timer_id) is timer:  # not set again while it was being sent
                self._forget(timer.timer_id)

    def next_due_ms(self) -> int:
        while self._due and self.in_memory.get(self._due[0][1]) is None:
            heapq.heappop(self._due)
        memory = self._due[0][0] if self._due else _NEVER
        return min(memory, _NEVER if self.stored_due_ms is None else self.stored_due_ms)

    def stored_may_be_due(self, now: int) -> bool:
        return self.stored_due_ms is None or self.stored_due_ms <= now

    async def take_due_stored(self, pool: AsyncConnectionPool, now: int, limit: int) -> list[Timer]:
        """Stored timers due at `now`; learns the next stored fire time when none are due."""
        owned = list(self.owned & self.caught_up)
        version = self._stored_version
        async with pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT timer_id, partition, workflow_id, run_id, kind, fire_at_ms, scheduled_event_id, attempt, traceparent "
                "FROM kadence_timers WHERE partition = ANY(%s) AND fire_at_ms <= %s ORDER BY fire_at_ms LIMIT %s",
                (owned, now, limit),
            )).fetchall()
            if not rows:
                row: Any = await (await conn.execute(
                    "SELECT min(fire_at_ms) FROM kadence_timers WHERE partition = ANY(%s)", (owned,),
                )).fetchone()
                if version == self._stored_version:  # else timers stored meanwhile may be earlier: ask again
                    self.stored_due_ms = _NEVER if row[0] is None else row[0]
        return [Timer(*row) for row in rows]

    async def delete_stored(self, pool: AsyncConnectionPool, timers: list[Timer]) -> None:
        async with pool.connection() as conn:
            await conn.execute("DELETE FROM kadence_timers WHERE timer_id = ANY(%s)", ([t.timer_id for t in timers],))
        self.stored_due_ms = None  # more may be due: ask again
