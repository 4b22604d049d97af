"""ERROR in a log means someone must act: what the Kafka clients retry through is at most a WARNING,
what no retry mends is an ERROR (docs/operations.md, KADENCE_LOG_LEVEL)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from kadence.protocol.kafka import ClientLog, log_client_error
from kadence.protocol.logs import RetriedByAiokafka


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


@pytest.mark.parametrize(("logger", "message", "args"), [
    ("aiokafka.cluster", "Topic %s not found in cluster metadata", ("kadence-matching-__assignor-__leader",)),
    ("aiokafka", "Unable connect to node with id %s: %s", (3, "[Errno 111] Connection refused")),
    ("aiokafka.consumer.fetcher", "Failed fetch messages from %s: %s", (2, "KafkaConnectionError: Connection closed")),
    ("aiokafka.consumer.group_coordinator", "Group Coordinator Request failed: %s", ("[Error 15] GroupCoordinatorNotAvailableError",)),
    ("aiokafka.consumer.group_coordinator", "Heartbeat session expired - marking coordinator dead", ()),
    ("aiokafka.consumer.group_coordinator", "OffsetCommit failed for group %s due to group error (%s), will rejoin",
     ("kadence-matching", "[Error 25] UnknownMemberIdError")),
    ("faust.transport.drivers.aiokafka", "[^--AIOKafkaConsumerThread]: Thread keepalive is not responding...", ()),
])
def test_what_aiokafka_retries_by_itself_is_a_warning(logger: str, message: str, args: tuple[object, ...]) -> None:
    record = logging.LogRecord(logger, logging.ERROR, __file__, 1, message, args, None)
    assert RetriedByAiokafka().filter(record)
    assert record.levelname == "WARNING"


def test_other_errors_keep_their_level() -> None:
    records = [logging.LogRecord("aiokafka", logging.ERROR, __file__, 1, "Unexpected error", (), None),
               logging.LogRecord("kadence.history", logging.ERROR, __file__, 1, "Unable connect to node with id 1", (), None)]
    for record in records:
        assert RetriedByAiokafka().filter(record)
    assert [record.levelname for record in records] == ["ERROR", "ERROR"]
