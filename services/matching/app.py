"""The faust app: one agent over kadence.history feeding the task router."""

from __future__ import annotations

from typing import Any

import faust

from kadence.protocol import topics
from kadence.protocol.kafka import faust_broker_settings
from kadence.protocol.settings import KafkaSettings
from services.matching.router import TaskRouter

APP_ID = "kadence-matching"


def create_app(settings: KafkaSettings) -> faust.App:
    app = faust.App(
        APP_ID, store="memory://", web_enabled=False, topic_allow_declare=False,
        stream_wait_empty=False, **faust_broker_settings(settings),
    )
    history = app.topic(topics.HISTORY, key_serializer="raw", value_serializer="raw")

    async def send(topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes]]) -> Any:
        # Not awaited to delivery: faust flushes its producer before it commits source offsets.
        return await app.producer.send(topic, key, value, partition=None, timestamp=None, headers=headers)

    router = TaskRouter(settings, send)

    @app.agent(history)
    async def route_tasks(stream: faust.StreamT) -> None:
        async for event in stream.events():
            headers = list(event.headers.items()) if isinstance(event.headers, dict) else list(event.headers or ())
            await router.route(event.message.partition, event.value, headers)

    return app
