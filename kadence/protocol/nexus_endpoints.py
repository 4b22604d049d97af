"""The Nexus endpoint registry (docs/decisions/0008-nexus.md): the compacted topic
kadence.nexus-endpoints, one record per endpoint keyed by its name (a tombstone deletes it),
written by `kadence nexus endpoint create | delete`, listed by `kadence nexus endpoint list`, and
followed by each history instance, which resolves a ScheduleNexusOperation's endpoint to its task
queue before it decides the workflow task's completion."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from kadence.protocol import topics
from kadence.protocol.codec import HeaderList, RecordCodec, codec
from kadence.protocol.kafka import base_config, ensure_topics, make_producer, read_to_end
from kadence.protocol.limits import task_queue_problem
from kadence.protocol.names import CommandType
from kadence.protocol.records import NexusEndpoint
from kadence.protocol.settings import KafkaSettings

log = logging.getLogger("kadence.nexus")

FOLLOW_POLL_S = 0.5


def endpoint_codec() -> RecordCodec:
    return codec("NexusEndpoint")


def _produce(settings: KafkaSettings, name: str, value: bytes | None, headers: HeaderList) -> None:
    ensure_topics(settings, {topics.NEXUS_ENDPOINTS: 1})
    producer = make_producer(settings)
    producer.produce(topics.NEXUS_ENDPOINTS, value, name.encode(), headers=headers)
    if producer.flush(30):
        raise RuntimeError(f"the broker at {settings.bootstrap_servers} did not take the write to {topics.NEXUS_ENDPOINTS} in 30 s")


def create_endpoint(settings: KafkaSettings, name: str, task_queue: str, description: str = "") -> NexusEndpoint:
    """Register (or replace) the endpoint `name`, whose operations go to `task_queue`."""
    if not name:
        raise ValueError("a Nexus endpoint needs a name")
    if problem := task_queue_problem(task_queue):
        raise ValueError(f"Nexus endpoint {name!r}: {problem}")
    endpoint: NexusEndpoint = {"name": name, "task_queue": task_queue, "description": description}
    endpoints = endpoint_codec()
    _produce(settings, name, endpoints.encode(endpoint), endpoints.headers())
    return endpoint


def delete_endpoint(settings: KafkaSettings, name: str) -> None:
    if name not in list_endpoints(settings):
        raise KeyError(f"no Nexus endpoint named {name!r} (`kadence nexus endpoint list` shows them)")
    _produce(settings, name, None, [])


def list_endpoints(settings: KafkaSettings) -> dict[str, NexusEndpoint]:
    """The registry as it is now: each endpoint's latest record."""
    ensure_topics(settings, {topics.NEXUS_ENDPOINTS: 1})
    endpoints: dict[str, NexusEndpoint] = {}
    decoder = endpoint_codec()
    for msg in read_to_end(settings, topics.NEXUS_ENDPOINTS, {0: 0}):
        _apply(endpoints, decoder, msg)
    return endpoints


def _apply(endpoints: dict[str, NexusEndpoint], decoder: RecordCodec, msg: Message) -> None:
    name = (msg.key() or b"").decode()
    value = msg.value()
    if value is None:
        endpoints.pop(name, None)
        return
    try:
        endpoints[name] = cast(NexusEndpoint, decoder.decode(value, msg.headers()))
    except Exception as exc:  # an outside write: the name keeps what it had, and the reason is told
        log.error("event=nexus_endpoint_undecodable name=%r offset=%d error=%r", name, msg.offset(), str(exc))


class EndpointRegistry:
    """The registry as one history instance follows it: read to its end before the instance decides
    any command, then followed on a thread of its own."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.settings = settings
        self._endpoints: dict[str, NexusEndpoint] = {}
        self.caught_up = threading.Event()
        self._decoder = endpoint_codec()

    def task_queue(self, name: str) -> str:
        """The endpoint's task queue, '' for an endpoint not registered."""
        endpoint = self._endpoints.get(name)
        return endpoint["task_queue"] if endpoint is not None else ""

    def follow(self, stop: threading.Event) -> None:
        """Read the registry, and every change to it, until `stop` (a thread's target)."""
        consumer = Consumer({
            **base_config(self.settings), "group.id": "kadence-reader", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "enable.partition.eof": True,
        })
        consumer.assign([TopicPartition(topics.NEXUS_ENDPOINTS, 0, OFFSET_BEGINNING)])
        try:
            while not stop.is_set():
                msg = consumer.poll(FOLLOW_POLL_S)
                if msg is None:
                    continue
                error = msg.error()
                if error is None:
                    _apply(self._endpoints, self._decoder, msg)
                elif error.code() == KafkaError._PARTITION_EOF:
                    self.caught_up.set()
                else:
                    log.warning("event=nexus_endpoints_read_failed error=%r", error.str())
        finally:
            consumer.close()

    def resolve(self, kind: str, body: Mapping[str, object]) -> None:
        """Name each ScheduleNexusOperation's task queue in a workflow task's completion, and a
        standalone Nexus operation's in its start, from its endpoint as the registry has it now;
        one not registered is left without (the machine refuses it, saying so)."""
        operation = body.get("nexus_operation")
        if kind == CommandType.StartWorkflowExecution and isinstance(operation, dict):
            operation["task_queue"] = self.task_queue(operation["endpoint"])
        if kind != CommandType.RespondWorkflowTaskCompleted:
            return
        commands = body.get("commands")
        assert isinstance(commands, list)
        for command_kind, attrs in commands:
            if command_kind == "ScheduleNexusOperation":
                attrs["task_queue"] = self.task_queue(attrs["endpoint"])
