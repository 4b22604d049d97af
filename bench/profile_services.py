"""Where each process's CPU goes under load: py-spy profiles of the services and of the client+worker.

    python -m bench.profile_services [--workflows 2000] [--concurrency 2000] [--seconds 10] [--rate 50] [--processes one|separate]

Starts a local stack and runs bench.bench_workflows' load (one-activity workflows, the worker in
this process): after the same warm-up as bench_workflows, rounds of --workflows workflows with at
most --concurrency in flight, back to back until py-spy has recorded each service process (`kadence
server`, or with --processes separate history, matching, timer and visibility) and this one for
--seconds, all in the same window, at --rate samples a second, --nonblocking (the process is not
paused to read its stack). For each process it prints, from py-spy's raw (collapsed stack) output,
the 10 frames with the most own time (the frame a sample was in, with its line) and the 10 functions
with the most inclusive time (on the stack at all, below the frames every stack of its thread
shares), each as its share of the process's samples. py-spy leaves out the samples of idle threads,
so a share is of the time the process's threads were busy; the CPU each process spent in the window
puts the shares on a scale. Own time in `Runner.run (asyncio/runners.py:118)` is the event loop's
own C code (uvloop: polling, sockets, callbacks), which py-spy does not see into without --native.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import uvloop

from bench.bench_workflows import bench_worker, run_workflows
from bench.local import CpuMeter, add_broker_option, describe_broker, stack_processes
from kadence.client import Client
from kadence.dev.local_stack import PROCESS_LAYOUTS, LocalStack

WORKLOAD = "one-activity"
TOP = 10
_LINE = re.compile(r":\d+\)$")  # the line number ending a py-spy frame, "name (file.py:12)"


@dataclass
class Profile:
    """Samples of one process, from py-spy's collapsed stacks."""

    samples: int = 0
    own: Counter[str] = field(default_factory=Counter)  # frame -> samples in which it was the innermost one
    inclusive: Counter[str] = field(default_factory=Counter)  # function -> samples in which it was on the stack

    @classmethod
    def parse(cls, collapsed: Iterable[str]) -> Profile:
        """From lines "outer (file.py:1);...;inner (file.py:9) COUNT", outermost frame first.

        Inclusive time leaves out each thread's trunk, the functions every stack from its
        outermost one passes through (runpy, the event loop's run, the service's main): on the
        stack of all of its samples, they would fill the top ten."""
        stacks = []
        for line in collapsed:
            stack, _, count = line.rpartition(" ")
            if stack:
                stacks.append((stack.split(";"), int(count)))
        trunks: dict[str, list[str]] = {}
        for frames, _ in stacks:
            functions = [_LINE.sub(")", frame) for frame in frames]
            trunks[functions[0]] = os.path.commonprefix([trunks.get(functions[0], functions), functions])
        profile = cls()
        for frames, samples in stacks:
            functions = [_LINE.sub(")", frame) for frame in frames]
            profile.samples += samples
            profile.own[frames[-1]] += samples
            for function in set(functions[len(trunks[functions[0]]):]):  # once per sample, however deep it recurses
                profile.inclusive[function] += samples
        return profile

    def report(self) -> list[str]:
        lines = ["  own time (innermost frame):"]
        lines += [f"    {count / self.samples:6.1%}  {frame}" for frame, count in self.own.most_common(TOP)]
        lines.append("  inclusive time (function on the stack, below its thread's trunk):")
        lines += [f"    {count / self.samples:6.1%}  {function}" for function, count in self.inclusive.most_common(TOP)]
        return lines


def py_spy() -> str:
    found = shutil.which("py-spy", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        raise SystemExit("py-spy is not installed: pip install -e '.[test]' (it is in the test extra)")
    return found


def record(pid: int, output: Path, seconds: int, rate: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [py_spy(), "record", "--pid", str(pid), "--duration", str(seconds), "--rate", str(rate), "--nonblocking",
         "--format", "raw", "--output", str(output)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )


async def profile(stack: LocalStack, workflows: int, concurrency: int, seconds: int, rate: int, out_dir: Path) -> None:
    services = stack_processes(stack)
    pids = {**{name: pid for name, pid in services.items() if name in stack.services}, "client+worker": os.getpid()}
    cpu = CpuMeter(pids)
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    rounds = []
    try:
        async with bench_worker(client):
            await run_workflows(client, WORKLOAD, min(50, workflows), concurrency)  # bench_workflows' warm-up
            recorders = {name: record(pid, out_dir / f"{name}.txt", seconds, rate) for name, pid in pids.items()}
            cpu.start()

            def recorded() -> str:
                """The CPU each process spent while it was recorded."""
                for recorder in recorders.values():
                    recorder.wait()
                return cpu.report()

            window = asyncio.ensure_future(asyncio.to_thread(recorded))
            while not window.done():  # the load outlasts the recording
                elapsed, _ = await run_workflows(client, WORKLOAD, workflows, concurrency)
                rounds.append(f"round:                {workflows} workflows in {elapsed:.1f} s, {workflows / elapsed:.0f} workflows/s")
    finally:
        await client.close()
    print(describe_broker(stack))
    print(f"load:                 {WORKLOAD}, rounds of {workflows} with at most {concurrency} in flight, worker in process")
    print(f"recorded:             {seconds} s of each process at {rate} Hz (py-spy --nonblocking), during the rounds")
    print("\n".join(rounds))
    print(window.result())
    for name, recorder in recorders.items():
        if recorder.returncode != 0:
            raise SystemExit(f"py-spy on {name} (pid {pids[name]}) failed: {recorder.stderr.read().decode() if recorder.stderr else ''}")
        parsed = Profile.parse((out_dir / f"{name}.txt").read_text().splitlines())
        print(f"\n{name} (pid {pids[name]}): {parsed.samples} samples of busy threads")
        print("\n".join(parsed.report()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflows", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rate", type=int, default=50, help="samples a second")
    parser.add_argument("--processes", choices=list(PROCESS_LAYOUTS), default="one",
                        help="the services in one process (`kadence server`, the default) or each in its own")
    add_broker_option(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="kadence-profile-") as data_dir:
        stack = LocalStack(Path(data_dir) / "stack", broker_kind=args.broker)
        stack.start(PROCESS_LAYOUTS[args.processes])
        try:
            uvloop.run(profile(stack, args.workflows, args.concurrency, args.seconds, args.rate, Path(data_dir)))
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
