"""What every benchmark shares: the local broker to run on (--broker) and the CPU each process spent,
so a figure can be compared across machines and brokers."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
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


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (field 3 on); None for a process gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def resident_bytes(pid: int) -> int | None:
    """A process's resident set size now (Linux /proc); None for a process gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def cpu_seconds(pid: int, *, with_children: bool = False) -> float:
    """User plus system CPU a process has spent so far (Linux /proc; 0 for a process gone). With
    `with_children`, its living descendants' too and what its exited children spent: Postgres
    serves each connection from a process of its own."""
    fields = _stat(pid)
    if fields is None:
        return 0.0
    spent = int(fields[11]) + int(fields[12])  # utime, stime
    if with_children:
        spent += int(fields[13]) + int(fields[14])  # cutime, cstime: children exited and waited for
        for child in _descendants(pid):
            if (child_fields := _stat(child)) is not None:
                spent += int(child_fields[11]) + int(child_fields[12])
    return spent / CLOCK_TICKS


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            parents.setdefault(int(fields[1]), []).append(int(entry.name))  # field 4: ppid
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


# Measured with their descendants (cpu_seconds(with_children=True)).
PROCESS_TREES = {"postgres"}


def stack_processes(stack: LocalStack) -> dict[str, int]:
    """Each broker node's and each service's pid, by name ("broker", or "broker-<id>" in a cluster)."""
    pids = {name: process.pid for name, process in stack.services.items()}
    if stack.broker is not None:
        for node_id, node in stack.broker.nodes.items():
            if node.process is not None:
                pids["broker" if len(stack.broker.nodes) == 1 else f"broker-{node_id}"] = node.process.pid
    if (postgres := stack.postgres_pid()) is not None:
        pids["postgres"] = postgres
    return pids


class CpuMeter:
    """CPU-seconds each named process spends between start() and report()."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._before: dict[str, float] = {}
        self._banked: dict[str, float] = {}  # what processes since replaced had spent

    def start(self) -> None:
        self._before = {name: cpu_seconds(pid, with_children=name in PROCESS_TREES) for name, pid in self.pids.items()}

    def replace(self, name: str, kill_and_start: Callable[[], int]) -> None:
        """Kill a process and start its successor (`kill_and_start`, which returns the new pid),
        counting what the first spent until then and the successor from its start."""
        self._banked[name] = self._banked.get(name, 0.0) + self._spent(name)
        self.pids[name] = kill_and_start()
        self._before[name] = cpu_seconds(self.pids[name], with_children=name in PROCESS_TREES)

    def _spent(self, name: str) -> float:
        return cpu_seconds(self.pids[name], with_children=name in PROCESS_TREES) - self._before[name]

    def report(self, per_thousand: int | None = None) -> str:
        """The CPU-seconds each process spent; with `per_thousand` (the workflows run), also per
        1,000 of them, so runs of different sizes compare."""
        spent = {name: self._spent(name) + self._banked.get(name, 0.0) for name in self.pids}
        total = sum(spent.values())
        ranked = sorted(spent.items(), key=lambda item: -item[1])
        parts = ", ".join(f"{name} {seconds:.1f}" for name, seconds in ranked)
        line = f"CPU-seconds:          {total:.1f} in all: {parts}"
        if per_thousand:
            scaled = ", ".join(f"{name} {seconds * 1000 / per_thousand:.1f}" for name, seconds in ranked)
            line += f"\nper 1,000 workflows:  {total * 1000 / per_thousand:.1f} CPU-s: {scaled}"
        return line
