"""A local broker as child processes, one per node: start them, wait until they serve, stop, kill,
pause and resume one or all (the broker-fault and cluster tests do the last four), and ask the
cluster's metadata who leads a partition and which replicas are in sync."""

from __future__ import annotations

import logging
import random
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from confluent_kafka.admin import AdminClient, ClusterMetadata

log = logging.getLogger("kadence.dev")


def die_with_parent() -> None:
    """Children get SIGTERM when the stack's process dies, even by SIGKILL: no stray processes."""
    if sys.platform == "linux":
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    return free_ports(1)[0]


# Where free ports are looked for: below the kernel's ephemeral range, whose ports it hands to
# outgoing connections too. A port picked from that range and released until its process binds it
# could meanwhile become a client connection's source port (a service then fails to start with
# "address already in use"); below it, only another listener can take it.
LISTEN_PORTS_FROM = 10000
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Its own generator: a test that seeds the global one (hypothesis does) must not make the picks repeat.
_PORT_PICKS = random.Random()


def free_ports(count: int, taken: frozenset[int] = frozenset()) -> list[int]:
    """`count` distinct free ports on loopback, none of `taken`, below the ephemeral range where
    there is one: each stays bound until all are picked, so none is handed out twice."""
    first_ephemeral = int(EPHEMERAL_RANGE.read_text().split()[0]) if EPHEMERAL_RANGE.exists() else 0
    with ExitStack() as bound:
        ports: list[int] = []
        for _ in range(100 * count):
            if len(ports) == count:
                return ports
            # Random, so two stacks starting at once seldom try the same port; 0 (the kernel's pick)
            # where the ephemeral range leaves none below it.
            candidate = _PORT_PICKS.randrange(LISTEN_PORTS_FROM, first_ephemeral) if first_ephemeral > LISTEN_PORTS_FROM else 0
            s = bound.enter_context(socket.socket())
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue  # another listener has it
            port = s.getsockname()[1]
            if port not in taken and port not in ports:
                ports.append(port)
        if len(ports) < count:
            raise RuntimeError(f"found {len(ports)} of {count} free ports on 127.0.0.1 in {100 * count} tries")
        return ports


class BrokerUnavailable(RuntimeError):
    """This broker cannot run on this machine, or did not come up; the message says why and what to do."""


