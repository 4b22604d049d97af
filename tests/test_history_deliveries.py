"""The history service's delivery reports, without a broker: what an acknowledgement moves."""

from __future__ import annotations

from confluent_kafka import Message

from kadence.protocol import topics
from kadence.protocol.settings import KafkaSettings
from services.history.partition import PartitionState
from services.history.service import HistoryService

UNREACHABLE = KafkaSettings(bootstrap_servers="127.0.0.1:1")  # never asked: the reports are handed in


def test_a_batch_acknowledged_without_its_offset_leaves_history_offset_where_it_was() -> None:
    """The broker acknowledges an idempotent retry of a batch it already had without its offset
    (librdkafka's OFFSET_INVALID). That report came during a cluster's leader change, inside a
    rebalance's flush, and killed the service; now it moves nothing, and the next report moves
    history_offset past both."""
    service = HistoryService(UNREACHABLE, None, 1.0)
    try:
        service.partitions[1] = PartitionState(1, history_offset=5)
        service._delivered(None, Message(topic=topics.HISTORY, partition=1, offset=-1001, value=b"batch"))
        assert service.partitions[1].history_offset == 5
        service._delivered(None, Message(topic=topics.HISTORY, partition=1, offset=7, value=b"batch"))
        assert service.partitions[1].history_offset == 8
    finally:
        service.consumer.close()
