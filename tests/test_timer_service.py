"""The timer service alone (broker, Postgres, timer service; no history service), fed synthetic
timer effects: never early, never lost across SIGKILL and rebalances, near-term timers kept out
of Postgres."""

from __future__ import annotations

import asyncio
import re
import signal
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from bench.timer_load import FiredTimers, TimerLoad
from kadence.dev.local_stack import LocalStack
from kadence.protocol.postgres import apply_ddl, connection_pool
from services.projection import LogRecord
from services.timer.store import TIMERS_DDL, TimerStore, now_ms
from tests.conftest import local_stack

HORIZON_MS = 2000  # timers due within 2 s are held in memory, later ones stored


@pytest.fixture(scope="module")
def timer_stack() -> Iterator[LocalStack]:
    with local_stack(services=("timer",), timer_memory_horizon_ms=HORIZON_MS) as local:
        yield local


@pytest.fixture(scope="module")
def load(timer_stack: LocalStack) -> TimerLoad:
    """One writer for the stack: the source offsets of its batches must keep growing, or the
    timer service's fencing rule skips them as a zombie's."""
    return TimerLoad(timer_stack.settings)


@pytest.fixture
def fired(timer_stack: LocalStack) -> Iterator[FiredTimers]:
    reader = FiredTimers(timer_stack.settings, {p: 0 for p in range(timer_stack.partitions)})
    yield reader
    reader.close()


