"""What every benchmark shares: the local broker to run on (--broker) and the CPU each process spent,
so a figure can be compared across machines and brokers."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from kadence.dev.brokers import CHOICES
from kadence.dev.local_stack import LocalStack

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def add_broker_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--broker", choices=CHOICES, default=None,
                        help="the local broker (default: $KADENCE_LOCAL_BROKER, else Apache Kafka where Java runs, else Tansu)")


def describe_broker(stack: LocalStack) -> str:
    assert stack.broker is not None and stack.broker_choice is not None
    return f"broker:               {stack.broker.name} ({stack.broker_choice.reason}), fetch wait {stack.fetch_wait_max_ms} ms"


def cpu_seconds(pid: int) -> float:
    """User plus system CPU a process has spent so far (Linux /proc; 0 for a process gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def stack_processes(stack: LocalStack) -> dict[str, int]:
    """The broker's and each service's pid, by name."""
    pids = {name: process.pid for name, process in stack.services.items()}
    if stack.broker is not None and stack.broker.process is not None:
        pids["broker"] = stack.broker.process.pid
    return pids


class CpuMeter:
    """CPU-seconds each named process spends between start() and report()."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._before: dict[str, float] = {}

    def start(self) -> None:
        self._before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def report(self, per_thousand: int | None = None) -> str:
        """The CPU-seconds each process spent; with `per_thousand` (the workflows run), also per
        1,000 of them, so runs of different sizes compare."""
        spent = {name: cpu_seconds(pid) - self._before[name] for name, pid in self.pids.items()}
        total = sum(spent.values())
        ranked = sorted(spent.items(), key=lambda item: -item[1])
        parts = ", ".join(f"{name} {seconds:.1f}" for name, seconds in ranked)
        line = f"CPU-seconds:          {total:.1f} in all: {parts}"
        if per_thousand:
            scaled = ", ".join(f"{name} {seconds * 1000 / per_thousand:.1f}" for name, seconds in ranked)
            line += f"\nper 1,000 workflows:  {total * 1000 / per_thousand:.1f} CPU-s: {scaled}"
        return line
