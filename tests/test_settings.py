"""Settings from the environment: a service refuses a bad one in one line (exit 2), and the
variables Kubernetes adds for Services are not mistaken for Kafka client properties."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kadence.protocol.runner import SETTING_ERROR_EXIT_CODE
from kadence.protocol.settings import KafkaSettings

# Nothing listens here: each refusal must come before any connection.
OFFLINE = {"KADENCE_BOOTSTRAP_SERVERS": "127.0.0.1:9", "KADENCE_POSTGRES_DSN": ""}


@pytest.mark.parametrize(("service", "variable", "value", "message"), [
    ("history", "KADENCE_LOG_LEVEL", "loud", "KADENCE_LOG_LEVEL='LOUD' is not a log level"),
    ("history", "KADENCE_PARTITIONS", "twelve", "KADENCE_PARTITIONS='twelve' is not an integer"),
    ("history", "KADENCE_KAFKA_SASL_MECHANISMZ", "PLAIN", 'No such configuration property: "sasl.mechanismz"'),
    ("matching", "KADENCE_KAFKA_SASL_MECHANISMZ", "PLAIN", 'No such configuration property: "sasl.mechanismz"'),
    ("visibility", "KADENCE_POSTGRES_DSN", "", "KADENCE_POSTGRES_DSN is not set"),
    ("visibility", "KADENCE_COMMAND_OUTCOME_RETENTION_HOURS", "0", "command outcomes must be kept at least an hour"),
])
def test_a_service_refuses_a_bad_setting_in_one_line(service: str, variable: str, value: str, message: str) -> None:
    env = {**os.environ, **OFFLINE, variable: value}
    refused = subprocess.run([sys.executable, "-m", "kadence.ops.cli", "serve", service], env=env, capture_output=True, text=True,
                             timeout=60)
    assert refused.returncode == SETTING_ERROR_EXIT_CODE, refused.stderr
    assert message in refused.stderr and "event=bad_setting" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_kubernetes_service_links_are_not_kafka_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Service named kadence-kafka-bootstrap gives every pod that does not set
    enableServiceLinks: false these variables; librdkafka would refuse them."""
    for name, value in {
        "KADENCE_KAFKA_BOOTSTRAP_SERVICE_HOST": "10.0.0.7", "KADENCE_KAFKA_BOOTSTRAP_SERVICE_PORT": "9093",
        "KADENCE_KAFKA_BOOTSTRAP_SERVICE_PORT_TCP_REPLICATION": "9091", "KADENCE_KAFKA_BOOTSTRAP_PORT": "tcp://10.0.0.7:9093",
        "KADENCE_KAFKA_BOOTSTRAP_PORT_9093_TCP": "tcp://10.0.0.7:9093", "KADENCE_KAFKA_BOOTSTRAP_PORT_9093_TCP_ADDR": "10.0.0.7",
        "KADENCE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    }.items():
        monkeypatch.setenv(name, value)
    assert KafkaSettings.from_env().client_config == {"security.protocol": "SASL_SSL"}


def test_kadence_instance_id_makes_a_service_consumer_a_static_member(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the consumers of the services that own partitions take it (a worker's two groups and any
    second Worker in the process stay dynamic), and only when it is set (Tansu needs dynamic)."""
    from kadence.protocol.kafka import consumer_config

    monkeypatch.setenv("KADENCE_INSTANCE_ID", " kadence-history-2 ")
    monkeypatch.setenv("KADENCE_SESSION_TIMEOUT_MS", "30000")
    settings = KafkaSettings.from_env()
    static = consumer_config(settings, "kadence.history-service", static_member=True)
    assert static["group.instance.id"] == "kadence-history-2"
    assert static["heartbeat.interval.ms"] == 3000, "a long session timeout must not slow rebalances"
    assert "group.instance.id" not in consumer_config(settings, "kadence.tq.orders.workflow")
    monkeypatch.delenv("KADENCE_INSTANCE_ID")
    assert "group.instance.id" not in consumer_config(KafkaSettings.from_env(), "kadence.history-service", static_member=True)


def test_readers_off_the_critical_path_fetch_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer service and the visibility projector let the broker gather records before it
    answers, matching's relay for less long; a wait of 0 makes them fetch like the rest."""
    from kadence.protocol.kafka import BATCHING_FETCH_MIN_BYTES, batching_fetch

    monkeypatch.setenv("KADENCE_BATCHING_FETCH_WAIT_MS", "35")
    monkeypatch.setenv("KADENCE_RELAY_FETCH_WAIT_MS", "7")
    settings = KafkaSettings.from_env()
    assert batching_fetch(settings.batching_fetch_wait_ms) == {"fetch.min.bytes": BATCHING_FETCH_MIN_BYTES, "fetch.wait.max.ms": 35}
    assert batching_fetch(settings.relay_fetch_wait_ms) == {"fetch.min.bytes": BATCHING_FETCH_MIN_BYTES, "fetch.wait.max.ms": 7}
    assert batching_fetch(0) == {}
    monkeypatch.delenv("KADENCE_BATCHING_FETCH_WAIT_MS")
    monkeypatch.delenv("KADENCE_RELAY_FETCH_WAIT_MS")
    assert (KafkaSettings.from_env().batching_fetch_wait_ms, KafkaSettings.from_env().relay_fetch_wait_ms) == (100, 20)

@pytest.mark.parametrize(("command", "variable", "value", "message"), [
    (["dlq", "list"], "KADENCE_KAFKA_SASL_MECHANISM", "BOGUS", "Unsupported SASL mechanism: BOGUS"),
    (["task-queue", "describe", "orders"], "KADENCE_KAFKA_SASL_MECHANISM", "BOGUS", "Unsupported SASL mechanism: BOGUS"),
    (["dlq", "list"], "KADENCE_PARTITIONS", "twelve", "KADENCE_PARTITIONS='twelve' is not an integer"),
])
def test_a_cli_command_refuses_a_bad_setting_in_one_line(command: list[str], variable: str, value: str, message: str) -> None:
    env = {**os.environ, **OFFLINE, "KADENCE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", variable: value}
    refused = subprocess.run([sys.executable, "-m", "kadence.ops.cli", *command], env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 1, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], refused.stderr
