"""Kadence beside the peers, fresh and steady: each engine's server started anew, its workload run
twice back to back on it, then the server stopped, one engine after the other.

    python -m bench.compare [--engines kadence,restate,dbos,temporal] [--sequential 200] [--concurrent 2000]

The workload is the peers' (`../shared/peers/`, installed by its setup.sh under $PEERS_HOME): a
workflow with one activity (or step) that returns its input, client and worker in one process; 20
warm-ups and N one after another, then M started at once; every result checked. The first run on a
fresh server is what a newcomer sees; the second, on the same server, is the steady state a
production server is in, and what the targets in docs/performance.md are about.

Each run prints one at a time's p50/p99, the rate at M at once, and the CPU-seconds of every
process of the engine (its servers, and the client with its worker). Kadence's rows also give the
broker's produce-to-consume round trip, measured on the same stack after its runs. The summary puts
Kadence's figures beside each peer's as ratios, run for run: only ratios taken in one session compare.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from bench.bench_workflows import bench_worker, broker_round_trip, percentile, run_workflows
from bench.local import CpuMeter, stack_processes
from kadence.client import Client
from kadence.dev.local_stack import PROCESS_LAYOUTS, LocalStack
from kadence.protocol.settings import KafkaSettings

REPO = Path(__file__).resolve().parents[1]
PEER_SCRIPTS = REPO.parent / "shared" / "peers"
PEERS_HOME = Path(os.environ.get("PEERS_HOME", Path.home() / ".cache" / "kadence-peers"))
RUNS = ("fresh", "steady")
WARM_UPS = 20
SEQUENTIAL = re.compile(r"^sequential\[.*?p50=([\d.]+)ms p99=([\d.]+)ms", re.M)
CONCURRENT = re.compile(r"^concurrent\[.*?throughput=(\d+) wf/s", re.M)


@dataclass
class RunResult:
    engine: str
    run: str  # "fresh" or "steady"
    p50_ms: float
    p99_ms: float
    rate: float  # workflows/s, all started at once
    cpu: dict[str, float]  # CPU-seconds by process over the run
    workflows: int
    note: str = ""

    def line(self) -> str:
        cpu = ", ".join(f"{name} {seconds:.1f}" for name, seconds in sorted(self.cpu.items(), key=lambda kv: -kv[1]))
        per = sum(self.cpu.values()) * 1000 / self.workflows
        return (f"{self.engine:9} {self.run:6}  one at a time p50 {self.p50_ms:6.1f} ms (p99 {self.p99_ms:6.1f})  "
                f"at once {self.rate:5.0f}/s  CPU {per:5.1f} ms a workflow: {cpu}{self.note}")


@dataclass
class Engine:
    """An engine of the comparison: its server's processes, its client's command line."""

    name: str
    client: list[str]
    cwd: Path
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    @contextmanager
    def server(self) -> Iterator[dict[str, int]]:
        """The server, started fresh for this engine's two runs; yields its processes' pids by name."""
        raise NotImplementedError(f"{type(self).__name__} starts no server")


class Peer(Engine):
    """A peer of ../shared/peers/: started and stopped by its scripts, its pids in $PEERS_HOME/pids."""

    def __init__(self, name: str, servers: tuple[str, ...], client: list[str], cwd: Path) -> None:
        super().__init__(name, client, cwd)
        self.servers = servers  # start.sh's names for them

    @contextmanager
    def server(self) -> Iterator[dict[str, int]]:
        subprocess.run(["bash", str(PEER_SCRIPTS / "stop.sh")], check=True, capture_output=True)
        started = subprocess.run(["bash", str(PEER_SCRIPTS / "start.sh"), *self.servers], capture_output=True, text=True)
        try:
            pids = {name: (PEERS_HOME / "pids" / f"{name}.pid").read_text().strip() for name in _pid_files(self.servers)}
            if not all(pid.isdigit() for pid in pids.values()):
                raise SystemExit(f"{self.name}'s server did not start (start.sh {' '.join(self.servers)}):\n"
                                 f"{(started.stdout + started.stderr)[-2000:]}")
            yield {name: int(pid) for name, pid in pids.items()}
        finally:
            subprocess.run(["bash", str(PEER_SCRIPTS / "stop.sh")], check=True, capture_output=True)


def _pid_files(servers: tuple[str, ...]) -> list[str]:
    names = {"postgres": ["postgres"], "restate": ["restate-server", "hypercorn"], "temporal": ["temporal"]}
    return [pid_file for server in servers for pid_file in names[server]]


class Kadence(Engine):
    """Kadence's local stack as `kadence dev` runs it (the services in one process), fresh in a new data dir."""

    def __init__(self, sequential: int, concurrent: int) -> None:
        super().__init__("kadence", [sys.executable, "-m", "bench.compare", "--client", str(sequential), str(concurrent)], REPO)
        self.round_trip_ms: float | None = None

    @contextmanager
    def server(self) -> Iterator[dict[str, int]]:
        with tempfile.TemporaryDirectory(prefix="kadence-compare-") as data_dir:
            stack = LocalStack(Path(data_dir), partitions=8)
            stack.start(PROCESS_LAYOUTS["one"])
            try:
                self.env = {**os.environ, **stack.env}
                yield stack_processes(stack)
                self.round_trip_ms = percentile(broker_round_trip(stack.settings, 500), 50)
            finally:
                stack.stop()


