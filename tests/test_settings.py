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
])
def test_a_service_refuses_a_bad_setting_in_one_line(service: str, variable: str, value: str, message: str) -> None:
    env = {**os.environ, **OFFLINE, variable: value}
    refused = subprocess.run([sys.executable, "-m", "kadence.cli", "serve", service], env=env, capture_output=True, text=True, timeout=60)
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
