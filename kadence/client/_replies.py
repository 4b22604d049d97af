"""The client's end of kadence.replies, where workers answer queries and the history service
answers commands and tells of the closes of runs the client started.

A client reads one partition of the topic from the partition's end when it starts (ListOffsets):
a reply to a query or command it sends later lands there or after. It asks for replies on that
partition; replies for other clients sharing the partition are skipped. (On Tansu, whose
ListOffsets answers up to a batch short of the end, the reader starts that much early and skips
those too.) A worker's QueryAnswer and the history service's Reply are told apart by their
kadence-schema header. The history service's replies are a shortcut, not the record: every one
is in the read model too, where the client also waits (a reply may be lost to a restart), but
for the first workflow task an eager start's answer carries, which only the reply brings.
"""

from __future__ import annotations

import asyncio
import logging
import random
import weakref
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from kadence.protocol import topics
from kadence.protocol.codec import Headers, Record, UndecodableRecord, codec
from kadence.protocol.kafka import base_config, consume_batches, topic_partitions, watermarks
from kadence.protocol.read_model import CommandOutcome
from kadence.protocol.records import EagerWorkflowTask
from kadence.protocol.settings import KafkaSettings

log = logging.getLogger("kadence.client")


@dataclass(eq=False)
class RunWatch:
    """The closes the history service sends for the run a start of this client answered with:
    `first` is that run's, `last` the one that ends its chain (continue-as-new, cron, retry).
    Held by the workflow handle: the listener keeps it only while something else does."""

    first: asyncio.Future[Record]
    last: asyncio.Future[Record]


class ReplyListener:
    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self.partition = 0
        self.waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}  # query id -> its answer
        self.answers: dict[str, asyncio.Future[CommandOutcome]] = {}  # request id -> the command's answer
        # start request id -> the first workflow task its accepted answer carries (None: it carries none)
        self.eager_tasks: dict[str, asyncio.Future[EagerWorkflowTask | None]] = {}
        self.watches: weakref.WeakValueDictionary[str, RunWatch] = weakref.WeakValueDictionary()  # by start request id
        self._replies = codec("Reply")
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

    def expect_answer(self, request_id: str) -> asyncio.Future[CommandOutcome]:
        """The history service's answer to a command not sent yet, which names this partition."""
        future: asyncio.Future[CommandOutcome] = asyncio.get_running_loop().create_future()
        self.answers[request_id] = future
        return future

    def forget_answer(self, request_id: str) -> None:
        self.answers.pop(request_id, None)

    def expect_eager_task(self, request_id: str) -> asyncio.Future[EagerWorkflowTask | None]:
        """The first workflow task the answer to an eager start not sent yet brings, or None when
        the answer brings none."""
        future: asyncio.Future[EagerWorkflowTask | None] = asyncio.get_running_loop().create_future()
        self.eager_tasks[request_id] = future
        return future

    def forget_eager_task(self, request_id: str) -> None:
        self.eager_tasks.pop(request_id, None)

    def watch(self, request_id: str) -> RunWatch:
        """The closes of the run a start not sent yet (carrying `request_id`) will answer with."""
        loop = asyncio.get_running_loop()
        watch = RunWatch(loop.create_future(), loop.create_future())
        self.watches[request_id] = watch
        return watch

    async def _listen(self, consumer: Consumer) -> None:
        answers = codec("QueryAnswer")
        try:
            async for messages in consume_batches(consumer, self._stop):
                for msg in messages:
                    if self._replies.wrote(msg.headers()):
                        self._settle_reply(msg.value(), msg.headers())
                        continue
                    try:
                        answer = answers.decode(msg.value(), msg.headers())
                    except UndecodableRecord:
                        continue  # not an answer (earlier releases' clients wrote markers here)
                    waiter = self.waiters.pop(answer["query_id"], None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(answer)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, consumer.close)

    def _settle_reply(self, value: bytes | None, headers: Headers | None) -> None:
        try:
            # Read by the version it names: a history of an earlier release writes its own.
            kind, reply = self._replies.decode(value, headers)["reply"]
        except UndecodableRecord as exc:
            log.warning("event=reply_undecodable partition=%d error=%r", self.partition, str(exc))
            return
        if kind == "CommandAnswer":
            waiter = self.answers.pop(reply["request_id"], None)
            if waiter is not None and not waiter.done():
                waiter.set_result(CommandOutcome(
                    reply["request_id"], reply["run_id"], reply["accepted"], reply["cause"], reply["reason"],
                ))
            eager = self.eager_tasks.pop(reply["request_id"], None)
            if eager is not None and not eager.done():
                eager.set_result(reply["eager_workflow_task"])
            return
        watch = self.watches.get(reply["request_id"])
        if watch is None:
            return
        if not watch.first.done():
            watch.first.set_result(reply)
        if reply["next_run_id"] is None:
            watch.last.set_result(reply)
            del self.watches[reply["request_id"]]

    async def close(self) -> None:
        self._stop.set()
        if self._listening is not None:
            await self._listening
