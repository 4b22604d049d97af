"""The local broker: Apache Kafka where Java runs, Tansu where it does not, and what each keeps."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from kadence.dev.brokers import ApacheKafka, BrokerUnavailable, Tansu, apache_kafka, choose_broker, free_port
from kadence.dev.local_stack import LocalStack
from kadence.protocol.kafka import base_config, core_topics, ensure_topics

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment like a machine without Java: no JAVA_HOME, and a PATH with only this interpreter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("python", "kadence"):
        (bin_dir / tool).symlink_to(Path(sys.executable).parent / tool)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("KADENCE_LOCAL_BROKER", raising=False)
    monkeypatch.setenv("PATH", str(bin_dir))
    return {key: value for key, value in os.environ.items() if not key.startswith("KADENCE_")}


def test_without_java_the_stack_takes_tansu_and_says_why(no_java: dict[str, str]) -> None:
    choice = choose_broker("auto")
    assert choice.broker is Tansu and "no Java found" in choice.reason
    with pytest.raises(BrokerUnavailable, match="Apache Kafka cannot run here: no Java found"):
        choose_broker("kafka")


@pytest.mark.kafka_only
def test_with_java_the_stack_takes_apache_kafka() -> None:
    assert choose_broker("auto").broker is ApacheKafka
    assert choose_broker("tansu").broker is Tansu


def test_the_readme_first_command_runs_without_java_on_tansu(no_java: dict[str, str], tmp_path: Path) -> None:
    data_dir = tmp_path / "stack"
    order_id = f"order-{uuid.uuid4()}"
    ran = subprocess.run(
        ["kadence", "dev", "--port", "0", "--data-dir", str(data_dir),
         "--run", f"python examples/order.py && kadence env --data-dir {data_dir}"],
        env={**no_java, "ORDER_ID": order_id}, cwd=REPO, capture_output=True, text=True, timeout=240,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "broker: Tansu 0.6.0 (no Java found" in ran.stderr
    assert f"workflow {order_id} result: shipped_{order_id}" in ran.stdout
    # `kadence env` hands a process started by hand the settings the services run with.
    assert "export KADENCE_FETCH_WAIT_MAX_MS=5\n" in ran.stdout and "export KADENCE_SESSION_TIMEOUT_MS=2000\n" in ran.stdout
    assert "ready: KADENCE_BOOTSTRAP_SERVERS=127.0.0.1:" in ran.stderr and "KADENCE_FETCH_WAIT_MAX_MS=5" in ran.stderr


def test_kadence_env_without_a_running_stack_says_how_to_start_one(tmp_path: Path) -> None:
    ran = subprocess.run([sys.executable, "-m", "kadence.ops.cli", "env", "--data-dir", str(tmp_path)], capture_output=True, text=True)
    assert ran.returncode == 1 and "no local stack is running" in ran.stderr and "kadence dev" in ran.stderr


@pytest.mark.kafka_only
def test_apache_kafka_and_postgres_keep_their_data_across_restarts_of_the_stack(tmp_path: Path) -> None:
    data_dir = tmp_path / "stack"
    first = LocalStack(data_dir, partitions=1, broker_kind="kafka")
    first.start(services=())
    try:
        ensure_topics(first.settings, {"kept": 1})
        producer = Producer({**base_config(first.settings), "enable.idempotence": True})
        producer.produce("kept", b"still here")
        assert producer.flush(30) == 0
        with psycopg.connect(first.postgres_dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (value text)")
            conn.execute("INSERT INTO kept VALUES ('row')")
    finally:
        first.stop()

    again = LocalStack(data_dir, partitions=1, broker_kind="kafka", kafka_port=first.kafka_port)
    again.start(services=())
    try:
        consumer = Consumer({**base_config(again.settings), "group.id": "kept-reader", "enable.auto.commit": False})
        consumer.assign([TopicPartition("kept", 0, 0)])
        message = consumer.poll(30)
        consumer.close()
        assert message is not None and message.error() is None and message.value() == b"still here"
        with psycopg.connect(again.postgres_dsn) as conn:
            assert conn.execute("SELECT value FROM kept").fetchall() == [("row",)]
    finally:
        again.stop()

    # A new log (its dir removed, or another broker) must not meet the Postgres state of the old one.
    shutil.rmtree(data_dir / "kafka")
    fresh = LocalStack(data_dir, partitions=1, broker_kind="kafka")
    fresh.start(services=())
    try:
        with psycopg.connect(fresh.postgres_dsn) as conn:
            assert conn.execute("SELECT to_regclass('kept')").fetchone() == (None,)
    finally:
        fresh.stop()


@pytest.mark.kafka_only
def test_a_cluster_id_that_begins_with_a_dash_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One id in 64 does (URL-safe base64); the storage tool must not take it for an option."""
    monkeypatch.setattr(apache_kafka, "new_cluster_id", lambda: "-AbCdEfGhIjKlMnOpQrStU")
    ApacheKafka(tmp_path, free_port()).prepare()
    assert "cluster.id=-AbCdEfGhIjKlMnOpQrStU\n" in (tmp_path / "kafka" / "meta.properties").read_text()


def test_only_apache_kafka_runs_a_cluster_and_kadence_dev_says_so(no_java: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(BrokerUnavailable, match="Tansu 0.6.0 runs a single broker; a cluster of 3 needs Apache Kafka"):
        choose_broker("tansu", nodes=3)
    with pytest.raises(BrokerUnavailable, match="a cluster of 3 brokers needs Apache Kafka, which cannot run here: no Java found"):
        choose_broker("auto", nodes=3)
    ran = subprocess.run(["kadence", "dev", "--brokers", "3", "--data-dir", str(tmp_path)],
                         env=no_java, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 1 and "a cluster of 3 brokers needs Apache Kafka" in ran.stderr, ran.stderr


@pytest.mark.kafka_only
def test_a_three_node_cluster_keeps_kadence_topics_on_three_replicas_two_in_sync(tmp_path: Path) -> None:
    """As deploy/ runs them: `kadence dev --brokers 3`'s topics, the services' settings and a node
    stopped and started again (its controller port and log dir kept), back in every ISR."""
    stack = LocalStack(tmp_path / "stack", partitions=2, broker_kind="kafka", brokers=3)
    stack.start(services=())
    try:
        assert isinstance(stack.broker, ApacheKafka)
        assert stack.kadence_env["KADENCE_REPLICATION_FACTOR"] == "3" and len(stack.bootstrap_servers.split(",")) == 3
        ensure_topics(stack.settings, {"kadence.tq.cluster.activity": 2})
        admin = AdminClient(base_config(stack.settings))
        for name in [*core_topics(stack.settings), "kadence.tq.cluster.activity"]:
            config = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)])
            assert next(iter(config.values())).result(10)["min.insync.replicas"].value == "2", name
        stack.broker.stop(2)
        assert stack.broker.out_of_sync(2) != []
        stack.broker.start(2)
        deadline = time.monotonic() + 60
        while stack.broker.out_of_sync(2) and time.monotonic() < deadline:
            time.sleep(0.2)
        metadata = stack.broker.metadata()
        for name in core_topics(stack.settings):
            for partition in metadata.topics[name].partitions.values():
                assert sorted(partition.replicas) == sorted(partition.isrs) == [1, 2, 3], (name, partition)
    finally:
        stack.stop()
