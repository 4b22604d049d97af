"""A local broker as a child process: start it, wait until it answers metadata, stop, kill,
pause and resume it (the broker-fault tests do the last three)."""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from confluent_kafka.admin import AdminClient

log = logging.getLogger("kadence.dev")


def die_with_parent() -> None:
    """Children get SIGTERM when the stack's process dies, even by SIGKILL: no stray processes."""
    if sys.platform == "linux":
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerUnavailable(RuntimeError):
    """This broker cannot run on this machine, or did not come up; the message says why and what to do."""


@dataclass
class LocalBroker:
    data_dir: Path
    port: int
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    name: ClassVar[str]
    # Whether its topics outlive the process: if not, the stack's Postgres state starts empty with it.
    persistent: ClassVar[bool]
    # The consumer fetch wait (KADENCE_FETCH_WAIT_MAX_MS) that serves latency on this broker.
    fetch_wait_max_ms: ClassVar[int]

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "logs" / "broker.log"

    @property
    def log_identity(self) -> str | None:
        """What identifies the log this broker keeps (its cluster id), or None when it keeps none."""
        return None

    def command(self) -> list[str]:
        raise NotImplementedError

    def prepare(self) -> None:
        """Whatever must exist before the process starts (jars, a formatted log dir)."""

    def start(self, timeout: float = 120.0) -> float:
        """Start the broker and wait until it answers metadata; returns the seconds that took."""
        started = time.monotonic()
        self.prepare()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as output:
            self.process = subprocess.Popen(
                self.command(), stdout=output, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent,
            )
        self._wait_until_ready(started + timeout)
        elapsed = time.monotonic() - started
        log.info("event=broker_started broker=%r bootstrap=%s seconds=%.1f", self.name, self.bootstrap_servers, elapsed)
        return elapsed

    def _wait_until_ready(self, deadline: float) -> None:
        # confluent-kafka takes a logging.Logger as "logger"; its stub allows only str and number values.
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "logger": logging.getLogger("kadence.dev.readiness")})  # type: ignore[dict-item]
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise BrokerUnavailable(f"{self.name} exited with code {code} while starting; see {self.log_path}")
            if self._listening():
                try:
                    if admin.list_topics(timeout=1).brokers:
                        return
                except Exception:  # not answering yet: the controller is still electing itself
                    pass
            time.sleep(0.05)
        raise BrokerUnavailable(f"{self.name} did not answer metadata on {self.bootstrap_servers} in time; see {self.log_path}")

    def _listening(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def stop(self, timeout: float = 30.0) -> None:
        """A clean shutdown (SIGTERM), a SIGKILL if it takes longer than `timeout`."""
        if self.process is None:
            return
        self.resume()  # a paused broker cannot shut down
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing flushed, nothing said to the clients."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def pause(self) -> None:
        """SIGSTOP: the broker stops answering while its connections stay open (a long GC or a hung host)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)
