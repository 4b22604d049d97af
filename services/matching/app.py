"""The faust app: one agent over kadence.history feeding the outbound relay."""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path
from typing import Any, cast

import faust

from kadence.protocol import topics
from kadence.protocol.codec import HeaderList, NewerSchemaVersion
from kadence.protocol.kafka import CONSUMER_LAG, faust_broker_settings
from kadence.protocol.observability import READINESS
from kadence.protocol.runner import stop_for_newer_schema
from kadence.protocol.settings import KafkaSettings
from services.matching.relay import OutboundRelay

log = logging.getLogger("kadence.matching")

APP_ID = "kadence-matching"
LAG_INTERVAL_S = 5.0  # as often as librdkafka's statistics give the other services theirs


def create_app(settings: KafkaSettings) -> faust.App:
    app = faust.App(
        # The memory store keeps nothing on disk; faust still wants a data directory, so it goes
        # under TMPDIR rather than the working directory (read-only in the container image).
        APP_ID, store="memory://", datadir=Path(tempfile.gettempdir()) / APP_ID, web_enabled=False, topic_allow_declare=False,
        stream_wait_empty=False, **faust_broker_settings(settings),
    )
    history = app.topic(topics.HISTORY, key_serializer="raw", value_serializer="raw")

    async def send(topic: str, key: bytes | None, value: bytes, headers: HeaderList) -> Any:
        # Not awaited to delivery: faust flushes its producer before it commits source offsets.
        # faust's stub says bytes values; aiokafka sends str and None values too (a dead letter keeps its source's).
        return await app.producer.send(topic, key, value, partition=None, timestamp=None, headers=cast(list[tuple[str, bytes]], headers))

    relay = OutboundRelay(send)

    readiness = READINESS.of("matching")  # what /readyz says of this service

    # Per assigned partition of kadence.history, the offset after the last record read.
    consumed: dict[Any, int] = {}
    measured: set[Any] = set()  # the partitions the lag gauge has a value for

    # faust sends the partitions as the handler's second argument; its stub says handlers take none.
    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def assigned(sender: Any, assigned: set[Any], **kwargs: Any) -> None:
        # faust reads on from its committed offsets; readiness here is the assignment.
        history_tps = {tp for tp in assigned if tp.topic == topics.HISTORY}
        partitions = {tp.partition for tp in history_tps}
        relay.fences.forget(partitions)
        readiness.assign(partitions)
        for partition in partitions:
            readiness.reached_end(partition)
        given_away(set(consumed) - history_tps)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]
    async def revoked(sender: Any, revoked: set[Any], **kwargs: Any) -> None:
        relay.fences.forget({tp.partition for tp in revoked if tp.topic == topics.HISTORY})
        readiness.revoke()

    def given_away(tps: set[Any]) -> None:
        """Partitions no longer this instance's: their lag is another instance's to report."""
        for tp in tps:
            consumed.pop(tp, None)
            if tp in measured:
                measured.discard(tp)
                CONSUMER_LAG.remove(APP_ID, tp.topic, str(tp.partition))

    @app.agent(history)
    async def relay_commands(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            headers = list(event.headers.items()) if isinstance(event.headers, dict) else list(event.headers or ())
            try:
                await relay.relay(event.message.partition, event.message.offset, event.key, event.value, headers,
                                   int(event.message.timestamp * 1000) if event.message.timestamp else None)
            except NewerSchemaVersion as exc:
                stop_for_newer_schema("matching", exc)  # faust would restart the agent past the record
            consumed[event.message.tp] = event.message.offset + 1

    async def record_lag() -> None:
        """The consumer lag gauge, as the other services report it: per assigned partition, its end
        (ListOffsets: aiokafka's end_offsets) minus the offset after the last record read (before
        any, the consumer's position)."""
        try:
            assigned = [tp for tp in app.consumer.assignment() if tp.topic == topics.HISTORY]
            given_away(measured - set(assigned))
            ends = await app.consumer.highwaters(*assigned) if assigned else {}
            for tp in assigned:
                position = consumed.get(tp)
                if position is None:
                    position = await asyncio.wait_for(app.consumer.position(tp), LAG_INTERVAL_S)
                if position is not None and ends.get(tp) is not None:
                    CONSUMER_LAG.labels(APP_ID, tp.topic, str(tp.partition)).set(max(0, ends[tp] - position))
                    measured.add(tp)
        except Exception as exc:  # a gauge not updated this round must not stop the routing
            log.info("event=consumer_lag_not_measured error=%r", exc)

    app.timer(LAG_INTERVAL_S)(record_lag)

    return app
