"""A partition's due timers fire independently of how long the records being read take to apply:
a timer held while its chunk is applied wakes the firing loop at once when it falls due before
what the loop holds (not at the chunk's commit), and a partition read to its end counts as caught
up once its own records are applied, not once the whole poll is (services/timer/store.py,
services/projection.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from services.projection import LogRecord, _caught_up_by_chunk
from services.timer.store import TimerStore, now_ms


class _Connection:
    """What TimerStore.apply asks of its transaction's connection for timers it holds in memory: a cursor it does not use."""

    @asynccontextmanager
    async def cursor(self) -> AsyncIterator[None]:
        yield None


def _setting(timer_id: str, fire_at_ms: int, offset: int) -> LogRecord:
    """A history record of partition 0 that sets one activity timeout."""
    timer = {"timer_id": timer_id, "kind": "ACTIVITY_START_TO_CLOSE", "fire_at_ms": fire_at_ms, "scheduled_event_id": 5, "attempt": 1}
    batch = {"workflow_id": "order-1", "run_id": "run-1", "first_event_id": 6, "events": [], "effects": [("Timer", timer)]}
    return LogRecord(0, offset, batch, decided_ms=now_ms())  # history decided it at once: not behind


async def _caught_up_store() -> TimerStore:
    store = TimerStore()
    store.on_assign({0})
    await asyncio.sleep(0)  # the assignment's bookkeeping runs on the loop
    store.on_caught_up(0)
    store.wake.clear()
    return store


async def test_a_timer_held_while_its_chunk_is_applied_wakes_the_firing_loop_before_the_commit() -> None:
    store = await _caught_up_store()
    now = now_ms()
    await store.apply(_Connection(), [_setting("later", now + 30_000, 1)])  # type: ignore[arg-type]
    assert store.wake.is_set()  # the first: the loop sleeps by what it holds
    store.on_commit()
    store.wake.clear()
    # Due before anything held: the loop, asleep until "later", is woken while the chunk's transaction is open.
    await store.apply(_Connection(), [_setting("due", now, 2)])  # type: ignore[arg-type]
    assert store.wake.is_set()
    assert [timer.timer_id for timer in store.take_due_in_memory(now_ms(), 10)] == ["due"]


async def test_a_timer_due_after_one_held_leaves_the_firing_loop_asleep() -> None:
    store = await _caught_up_store()
    now = now_ms()
    await store.apply(_Connection(), [_setting("soon", now + 1_000, 1)])  # type: ignore[arg-type]
    store.on_commit()
    store.wake.clear()
    await store.apply(_Connection(), [_setting("later", now + 30_000, 2)])  # type: ignore[arg-type]
    assert not store.wake.is_set()  # the loop wakes for "soon" first, and then sleeps by "later"


class _Message:
    def __init__(self, partition: int) -> None:
        self._partition = partition

    def partition(self) -> int:
        return self._partition


def test_a_partition_read_to_its_end_is_caught_up_once_its_own_records_are_applied() -> None:
    chunks: list[list[Any]] = [[_Message(0), _Message(1)], [_Message(1), _Message(2)], [_Message(2)]]
    assert _caught_up_by_chunk(chunks, [0, 1, 2, 3]) == [[3], [0], [1], [2]]
    assert _caught_up_by_chunk([], [4]) == [[4]]