def engines(names: list[str], sequential: int, concurrent: int) -> list[Engine]:
    py = str(PEERS_HOME / "venv" / "bin" / "python")
    n, m = str(sequential), str(concurrent)
    known: dict[str, Engine] = {
        "kadence": Kadence(sequential, concurrent),
        "restate": Peer("restate", ("restate",), [py, "bench_restate.py", "wf", n, m, "500"], PEERS_HOME / "restate"),
        "dbos": Peer("dbos", ("postgres",), [py, "dbos_bench.py", "sync", n, m], PEERS_HOME),
        "temporal": Peer("temporal", ("temporal",), [py, "bench_temporal.py", n, m, "1"], PEERS_HOME / "temporal"),
    }
    unknown = set(names) - set(known)
    if unknown:
        raise SystemExit(f"unknown engines {sorted(unknown)}: choose from {', '.join(known)}")
    missing = [name for name in names if name != "kadence" and not (PEERS_HOME / "venv").exists()]
    if missing:
        raise SystemExit(f"the peers {missing} are not installed under {PEERS_HOME}: run {PEER_SCRIPTS / 'setup.sh'} once")
    return [known[name] for name in names]


def run_engine(engine: Engine, workflows: int) -> list[RunResult]:
    """The engine's two runs on one fresh server."""
    results = []
    with engine.server() as pids:
        for run in RUNS:
            cpu = CpuMeter(dict(pids))
            cpu.start()
            before, started = os.times(), time.monotonic()
            client = subprocess.run(engine.client, cwd=engine.cwd, env=engine.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            after, text = os.times(), client.stdout.decode(errors="replace")
            sequential, concurrent = SEQUENTIAL.search(text), CONCURRENT.search(text)
            if client.returncode != 0 or sequential is None or concurrent is None:
                raise SystemExit(f"{engine.name}'s {run} run failed (exit code {client.returncode}):\n{text[-3000:]}")
            spent = cpu.spent()
            # The client (with its worker) is this process's only child waited for meanwhile.
            spent["client+worker"] = (after.children_user - before.children_user) + (after.children_system - before.children_system)
            results.append(RunResult(engine.name, run, float(sequential[1]), float(sequential[2]), float(concurrent[1]), spent,
                                     workflows, note=f"  ({time.monotonic() - started:.0f} s)"))
            print(results[-1].line(), flush=True)
    if isinstance(engine, Kadence) and engine.round_trip_ms is not None:
        print(f"kadence   broker round trip p50 {engine.round_trip_ms:.2f} ms", flush=True)
    return results


def summary(results: list[RunResult]) -> str:
    """Kadence beside each peer, run for run: its p50 as a multiple of theirs, its rate as a fraction."""
    ours = {r.run: r for r in results if r.engine == "kadence"}
    lines = []
    for peer in [r for r in results if r.engine != "kadence"]:
        mine = ours.get(peer.run)
        if mine is None:
            continue
        lines.append(f"{peer.run:6} kadence/{peer.engine:8}: p50 {mine.p50_ms / peer.p50_ms:4.2f} times, "
                     f"rate {mine.rate / peer.rate:4.2f} of theirs, CPU a workflow "
                     f"{sum(mine.cpu.values()) / max(sum(peer.cpu.values()), 1e-9):4.2f} times")
    return "\n".join(lines)


async def client_run(sequential: int, concurrent: int) -> None:
    """Kadence's side, shaped as the peers' scripts: against the stack the KADENCE_* variables name,
    the worker in this process; prints the lines the peers print."""
    settings = KafkaSettings.from_env()
    client = await Client.connect(settings.bootstrap_servers, postgres_dsn=os.environ["KADENCE_POSTGRES_DSN"])
    async with bench_worker(client):
        await run_workflows(client, "one-activity", WARM_UPS, 1)
        _, latencies = await run_workflows(client, "one-activity", sequential, 1)
        print(f"sequential[kadence]: n={sequential} p50={percentile(latencies, 50):.2f}ms p99={percentile(latencies, 99):.2f}ms "
              f"mean={statistics.mean(latencies):.2f}ms", flush=True)
        elapsed, _ = await run_workflows(client, "one-activity", concurrent, concurrent)
        print(f"concurrent[kadence]: n={concurrent} total={elapsed:.2f}s throughput={concurrent / elapsed:.0f} wf/s", flush=True)
    await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="kadence,restate,dbos,temporal")
    parser.add_argument("--sequential", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=2000)
    parser.add_argument("--client", nargs=2, type=int, metavar=("SEQUENTIAL", "CONCURRENT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        uvloop.run(client_run(*args.client))
        return
    chosen = engines(args.engines.split(","), args.sequential, args.concurrent)
    print(f"# {args.sequential} one at a time after {WARM_UPS} warm-ups, then {args.concurrent} at once; "
          f"load {os.getloadavg()[0]:.2f}; each engine fresh, then steady on the same server", flush=True)
    results = [result for engine in chosen for result in run_engine(engine, WARM_UPS + args.sequential + args.concurrent)]
    print(summary(results))


if __name__ == "__main__":
    main()
