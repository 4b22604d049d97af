"""Apache Kafka as the local broker: one KRaft node, broker and controller in one process, run
from the jars Maven resolves for `pom.xml` beside this file (the version deploy/ runs).

Maven resolves the jars once into its local repository and the classpath is cached under
~/.cache/kadence (outside any work tree); later starts need neither Maven nor the network.
The log dir lives under the stack's data dir and is formatted once, so topics, offsets and
committed positions survive a restart of the broker or of the whole stack.
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

from kadence.dev.brokers.process import BrokerUnavailable, LocalBroker, free_port

log = logging.getLogger("kadence.dev")

POM = Path(__file__).with_name("pom.xml")
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
KAFKA_VERSION = re.search(r"<kafka.version>([^<]+)</kafka.version>", POM.read_text()).group(1)  # type: ignore[union-attr]
MIN_JAVA = 17  # Apache Kafka 4's brokers need Java 17
# A bounded heap: plenty for one node serving tests and benchmarks (docs/architecture.md, "Brokers").
JVM_OPTIONS = ("-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")


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
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "kadence" / f"apache-kafka-{KAFKA_VERSION}-{hashlib.sha256(POM.read_bytes()).hexdigest()[:12]}"


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
    name: ClassVar[str] = f"Apache Kafka {KAFKA_VERSION}"
    persistent: ClassVar[bool] = True
    # A fetch returns as soon as data arrives on a partition it names; a partition assigned while it
    # waits (a worker that just joined, a rebalance) is first fetched when it returns. 100 ms, not the
    # deployments' 500: a worker started beside the stack gets its first task sooner, and the idle
    # stack spends no more (docs/performance.md, "The first fetch after an assignment").
    fetch_wait_max_ms: ClassVar[int] = 100

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "kafka"

    @property
    def log_identity(self) -> str | None:
        meta = self.log_dir / "meta.properties"
        if not meta.exists():
            return None
        found = re.search(r"^cluster\.id=(.+)$", meta.read_text(), re.MULTILINE)
        return found.group(1) if found else None

    @property
    def config_path(self) -> Path:
        return self.data_dir / "kafka.properties"

    def prepare(self) -> None:
        self._classpath = resolve_classpath()
        self._java = find_java() or "java"
        # The controller's port is free-picked on each start: a static voter set keeps no address in the log.
        self.config_path.write_text(self._config(controller_port=free_port()))
        if not (self.log_dir / "meta.properties").exists():
            self._format()

    def _config(self, controller_port: int) -> str:
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": f"PLAINTEXT://{self.bootstrap_servers},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap_servers}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.log_dir),
            # One node: every internal topic has one replica.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            # As deploy/ runs it: topics are created explicitly, with their settings; records up to 10 MiB.
            "auto.create.topics.enable": "false",
            "message.max.bytes": "10485760",
            # Tests and `kadence dev` use session timeouts of 1-2 s (production keeps Kafka's 6 s minimum).
            "group.min.session.timeout.ms": "1000",
            # The node is its own controller: frozen longer than this (a 10 s SIGSTOP in the broker-fault
            # tests, a long GC pause), it fences itself when it resumes, for a few tens of milliseconds.
            # A client whose metadata request lands then sees no broker, and librdkafka 2.13 and later
            # drop every broker and never reconnect (confluentinc/librdkafka#5301). Longer than Kafka's
            # 9 s; the price is a restart after a SIGKILL, which waits this long for the old registration.
            "broker.session.timeout.ms": "15000",
            "group.initial.rebalance.delay.ms": "0",
            # Fewer threads and a smaller cleaner buffer than Kafka's defaults: a 2-core laptop, not a server.
            "num.network.threads": "2",
            "num.io.threads": "4",
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        }
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def _format(self) -> None:
        result = subprocess.run(
            [self._java, *JVM_OPTIONS, f"-Dlog4j2.configurationFile={LOG_CONFIG}", "-cp", self._classpath,
             # One argument each: an id may begin with "-", which the tool would take for an option.
             "kafka.tools.StorageTool", "format", f"--cluster-id={new_cluster_id()}", f"--config={self.config_path}"],
            capture_output=True, text=True, timeout=120,
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip()[-2000:]
            raise BrokerUnavailable(f"formatting the Kafka log dir {self.log_dir} failed: {output}")
        log.info("event=kafka_formatted log_dir=%s", self.log_dir)

    def command(self) -> list[str]:
        return [self._java, *JVM_OPTIONS, f"-Dlog4j2.configurationFile={LOG_CONFIG}", "-cp", self._classpath,
                "kafka.Kafka", str(self.config_path)]
