"""The timer service under load: firing lag, a million pending timers, restart with them.

    python -m bench.bench_timers --rate 1000 --seconds 10 --pending 1000000 [--broker kafka|tansu]

On a stack of broker, Postgres and the timer service only, fed synthetic timer effects:
1. firing lag at `--rate` timers a second for `--seconds`, half of them due in 0.5 s (held in
   memory), half due in 3 s (past the 1 s memory horizon: stored in Postgres); the lag is the
   TimeoutFired record's CreateTime minus the timer's fire time;
2. `--pending` timers due in an hour, written as fast as the service takes them: the time to
   store them and the service's resident memory before and after;
3. SIGKILL and restart with them pending: the time until a timer due at once fires.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import psycopg

from bench.local import add_broker_option, describe_broker, resident_bytes
from bench.timer_load import FiredTimers, TimerLoad
from kadence.dev.local_stack import LocalStack
from services.timer.store import now_ms

HORIZON_MS = 1000


def rss_mb(stack: LocalStack) -> float:
    return (resident_bytes(stack.services["timer"].pid) or 0) / 2**20


def percentiles(values: list[int]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered):.0f} ms, p99 {p99} ms, max {ordered[-1]} ms"


def rows_inserted(stack: LocalStack) -> int:
    """Rows ever inserted into kadence_timers (Postgres's statistics, flushed about once a second)."""
    time.sleep(2)
    with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = 'kadence_timers'").fetchone()
    return row[0] if row else 0


def firing_lag(stack: LocalStack, load: TimerLoad, fired: FiredTimers, rate: int, seconds: int) -> None:
    inserted_before = rows_inserted(stack)
    due: dict[str, int] = {}
    per_tick = max(1, rate // 100)
    began = time.monotonic()
    for tick in range(seconds * 100):
        now = now_ms()
        timers = {f"lag-{tick}-{i}": now + (500 if i % 2 == 0 else 3000) for i in range(per_tick)}
        due.update(timers)
        load.set(tick % stack.partitions, timers.items())
        load.producer.poll(0)
        fired.poll(0)
        time.sleep(max(0.0, began + (tick + 1) / 100 - time.monotonic()))
    load.flush()
    deadline = time.monotonic() + 60
    while not due.keys() <= fired.firings.keys() and time.monotonic() < deadline:
        fired.poll()
    lags = {t: fired.firings[t][0].produced_at_ms - fire_at for t, fire_at in due.items() if t in fired.firings}
    memory = [lag for t, lag in lags.items() if int(t.rsplit("-", 1)[1]) % 2 == 0]
    stored = [lag for t, lag in lags.items() if int(t.rsplit("-", 1)[1]) % 2 == 1]
    print(f"firing lag at {rate}/s for {seconds} s ({len(due)} timers, {len(due) - len(memory) - len(stored)} not fired):")
    print(f"  held in memory:     {percentiles(memory)}")
    print(f"  stored in Postgres: {percentiles(stored)}")
    print(f"  rows written to kadence_timers: {rows_inserted(stack) - inserted_before:,} for {len(due):,} timers "
          f"({len(stored):,} of them past the memory horizon)")


def million_pending(stack: LocalStack, load: TimerLoad, pending: int) -> None:
    before = rss_mb(stack)
    began = time.monotonic()
    fire_at = now_ms() + 3_600_000
    for start in range(0, pending, 1000):
        load.set((start // 1000) % stack.partitions, ((f"pending-{i}", fire_at) for i in range(start, start + 1000)))
    load.flush()
    written = time.monotonic() - began
    with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
        while conn.execute("SELECT count(*) FROM kadence_timers").fetchone()[0] < pending:
            time.sleep(0.5)
    stored = time.monotonic() - began
    print(f"{pending:,} pending timers: written in {written:.1f} s, stored after {stored:.1f} s ({pending / stored:,.0f}/s)")
    print(f"  timer service memory: {before:.0f} MB before, {rss_mb(stack):.0f} MB with them pending")


def restart_with_pending(stack: LocalStack, load: TimerLoad, fired: FiredTimers) -> None:
    stack.kill_service("timer")
    began = time.monotonic()
    stack.start_service("timer")
    load.set(0, [("after-restart", now_ms())])
    load.flush()
    while "after-restart" not in fired.firings:
        fired.poll()
    print(f"restart with them pending: a timer due at once fired {time.monotonic() - began:.1f} s after the restart began")
    print(f"  timer service memory after the restart: {rss_mb(stack):.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--pending", type=int, default=1_000_000)
    add_broker_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kadence-bench-timers-") as data_dir:
        stack = LocalStack(Path(data_dir), partitions=8, timer_memory_horizon_ms=HORIZON_MS, broker_kind=args.broker)
        try:
            stack.start(services=("timer",))
            print(describe_broker(stack))
            load = TimerLoad(stack.settings)
            fired = FiredTimers(stack.settings, {p: 0 for p in range(stack.partitions)})
            time.sleep(3)  # the service joins its consumer group
            firing_lag(stack, load, fired, args.rate, args.seconds)
            million_pending(stack, load, args.pending)
            restart_with_pending(stack, load, fired)
            fired.close()
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
