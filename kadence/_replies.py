"""The client's end of kadence.replies, where workers answer queries.

A client reads one partition of the topic, from just after a marker record it wrote there
itself: the marker's delivery report gives the exact offset, so the client never asks the
broker for a partition's end (the local broker answers that wrongly). It asks for answers on
that partition; answers for other clients sharing the partition are skipped.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from kadence.protocol import topics
from kadence.protocol.codec import UndecodableRecord, codec
from kadence.protocol.kafka import AsyncProducer, base_config, consume_batches, topic_partitions
from kadence.protocol.settings import KafkaSettings

log = logging.getLogger("kadence.client")


class ReplyListener:
    def __init__(self, settings: KafkaSettings, producer: AsyncProducer) -> None:
        self.settings = settings
        self.producer = producer
        self.partition = 0
        self.waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._stop = asyncio.Event()
        self._listening: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        partitions = await loop.run_in_executor(None, topic_partitions, self.settings, topics.REPLIES)
        self.partition = random.randrange(partitions)
        marker = await self.producer.produce(topics.REPLIES, b"", b"marker", partition=self.partition)
        consumer = Consumer({
            **base_config(self.settings), "group.id": "kadence-replies", "enable.auto.commit": False,
            "fetch.wait.max.ms": self.settings.fetch_wait_max_ms,
        })
        consumer.assign([TopicPartition(topics.REPLIES, self.partition, marker.offset() + 1)])
        self._listening = asyncio.create_task(self._listen(consumer))

    def expect(self, query_id: str) -> asyncio.Future[dict[str, Any]]:
        """The answer to a query not sent yet (ask before sending it)."""
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiters[query_id] = future
        return future

    def forget(self, query_id: str) -> None:
        self.waiters.pop(query_id, None)

    async def _listen(self, consumer: Consumer) -> None:
        answers = codec("QueryAnswer")
        try:
            async for messages in consume_batches(consumer, self._stop):
                for msg in messages:
                    try:
                        answer = answers.decode(msg.value(), msg.headers())
                    except UndecodableRecord:
                        continue  # a client's marker
                    waiter = self.waiters.pop(answer["query_id"], None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(answer)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, consumer.close)

    async def close(self) -> None:
        self._stop.set()
        if self._listening is not None:
            await self._listening
