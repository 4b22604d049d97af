"""The one place Kafka clients are configured and created.

Every service and the SDK get producers, consumers and topics from here, so tuning,
security pass-through and the workarounds for the Tansu broker (`is_tansu`) live in one module.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Future
from typing import Any, TypeVar

from aiokafka.partitioner import murmur2
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ListOffsetsResultInfo, NewTopic, OffsetSpec
from prometheus_client import Counter, Gauge

from kadence.protocol.codec import HeaderList
from kadence.protocol.limits import MAX_RECORD_BYTES
from kadence.protocol.settings import KafkaSettings
from kadence.protocol.stopping import STOP_CHECK_S, give_up_if_stopping, sleep_unless_stopping
from kadence.protocol.topics import topic_config

log = logging.getLogger("kadence.kafka")

T = TypeVar("T")
BROKER_RETRY_FIRST_S = 0.5
BROKER_RETRY_MAX_S = 5.0

PRODUCE_RETRIED = Counter(
    "kadence_produce_retried_total", "Records produced again after their delivery failed for a reason that passes (the broker away "
    "past the delivery timeout, a producer replaced after a fatal error)",
)
CONSUMER_LAG = Gauge(
    "kadence_consumer_lag", "Records between a consumer's position and its partition's end (ListOffsets)", ["group", "topic", "partition"],
)

# The Tansu broker (the zero-Java local broker: docs/architecture.md, "Brokers") names its
# cluster so unless told otherwise, and kadence.dev.brokers.tansu does not tell it; an Apache Kafka
# cluster id is a random UUID.
TANSU_CLUSTER_ID = "tansu_cluster"


def is_tansu(cluster_id: str | None) -> bool:
    """Whether the broker is Tansu, which gets two things wrong that Kadence relies on with Apache
    Kafka. This is the one place they are worked around, only where Tansu must still work (the
    order example, start by topic, history recovery after a kill):
    - ListOffsets answers with the base offset of the partition's last batch + 1, not its end. So
      `read_to_end` (history recovery, the audit) finds the end by partition EOF there, which a
      fetch reports right. Elsewhere Kadence takes ListOffsets as it is and reads low on Tansu: the
      consumer lag gauge and task queue backlogs; a query's reply reader starts a batch early and
      skips what is not its own.
    - It refuses aiokafka's InitProducerId, so matching's faust producer is not idempotent there.
    - It answers a long poll only when the poll's wait expires, not when a record arrives, so a
      consumer there waits TANSU_FETCH_WAIT_MAX_MS (`fitted_to_broker`).
    Static membership, which strands partitions on Tansu, is off unless KADENCE_INSTANCE_ID is set."""
    return cluster_id == TANSU_CLUSTER_ID


# What a consumer on Tansu asks its fetches to wait: every hop a record makes waits up to this long.
TANSU_FETCH_WAIT_MAX_MS = 5


def broker_is_tansu(settings: KafkaSettings, timeout: float = 30.0) -> bool:
    return is_tansu(AdminClient(base_config(settings)).list_topics(timeout=timeout).cluster_id)


def fitted_to_broker(settings: KafkaSettings, tansu: bool) -> KafkaSettings:
    """`settings` for the broker: on Tansu, unless KADENCE_FETCH_WAIT_MAX_MS says otherwise, its
    short fetch wait. The default, 500 ms, costs nothing on Apache Kafka, which answers a long poll
    as soon as a record arrives, and up to 500 ms a hop on Tansu."""
    if not tansu or "KADENCE_FETCH_WAIT_MAX_MS" in os.environ:
        return settings
    return dataclasses.replace(settings, fetch_wait_max_ms=TANSU_FETCH_WAIT_MAX_MS)


def partition_for_key(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner (murmur2, as the Java client and librdkafka's murmur2_random)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def base_config(settings: KafkaSettings) -> dict[str, Any]:
    return {"bootstrap.servers": settings.bootstrap_servers, "logger": CLIENT_LOG, "error_cb": log_client_error, **settings.client_config}


class ClientLog:
    """librdkafka's log lines as structured ones (confluent-kafka calls `log(level, fmt, facility,
    client, message)`, from the thread that polls the client). While the broker is away a client
    tries to reconnect every few tens of milliseconds: a line repeated within REPEAT_WINDOW_S is
    counted, not written, and the next one written says how often it came meanwhile."""

    REPEAT_WINDOW_S = 10.0

    def __init__(self) -> None:
        self._log = logging.getLogger("kadence.kafka.client")
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str, str], tuple[float, int]] = {}  # line -> (when written, repeats since)

    def log(self, level: int, _format: str, facility: str, client: str, message: str, *_: Any) -> None:
        # librdkafka says ERR of a connection refused while a broker starts, which it retries: at
        # most a WARNING here. What must be acted on comes through `log_client_error`.
        level = min(level, logging.WARNING)
        key, now = (client, facility, message), time.monotonic()
        with self._lock:
            written, repeats = self._last.get(key, (-self.REPEAT_WINDOW_S, 0))
            if now - written < self.REPEAT_WINDOW_S:
                self._last[key] = (written, repeats + 1)
                return
            if len(self._last) > 1000:  # forget lines not seen for a while
                self._last = {k: v for k, v in self._last.items() if now - v[0] < self.REPEAT_WINDOW_S}
            self._last[key] = (now, 0)
        self._log.log(level, "event=kafka_client_log client=%s facility=%s repeated=%d message=%r", client, facility, repeats, message)


CLIENT_LOG = ClientLog()


# Errors no retry mends: the client's credentials or TLS settings are wrong, and an operator must act.
_SETTINGS_ERRORS = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL})


def log_client_error(err: KafkaError) -> None:
    """A client's error callback: the errors that say more than its log lines (broker transport
    failures are in those already). ERROR only for what someone must fix; brokers away (a broker
    starting, restarting, a network blip) are retried, and say so as a WARNING."""
    if err.fatal() or err.code() in _SETTINGS_ERRORS:
        log.error("event=kafka_client_error code=%s fatal=%s reason=%r", err.name(), err.fatal(), err.str())
    elif err.code() == KafkaError._ALL_BROKERS_DOWN:
        log.warning("event=kafka_brokers_down reason=%r", err.str())


# One produce request in flight per broker connection: an idle producer sends a record at once (no
# linger), a loaded one gathers what comes while its request is out into the next, as Nagle's
# algorithm does. At 2,000 workflows at once that ran 20 % more workflows a second than 5 (librdkafka's
# default), one at a time no slower (docs/performance.md, "Producer linger"). A KADENCE_KAFKA_*
# setting of it wins.
MAX_IN_FLIGHT_PRODUCE_REQUESTS = 1


def producer_config(settings: KafkaSettings, **overrides: Any) -> dict[str, Any]:
    return {
        "max.in.flight.requests.per.connection": MAX_IN_FLIGHT_PRODUCE_REQUESTS,
        **base_config(settings),
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": settings.linger_ms,
        "batch.num.messages": 10000,
        "compression.type": "lz4",
        "partitioner": "murmur2_random",
        "message.max.bytes": MAX_RECORD_BYTES,
        **overrides,
    }


def heartbeat_interval_ms(settings: KafkaSettings) -> int:
    """A third of the session timeout, and at most 3 s (Kafka's default): members hear of a
    rebalance at their next heartbeat, so a long session timeout (static members) must not make
    every rebalance wait longer."""
    return max(100, min(3000, settings.session_timeout_ms // 3))


PREFETCH_KBYTES = 8192


def consumer_config(settings: KafkaSettings, group_id: str, *, static_member: bool = False, **overrides: Any) -> dict[str, Any]:
    """A consumer of group `group_id`. With `static_member` and KADENCE_INSTANCE_ID set, a static
    member (KIP-345): its partitions stay its own while it restarts within the session timeout,
    and the rest of the group is not rebalanced when it leaves or comes back."""
    membership = {"group.instance.id": settings.instance_id} if static_member and settings.instance_id else {}
    return {
        **base_config(settings),
        "group.id": group_id,
        **membership,
        "session.timeout.ms": settings.session_timeout_ms,
        "heartbeat.interval.ms": heartbeat_interval_ms(settings),
        "fetch.wait.max.ms": settings.fetch_wait_max_ms,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 1000,  # a worker that dies leaves at most ~1 s of tasks to hand out again
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,  # readiness: the fetch that reaches the end says so, on any broker
        "max.poll.interval.ms": 600000,
        # librdkafka fetches ahead up to 64 MiB by default. A service that stops taking records for
        # a while (Postgres away, a backlog) would hold that much, and its resident memory keeps the
        # high-water mark after; 8 MiB still holds thousands of records past a 500-record batch.
        "queued.max.messages.kbytes": PREFETCH_KBYTES,
        **overrides,
    }


# Large enough that the broker answers a batching reader when its wait is up, not at the first record.
BATCHING_FETCH_MIN_BYTES = 1024 * 1024


def batching_fetch(wait_ms: int) -> dict[str, Any]:
    """Consumer overrides for a reader off a workflow's critical path: the broker holds its fetch
    up to `wait_ms` (KADENCE_BATCHING_FETCH_WAIT_MS, KADENCE_RELAY_FETCH_WAIT_MS) gathering
    records, so one fetch answers for many."""
    if wait_ms <= 0:
        return {}
    return {"fetch.min.bytes": BATCHING_FETCH_MIN_BYTES, "fetch.wait.max.ms": wait_ms}


def make_producer(settings: KafkaSettings, **overrides: Any) -> Producer:
    return Producer(producer_config(settings, **overrides))


class GreenThreadsError(RuntimeError):
    """gevent's monkey patching reached the threads (or their queues) Kadence's Kafka clients run on."""


def refuse_green_threads() -> None:
    """Fail loudly where gevent's monkey patching (its gevent_async sample: `monkey.patch_all()`)
    reached threads or their queues, where Kadence would otherwise hang for ever with no output.
    Kadence's Kafka clients (confluent-kafka, on librdkafka) wait in C calls (a producer's poll for
    delivery reports, a consumer's poll) on threads of their own. Patched threads are greenlets
    that share one OS thread with the event loop and never yield to gevent's hub while they wait,
    so the first holds the loop for good; a patched queue hands work between OS threads (the
    loop's executor) through a gevent hub, which is per thread, and blocks for ever (LoopExit).
    Patching the rest (sockets, select, time ...) is fine: the sample runs so."""
    monkey = sys.modules.get("gevent.monkey")
    patched = [name for name in ("threading", "queue") if monkey is not None and monkey.is_module_patched(name)]
    if patched:
        raise GreenThreadsError(
            f"gevent's monkey patching reached {' and '.join(patched)}, and Kadence's Kafka clients cannot run so: "
            "confluent-kafka (librdkafka) waits in C calls on threads of Kadence's own (delivery reports, polls), which "
            "as greenlets never yield to gevent's hub and would hold the event loop's thread for ever, and work handed "
            "between threads through a patched queue blocks for ever; the worker or client would hang with no output. "
            "Patch the rest only: monkey.patch_all(thread=False, queue=False)"
        )


def make_consumer(settings: KafkaSettings, group_id: str, *, static_member: bool = False, **overrides: Any) -> Consumer:
    refuse_green_threads()
    return Consumer(consumer_config(
        settings, group_id, static_member=static_member,
        **{"statistics.interval.ms": 5000, "stats_cb": _lag_recorder(settings, group_id), **overrides},
    ))


def _lag_recorder(settings: KafkaSettings, group_id: str) -> Callable[[str], None]:
    """librdkafka's statistics callback (every 5 s, on the polling thread), as the consumer lag
    gauge: per assigned partition, its end now (ListOffsets, asked without waiting) minus the
    position handed to the application. The end is the broker's, not the one the last fetch saw,
    so the lag of a consumer that stopped fetching keeps growing instead of freezing."""
    admin: AdminClient | None = None
    positions: dict[tuple[str, int], int] = {}

    def record(stats_json: str) -> None:
        nonlocal admin, positions
        current = {}
        for topic, topic_stats in json.loads(stats_json).get("topics", {}).items():
            for partition, stats in topic_stats.get("partitions", {}).items():
                if partition == "-1":
                    continue
                # app_offset: after the last record handed over; before any, the next fetch's offset.
                position = stats["app_offset"] if stats["app_offset"] >= 0 else stats["next_offset"]
                if stats.get("fetch_state") == "active" and position >= 0:
                    current[(topic, int(partition))] = position
                else:
                    with contextlib.suppress(KeyError):
                        CONSUMER_LAG.remove(group_id, topic, partition)
        positions = current
        if not current:
            return
        if admin is None:
            admin = AdminClient(base_config(settings))
        ends = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in current}, request_timeout=10)
        for tp, future in ends.items():
            future.add_done_callback(functools.partial(record_end, tp.topic, tp.partition))

    def record_end(topic: str, partition: int, end: Future[ListOffsetsResultInfo]) -> None:
        position = positions.get((topic, partition))
        if position is None or end.exception() is not None:
            return  # revoked meanwhile, or the broker did not answer: the next round asks again
        CONSUMER_LAG.labels(group_id, topic, str(partition)).set(max(0, end.result().offset - position))

    return record


async def until_broker_answers(operation: str, call: Callable[[], T]) -> T:
    """`call()`, blocking admin requests to the broker, on a thread of its own, so the event loop (and
    /readyz, which says why the process is not ready) stays free; tried again with backoff while
    the broker does not answer (down, out of reach, or refusing the client's security settings, a
    SASL mechanism it does not offer). A setting librdkafka refuses outright is raised at once. A
    stop of the process ends the wait (StoppedWaiting): the thread, a daemon, is not waited for."""
    delay, since = BROKER_RETRY_FIRST_S, time.monotonic()
    while True:
        answer = _on_daemon_thread(call)
        while not answer.done():
            await asyncio.wait({answer}, timeout=STOP_CHECK_S)
            give_up_if_stopping(operation, "the broker does not answer")
        try:
            result = answer.result()
        except (KafkaException, TimeoutError) as exc:
            if isinstance(exc, KafkaException) and exc.args[0].code() == KafkaError._INVALID_ARG:
                raise
            why = exc.args[0].str() if isinstance(exc, KafkaException) else f"timed out: {exc}"
            log.warning("event=broker_operation_waiting operation=%s error=%r retry_in_s=%.1f", operation, why, delay)
            await sleep_unless_stopping(operation, delay, f"the broker does not answer ({why})")
            delay = min(delay * 2, BROKER_RETRY_MAX_S)
            continue
        if delay > BROKER_RETRY_FIRST_S:
            log.info("event=broker_operation_resumed operation=%s waited_seconds=%.1f", operation, time.monotonic() - since)
        return result


def _on_daemon_thread(call: Callable[[], T]) -> asyncio.Future[T]:
    """`call()` on a daemon thread of its own: a process that stops does not wait for it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            outcome: tuple[T | None, BaseException | None] = (call(), None)
        except BaseException as exc:
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the process stopped
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=run, name="kadence-broker-call", daemon=True).start()
    return future


def ensure_topics(settings: KafkaSettings, topics: dict[str, int], timeout: float = 30.0) -> None:
    """Create the topics that do not exist yet (name -> partitions), with their settings.
    Services never rely on auto-creation."""
    admin = AdminClient(base_config(settings))
    existing = admin.list_topics(timeout=timeout).topics
    missing = [
        NewTopic(name, num_partitions=partitions, replication_factor=settings.replication_factor,
                 config=topic_config(name, settings.replication_factor))
        for name, partitions in topics.items()
        if name not in existing
    ]
    if not missing:
        return
    for name, future in admin.create_topics(missing, operation_timeout=timeout, request_timeout=timeout).items():
        try:
            future.result(timeout=timeout)
            log.info("event=topic_created topic=%s", name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        except TimeoutError:  # concurrent.futures.TimeoutError is this one since Python 3.11
            raise TimeoutError(
                f"the broker at {settings.bootstrap_servers} did not create topic {name} within {timeout:.0f} s; "
                "is it up and does it have a controller?"
            ) from None
    _wait_until_listed(settings, admin, {topic.topic: topic.num_partitions for topic in missing}, timeout)


def _unlisted(listed: dict[str, Any], topics: dict[str, int]) -> list[str]:
    return [name for name, count in topics.items() if name not in listed or len(listed[name].partitions) < count]


def _wait_until_listed(settings: KafkaSettings, admin: AdminClient, topics: dict[str, int], timeout: float) -> None:
    """Apache Kafka acknowledges a creation once its controller committed it; the brokers' metadata
    may lag a moment, and a client asking a broker that lags then sees no such topic. Wait until
    every broker lists them (each asked directly: a client asks any broker)."""
    deadline = time.monotonic() + timeout
    while True:
        metadata = admin.list_topics(timeout=timeout)
        pending = _unlisted(metadata.topics, topics)
        if not pending and len(metadata.brokers) > 1:
            for broker in metadata.brokers.values():
                direct = AdminClient({**base_config(settings), "bootstrap.servers": f"{broker.host}:{broker.port}"})
                pending += _unlisted(direct.list_topics(timeout=timeout).topics, topics)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"topics {pending} were created but not listed within {timeout} s"))
        time.sleep(0.02)


def topic_partitions(settings: KafkaSettings, topic: str, timeout: float = 30.0) -> int:
    """The partition count the broker reports for `topic` (metadata, which the local broker gets right)."""
    admin = AdminClient(base_config(settings))
    metadata = admin.list_topics(topic, timeout=timeout).topics[topic]
    if metadata.error is not None:
        raise KafkaException(metadata.error)
    return len(metadata.partitions)


# What a partition's leader answers while it changes (Kafka marks each retriable): a topic just
# created has no leader yet; a node that lost the leadership says so, or its epoch is stale; a new
# leader refuses offsets until its high watermark has caught up with the old one's (OFFSET_NOT_AVAILABLE).
_LEADER_CHANGING = {
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError._TRANSPORT,
    KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH, KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.REQUEST_TIMED_OUT,
}


def leader_changing(error: KafkaError) -> bool:
    """Whether a partition's leader may answer otherwise in a moment: asked again, not raised."""
    return error.code() in _LEADER_CHANGING or error.retriable()


def watermarks(consumer: Consumer, topic: str, partitions: Iterable[int], timeout: float = 30.0) -> dict[int, tuple[int, int]]:
    """Per partition, its first offset and its end (the offset its next record gets: the high
    watermark), from the partition's leader (ListOffsets), asked again for up to `timeout` while
    the leader changes (a rolling restart of the brokers). Wrong on Tansu: see `is_tansu`."""
    deadline = time.monotonic() + timeout
    found = {}
    for partition in partitions:
        while True:
            try:
                offsets = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=max(0.1, deadline - time.monotonic()))
            except KafkaException as exc:
                if not leader_changing(exc.args[0]) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
                continue
            if offsets is None:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"no offsets for {topic} [{partition}] within {timeout} s"))
            found[partition] = offsets
            break
    return found


def log_ends(settings: KafkaSettings, topic: str, partitions: Iterable[int]) -> dict[int, int] | None:
    """Each partition's end now (ListOffsets), or None on Tansu, whose ListOffsets is wrong."""
    consumer = Consumer({**base_config(settings), "group.id": "kadence-reader", "enable.auto.commit": False})
    try:
        if is_tansu(consumer.list_topics(topic, timeout=30).cluster_id):
            return None
        return {p: high for p, (_, high) in watermarks(consumer, topic, partitions).items()}
    finally:
        consumer.close()


def offsets_for_time(settings: KafkaSettings, topic: str, partitions: list[int], timestamp_ms: int) -> dict[int, int]:
    """Per partition, the first offset at or after `timestamp_ms`."""
    consumer = Consumer({**base_config(settings), "group.id": "kadence-reader", "enable.auto.commit": False})
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, p, timestamp_ms) for p in partitions], timeout=30)
    finally:
        consumer.close()
    # -1: no record that late, so nothing to read there.
    return {tp.partition: tp.offset for tp in found if tp.offset >= 0}


def core_topics(settings: KafkaSettings) -> dict[str, int]:
    from kadence.protocol import topics

    return {
        topics.COMMANDS: settings.partitions, topics.HISTORY: settings.partitions, topics.DLQ: 1, topics.POLLERS: 1,
        topics.REPLIES: settings.partitions, topics.NEXUS_ENDPOINTS: 1,
    }


class _Delivery:
    """One record produced by an AsyncProducer, until its future is settled: librdkafka's delivery
    callback (called on the thread that polled), then, on the record's event loop, `settle`. One
    object a record, where a closure held a cell per name (the garbage collector walks them all)."""

    __slots__ = ("attempt", "err", "future", "headers", "key", "loop", "msg", "partition", "producer", "topic", "until_delivered",
                 "value")

    def __init__(
        self, producer: AsyncProducer, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Message], topic: str, value: bytes,
        key: bytes | None, partition: int | None, headers: HeaderList | None, until_delivered: bool,
    ) -> None:
        self.producer, self.loop, self.future = producer, loop, future
        self.topic, self.value, self.key, self.partition, self.headers = topic, value, key, partition, headers
        self.until_delivered, self.attempt = until_delivered, 1
        self.err: KafkaError | None = None
        self.msg: Message | None = None

    def __call__(self, err: KafkaError | None, msg: Message | None) -> None:
        self.err, self.msg = err, msg
        self.producer._report(self)

    def settle(self) -> None:
        """On the record's loop: resolve its future, or produce it again (until_delivered)."""
        err, future = self.err, self.future
        if err is not None and self.until_delivered and not self.producer._closing and _passes(err) and not future.done():
            PRODUCE_RETRIED.inc()
            log.log(logging.WARNING if self.attempt == 1 else logging.DEBUG, "event=produce_retried topic=%s partition=%s attempt=%d "
                    "error=%r", self.topic, self.partition, self.attempt, err.str())
            self.attempt += 1
            # Not at once: a producer that failed a record on a fatal error is replaced first.
            self.loop.call_later(0.1, self.producer._send, self)
            return
        if future.done():
            return
        if err is not None:
            future.set_exception(KafkaException(err))
        else:
            future.set_result(self.msg)  # type: ignore[arg-type]  # delivered: librdkafka gives the message


class AsyncProducer:
    """A confluent-kafka Producer whose deliveries resolve asyncio futures.

    A daemon thread serves delivery callbacks, so `produce` never blocks the event loop.

    While the broker is away, records wait in the producer, each until its delivery timeout
    (librdkafka's message.timeout.ms, 5 minutes by default). A fatal error of the idempotent
    producer (librdkafka raises one when it can no longer keep its ordering and exactly-once
    guarantees, say the broker lost the producer's state) leaves the instance unable to produce:
    it is replaced by a new one, and the records the old one still held fail as purged.
    `produce(..., until_delivered=True)` produces a record again whenever its delivery fails for
    a reason that passes (a timeout, a purge by the replacement), until it is delivered: for
    records whose repetition is harmless (a worker's task results, a timer's firing: a duplicate
    is rejected as stale) and whose loss is not.
    """

    def __init__(self, settings: KafkaSettings, **overrides: Any) -> None:
        refuse_green_threads()
        self._config = producer_config(settings, **{"error_cb": self._on_error, **overrides})
        self._producer = Producer(self._config)
        self._lock = threading.Lock()  # guards the swap of _producer
        self._fatal: KafkaError | None = None
        self._closing = False
        self._closed = threading.Event()
        # Delivery reports served by a poll, per event loop, settled on it in one callback per
        # poll: one wake-up of the loop for every record a produce request carried.
        self._reports: dict[asyncio.AbstractEventLoop, list[_Delivery]] = {}
        self._reports_lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve_callbacks, name="kadence-producer", daemon=True)
        self._thread.start()

    def _on_error(self, err: KafkaError) -> None:
        log_client_error(err)
        if err.fatal():
            self._fatal = err

    def _serve_callbacks(self) -> None:
        while not self._closed.is_set():
            self._producer.poll(0.05)
            self._hand_over_reports()
            if self._fatal is not None:
                self._replace()

    def _report(self, delivery: _Delivery) -> None:
        """A delivery report, kept for `_hand_over_reports` (on whichever thread served it)."""
        with self._reports_lock:
            self._reports.setdefault(delivery.loop, []).append(delivery)

    def _hand_over_reports(self) -> None:
        """The reports the last poll or flush served, to their loops: one callback each."""
        if not self._reports:
            return
        with self._reports_lock:  # held while handing over: the reports reach each loop in order
            reports, self._reports = self._reports, {}
            for loop, settles in reports.items():
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits these any more
                    loop.call_soon_threadsafe(_settle_all, settles)

    def _replace(self) -> None:
        """A new producer (a new producer id) for one that hit a fatal error; what the old one
        still held fails with a purge error (until_delivered records go again on the new one)."""
        fatal, self._fatal = self._fatal, None
        with self._lock:
            old, self._producer = self._producer, Producer(self._config)
        held = len(old)
        old.purge(in_queue=True, in_flight=True, blocking=False)
        left = old.flush(5)  # serves the purged records' delivery reports
        self._hand_over_reports()
        log.warning("event=producer_replaced reason=fatal_error error=%r records_failed=%d records_left=%d",
                    fatal.str() if fatal is not None else "", held, left)

    def produce(
        self, topic: str, value: bytes, key: bytes | None = None, *, partition: int | None = None,
        headers: HeaderList | None = None, until_delivered: bool = False, loop: asyncio.AbstractEventLoop | None = None,
    ) -> asyncio.Future[Message]:
        """Produce now; the future, of the running loop or of `loop` (given when called from another
        thread), resolves on delivery."""
        loop = loop or asyncio.get_running_loop()
        future: asyncio.Future[Message] = loop.create_future()
        self._send(_Delivery(self, loop, future, topic, value, key, partition, headers, until_delivered))
        return future

    def _send(self, delivery: _Delivery) -> None:
        while True:
            with self._lock:
                producer = self._producer
            try:
                if delivery.partition is None:
                    producer.produce(delivery.topic, delivery.value, delivery.key, headers=delivery.headers, on_delivery=delivery)
                else:
                    producer.produce(delivery.topic, delivery.value, delivery.key, delivery.partition, headers=delivery.headers,
                                     on_delivery=delivery)
                return
            except BufferError:
                producer.poll(0.01)
                self._hand_over_reports()
            except KafkaException as exc:  # _FATAL: this producer is being replaced
                delivery.err = exc.args[0]
                delivery.loop.call_soon_threadsafe(delivery.settle)  # on the loop: this may be another thread
                return

    async def flush(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._producer.flush)
        self._hand_over_reports()

    def close(self) -> None:
        self._closing = True
        self._producer.flush(10)
        self._closed.set()
        self._thread.join()
        self._hand_over_reports()


# Delivery failures that pass: the record may be produced again.
_PASSING_ERRORS = {
    KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT,
    KafkaError._FATAL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
}


def _passes(err: KafkaError) -> bool:
    return err.retriable() or err.code() in _PASSING_ERRORS


def _settle_all(deliveries: list[_Delivery]) -> None:
    for delivery in deliveries:
        try:
            delivery.settle()
        except Exception:  # a bug in one report's handling must not leave the others unsettled
            log.exception("event=delivery_report_failed")


def position(msg: Message) -> tuple[int, int]:
    """A consumed record's partition and offset. confluent-kafka types both optional (a message
    not yet produced has neither); a consumed record, or a partition-end event, has both."""
    partition, offset = msg.partition(), msg.offset()
    if partition is None or offset is None:
        raise ValueError(f"a message of {msg.topic()} without a partition or offset: not a consumed record")
    return partition, offset


def poll_batch(consumer: Consumer, max_messages: int, timeout: float) -> list[Message]:
    """Wait up to `timeout` for one message, then take what else is already fetched.

    `Consumer.consume(n, timeout)` returns only when n messages arrived or the timeout expired,
    which puts a floor of `timeout` on every hop when traffic is light.
    """
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(max_messages - 1, 0)]


def store_offsets(consumer: Consumer, messages: list[Message]) -> None:
    """Store each message's offset for the next commit, skipping a partition the consumer no longer
    holds: its group session timed out while the batch ran (the group coordinator's broker died, and
    the session ends before another takes the group over), so librdkafka dropped the assignment.
    Whoever is assigned the partition next reads those records again, and history refuses a task's
    start or result it already recorded (docs/architecture.md, "Exactly once")."""
    for msg in messages:
        try:
            consumer.store_offsets(msg)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._STATE:
                raise
            log.info("event=offset_not_stored topic=%s partition=%d offset=%d reason=assignment_lost",
                     msg.topic(), msg.partition(), msg.offset())


def consume_batches(
    consumer: Consumer, stop: asyncio.Event, *, max_messages: int = 500, timeout: float | Callable[[], float] = 0.05,
    on_end: Callable[[int], None] | None = None,
) -> ConsumedBatches:
    """Batches of data messages from `consumer`, polled on a worker thread, until `stop` is set.
    `timeout`, or what it returns before each poll, bounds the wait for the first message.

    Yields empty batches too, so callers can do periodic work between polls. Rebalance callbacks
    run inside `consume` on that thread while the caller is suspended here, never concurrently.

    An async iterator, not an async generator: asyncio's loop.shutdown_asyncgens() (asyncio.run
    calls it, and programs ending on Ctrl-C as temporalio's samples do) acloses every async
    generator still alive, and one suspended in a poll of a worker's task that is still running
    fails so ("aclose(): asynchronous generator is already running", logged as an ERROR). It holds
    nothing to release: the task that iterates it ends it.
    """
    return ConsumedBatches(consumer, stop, max_messages=max_messages, timeout=timeout, on_end=on_end)


class ConsumedBatches:
    """consume_batches' iterator."""

    def __init__(
        self, consumer: Consumer, stop: asyncio.Event, *, max_messages: int = 500, timeout: float | Callable[[], float] = 0.05,
        on_end: Callable[[int], None] | None = None,
    ) -> None:
        self._consumer = consumer
        self._stop = stop
        self._max_messages = max_messages
        self._timeout = timeout
        self._on_end = on_end

    def __aiter__(self) -> ConsumedBatches:
        return self

    async def __anext__(self) -> list[Message]:
        if self._stop.is_set():
            raise StopAsyncIteration
        wait = self._timeout() if callable(self._timeout) else self._timeout
        messages = await asyncio.get_running_loop().run_in_executor(None, poll_batch, self._consumer, self._max_messages, wait)
        batch = []
        for msg in messages:
            error = msg.error()
            if error is None:
                batch.append(msg)
            elif error.code() == KafkaError._PARTITION_EOF:
                if self._on_end is not None:  # read to the end of the partition: caught up
                    self._on_end(position(msg)[0])
            else:
                log.warning("event=consume_error topic=%s error=%s", msg.topic(), error)
        return batch


def read_to_end(settings: KafkaSettings, topic: str, start_offsets: dict[int, int]) -> Generator[Message]:
    """Every record of the given partitions, each from its start offset to the partition's end as
    it is when the read begins (ListOffsets).

    So a read of a log that is still being written ends, a partition with nothing left to read is
    not fetched, and the last record read ends the read at once, where a fetch finding no more would
    first wait fetch.wait.max.ms. On Tansu, whose ListOffsets is wrong, the end is the one a fetch
    reports (partition EOF): see `is_tansu`. A start offset whose records retention deleted reads
    from the partition's first record.
    """
    if not start_offsets:
        return
    consumer = Consumer({
        **base_config(settings),
        "group.id": "kadence-reader",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        # The end on Tansu; elsewhere it ends a partition whose last offsets hold no record (transaction markers).
        "enable.partition.eof": True,
        "fetch.wait.max.ms": settings.fetch_wait_max_ms,
        # librdkafka fetches ahead up to 64 MiB by default: an audit's memory would be mostly that.
        "queued.max.messages.kbytes": 16384,
    })
    try:
        ends = None if is_tansu(consumer.list_topics(topic, timeout=30).cluster_id) else {
            p: high for p, (_, high) in watermarks(consumer, topic, start_offsets).items()
        }
        remaining = {p for p, offset in start_offsets.items() if ends is None or offset < ends[p]}
        if remaining:
            consumer.assign([TopicPartition(topic, p, start_offsets[p]) for p in remaining])
        while remaining:
            if ends is None:
                remaining -= _past_the_fetched_end(consumer, topic, remaining, start_offsets)
            for msg in poll_batch(consumer, 1000, 0.05):
                (partition, offset), error = position(msg), msg.error()
                if partition not in remaining:
                    continue  # read to its end already: what follows came later
                if error is None:
                    end = None if ends is None else ends[partition]
                    if end is None or offset < end:
                        yield msg
                    if end is not None and offset >= end - 1:
                        remaining.discard(partition)
                elif error.code() == KafkaError._PARTITION_EOF:
                    remaining.discard(partition)
                else:
                    raise KafkaException(error)
    finally:
        consumer.close()


def _past_the_fetched_end(consumer: Consumer, topic: str, partitions: set[int], start_offsets: dict[int, int]) -> set[int]:
    """The partitions whose start offset lies beyond the end their last fetch reported. Tansu
    answers a fetch there with no records and no error, so no partition EOF would ever end them."""
    past = set()
    for partition in partitions:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
        if 0 <= high < start_offsets[partition]:
            past.add(partition)
    return past


def faust_broker_settings(settings: KafkaSettings) -> dict[str, Any]:
    """faust.App keyword settings equivalent to `consumer_config`/`producer_config`: a static member
    with KADENCE_INSTANCE_ID (aiokafka's group_instance_id), an idempotent producer with acks=all
    (asks the broker, since Tansu refuses it: see `is_tansu`)."""
    import faust

    config = settings.client_config
    credentials: faust.SASLCredentials | faust.SSLCredentials | None = None
    if config.get("security.protocol", "").upper().startswith("SASL"):
        ssl_context = None
        if config["security.protocol"].upper() == "SASL_SSL":
            import ssl

            ssl_context = ssl.create_default_context(cafile=config.get("ssl.ca.location"))
        credentials = faust.SASLCredentials(
            username=config.get("sasl.username"), password=config.get("sasl.password"),
            mechanism=config.get("sasl.mechanism", "PLAIN"), ssl_context=ssl_context,
        )
    elif config.get("security.protocol", "").upper() == "SSL":
        import ssl

        credentials = faust.SSLCredentials(ssl.create_default_context(cafile=config.get("ssl.ca.location")))
    session_timeout = settings.session_timeout_ms / 1000
    _set_faust_fetch(settings)
    _set_faust_idempotence(not broker_is_tansu(settings))
    _survive_closed_aiokafka_connections()
    return {
        "broker": [f"kafka://{server}" for server in settings.bootstrap_servers.split(",")],
        "broker_credentials": credentials,
        "broker_session_timeout": session_timeout,
        "broker_heartbeat_interval": heartbeat_interval_ms(settings) / 1000,
        "broker_request_timeout": max(40.0, session_timeout * 2),
        "consumer_group_instance_id": settings.instance_id or None,
        "consumer_auto_offset_reset": "earliest",
        "producer_linger": settings.linger_ms / 1000,
        "producer_max_request_size": MAX_RECORD_BYTES,
        "producer_acks": -1,
        "producer_compression_type": "lz4",
    }


def _set_faust_idempotence(enabled: bool) -> None:
    """faust makes its aiokafka producer idempotent only inside transactions, which Kadence does
    not use: ask for it always (faust already asks for acks=all, producer_acks=-1), so a retried
    produce cannot write a task twice or out of order."""
    from faust.transport.drivers import aiokafka as faust_aiokafka

    producer_class = faust_aiokafka.Producer
    original = getattr(producer_class, "_kadence_original_settings_extra", producer_class._settings_extra)

    def settings_extra(self: Any) -> Any:
        return {**original(self), "enable_idempotence": True} if enabled else original(self)

    setattr(producer_class, "_kadence_original_settings_extra", original)  # noqa: B010 (a monkeypatch)
    setattr(producer_class, "_settings_extra", settings_extra)  # noqa: B010


def _set_faust_fetch(settings: KafkaSettings) -> None:
    """faust hardcodes fetch_max_wait_ms=1500 for its consumer. A broker that does not wake long
    polls on new data (the local Tansu broker) then adds 1.5 s per hop, so apply our setting; the
    relay is off a workflow's critical path, so it fetches as a batching reader (`batching_fetch`,
    KADENCE_RELAY_FETCH_WAIT_MS)."""
    from faust.transport.drivers import aiokafka as faust_aiokafka

    batching = batching_fetch(settings.relay_fetch_wait_ms)
    fetch_wait_max_ms = batching.get("fetch.wait.max.ms", settings.fetch_wait_max_ms)
    fetch_min_bytes = batching.get("fetch.min.bytes", 1)
    thread_class = faust_aiokafka.AIOKafkaConsumerThread
    original = getattr(thread_class, "_kadence_original_create_worker_consumer", thread_class._create_worker_consumer)

    def create_worker_consumer(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        consumer._fetch_max_wait_ms = fetch_wait_max_ms
        consumer._fetch_min_bytes = fetch_min_bytes
        return consumer

    setattr(thread_class, "_kadence_original_create_worker_consumer", original)  # noqa: B010 (a monkeypatch)
    setattr(thread_class, "_create_worker_consumer", create_worker_consumer)  # noqa: B010


def _survive_closed_aiokafka_connections() -> None:
    """A request written to a connection the broker has just closed (it died, or restarted) is a
    connection error aiokafka retries: it catches the OSError the standard event loop raises. On
    uvloop the same write raises RuntimeError ("unable to perform operation on <TCPTransport
    closed=True ...>; the handler is closed"), which aiokafka 0.14 lets through (aio-libs/aiokafka#1038,
    open). Met by the group coordination, it ends it ("Unexpected error in coordinator routine") and
    faust's worker crashes; met by the client's metadata task, that task dies without a word and
    every later request waits for metadata for ever (matching stops routing for good). Raise the
    connection error aiokafka expects instead."""
    from aiokafka.conn import AIOKafkaConnection, CloseReason
    from aiokafka.errors import KafkaConnectionError
    from aiokafka.errors import KafkaError as AIOKafkaError  # a RuntimeError too

    if getattr(AIOKafkaConnection, "_kadence_survives_closed_transport", False):
        return
    original = AIOKafkaConnection.send

    def send(self: Any, request: Any, expect_response: bool = True) -> Any:
        try:
            return original(self, request, expect_response)
        except AIOKafkaError:
            raise
        except RuntimeError as exc:
            writer = self._writer
            if writer is None or not writer.transport.is_closing():
                raise
            log.warning("event=broker_connection_broken host=%s port=%s error=%r", self.host, self.port, str(exc))
            self.close(reason=CloseReason.CONNECTION_BROKEN, exc=exc)
            raise KafkaConnectionError(f"Connection at {self.host}:{self.port} broken: {exc}") from exc

    AIOKafkaConnection.send = send
    AIOKafkaConnection._kadence_survives_closed_transport = True
