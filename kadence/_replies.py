"""The client's end of kadence.replies, where workers answer queries.

A client reads one partition of the topic from the partition's end when it starts (ListOffsets):
an answer to a query it sends later lands there or after. It asks for answers on that partition;
answers for other clients sharing the partition are skipped. (On Tansu, whose ListOffsets answers
up to a batch short of the end, the reader starts that much early and skips those too.)
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from kadence.protocol import topics
from kadence.protocol.codec import UndecodableRecord, codec
from kadence.protocol.kafka import base_config, consume_batches, topic_partitions, watermarks
from kadence.protocol.settings import KafkaSettings

log = logging.getLogger("kadence.client")


class ReplyListener:
    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.partition = 0
        self.waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._stop = asyncio.Event()
        self._listening: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        partitions = await loop.run_in_executor(None, topic_partitions, self.settings, topics.REPLIES)
        self.partition = random.randrange(partitions)
        consumer = Consumer({
            **base_config(self.settings), "group.id": "kadence-replies", "enable.auto.commit": False,
            "fetch.wait.max.ms": self.settings.fetch_wait_max_ms,
        })
        ends = await loop.run_in_executor(None, watermarks, consumer, topics.REPLIES, [self.partition])
        consumer.assign([TopicPartition(topics.REPLIES, self.partition, ends[self.partition][1])])
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
                        continue  # not an answer (earlier releases' clients wrote markers here)
                    waiter = self.waiters.pop(answer["query_id"], None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(answer)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, consumer.close)

    async def close(self) -> None:
        self._stop.set()
        if self._listening is not None:
            await self._listening
