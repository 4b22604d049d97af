"""The faust app: one agent over kadence.history feeding the task router."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import faust

from kadence.protocol import topics
from kadence.protocol.codec import NewerSchemaVersion
from kadence.protocol.kafka import CONSUMER_LAG, faust_broker_settings
from kadence.protocol.observability import READINESS, serve
from kadence.protocol.runner import stop_for_newer_schema
from kadence.protocol.settings import KafkaSettings
from services.matching.router import TaskRouter

APP_ID = "kadence-matching"


def create_app(settings: KafkaSettings) -> faust.App:
    app = faust.App(
        # The memory store keeps nothing on disk; faust still wants a data directory, so it goes
        # under TMPDIR rather than the working directory (read-only in the container image).
        APP_ID, store="memory://", datadir=Path(tempfile.gettempdir()) / APP_ID, web_enabled=False, topic_allow_declare=False,
        stream_wait_empty=False, **faust_broker_settings(settings),
    )
    history = app.topic(topics.HISTORY, key_serializer="raw", value_serializer="raw")

    async def send(topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]) -> Any:
        # Not awaited to delivery: faust flushes its producer before it commits source offsets.
        return await app.producer.send(topic, key, value, partition=None, timestamp=None, headers=headers)

    router = TaskRouter(settings, send)

    servers: list[Any] = []  # held: the endpoints live as long as the app

    @app.task
    async def endpoints() -> None:
        servers.append(await serve("matching"))

    @app.on_partitions_assigned.connect
    async def assigned(sender: Any, assigned: set[Any], **kwargs: Any) -> None:
        # faust reads on from its committed offsets; readiness here is the assignment.
        partitions = {tp.partition for tp in assigned if tp.topic == topics.HISTORY}
        READINESS.assign(partitions)
        for partition in partitions:
            READINESS.reached_end(partition)

    @app.agent(history)
    async def route_tasks(stream: faust.StreamT) -> None:
        async for event in stream.events():
            headers = list(event.headers.items()) if isinstance(event.headers, dict) else list(event.headers or ())
            try:
                await router.route(event.message.partition, event.value, headers)
            except NewerSchemaVersion as exc:
                stop_for_newer_schema("matching", exc)  # faust would restart the agent past the record
            record_lag(event.message.tp, event.message.offset)

    def record_lag(tp: Any, offset: int) -> None:
        """The consumer lag gauge the other services get from librdkafka: the end aiokafka's last
        fetch saw (its highwater, from fetches) minus the position after this record."""
        highwater = app.consumer.highwater(tp)
        if highwater is not None and highwater >= 0:
            CONSUMER_LAG.labels(APP_ID, tp.topic, str(tp.partition)).set(max(0, highwater - offset - 1))

    return app
