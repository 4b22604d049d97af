"""What a partition's leader answers while it moves (a rolling restart of the brokers) is asked
again, not raised: the history service read OFFSET_NOT_AVAILABLE from a new leader whose high
watermark had not caught up, at its partitions' assignment, and the process stopped."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from kadence.protocol.kafka import leader_changing


@pytest.mark.parametrize("code", [
    KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TRANSPORT,
])
def test_a_leader_on_the_move_is_asked_again(code: int) -> None:
    assert leader_changing(KafkaError(code))


@pytest.mark.parametrize("code", [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._INVALID_ARG, KafkaError.OFFSET_OUT_OF_RANGE])
def test_what_no_wait_mends_is_raised(code: int) -> None:
    assert not leader_changing(KafkaError(code))
