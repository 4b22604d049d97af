"""ERROR in a log means someone must act: what the Kafka clients retry through is at most a WARNING,
what no retry mends is an ERROR (docs/operations.md, KADENCE_LOG_LEVEL)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from kadence.protocol.kafka import ClientLog, log_client_error
from kadence.protocol.logs import TopicNotYetInMetadata


def test_librdkafkas_connection_errors_are_warnings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="kadence.kafka.client"):
        ClientLog().log(logging.ERROR, "%s", "FAIL", "rdkafka#producer-1", "Connect to ipv4#127.0.0.1:9092 failed: Connection refused")
        ClientLog().log(logging.DEBUG, "%s", "BROKER", "rdkafka#producer-1", "a debug line")
    assert [record.levelno for record in caplog.records] == [logging.WARNING, logging.DEBUG]


@pytest.mark.parametrize(("error", "level"), [
    (KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"), logging.WARNING),
    (KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error"), logging.ERROR),
    (KafkaError(KafkaError._SSL, "certificate verify failed"), logging.ERROR),
    (KafkaError(KafkaError._FENCED, "producer fenced", fatal=True), logging.ERROR),
])
def test_client_errors_are_errors_only_when_someone_must_act(caplog: pytest.LogCaptureFixture, error: KafkaError, level: int) -> None:
    with caplog.at_level(logging.DEBUG, logger="kadence.kafka"):
        log_client_error(error)
    assert [record.levelno for record in caplog.records] == [level]


def test_a_topic_not_yet_in_aiokafkas_metadata_is_a_warning() -> None:
    expected = logging.LogRecord("aiokafka.cluster", logging.ERROR, __file__, 1,
                                 "Topic %s not found in cluster metadata", ("kadence-matching-__assignor-__leader",), None)
    other = logging.LogRecord("aiokafka.cluster", logging.ERROR, __file__, 1, "Unexpected error", (), None)
    for record in (expected, other):
        assert TopicNotYetInMetadata().filter(record)
    assert (expected.levelname, other.levelname) == ("WARNING", "ERROR")
