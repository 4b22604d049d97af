"""What every benchmark shares: the local broker to run on (--broker) and the CPU each process spent,
so a figure can be compared across machines and brokers."""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kadence.dev.brokers import CHOICES
from kadence.dev.brokers.process import LocalBroker
from kadence.dev.local_stack import LocalStack, free_port

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


# Measured with their descendants (cpu_seconds(with_children=True)): Postgres serves each connection
# from a process of its own, hypercorn (Restate's Python service, bench.compare) runs the app in one.
PROCESS_TREES = {"postgres", "hypercorn"}


def broker_processes(broker: LocalBroker) -> dict[str, int]:
    """Each running broker node's pid, by name ("broker", or "broker-<id>" and "controller" in a cluster)."""
    pids = {}
    for node_id, node in broker.nodes.items():
        if node.process is not None:
            pids["broker" if len(broker.nodes) == 1 else f"broker-{node_id}"] = node.process.pid
    for controller in broker.controllers.values():  # a cluster's
        if controller.process is not None:
            pids["controller"] = controller.process.pid
    return pids


def stack_processes(stack: LocalStack) -> dict[str, int]:
    """Each broker node's (broker_processes) and each service's pid, by name."""
    pids = {name: process.pid for name, process in stack.services.items()}
    if stack.broker is not None:
        pids |= broker_processes(stack.broker)
    if (postgres := stack.postgres_pid()) is not None:
        pids["postgres"] = postgres
    return pids


class CollectionMeter:
    """The garbage collections of this process (the client's and in-process worker's) between
    start() and report(): how many of the oldest generation, and the CPU all of them took. A full
    collection walks every object the process holds, so its cost follows what the workflows in
    flight hold."""

    def __init__(self) -> None:
        self.full = 0
        self.cpu_s = 0.0
        self._began = 0.0

    def start(self) -> None:
        gc.callbacks.append(self._on_collection)

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.thread_time()
            return
        self.cpu_s += time.thread_time() - self._began
        self.full += info["generation"] == 2

    def report(self, workflows: int) -> str:
        gc.callbacks.remove(self._on_collection)
        return (f"client's collections: {self.cpu_s * 1000 / workflows:.2f} CPU-s per 1,000 workflows "
                f"({self.cpu_s:.2f} in all, {self.full} of the oldest generation)")


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

    def spent(self) -> dict[str, float]:
        """The CPU-seconds each process has spent since start()."""
        return {name: self._spent(name) + self._banked.get(name, 0.0) for name in self.pids}

    def report(self, per_thousand: int | None = None) -> str:
        """The CPU-seconds each process spent; with `per_thousand` (the workflows run), also per
        1,000 of them, so runs of different sizes compare."""
        spent = self.spent()
        total = sum(spent.values())
        ranked = sorted(spent.items(), key=lambda item: -item[1])
        parts = ", ".join(f"{name} {seconds:.1f}" for name, seconds in ranked)
        line = f"CPU-seconds:          {total:.1f} in all: {parts}"
        if per_thousand:
            scaled = ", ".join(f"{name} {seconds * 1000 / per_thousand:.1f}" for name, seconds in ranked)
            line += f"\nper 1,000 workflows:  {total * 1000 / per_thousand:.1f} CPU-s: {scaled}"
        return line


JOLOKIA = "org.jolokia:jolokia-agent-jvm:2.1.1:jar:javaagent"  # a JMX-over-HTTP agent, attached to the running broker
REQUEST_COUNTS = "kafka.network:type=RequestMetrics,name=RequestsPerSec,*"
FETCH_SUBSETS = {"FetchConsumer", "FetchFollower"}


class BrokerRequests:
    """The requests an Apache Kafka broker has handled, by type (its JMX RequestMetrics), read over
    Jolokia's agent attached to the running broker (Maven fetches the jar once). None where it
    cannot be attached (Tansu, no Maven): the benchmark then prints no request counts."""

    def __init__(self, url: str) -> None:
        self.url = url

    @classmethod
    def attach(cls, stack: LocalStack) -> BrokerRequests | None:
        if stack.broker is None or len(stack.broker.nodes) != 1 or shutil.which("java") is None or shutil.which("mvn") is None:
            return None
        [node] = stack.broker.nodes.values()
        if node.process is None or node.process.pid is None:
            return None
        group, artifact, version, packaging, classifier = JOLOKIA.split(":")
        jar = (Path.home() / ".m2" / "repository" / group.replace(".", "/") / artifact / version
               / f"{artifact}-{version}-{classifier}.{packaging}")
        if not jar.exists():
            subprocess.run(["mvn", "-q", "dependency:get", f"-Dartifact={JOLOKIA}"], check=False, capture_output=True, timeout=300)
        port = free_port()
        attached = subprocess.run(["java", "-jar", str(jar), f"--port={port}", "--host=127.0.0.1", "start", str(node.process.pid)],
                                  capture_output=True, text=True, timeout=60) if jar.exists() else None
        return cls(f"http://127.0.0.1:{port}/jolokia") if attached is not None and attached.returncode == 0 else None

    def counts(self) -> dict[str, int]:
        """Requests handled so far, by request type (all versions together)."""
        with urllib.request.urlopen(f"{self.url}/read/{urllib.parse.quote(REQUEST_COUNTS, safe='')}/Count", timeout=10) as response:
            beans = json.load(response)["value"]
        counts: dict[str, int] = {}
        for name, value in beans.items():
            request = dict(part.split("=", 1) for part in name.split(":", 1)[1].split(","))["request"]
            counts[request] = counts.get(request, 0) + int(value["Count"])
        return counts


def requests_per_workflow(before: dict[str, int], after: dict[str, int], workflows: int, shown: int = 6) -> str:
    """The broker's requests per workflow between two counts: in all, and the most frequent types."""
    # FetchConsumer and FetchFollower are the Fetch requests again, by who sent them.
    spent = {request: after.get(request, 0) - before.get(request, 0) for request in after if request not in FETCH_SUBSETS}
    top = sorted(((n, request) for request, n in spent.items() if n > 0), reverse=True)[:shown]
    return (f"broker requests:      {sum(spent.values()) / workflows:.1f} per workflow: "
            + ", ".join(f"{request} {n / workflows:.1f}" for n, request in top))
