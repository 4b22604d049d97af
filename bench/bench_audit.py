"""The audit's speed and memory over a log of real histories.

    python -m bench.bench_audit --events 1000000 [--broker kafka|tansu]

Writes histories with the history state machine, as the service does (bench.bench_recovery's
HistoryWriter: start, workflow tasks, one activity, completion; a tenth of the runs left open), to
kadence.history of --partitions partitions, then runs `kadence audit replay` over it as the nightly
Job does (its own process): the invariants only, and with the code replay of every run, in one
process and with the partitions shared between two. For each it
prints events/s, the audit process's CPU-seconds and its peak memory, beside the broker's own
produce-to-consume round trip.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_recovery import HistoryWriter
from bench.bench_workflows import broker_round_trip, percentile
from bench.local import add_broker_option, describe_broker
from kadence.dev.local_stack import LocalStack
from kadence.protocol.kafka import core_topics, ensure_topics

REPO = Path(__file__).resolve().parents[1]


def audit(stack: LocalStack, *args: str) -> tuple[dict, float, float, float]:
    """The audit's summary, wall seconds, CPU-seconds and peak resident MB, from a process of its own.
    wait4 gives that process's own usage (with its pool's, for --processes; the peak is the largest
    one process's), not the maximum over every child the bench ever ran (the broker's format tool)."""
    env = {key: value for key, value in stack.env.items() if key != "KADENCE_POSTGRES_DSN"}  # the log only
    began = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen([sys.executable, "-m", "kadence.ops.cli", "audit", "replay", "--json", "--stuck-after", "0", *args],
                                   env=env, cwd=REPO, stdout=out, stderr=err)
        _, _, usage = os.wait4(process.pid, 0)
        process.returncode = 0  # reaped by wait4: Popen must not wait for it again
        elapsed = time.perf_counter() - began
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if not stdout:
        raise RuntimeError(f"the audit printed nothing: {stderr[-2000:]}")
    return json.loads(stdout), elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    add_broker_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kadence-bench-audit-") as data_dir:
        stack = LocalStack(Path(data_dir), partitions=args.partitions, broker_kind=args.broker)
        stack.start_broker()
        print(describe_broker(stack))
        try:
            ensure_topics(stack.settings, core_topics(stack.settings))
            writers = [HistoryWriter(stack, partition) for partition in range(args.partitions)]
            i = 0
            while sum(w.events for w in writers) < args.events:
                writers[i % args.partitions].run(f"order-{i}", finish=i % 10 != 0)
                i += 1
            for writer in writers:
                writer.producer.flush(60)
            records, events = sum(w.batches for w in writers), sum(w.events for w in writers)
            print(f"log:                  {records:,} records, {events:,} events, {i:,} runs (a tenth open), "
                  f"{args.partitions} partitions")
            pings = broker_round_trip(stack.settings, 200)
            print(f"broker round trip:    p50 {percentile(pings, 50):.2f} ms, p99 {percentile(pings, 99):.2f} ms (200 pings)")
            for label, extra in (
                ("invariants only", ()), ("with code replay", ("--worker-module", "bench.audit_workflows")),
                ("invariants, 2 processes", ("--processes", "2")),
                ("code replay, 2 processes", ("--processes", "2", "--worker-module", "bench.audit_workflows")),
            ):
                summary, elapsed, cpu, peak_mb = audit(stack, *extra)
                events = summary["events"]
                problems = len(summary["violations"]) + len(summary.get("divergences", []))
                print(f"{label + ':':22}{events / elapsed:,.0f} events/s ({events:,} events in {elapsed:.1f} s), "
                      f"CPU-s {cpu:.1f}, peak memory {peak_mb:.0f} MB, {problems} problems")
        finally:
            stack.stop()


if __name__ == "__main__":
    sys.exit(main())