def spread(load: TimerLoad, timers: dict[str, int], partitions: int, per_batch: int = 500) -> None:
    """Write `timers` (id -> fire_at_ms) round-robin over the partitions, `per_batch` per record."""
    items = list(timers.items())
    for start in range(0, len(items), per_batch):
        load.set((start // per_batch) % partitions, items[start:start + per_batch])
    load.flush()


def wait_until_fired(fired: FiredTimers, timer_ids: set[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not timer_ids <= fired.firings.keys():
        assert time.monotonic() < deadline, f"{len(timer_ids - fired.firings.keys())} timers never fired"
        fired.poll()


def wait_for_log(stack: LocalStack, instance: str, text: str, timeout_s: float) -> None:
    log_file = stack.data_dir / "logs" / f"{instance}.log"
    deadline = time.monotonic() + timeout_s
    while not (log_file.exists() and text in log_file.read_text()):
        assert time.monotonic() < deadline, f"{instance} never logged {text!r}"
        time.sleep(0.1)


def assert_never_early(fired: FiredTimers, timers: dict[str, int]) -> None:
    early = [(tid, f.produced_at_ms - timers[tid]) for tid in timers for f in fired.firings[tid] if f.produced_at_ms < timers[tid]]
    assert early == []


def test_killed_with_10000_pending_timers_it_fires_every_one_and_none_early(
    timer_stack: LocalStack, load: TimerLoad, fired: FiredTimers,
) -> None:
    prefix = f"kill-{uuid.uuid4()}"
    now = now_ms()
    # 0.5 to 8.5 s out: the first ones are held in memory, the rest stored in Postgres.
    timers = {f"{prefix}-{i}": now + 500 + (i * 7919) % 8000 for i in range(10_000)}
    applied_before, written_before = records_applied(timer_stack, "timer"), sum(load.source_offsets.values())
    spread(load, timers, timer_stack.partitions)
    # Each dropped timer is set and dropped by the next record of its partition, as history drops
    # one, due a second after both were written. Written once the service has applied the timers
    # above: a service still working through them a second later could fire a timer whose drop it
    # has not read yet (a timer due is fired once its set is read, before the records after it).
    written = sum(load.source_offsets.values()) - written_before
    wait_until(lambda: records_applied(timer_stack, "timer") >= applied_before + written, "the timers applied", timeout_s=60)
    set_at = now_ms()
    dropped = {f"{prefix}-dropped-{i}": set_at + 1000 + i for i in range(1000)}
    for partition in range(timer_stack.partitions):
        mine = [(timer_id, at) for i, (timer_id, at) in enumerate(dropped.items()) if i % timer_stack.partitions == partition]
        load.set(partition, mine)
        load.drop(partition, [timer_id for timer_id, _ in mine])
    load.flush()

    while sum(tid in fired.firings for tid in timers) < 1000:  # the kill lands mid-run
        fired.poll()
    timer_stack.kill_service("timer")
    timer_stack.start_service("timer")

    wait_until_fired(fired, set(timers), timeout_s=60)
    assert_never_early(fired, timers)
    assert not dropped.keys() & fired.firings.keys()


def test_near_term_timers_never_reach_postgres(timer_stack: LocalStack, load: TimerLoad, fired: FiredTimers) -> None:
    prefix = f"cost-{uuid.uuid4()}"
    now = now_ms()
    near = {f"{prefix}-near-{i}": now + HORIZON_MS // 2 + i for i in range(500)}
    far = {f"{prefix}-far-{i}": now + 3_600_000 for i in range(500)}
    load.set(0, [*near.items(), *far.items()])
    load.flush()

    def stored(ids: list[str]) -> int:
        with psycopg.connect(timer_stack.postgres_dsn) as conn:
            return conn.execute("SELECT count(*) FROM kadence_timers WHERE timer_id = ANY(%s)", (ids,)).fetchone()[0]

    deadline = time.monotonic() + 30
    while stored(list(far)) < len(far):  # applied: the near ones came in the same record
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert stored(list(near)) == 0
    wait_until_fired(fired, set(near), timeout_s=30)
    assert_never_early(fired, near)
    load.drop(0, list(far))
    load.flush()


def test_a_second_instance_takes_half_the_partitions_and_the_survivor_takes_them_back(
    timer_stack: LocalStack, load: TimerLoad, fired: FiredTimers,
) -> None:
    timer_stack.start_service("timer", instance="timer-2")
    wait_for_log(timer_stack, "timer-2", "event=partitions_assigned", timeout_s=30)

    prefix = f"split-{uuid.uuid4()}"
    first = {f"{prefix}-a-{i}": now_ms() + 1000 for i in range(400)}
    spread(load, first, timer_stack.partitions, per_batch=100)
    wait_until_fired(fired, set(first), timeout_s=30)
    owners = {p: {f.identity for tid in first for f in fired.firings[tid] if f.partition == p} for p in range(timer_stack.partitions)}
    assert all(len(identities) == 1 for identities in owners.values()), owners
    assert len(set().union(*owners.values())) == 2, "both instances own partitions"

    timer_stack.kill_service("timer-2")
    second = {f"{prefix}-b-{i}": now_ms() + 1000 for i in range(400)}
    spread(load, second, timer_stack.partitions, per_batch=100)
    wait_until_fired(fired, set(second), timeout_s=60)
    assert_never_early(fired, {**first, **second})
    assert len({f.identity for tid in second for f in fired.firings[tid]}) == 1, "the survivor fires every partition's timers"


def metric(stack: LocalStack, instance: str, sample: str) -> float:
    """A sample of the instance's /metrics (0 until it answers), by its name and labels."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{stack.http_ports[instance]}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return 0
    found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0


def pending_in_memory(stack: LocalStack, instance: str) -> float:
    """The instance's kadence_timer_pending_in_memory gauge."""
    return metric(stack, instance, "kadence_timer_pending_in_memory")


def records_applied(stack: LocalStack, instance: str) -> float:
    """The history records the instance's timer projection has applied since it started."""
    return metric(stack, instance, 'kadence_projection_records_total{projection="timer"}')


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def wait_until_held(stack: LocalStack, instances: list[str], count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while sum(pending_in_memory(stack, instance) for instance in instances) < count:
        assert time.monotonic() < deadline, f"{instances} never held {count} timers in memory"
        time.sleep(0.05)


def test_memory_timers_pending_across_rebalances_fire_exactly_once(
    timer_stack: LocalStack, load: TimerLoad, fired: FiredTimers,
) -> None:
    """A second instance joins while timers are held in memory, then leaves while it holds some:
    the instance that keeps partitions re-reads them from their pinned positions, and the one that
    gets partitions back re-reads what the other advanced. Every timer fires, once."""
    held = {"KADENCE_TIMER_MEMORY_HORIZON_MS": "20000"}  # every timer of this test in memory
    timer_stack.kill_service("timer", signal.SIGTERM)
    timer_stack.start_service("timer", env=held)
    try:
        prefix = f"rebalance-{uuid.uuid4()}"
        partitions = timer_stack.partitions
        # Pending in the one instance when the second joins (it takes a few seconds to start).
        joined = {f"{prefix}-joined-{i}": now_ms() + 8000 for i in range(400)}
        spread(load, joined, partitions, per_batch=25)
        wait_until_held(timer_stack, ["timer"], len(joined), timeout_s=30)
        timer_stack.start_service("timer", instance="timer-2", env=held)
        wait_for_log(timer_stack, "timer-2", "event=partitions_assigned", timeout_s=30)
        wait_until_fired(fired, set(joined), timeout_s=30)

        # Pending in both when the second leaves: the first takes back partitions the second advanced.
        left = {f"{prefix}-left-{i}": now_ms() + 4000 for i in range(400)}
        spread(load, left, partitions, per_batch=25)
        wait_until_held(timer_stack, ["timer", "timer-2"], len(left), timeout_s=30)
        assert pending_in_memory(timer_stack, "timer-2") > 0, "the second instance holds some of the timers"
        timer_stack.kill_service("timer-2", signal.SIGTERM)
        wait_until_fired(fired, set(left), timeout_s=30)

        timers = {**joined, **left}
        assert_never_early(fired, timers)
        twice = {tid: len(fired.firings[tid]) for tid in timers if len(fired.firings[tid]) != 1}
        assert twice == {}
    finally:
        timer_stack.services.pop("timer-2", None)
        timer_stack.kill_service("timer", signal.SIGTERM)
        timer_stack.start_service("timer")


def test_timers_read_again_after_a_kill_wait_for_their_drops_before_firing(
    timer_stack: LocalStack, load: TimerLoad, fired: FiredTimers,
) -> None:
    """After a SIGKILL the service reads again from the pinned position the timers it fired since,
    and further on the drops history wrote once it accepted their firings. It holds off firing a
    partition's timers until it has read the partition to its end, so those timers never fire twice
    however many reads the stretch takes."""
    held = {"KADENCE_TIMER_MEMORY_HORIZON_MS": "200000"}  # the pins are held in memory
    timer_stack.kill_service("timer", signal.SIGTERM)
    timer_stack.start_service("timer", env=held)
    prefix = f"refire-{uuid.uuid4()}"
    partitions = range(timer_stack.partitions)
    try:
        for partition in partitions:  # every partition's position pinned here for the whole test
            load.set(partition, [(f"{prefix}-pin-{partition}", now_ms() + 120_000)])
        quick = {f"{prefix}-quick-{i}": now_ms() + 1000 for i in range(400)}
        spread(load, quick, timer_stack.partitions, per_batch=25)
        wait_until_fired(fired, set(quick), timeout_s=30)
        for partition in partitions:
            for _ in range(3000):  # other work: the drops come reads after the timers they drop
                load.set(partition, [])
            load.drop(partition, [tid for i, tid in enumerate(quick) if (i // 25) % timer_stack.partitions == partition])
        load.flush()
        timer_stack.kill_service("timer")
        timer_stack.start_service("timer", env=held)
        timer_stack.wait_until_ready()
        deadline = time.monotonic() + 2  # and what it fires once caught up
        while time.monotonic() < deadline:
            fired.poll()
        twice = {tid: len(fired.firings[tid]) for tid in quick if len(fired.firings[tid]) != 1}
        assert twice == {}
    finally:
        for partition in partitions:
            load.drop(partition, [f"{prefix}-pin-{partition}"])
        load.flush()
        timer_stack.kill_service("timer", signal.SIGTERM)
        timer_stack.start_service("timer")


async def test_a_timers_table_of_an_earlier_release_gains_the_traceparent_and_its_timers_still_fire(stack: LocalStack) -> None:
    """The store's DDL adds `traceparent` to a kadence_timers created without it: the timers stored
    before fire untraced, those stored after keep the traceparent of the record that set them."""
    database = f"timers_{uuid.uuid4().hex}"
    with psycopg.connect(stack.postgres_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {database}")
    dsn = make_conninfo(stack.postgres_dsn, dbname=database)
    earlier = TIMERS_DDL[0]  # the table as releases before tracing created it (the column is added by a later statement)
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(earlier)
            await conn.execute("INSERT INTO kadence_timers VALUES ('before', 0, 'wf', 'run', 'USER_TIMER', 1, 5, 1)")
            await apply_ddl(conn, TIMERS_DDL)
            store = TimerStore(memory_horizon_ms=0)  # every timer stored
            effect = {"timer_id": "after", "kind": "USER_TIMER", "fire_at_ms": now_ms() + 60_000, "scheduled_event_id": 6, "attempt": 1}
            batch = {"workflow_id": "wf", "run_id": "run", "first_event_id": 6, "events": [], "next_run": None,
                     "effects": [("Timer", effect)]}
            async with conn.transaction():
                await store.apply(conn, [LogRecord(0, 7, batch, traceparent)])
        store.on_assign({0})
        await asyncio.sleep(0)  # the assignment takes effect on the loop
        store.on_caught_up(0)
        async with connection_pool(dsn, min_size=1, max_size=1) as pool:
            due = await store.take_due_stored(pool, now_ms() + 120_000, 10)
        assert {(timer.timer_id, timer.traceparent) for timer in due} == {("before", ""), ("after", traceparent)}
    finally:
        with psycopg.connect(stack.postgres_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {database} WITH (FORCE)")
