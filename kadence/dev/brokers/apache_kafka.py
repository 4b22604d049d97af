"""Apache Kafka as the local broker: one KRaft node, broker and controller in one process, or a
cluster of them (three, as deploy/ runs), run from the jars Maven resolves for `pom.xml` beside this
file (the version deploy/ runs).

Maven resolves the jars once into its local repository and the classpath is cached under
~/.cache/kadence (outside any work tree); later starts need neither Maven nor the network.
Each node's log dir lives under the stack's data dir and is formatted once, so topics, offsets and
committed positions survive a restart of a node, of the cluster or of the whole stack.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import ClassVar

from kadence.dev import cache_root
from kadence.dev.brokers.process import BrokerUnavailable, LocalBroker, NodeProcess, free_ports
from kadence.protocol.topics import min_insync_replicas

log = logging.getLogger("kadence.dev")

POM = Path(__file__).with_name("pom.xml")
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
KAFKA_VERSION = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text()).group(1)  # type: ignore[union-attr]
MIN_JAVA = 17  # Apache Kafka 4's brokers need Java 17
# A bounded heap: plenty for one node serving tests and benchmarks (docs/architecture.md, "Brokers"),
# its whole size from the start, as Kafka's own start script sizes it (-Xms = -Xmx): a heap that
# grows toward its maximum under load reads as a leak in the soak's memory figures, and is only
# the collector using the room it was given.
JVM_OPTIONS = ("-Xms512m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")
# A cluster on one machine (a laptop, CI's two cores) beside the services: each JVM sized as one
# CPU's worth (its GC and compiler threads), compiling with C1 only, whose code is slower but whose
# compiles cost a fraction of C2's (a cluster's start took 13.3 CPU-s with C2, 8.4 without), and
# collecting with the serial collector, which spends no more CPU than G1 on a heap this small and
# keeps no remembered sets (`python -m bench.cluster_nodes` measures each choice).
CLUSTER_JVM_OPTIONS: tuple[str, ...] = ("-Xms128m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:ActiveProcessorCount=1",
                                        "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
# The cluster's controller keeps only the metadata log: a small heap, the serial collector.
CONTROLLER_JVM_OPTIONS: tuple[str, ...] = ("-Xms64m", "-Xmx128m", "-XX:+UseSerialGC", "-XX:ActiveProcessorCount=1",
                                           "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
CONTROLLER_ID = 0  # the brokers are 1 to node_count
SINGLE_NODE_THREADS = {"num.network.threads": "2", "num.io.threads": "4"}
CLUSTER_BROKER_THREADS = {"num.network.threads": "1", "num.io.threads": "2", "background.threads": "2"}
# Kafka's 50 partitions of __consumer_offsets, three replicas each, are most of what a restarted node
# of a local cluster must catch up before it is back in every ISR, and a rolling restart waits for
# that at each node: a local cluster's few groups need few.
CLUSTER_OFFSETS_PARTITIONS = 8
CONTROLLER_THREADS = {"num.network.threads": "1", "num.io.threads": "1", "background.threads": "1"}


def find_java() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java")


def java_major_version(java: str) -> int:
    """17 for 'openjdk version "17.0.15"', 8 for 'java version "1.8.0_402"'."""
    banner = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    found = re.search(r'version "(\d+)(?:\.(\d+))?', banner)
    if found is None:
        return 0
    major, minor = int(found.group(1)), int(found.group(2) or 0)
    return minor if major == 1 else major


def missing_prerequisite() -> str | None:
    """Why Apache Kafka cannot run here, or None when it can."""
    java = find_java()
    if java is None:
        return "no Java found (neither $JAVA_HOME/bin/java nor java on PATH)"
    major = java_major_version(java)
    if major < MIN_JAVA:
        return f"{java} is Java {major}; Apache Kafka {KAFKA_VERSION} needs Java {MIN_JAVA} or later"
    if cached_classpath() is None and shutil.which("mvn") is None:
        return f"Maven (mvn) is not on PATH to fetch Apache Kafka {KAFKA_VERSION}'s jars, and they are not cached yet"
    return None


def cache_dir() -> Path:
    """One directory per pom content: a changed pom resolves again."""
    return cache_root() / f"apache-kafka-{KAFKA_VERSION}-{hashlib.sha256(POM.read_bytes()).hexdigest()[:12]}"


def cached_classpath() -> str | None:
    path = cache_dir() / "classpath.txt"
    if not path.exists():
        return None
    classpath = path.read_text().strip()
    # Maven's repository may have been cleaned since: then resolve again.
    return classpath if classpath and all(Path(jar).exists() for jar in classpath.split(os.pathsep)) else None


def resolve_classpath() -> str:
    """The broker's classpath, resolved by Maven on first use (a minute or so) and cached."""
    classpath = cached_classpath()
    if classpath is not None:
        return classpath
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerUnavailable(
            f"Maven (mvn) is needed once to fetch Apache Kafka {KAFKA_VERSION}'s jars; install it or use --broker tansu"
        )
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(POM, directory / "pom.xml")  # Maven runs there, so the installed package stays untouched
    log.info("event=kafka_resolving version=%s cache=%s (first start only: Maven fetches the jars)", KAFKA_VERSION, directory)
    result = subprocess.run(
        [mvn, "-B", "-q", "-f", str(directory / "pom.xml"), "dependency:build-classpath",
         f"-Dmdep.outputFile={directory / 'classpath.new'}"],
        capture_output=True, text=True, timeout=900,
    )
    if result.returncode != 0:
        raise BrokerUnavailable(
            f"Maven could not resolve Apache Kafka {KAFKA_VERSION} (exit {result.returncode}): "
            f"{(result.stdout + result.stderr).strip()[-2000:]}\nCheck that Maven Central is reachable, or use --broker tansu"
        )
    (directory / "classpath.new").replace(directory / "classpath.txt")
    classpath = cached_classpath()
    if classpath is None:
        raise BrokerUnavailable(f"Maven resolved Apache Kafka {KAFKA_VERSION} but its jars are missing from {directory / 'classpath.txt'}")
    return classpath


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as kafka-storage random-uuid)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class ApacheKafka(LocalBroker):
    """One KRaft node, broker and controller in one process; or a cluster (`node_count` brokers) with
    one controller of its own. Each process has its own port, log dir, config and log file."""

    name: ClassVar[str] = f"Apache Kafka {KAFKA_VERSION}"
    persistent: ClassVar[bool] = True
    # A fetch returns as soon as data arrives on a partition it names; a partition assigned while it
    # waits (a worker that just joined, a rebalance) is first fetched when it returns. 100 ms, not the
    # deployments' 500: a worker started beside the stack gets its first task sooner, and the idle
    # stack spends no more (docs/performance.md, "The first fetch after an assignment").
    fetch_wait_max_ms: ClassVar[int] = 100
    max_nodes: ClassVar[int | None] = None
    controller_ports: dict[int, int]  # voter's node id -> its controller listener's port

    def __post_init__(self) -> None:
        super().__post_init__()
        # Picked once: a node started again while the others run must find the voters where they were.
        # (The static voter set keeps no address in the log, so a new stack on this data dir may pick others.)
        taken = frozenset(node.port for node in self.nodes.values())
        [controller_port] = free_ports(1, taken=taken)
        if self.node_count == 1:
            self.controller_ports = {1: controller_port}
            return
        # A cluster's quorum in a process of its own that no broker's fault takes with it: on two
        # shared cores, controllers inside the brokers starved under load, lost their quorum and
        # elected again and again (docs/operations.md, "One node of three").
        self.controller_ports = {CONTROLLER_ID: controller_port}
        self.controllers = {CONTROLLER_ID: NodeProcess(CONTROLLER_ID, controller_port, self.data_dir / "logs" / "controller.log")}

    def node_suffix(self, node_id: int) -> str:
        return "-controller" if node_id in self.controllers else super().node_suffix(node_id)

    def node_log_dir(self, node_id: int) -> Path:
        return self.data_dir / f"kafka{self.node_suffix(node_id)}"

    @property
    def log_dir(self) -> Path:
        """Node 1's (a single node's only) log dir: the one whose cluster id names the log."""
        return self.node_log_dir(1)

    @property
    def log_identity(self) -> str | None:
        meta = self.log_dir / "meta.properties"
        if not meta.exists():
            return None
        found = re.search(r"^cluster\.id=(.+)$", meta.read_text(), re.MULTILINE)
        return found.group(1) if found else None

    def config_path(self, node_id: int) -> Path:
        return self.data_dir / f"kafka{self.node_suffix(node_id)}.properties"

    @property
    def _process_ids(self) -> list[int]:
        return [*self.controllers, *self.nodes]

    def prepare(self) -> None:
        self._classpath = resolve_classpath()
        self._java = find_java() or "java"
        for node_id in self._process_ids:
            self.config_path(node_id).write_text(self._config(node_id))
        formatted = [node_id for node_id in self._process_ids if (self.node_log_dir(node_id) / "meta.properties").exists()]
        if not formatted:
            self._format()
        elif len(formatted) < len(self._process_ids):
            # A node formatted anew beside voters that hold the metadata log could vote that log away
            # (and a cluster's log dirs from before it had a controller of its own have none).
            raise BrokerUnavailable(
                f"only {', '.join(self.node_log_dir(node_id).name for node_id in formatted)} of "
                f"{len(self._process_ids)} Kafka log dirs are formatted under {self.data_dir}; "
                f"remove {self.data_dir}/kafka* to start an empty cluster"
            )

    def _config(self, node_id: int) -> str:
        replicas = min(self.node_count, 3)
        min_isr = str(min_insync_replicas(replicas))
        quorum = {
            "node.id": str(node_id),
            "controller.quorum.voters": ",".join(f"{voter}@127.0.0.1:{port}" for voter, port in self.controller_ports.items()),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.node_log_dir(node_id)),
            # As deploy/base/kafka.yaml: internal topics on three replicas, two in sync for a write; one node:
            # one replica. The controller creates topics, so it reads these too.
            "default.replication.factor": str(replicas),
            "min.insync.replicas": min_isr,
            **self._session_settings(),
        }
        if node_id in self.controllers:
            listener = f"CONTROLLER://127.0.0.1:{self.controller_ports[node_id]}"
            return _properties({**quorum, "process.roles": "controller", "listeners": listener, **CONTROLLER_THREADS})
        port = self.nodes[node_id].port
        listeners = f"PLAINTEXT://127.0.0.1:{port}"
        if self.node_count == 1:
            listeners += f",CONTROLLER://127.0.0.1:{self.controller_ports[1]}"
        return _properties({
            **quorum,
            "process.roles": "broker,controller" if self.node_count == 1 else "broker",
            "listeners": listeners,
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "inter.broker.listener.name": "PLAINTEXT",
            "offsets.topic.replication.factor": str(replicas),
            "transaction.state.log.replication.factor": str(replicas),
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": str(replicas),
            "share.coordinator.state.topic.min.isr": min_isr,
            # As deploy/ runs it: topics are created explicitly, with their settings; records up to 10 MiB.
            "auto.create.topics.enable": "false",
            "message.max.bytes": "10485760",
            "replica.fetch.max.bytes": "10485760",
            # Tests and `kadence dev` use session timeouts of 1-2 s (production keeps Kafka's 6 s minimum).
            "group.min.session.timeout.ms": "1000",
            "group.initial.rebalance.delay.ms": "0",
            # Fewer threads and a smaller cleaner buffer than Kafka's defaults: a 2-core laptop, not a server.
            **(CLUSTER_BROKER_THREADS if self.node_count > 1 else SINGLE_NODE_THREADS),
            **({"offsets.topic.num.partitions": str(CLUSTER_OFFSETS_PARTITIONS)} if self.node_count > 1 else {}),
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        })

    def _jvm_options(self, node_id: int) -> tuple[str, ...]:
        if node_id in self.controllers:
            return CONTROLLER_JVM_OPTIONS
        return CLUSTER_JVM_OPTIONS if self.node_count > 1 else JVM_OPTIONS

    def _session_settings(self) -> dict[str, str]:
        """How long the controller waits for a broker's heartbeats before it fences it."""
        if self.node_count > 1:
            # Kafka's session (9 s, heartbeats every 2 s), as deploy/ runs: the controller fences a dead
            # node after this, which is what a leader change after a crash costs (docs/operations.md).
            return {}
        # A single node is its own controller: frozen longer than this (a 10 s SIGSTOP in the broker-fault
        # tests, a long GC pause), it fences itself when it resumes, for a few tens of milliseconds.
        # A client whose metadata request lands then sees no broker, and librdkafka 2.13 and later
        # drop every broker and never reconnect (confluentinc/librdkafka#5301). Longer than Kafka's
        # 9 s; the price is a restart after a SIGKILL: its controller, itself restarted, counts the
        # old registration's session from its own start and refuses the new one until it ends.
        # The refused node asks again every heartbeat interval: 500 ms, not Kafka's 2 s, so it
        # registers within half a second of the session's end instead of up to 2 s after.
        return {"broker.session.timeout.ms": "15000", "broker.heartbeat.interval.ms": "500"}

    def _format(self) -> None:
        """Every node's log dir, with one new cluster id, side by side (a JVM each)."""
        cluster_id = new_cluster_id()
        formats = {
            node_id: subprocess.Popen(
                [self._java, *self._jvm_options(node_id), f"-Dlog4j2.configurationFile={LOG_CONFIG}", "-cp", self._classpath,
                 # One argument each: an id may begin with "-", which the tool would take for an option.
                 "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", f"--config={self.config_path(node_id)}"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
            for node_id in self._process_ids
        }
        for node_id, process in formats.items():
            output, _ = process.communicate(timeout=120)
            if process.returncode != 0:
                raise BrokerUnavailable(f"formatting the Kafka log dir {self.node_log_dir(node_id)} failed: {output.strip()[-2000:]}")
        log.info("event=kafka_formatted log_dirs=%s", ",".join(str(self.node_log_dir(node_id)) for node_id in self._process_ids))

    def command(self, node_id: int) -> list[str]:
        return [self._java, *self._jvm_options(node_id), f"-Dlog4j2.configurationFile={LOG_CONFIG}", "-cp", self._classpath,
                "kafka.Kafka", str(self.config_path(node_id))]


def _properties(settings: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in settings.items())
