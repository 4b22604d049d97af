"""The matching service: its faust app (the relay of outbound commands) started on the running
event loop, so it runs alone (`python -m services.matching`) or beside the other services in one
process (`kadence server`) alike."""

from __future__ import annotations

import asyncio

from kadence.protocol.kafka import core_topics, ensure_topics, until_broker_answers
from kadence.protocol.settings import KafkaSettings
from services.matching.app import create_app


async def run_matching_service(stop: asyncio.Event) -> None:
    settings = KafkaSettings.from_env()
    await until_broker_answers("matching_topic_setup", lambda: ensure_topics(settings, core_topics(settings)))
    # Made here, not at import: a faust app binds the event loop it is made on.
    app = create_app(settings)
    await app.start()
    try:
        await stop.wait()
    finally:
        await app.stop()