@dataclass
class NodeProcess:
    """One process of a local broker (a Kafka node, or Tansu), on its own port and log file."""

    node_id: int
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def spawn(self, command: list[str]) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as output:
            self.process = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent,
            )

    def exit_code(self) -> int | None:
        """The code it exited with, or None while it runs (or was never started)."""
        return None if self.process is None else self.process.poll()

    def listening(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def terminate(self) -> None:
        """SIGTERM: a clean shutdown; `wait_stopped` waits for it."""
        if self.process is not None:
            self.resume()  # a paused process cannot shut down
            self.process.terminate()

    def wait_stopped(self, timeout: float) -> None:
        """After `terminate`: until it exited, SIGKILLed if that takes longer than `timeout`."""
        if self.process is None:
            return
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.warning("event=broker_node_stop_timed_out node=%d seconds=%.0f", self.node_id, timeout)
            self.process.kill()
            self.process.wait()
        self.process = None

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def pause(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)


@dataclass
class LocalBroker:
    data_dir: Path
    port: int  # node 1's; a cluster's other nodes take free ports
    node_count: int = 1
    nodes: dict[int, NodeProcess] = field(init=False)
    # Processes the brokers need that are not brokers (a cluster's dedicated controller): started
    # before the nodes and stopped after them when the whole broker starts or stops; a fault test
    # breaks one only by naming it.
    controllers: dict[int, NodeProcess] = field(init=False, default_factory=dict)

    name: ClassVar[str]
    # Whether its topics outlive the process: if not, the stack's Postgres state starts empty with it.
    persistent: ClassVar[bool]
    # The consumer fetch wait (KADENCE_FETCH_WAIT_MAX_MS) that serves latency on this broker.
    fetch_wait_max_ms: ClassVar[int]
    # How many nodes it can run as one cluster (None: any number).
    max_nodes: ClassVar[int | None] = 1

    def __post_init__(self) -> None:
        if self.max_nodes is not None and self.node_count > self.max_nodes:
            raise BrokerUnavailable(f"{self.name} runs at most {self.max_nodes} node(s), not {self.node_count}")
        ports = [self.port, *free_ports(self.node_count - 1, taken=frozenset({self.port}))]
        self.nodes = {
            node_id: NodeProcess(node_id, port, self.data_dir / "logs" / f"broker{self.node_suffix(node_id)}.log")
            for node_id, port in enumerate(ports, start=1)
        }

    def node_suffix(self, node_id: int) -> str:
        """What tells a node's files apart: nothing for a single node (its files are named as they
        always were), -<id> in a cluster."""
        return "" if self.node_count == 1 else f"-{node_id}"

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.address for node in self.nodes.values())

    @property
    def log_identity(self) -> str | None:
        """What identifies the log this broker keeps (its cluster id), or None when it keeps none."""
        return None

    def command(self, node_id: int) -> list[str]:
        raise NotImplementedError

    def prepare(self) -> None:
        """Whatever must exist before a node starts (jars, configs, formatted log dirs)."""

    def _selected(self, node_id: int | None) -> list[NodeProcess]:
        return list(self.nodes.values()) if node_id is None else [{**self.controllers, **self.nodes}[node_id]]

    def start(self, node_id: int | None = None, timeout: float = 120.0) -> float:
        """Start every node (or one: the others run), on its port and data, and wait until each
        serves; returns the seconds that took. Starting them all starts the controllers first."""
        started = time.monotonic()
        self.prepare()
        controllers = [*self.controllers.values()] if node_id is None else [n for n in self.controllers.values() if n.node_id == node_id]
        for controller in controllers:
            controller.spawn(self.command(controller.node_id))
        for controller in controllers:
            self._wait_until_listening(controller, started + timeout)
        starting = [node for node in self._selected(node_id) if node not in controllers]
        for node in starting:
            node.spawn(self.command(node.node_id))
        for node in starting:
            self._wait_until_serving(node, started + timeout)
        elapsed = time.monotonic() - started
        log.info("event=broker_started broker=%r nodes=%s bootstrap=%s seconds=%.1f",
                 self.name, ",".join(str(node.node_id) for node in starting), self.bootstrap_servers, elapsed)
        return elapsed

    def _wait_until_listening(self, node: NodeProcess, deadline: float) -> None:
        """A controller answers no client's metadata: until its listener takes connections."""
        while not node.listening():
            code = node.exit_code()
            what = f"{self.name} controller {node.node_id}"
            if node.process is None or code is not None:
                raise BrokerUnavailable(f"{what} exited with code {code} while starting; see {node.log_path}")
            if time.monotonic() > deadline:
                raise BrokerUnavailable(f"{what} did not listen on {node.address} in time; see {node.log_path}")
            time.sleep(0.05)

    def _wait_until_serving(self, node: NodeProcess, deadline: float) -> None:
        """Until the metadata the node answers lists it: registered, unfenced, taking requests."""
        admin = self._admin(node.address)
        while time.monotonic() < deadline:
            code = node.exit_code()
            if node.process is None or code is not None:
                raise BrokerUnavailable(f"{self.name} node {node.node_id} exited with code {code} while starting; see {node.log_path}")
            if node.listening():
                try:
                    if any(broker.port == node.port for broker in admin.list_topics(timeout=1).brokers.values()):
                        return
                except Exception:  # not answering yet: the controller is still electing itself, or it is fenced
                    pass
            time.sleep(0.05)
        raise BrokerUnavailable(f"{self.name} node {node.node_id} did not answer metadata on {node.address} in time; see {node.log_path}")

    def stop(self, node_id: int | None = None, timeout: float = 30.0) -> None:
        """A clean shutdown (SIGTERM), a SIGKILL if it takes longer than `timeout`. Every node at
        once when all stop: one by one, the last ones would wait for a quorum the first took away.
        The controllers after the brokers: a broker's controlled shutdown asks them to move its leaderships."""
        waves = [self._selected(node_id)] if node_id is not None else [self._selected(None), [*self.controllers.values()]]
        for stopping in waves:
            for node in stopping:
                node.terminate()
            for node in stopping:
                node.wait_stopped(timeout)

    def _every_process(self, node_id: int | None) -> list[NodeProcess]:
        return self._selected(node_id) if node_id is not None else [*self.controllers.values(), *self.nodes.values()]

    def kill(self, node_id: int | None = None) -> None:
        """SIGKILL, as a crash: nothing flushed, nothing said to the clients or the controller."""
        for node in self._every_process(node_id):
            node.kill()

    def pause(self, node_id: int | None = None) -> None:
        """SIGSTOP: the node stops answering while its connections stay open (a long GC or a hung host)."""
        for node in self._every_process(node_id):
            node.pause()

    def resume(self, node_id: int | None = None) -> None:
        for node in self._every_process(node_id):
            node.resume()

    def metadata(self, timeout: float = 5.0) -> ClusterMetadata:
        """The cluster's metadata, as a node that runs answers it (partitions, leaders, replicas, ISR).
        A client of its own each time: librdkafka 2.13+ gives up on a cluster for good once an
        answer listed no broker (confluentinc/librdkafka#5301), which a restarting node may give."""
        return self._admin(self.bootstrap_servers).list_topics(timeout=timeout)

    def leaders(self, topic: str, timeout: float = 5.0) -> dict[int, int]:
        """Partition -> the node leading it (-1 while none does)."""
        return {partition: meta.leader for partition, meta in self.metadata(timeout).topics[topic].partitions.items()}

    def out_of_sync(self, node_id: int, timeout: float = 5.0) -> list[str]:
        """The partitions (topic-partition) that have a replica on the node but not in sync: empty
        once it has caught up with every leader."""
        return sorted(
            f"{name}-{partition}"
            for name, topic in self.metadata(timeout).topics.items() for partition, meta in topic.partitions.items()
            if node_id in meta.replicas and node_id not in meta.isrs
        )

    @staticmethod
    def _admin(bootstrap_servers: str) -> AdminClient:
        # confluent-kafka takes a logging.Logger as "logger"; its stub allows only str and number values.
        return AdminClient({"bootstrap.servers": bootstrap_servers, "logger": logging.getLogger("kadence.dev.readiness")})  # type: ignore[dict-item]
