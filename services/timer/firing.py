"""Firing due timers: produce TimeoutFired to the timer's command partition, then forget it.

A timer never fires before fire_at_ms. One that fires twice (a crash between produce and
forget, a rebalance, a re-read of the log) is rejected by the history service as stale.

While Postgres is away the timers held in memory still fire; the stored ones wait for it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

import psycopg
from prometheus_client import Counter, Gauge, Histogram
from psycopg_pool import AsyncConnectionPool

from kadence.protocol import topics, tracing
from kadence.protocol.codec import command_codec
from kadence.protocol.kafka import AsyncProducer
from kadence.protocol.names import CommandType
from kadence.protocol.postgres import Backoff, describe
from services.timer.store import Timer, TimerStore, now_ms

log = logging.getLogger("kadence.timer")

FIRE_BATCH = 1000
MAX_SLEEP_S = 1.0
IDENTITY = f"kadence-timer@{socket.gethostname()}:{os.getpid()}"

FIRED = Counter("kadence_timer_fired_total", "Timers fired, by where they were held", ["held_in"])
LAG = Histogram("kadence_timer_firing_lag_seconds", "Fire time to firing", buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5, 60))
PENDING = Gauge("kadence_timer_pending_in_memory", "Near-term timers held in memory")
WAITING = Gauge("kadence_timer_waiting_for_history",
                "Timeouts due that wait for the history service to work through its backlog before they fire")


async def fire_timers(pool: AsyncConnectionPool, producer: AsyncProducer, store: TimerStore, stop: asyncio.Event) -> None:
    codec = command_codec()
    stored_backoff = Backoff("timer_take_due_stored")
    stored_paused_until = 0.0  # monotonic: Postgres did not answer, the stored timers wait until then
    while not stop.is_set():
        store.wake.clear()
        now = now_ms()
        from_memory = store.take_due_in_memory(now, FIRE_BATCH)
        from_postgres: list[Timer] = []
        if store.stored_may_be_due(now) and time.monotonic() >= stored_paused_until:
            try:
                from_postgres = await store.take_due_stored(pool, now, FIRE_BATCH)
                stored_backoff.succeeded()
            except psycopg.OperationalError as exc:
                stored_paused_until = time.monotonic() + stored_backoff.failed(exc)
                store.stored_due_ms = None  # not known: ask again then, and sleep by the memory's timers meanwhile
        due = from_memory + from_postgres
        if due:
            # Until delivered: a timer is forgotten only once its firing is in kadence.commands,
            # however long the broker is away (a repeat is rejected as stale).
            traced = [_fired_span(timer) for timer in due]
            await asyncio.gather(*(
                producer.produce(topics.COMMANDS, codec.encode(_command(timer)), timer.workflow_id.encode(), partition=timer.partition,
                                 headers=codec.headers() + tracing.headers_of(span), until_delivered=True)
                for timer, span in zip(due, traced, strict=True)
            ))
            store.fired(from_memory)
            if from_postgres:
                await _forget_stored(pool, store, from_postgres)
            _log_fired(due, now)
            FIRED.labels("memory").inc(len(from_memory))
            FIRED.labels("postgres").inc(len(from_postgres))
            for timer, span in zip(due, traced, strict=True):
                LAG.observe(max(0, now - timer.fire_at_ms) / 1000, exemplar=tracing.exemplar(span))
            PENDING.set(len(store.in_memory))
            continue
        PENDING.set(len(store.in_memory))
        WAITING.set(store.progress.waiting)
        sleep_s = min(MAX_SLEEP_S, max(0.0, (store.next_due_ms() - now) / 1000))
        try:
            await asyncio.wait_for(store.wake.wait(), timeout=sleep_s)
        except TimeoutError:
            pass


async def _forget_stored(pool: AsyncConnectionPool, store: TimerStore, timers: list[Timer]) -> None:
    try:
        await store.delete_stored(pool, timers)
    except psycopg.OperationalError as exc:
        store.stored_due_ms = None
        log.warning("event=fired_timers_not_deleted timers=%d error=%r consequence=%r", len(timers), describe(exc),
                    "they fire again once Postgres answers, and the history service rejects the repeats as stale")


def _command(timer: Timer) -> dict[str, object]:
    return {"workflow_id": timer.workflow_id, "identity": IDENTITY, "command": (CommandType.TimeoutFired, {
        "run_id": timer.run_id, "timer_id": timer.timer_id, "kind": timer.kind,
        "scheduled_event_id": timer.scheduled_event_id, "attempt": timer.attempt,
    })}


def _fired_span(timer: Timer) -> str | None:
    """A span for the firing, the child of the record that set the timer (from the timer's due time
    to now: its lag); the TimeoutFired command carries it, so the trace goes on through the timer."""
    if not timer.traceparent:
        return None
    return tracing.later("timer fired", timer.traceparent, start_ms=timer.fire_at_ms, attributes={
        "kadence.workflow_id": timer.workflow_id, "kadence.run_id": timer.run_id, "kadence.timer_id": timer.timer_id,
        "kadence.timer.kind": timer.kind, "messaging.destination.name": topics.COMMANDS,
    })


def _log_fired(timers: list[Timer], now: int) -> None:
    if log.isEnabledFor(logging.DEBUG):  # one line per timer is too many at thousands a second
        for timer in timers:
            log.debug("event=timer_fired workflow_id=%s run_id=%s timer_id=%s kind=%s lag_ms=%d",
                      timer.workflow_id, timer.run_id, timer.timer_id, timer.kind, now - timer.fire_at_ms)
