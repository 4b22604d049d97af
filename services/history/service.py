"""The history service loop: commands in, one HistoryBatch out per command, on the same partition."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from prometheus_client import Counter, Gauge, Histogram

from kadence.protocol import topics, tracing
from kadence.protocol.codec import NewerSchemaVersion, UndecodableRecord, command_codec, history_batch_codec, writes_field
from kadence.protocol.dead_letters import dead_letter_headers
from kadence.protocol.events import refused, run_sections
from kadence.protocol.kafka import (
    consume_batches,
    core_topics,
    ensure_topics,
    log_client_error,
    make_consumer,
    make_producer,
    partition_for_key,
    position,
    topic_partitions,
    until_broker_answers,
    watermarks,
)
from kadence.protocol.limits import (
    MAX_RECORD_VALUE_BYTES,
    WARN_PAYLOAD_BYTES,
    text_problem,
)
from kadence.protocol.names import CLIENT_COMMANDS, WITH_START, CommandType, EffectType
from kadence.protocol.nexus_endpoints import EndpointRegistry
from kadence.protocol.observability import ERRORS, READINESS
from kadence.protocol.postgres import apply_ddl, describe, until_answered, until_answered_blocking
from kadence.protocol.runner import stop_for_newer_schema
from kadence.protocol.settings import KafkaSettings, SettingError, env_int
from services.history.checkpoint import CHECKPOINT_DDL, CheckpointStore
from services.history.machine.execution import HISTORY_IDENTITY
from services.history.machine.records import HistoryBatch, Record
from services.history.machine.reset import reset_retention_ms
from services.history.partition import PartitionState
from services.history.recovery import recover_partitions, runs_to_load
from services.history.replies import Replies, Reply
from services.history.snapshot import Snapshot
from services.history.step import Step, eventless, request_id_of, step
from services.matching.dispatch import TaskRecord, TaskRecords, counted

log = logging.getLogger("kadence.history")

COMMANDS = Counter("kadence_history_commands_total", "Commands processed, by kind", ["command"])
REJECTED = Counter("kadence_history_commands_rejected_total", "Commands that did not apply, by cause", ["cause"])
BATCHES = Counter("kadence_history_batches_written_total", "HistoryBatch records produced")
ANSWERED_AGAIN = Counter("kadence_history_requests_answered_again_total", "Requests sent again and answered without a batch")
REDISPATCHED = Counter(
    "kadence_history_tasks_redispatched_total",
    "Workflow and activity tasks dispatched again because no worker started them (a task record lost, or no worker polling)",
    ["task"],
)
RECOVERY = Gauge("kadence_history_recovery_seconds", "How long the last recovery of assigned partitions took")
# What the open runs held cost the command loop (bench/bench_open_runs.py reads them).
PAUSE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
# The longest the command loop runs before the event loop's other tasks have their turn: a consumed
# batch of 500 commands takes 100 ms and more to apply under load, on two busy cores longer.
SLICE_S = 0.02
LOOP_PAUSE = Histogram(
    "kadence_history_loop_pause_seconds",
    "How long the command loop held the event loop at a stretch: decoding a batch, applying its commands (up to a slice), "
    "or beginning a checkpoint",
    buckets=PAUSE_BUCKETS,
)
LONG_HOLD_S = 0.1  # a stretch this long is logged, with its CPU and commands: the open runs' target (docs/performance.md)
CHECKPOINT_SECONDS = Histogram("kadence_history_checkpoint_seconds",
                               "How long a checkpoint took to store every partition due, beside the command loop", buckets=PAUSE_BUCKETS)
CHECKPOINT_RUNS = Counter("kadence_history_checkpoint_runs_total", "Runs whose rows checkpoints wrote (the runs changed)")
EXECUTIONS_HELD = Gauge("kadence_history_executions_in_memory",
                        "Runs the owned partitions hold in memory as objects: those changed since their last checkpoint, and those read")
RUNS_AT_REST = Gauge("kadence_history_runs_at_rest", "Open runs held in memory as their stored rows, within KADENCE_HISTORY_CACHE_RUNS")
RUNS_READ_BACK = Counter("kadence_history_runs_read_back_total", "Runs read back from Postgres for the commands that named them")
RUNS_EVICTED = Counter("kadence_history_runs_evicted_total", "Stored runs that left memory, least recently used first")

CONSUMER_GROUP = "kadence.history-service"
CHECKPOINT_FLUSH_TIMEOUT_S = 5.0  # how long a checkpoint waits for the broker to acknowledge the batches written
ENCODE_SLICE_RUNS = 64  # runs a checkpoint encodes before it lets the command loop go on
ACKNOWLEDGED_POLL_S = 0.01
# Runs at rest are held as their rows (about 1 KiB each, nothing the garbage collector walks); a run
# as objects is about 17 that each collection of the oldest generation walks.
DEFAULT_CACHE_RUNS = 20_000
ASSIGN_FLUSH_WAIT_S = 5.0  # how often a recovery waiting for this instance's batches to be written says so


def _leave_out_workflow_task_events(batch: HistoryBatch) -> None:
    """The batch's workflow tasks without their events, as the log holds them: the task records
    carry the events, and every event is in the log already as the batch's own."""
    for section in run_sections(batch):
        for kind, effect in section.effects:
            if kind == EffectType.WorkflowTask and effect["history"]:
                effect["history"] = []
                effect["first_event_id"] = effect["scheduled_event_id"] + 1


def _task_delivered(err: KafkaError | None, msg: Message) -> None:
    """A task record not written is not fatal: its re-dispatch timer sends the task again."""
    if err is not None:
        ERRORS.labels("history", "task_not_written").inc()
        log.warning("event=task_not_written topic=%s error=%r", msg.topic(), err.str())


def _reply_delivered(err: KafkaError | None, msg: Message) -> None:
    if err is not None:
        log.warning("event=reply_not_delivered partition=%s error=%r", msg.partition(), err.str())


def _settle(acknowledged: asyncio.Future[KafkaError | None], err: KafkaError | None) -> None:
    if not acknowledged.done():
        acknowledged.set_result(err)


@dataclass
class SentElsewhere:
    """A dead letter or a forward produced: the batches after it wait for its acknowledgement."""

    topic: str
    offset: int  # of its command on kadence.commands
    acknowledged: asyncio.Future[KafkaError | None]


class FatalProduceError(RuntimeError):
    """A history batch was not written; the in-memory state is ahead of the log, so the process must restart."""


class Stretch:
    """One stretch of the command loop, from when it took the event loop: its wall time, its CPU,
    and the commands it applied."""

    def __init__(self) -> None:
        self.began, self.began_cpu = time.monotonic(), time.thread_time()
        self.commands = 0

    def seconds(self) -> float:
        return time.monotonic() - self.began

    def observe(self) -> None:
        held = self.seconds()
        LOOP_PAUSE.observe(held)
        if held >= LONG_HOLD_S:
            # CPU far below the wall time: the thread waited for a core or a collection (event=long_gc_pause).
            log.warning("event=long_loop_hold seconds=%.3f cpu_seconds=%.3f commands=%d", held, time.thread_time() - self.began_cpu,
                        self.commands)


class HistoryService:
    def __init__(
        self, settings: KafkaSettings, checkpoints: CheckpointStore | None, checkpoint_interval_s: float,
        cache_runs: int = DEFAULT_CACHE_RUNS,
    ) -> None:
        self.settings = settings
        self.checkpoints = checkpoints
        self.readiness = READINESS.of("history")  # what /readyz says of this service
        self.checkpoint_interval_s = checkpoint_interval_s
        self._next_checkpoint = time.monotonic() + checkpoint_interval_s
        self._checkpointing: asyncio.Task[None] | None = None
        # Without checkpoints every run stays in memory: none is stored to read back.
        self.cache_runs = cache_runs
        self.partitions: dict[int, PartitionState] = {}
        self._create_time_partitions: set[int] = set()  # warned of: the commands topic was created by an older release
        self.commands = command_codec()
        self.batches = history_batch_codec()
        self._producer_generation = 0
        self._fatal: KafkaError | None = None  # the producer's fatal error, until it is replaced
        self.producer = self._new_producer()
        # A static member with KADENCE_INSTANCE_ID: a restart keeps its partitions, and every other
        # instance keeps its own (and the state it holds) instead of recovering it again.
        self.consumer: Consumer = make_consumer(settings, CONSUMER_GROUP, static_member=True, **{"enable.auto.commit": False})
        self._produce_error: KafkaError | None = None
        self.partition_count = settings.partitions
        # A KADENCE_SCHEMA_PIN to a version whose workflow tasks carry no first_event_id: the
        # workers of that release expect the whole history in each task.
        self._workflow_task_deltas = writes_field(self.batches, EffectType.WorkflowTask, "first_event_id")
        self.task_records = TaskRecords()
        self._dispatching: list[TaskRecord] = []  # the tasks of batches produced, for their task queue topics
        # Dead letters and forwards not acknowledged yet, and the history batches written after
        # them, in order: each batch is produced once those before it are acknowledged.
        self._held: list[SentElsewhere | Callable[[], None]] = []
        self._task_topics: set[str] = set()  # the task queue topics known to exist
        self.replies = Replies()
        self._offsets_lock = threading.Lock()
        self.nexus_endpoints = EndpointRegistry(settings)

    def _new_producer(self) -> Producer:
        # No delivery timeout: a batch waits in the producer however long the broker is away. A
        # batch that timed out while a later one of its partition was written would leave a gap
        # no reader could fill (the later batch's source offset says the earlier command was done).
        self._producer_generation += 1
        return make_producer(self.settings, **{"message.timeout.ms": 0, "error_cb": self._on_producer_error})

    def _on_producer_error(self, err: KafkaError) -> None:
        log_client_error(err)
        if err.fatal():
            self._fatal = err

    def _check_partition_counts(self) -> int:
        """Command partition p is answered on history partition p, so the counts must match."""
        commands = topic_partitions(self.settings, topics.COMMANDS)
        history = topic_partitions(self.settings, topics.HISTORY)
        if commands != history:
            raise SettingError(
                f"{topics.COMMANDS} has {commands} partitions but {topics.HISTORY} has {history}; "
                "they must be equal: recreate the smaller topic with the same count before starting the history service"
            )
        return commands

    async def run(self, stop: asyncio.Event) -> None:
        def set_up_topics() -> tuple[int, int]:
            ensure_topics(self.settings, core_topics(self.settings))
            return self._check_partition_counts(), topic_partitions(self.settings, topics.REPLIES)

        self.partition_count, self.replies.partition_count = await until_broker_answers("history_topic_setup", set_up_topics)
        postgres_watch = self.readiness.watch_postgres(self.checkpoints.dsn) if self.checkpoints is not None else None
        if self.checkpoints is not None:
            await until_answered("history_schema_setup", self._create_tables)
        self.consumer.subscribe([topics.COMMANDS], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke)
        stopped = threading.Event()
        threading.Thread(target=self.nexus_endpoints.follow, args=(stopped,), name="kadence-nexus-endpoints", daemon=True).start()
        # Every command is decided with the whole registry: a completion naming an endpoint just
        # created is not refused for a registry read only in part.
        while not await asyncio.get_running_loop().run_in_executor(None, self.nexus_endpoints.caught_up.wait, 5.0):
            log.info("event=waiting_for_nexus_endpoints topic=%s", topics.NEXUS_ENDPOINTS)
        log.info("event=history_started bootstrap=%s", self.settings.bootstrap_servers)
        threading.Thread(target=self._serve_deliveries, args=(stopped,), name="kadence-history-deliveries", daemon=True).start()
        try:
            async for messages in consume_batches(self.consumer, stop, on_end=self.readiness.reached_end):
                stretch = Stretch()
                if self._fatal is not None:  # what the log holds is unknown: these commands are read again
                    self._replace_producer_and_recover()
                    continue
                commands = [(msg, self._decode(msg)) for msg in messages if msg.partition() in self.partitions]
                if await self._load_runs(commands):
                    stretch = Stretch()  # the read back gave the loop way
                for msg, command in commands:
                    if isinstance(command, UndecodableRecord):
                        self._dead_letter(msg, str(command))
                    else:
                        self.handle(msg, command)
                    stretch.commands += 1
                    if stretch.seconds() > SLICE_S:
                        await self._give_way(stretch)
                        stretch = Stretch()
                await self._give_way(stretch)
                self._checkpoint_if_due()
        finally:
            if self._checkpointing is not None:
                self._checkpointing.cancel()
            self._produce_tasks()
            self.producer.flush(10)
            stopped.set()
            self.consumer.close()
            if self.checkpoints is not None:
                self.checkpoints.close()
            if postgres_watch is not None:
                postgres_watch.cancel()

    async def _give_way(self, stretch: Stretch) -> None:
        """End a slice of the command loop: the tasks of the batches written go out, the commands
        sent elsewhere are passed, and the loop's other work (a checkpoint's encoding, /metrics)
        has its turn before the next command."""
        stretch.observe()
        await self._write_held()
        await self._dispatch_tasks()
        self._raise_produce_error()
        await asyncio.sleep(0)

    def _serve_deliveries(self, stop: threading.Event) -> None:
        """Delivery reports as they come, on a thread of their own: a batch's replies leave the
        moment the broker acknowledged it, whatever the loop is doing (waiting for a command)."""
        while not stop.is_set():
            try:
                self.producer.poll(0.05)
            except Exception:  # a callback's bug: said loudly, and the reports after it still served
                ERRORS.labels("history", "delivery_callback_failed").inc()
                log.exception("event=delivery_callback_failed")

    async def _create_tables(self) -> None:
        assert self.checkpoints is not None
        async with await psycopg.AsyncConnection.connect(self.checkpoints.dsn, autocommit=True) as conn:
            await apply_ddl(conn, CHECKPOINT_DDL)

    def _raise_produce_error(self) -> None:
        if self._produce_error is not None:
            raise FatalProduceError(f"history batch not written: {self._produce_error}")

    def _checkpoint_if_due(self) -> None:
        """Every interval: let the runs stored unchanged rest as their rows (`rest_stored_runs`), and begin a checkpoint of every
        owned partition whose state changed since its last (`checkpoint_due`), unless one is still
        being stored. The snapshots are taken here, between batches, and stored beside the loop."""
        if self.checkpoints is None or time.monotonic() < self._next_checkpoint:
            return
        if self._checkpointing is not None and not self._checkpointing.done():
            return
        self._next_checkpoint = time.monotonic() + self.checkpoint_interval_s
        held = Stretch()  # a stretch of the command loop's own
        self._rest_stored_runs()
        with self._offsets_lock:  # the delivery thread completes a snapshot's position
            snapshots = [(state, state.begin_snapshot()) for state in self.partitions.values() if state.checkpoint_due]
        held.observe()
        if snapshots:
            self._checkpointing = asyncio.create_task(self._store_snapshots(self.checkpoints, snapshots))

    def _rest_stored_runs(self) -> None:
        keep = max(1, self.cache_runs // max(1, len(self.partitions)))
        RUNS_EVICTED.inc(sum(state.rest_stored_runs(keep) for state in list(self.partitions.values())))
        EXECUTIONS_HELD.set(sum(len(state.executions) for state in list(self.partitions.values())))
        RUNS_AT_REST.set(sum(len(state.at_rest) for state in list(self.partitions.values())))

    async def _store_snapshots(self, checkpoints: CheckpointStore, snapshots: list[tuple[PartitionState, Snapshot]]) -> None:
        """Store each snapshot once its runs are encoded (a slice at a time, so the loop goes on
        between) and the broker has acknowledged every batch written before it, so it is exactly
        the fold of the log up to its history offset. While the broker has not acknowledged them
        (it is away), or Postgres does not answer, or anything else stops it, the runs go to the
        next checkpoint: they stay in memory meanwhile, and recovery would read more of the log."""
        started = time.monotonic()
        stored: list[int] = []
        try:
            await self._store_each(checkpoints, snapshots, stored)
        except psycopg.OperationalError as exc:
            log.warning("event=checkpoint_postponed partitions_stored=%s reason=%r error=%r",
                        stored, "Postgres does not answer", describe(exc))
            return
        except Exception:
            ERRORS.labels("history", "checkpoint_failed").inc()
            log.exception("event=checkpoint_failed partitions_stored=%s reason=%r", stored,
                          "a bug: the runs go to the next checkpoint, and this one is tried again then")
            return
        finally:
            for state, snapshot in snapshots:
                if state.snapshot is snapshot:  # neither stored nor given back
                    state.snapshot_failed(snapshot)
        took = time.monotonic() - started
        CHECKPOINT_SECONDS.observe(took)
        log.info("event=checkpoint_taken partitions=%s runs=%d seconds=%.3f", stored,
                 sum(len(snapshot.rows) for _, snapshot in snapshots), took)

    async def _store_each(self, checkpoints: CheckpointStore, snapshots: list[tuple[PartitionState, Snapshot]], stored: list[int]) -> None:
        loop = asyncio.get_running_loop()
        for _, snapshot in snapshots:
            while snapshot.encode_some(ENCODE_SLICE_RUNS):
                await asyncio.sleep(0)
        deadline = time.monotonic() + CHECKPOINT_FLUSH_TIMEOUT_S
        while any(snapshot.history_offset is None for _, snapshot in snapshots) and time.monotonic() < deadline:
            await asyncio.sleep(ACKNOWLEDGED_POLL_S)
        for state, snapshot in snapshots:
            if self.partitions.get(snapshot.partition) is not state:
                continue  # revoked, or recovered again, meanwhile: its next owner stores its own
            if snapshot.history_offset is None:
                log.warning("event=checkpoint_postponed partition=%d reason=%r", snapshot.partition,
                            "the broker has not acknowledged every batch written")
                state.snapshot_failed(snapshot)
                continue
            ids = _stored_ids_to_write(state, snapshot)
            if not await loop.run_in_executor(None, checkpoints.save, snapshot, ids):
                state.snapshot_failed(snapshot)  # fenced: a later claim holds the partition
                continue
            if state.stored_ids is not None and ids is not None:
                state.stored_ids.changed = False
            state.snapshot_stored(snapshot)
            CHECKPOINT_RUNS.inc(len(snapshot.rows))
            stored.append(snapshot.partition)

    # Rebalance callbacks run on the polling thread while the loop is suspended in consume().
    def _on_assign(self, consumer: Consumer, assigned: list[TopicPartition]) -> None:
        partitions = [tp.partition for tp in assigned]
        for partition in partitions:
            log.info("event=partition_assigned partition=%d", partition)
        self._wait_for_written_batches()
        recovered = self._recover(partitions)
        for tp in assigned:
            tp.offset = recovered[tp.partition].resume_offset
        consumer.assign(assigned)
        self.readiness.assign(set(self.partitions))

    def _wait_for_written_batches(self) -> None:
        """Every batch this instance produced is in the log before it recovers a partition from
        there. A revoke whose flush timed out (the broker away) leaves batches queued in this
        producer; a recovery that read the log before they landed would decide their commands
        again, into records readers skip as repeats: the same decisions, at the same record times,
        but work done twice and, for anything not decided from the log alone, a second answer that
        readers would skip while this instance's state held it (docs/architecture.md, "Exactly
        once"). The broker that assigned the partitions answers, so this wait is short; while it
        lasts the service is not ready."""
        waited = time.monotonic()
        while (outstanding := self.producer.flush(ASSIGN_FLUSH_WAIT_S)) and self._fatal is None:
            log.warning("event=recovery_waits_for_batches outstanding_batches=%d waited_s=%.1f reason=%r", outstanding,
                        time.monotonic() - waited, "the broker has not acknowledged every batch this instance wrote")
        # After a fatal error the old batches are lost or in the log: the producer is replaced and
        # the partitions recovered again before any command is read (_replace_producer_and_recover).

    def _recover(self, partitions: list[int]) -> dict[int, PartitionState]:
        """Claim the partitions and fold their checkpoints and the log after them into state."""
        started = time.monotonic()
        checkpoints = self.checkpoints
        claimed = until_answered_blocking("history_claim_partitions", lambda: checkpoints.claim(partitions)) if checkpoints else {}
        for p, claim in claimed.items():
            if claim.positions is not None:
                log.info("event=checkpoint_restored partition=%d history_offset=%d", p, claim.positions.history_offset)
        load_runs = None if checkpoints is None else (
            lambda wanted: until_answered_blocking("history_recovery_run_lookup", lambda: checkpoints.load_runs(wanted)))
        try:
            recovered = recover_partitions(self.settings, {
                p: claimed[p].state(p) if p in claimed else PartitionState(p) for p in partitions
            }, load_runs)
        except NewerSchemaVersion as exc:  # here, not above: confluent-kafka mangles exceptions from callbacks
            stop_for_newer_schema("history", exc)
        ends = {p: end for p, (_, end) in watermarks(self.consumer, topics.COMMANDS, partitions).items()}
        for p, end in ends.items():
            recovered[p].decided_before = end
        log.info("event=tasks_marked_as_copies_below partition_ends=%s reason=%r", ends,
                 "an earlier owner may have decided these commands and dispatched their tasks")
        self.partitions.update(recovered)
        RECOVERY.set(time.monotonic() - started)
        return recovered

    def _replace_producer_and_recover(self) -> None:
        """After a fatal error of the idempotent producer (librdkafka raises one when it can no
        longer keep its ordering and exactly-once guarantees): a new producer, and the owned
        partitions recovered from the log again, their commands read from just past the last one
        the log holds. The old producer's batches not acknowledged may or may not be in the log;
        what the new one writes again for the same commands is what it would have said, and
        readers skip a repeat by the fencing rule."""
        fatal, self._fatal = self._fatal, None
        old, self.producer = self.producer, self._new_producer()
        old.purge(in_queue=True, in_flight=True, blocking=False)
        old.flush(5)  # serves the purged batches' delivery reports (ignored: an older generation)
        partitions = sorted(self.partitions)
        recovered = self._recover(partitions)
        for p in partitions:
            self.consumer.seek(TopicPartition(topics.COMMANDS, p, recovered[p].resume_offset))
        log.warning("event=history_recovered_in_place reason=producer_fatal_error error=%r partitions=%s resume_offsets=%s",
                    fatal.str() if fatal is not None else "", partitions, {p: recovered[p].resume_offset for p in partitions})

    def _on_revoke(self, consumer: Consumer, revoked: list[TopicPartition]) -> None:
        self.producer.flush(10)  # narrow the window in which this instance writes as a zombie
        for tp in revoked:
            self.partitions.pop(tp.partition, None)
            self.replies.revoked(tp.partition)
            log.info("event=partition_revoked partition=%d", tp.partition)
        self.readiness.revoke()

    def _decode(self, msg: Message) -> Record | UndecodableRecord:
        """The command, or why it is not one (dead-lettered in its turn, so batches keep offset order)."""
        try:
            return self.commands.decode(msg.value(), msg.headers())
        except UndecodableRecord as exc:
            return exc

    async def _load_runs(self, commands: list[tuple[Message, Record | UndecodableRecord]]) -> bool:
        """Read back from Postgres the stored run of each workflow id these commands name that memory
        does not hold (the cache let it go, or a checkpoint moved it out when it closed): one query per
        batch. Without the answer a command could start a run the reuse policy forbids or answer a
        stored run as unknown, so while Postgres is away the batch waits here (the process not ready),
        and nothing after it is read; a batch naming only runs in memory, or ids the partition's
        StoredIds never held (new workflow ids), needs no lookup. Whether it asked."""
        checkpoints = self.checkpoints
        if checkpoints is None:
            return False
        wanted = runs_to_load(self.partitions, (
            (position(msg)[0], command["workflow_id"]) for msg, command in commands
            if not isinstance(command, UndecodableRecord)
            and text_problem("workflow_id", command["workflow_id"]) is None  # refused in handle: no run to look up
        ))
        if wanted:
            loop = asyncio.get_running_loop()
            found = await until_answered(
                "history_run_lookup", lambda: loop.run_in_executor(None, checkpoints.load_runs, wanted),
            )
            RUNS_READ_BACK.inc(len(found))
            for partition, execution in found:
                self.partitions[partition].loaded(execution)
        return bool(wanted)

    def handle(self, msg: Message, command: Record) -> None:
        partition, offset = position(msg)
        workflow_id = command["workflow_id"]
        owner = partition_for_key(workflow_id.encode(), self.partition_count)
        if owner != partition:
            self._forward(msg, command, owner)
            return
        kind, _ = command["command"]
        with tracing.hop(f"history {kind}", msg.headers(), timestamp_ms=msg.timestamp()[1], attributes={
            "messaging.destination.name": topics.COMMANDS, "messaging.kafka.destination.partition": partition,
            "messaging.kafka.message.offset": offset, "kadence.workflow_id": workflow_id,
        }) as traceparent:
            COMMANDS.labels(kind).inc(exemplar=tracing.exemplar(traceparent))
            self._step(msg, command, kind, traceparent)

    def _step(self, msg: Message, command: Record, kind: str, traceparent: str | None) -> None:
        (partition, offset), workflow_id = position(msg), command["workflow_id"]
        if kind != CommandType.QueryWorkflow and len(msg.value() or b"") > WARN_PAYLOAD_BYTES:
            log.warning("event=large_command workflow_id=%s command=%s bytes=%d", workflow_id, kind, len(msg.value() or b""))
        decided_ms = self._decision_time_ms(msg)
        self.nexus_endpoints.resolve(kind, command["command"][1])
        written = step(self.partitions[partition], command, decided_ms, partition, offset,
                       whole_histories=not self._workflow_task_deltas)
        if written.batch is not None:
            self._note_reply(partition, command, kind, written.batch)
        elif written.answered_again is not None:
            self._answer_again(partition, command, kind, written.answered_again)
        if written.rejected is not None:
            REJECTED.labels(written.rejected.cause).inc()
            if written.batch is None and kind in CLIENT_COMMANDS and command["identity"] != HISTORY_IDENTITY:
                # No request id to answer: its sender learns it here. (A parent close policy's
                # terminate or cancel that finds its child closed is no one's mistake.)
                self._dead_letter(msg, f"refused ({written.rejected.cause}): {written.rejected}")
                return
        if written.redispatch is not None:
            REDISPATCHED.labels(written.redispatch.task).inc()
            log.info("event=task_redispatched task=%s workflow_id=%s run_id=%s scheduled_event_id=%d waited_ms=%d",
                     written.redispatch.task, workflow_id, written.batch["run_id"] if written.batch else "",
                     written.redispatch.scheduled_event_id, written.redispatch.waited_ms)
        self._write(partition, written, decided_ms, traceparent)

    def _decision_time_ms(self, msg: Message) -> int:
        """The time a command is decided at: its record's timestamp, the broker's append time on
        kadence.commands (LogAppendTime), so every instance that decides the command, a deposed
        owner and the next one or a recovery after a crash, decides it alike (docs/architecture.md,
        "Exactly once"). On a topic an older release created (CreateTime: the producers' clocks,
        which a client's skew would put in every decision) this instance's clock, as before."""
        kind, timestamp_ms = msg.timestamp()
        if kind == TIMESTAMP_LOG_APPEND_TIME and timestamp_ms > 0:
            return timestamp_ms
        partition, _ = position(msg)
        if partition not in self._create_time_partitions:
            self._create_time_partitions.add(partition)
            log.warning("event=commands_not_log_append_time partition=%d fix=%r", partition,
                        f"kafka-configs --alter --entity-type topics --entity-name {topics.COMMANDS} "
                        "--add-config message.timestamp.type=LogAppendTime (decisions take this instance's clock until then)")
        return int(time.time() * 1000)

    def _note_reply(self, partition: int, command: Record, kind: str, batch: HistoryBatch) -> None:
        """Where to answer the command, if it asked for an answer on kadence.replies and its batch
        answers it."""
        if command.get("reply_partition") is None or kind == CommandType.QueryWorkflow:
            return
        request_id = request_id_of(kind, command["command"][1])
        if request_id in batch["request_ids"] or any(rejection["request_id"] == request_id for rejection in refused(batch)):
            self.replies.asked(partition, command, request_id)

    def _answer_again(self, partition: int, command: Record, kind: str, answer: HistoryBatch) -> None:
        """A request answered before, sent again: answered at once on its client's reply partition,
        without a batch. The first answer's batch may still be on its way to the log, but it says the
        same: were it lost with this process, the next owner decides the first command again alike
        (docs/architecture.md, "Exactly once"). A client without a reply partition finds the answer
        in the read model, which recorded the first."""
        ANSWERED_AGAIN.inc()
        self._note_reply(partition, command, kind, answer)
        self._send_replies(self.replies.of_batch(partition, answer))

    def _write(self, partition: int, written: Step, decided_ms: int, traceparent: str | None = None) -> None:
        """Produce the step's batch, one record per command: a command decided again (by the next
        owner, or after a fatal producer error) writes a record of the same bounds, which readers
        skip as a repeat (docs/architecture.md, "Exactly once"). The record's timestamp is the time
        its command was decided at, so a reader of the log knows how far history has decided each
        partition (the timer service holds its timeouts against it)."""
        batch = written.batch
        if batch is None:
            return
        BATCHES.inc()
        self.partitions[partition].written += 1
        # A command an earlier owner may have decided: its tasks may be out already, read by a worker
        # that is not the one this copy reaches (docs/architecture.md, "Exactly once").
        decided_before = batch["source_offset"] < self.partitions[partition].decided_before
        self._dispatching += self.task_records.of(batch, traceparent, maybe_copies=decided_before)
        replies = self.replies.of_batch(partition, batch, written.eager_workflow_task)
        # The tasks carry their events; the log holds them once, as the batches' events.
        _leave_out_workflow_task_events(batch)
        value = self.batches.encode(batch)
        if len(value) > MAX_RECORD_VALUE_BYTES:
            raise FatalProduceError(
                f"history batch of {batch['workflow_id']} (run {batch['run_id']}) is {len(value)} bytes, over the "
                f"{MAX_RECORD_VALUE_BYTES}-byte record limit its transition was measured within: a bug in batch_bytes_bound"
            )
        produce = functools.partial(
            self.producer.produce, topics.HISTORY, value, batch["workflow_id"].encode(), partition=partition,
            headers=self.batches.headers() + tracing.headers_of(traceparent), on_delivery=self._on_delivery(replies),
            timestamp=decided_ms,
        )
        if self._held:
            self._held.append(produce)
        else:
            produce()

    async def _dispatch_tasks(self) -> None:
        """Produce the tasks of the batches just produced to their task queue topics, creating a
        topic the first time a task queue is seen (docs/architecture.md, "Task dispatch")."""
        new = {record.topic for record in self._dispatching} - self._task_topics
        if new:
            await asyncio.get_running_loop().run_in_executor(
                None, ensure_topics, self.settings, dict.fromkeys(new, self.settings.task_queue_partitions),
            )
            self._task_topics |= new
        self._produce_tasks()

    def _produce_tasks(self) -> None:
        """Not waiting for the batch's acknowledgement: a task whose batch never reaches the log
        (this process died first) is answered by a worker's command that follows the dispatching
        command on the partition, so the next owner decides that command again (the same run,
        ids and task, by the determinism of decisions) before it reads the answer."""
        dispatching, self._dispatching = self._dispatching, []
        for record in dispatching:
            self.producer.produce(record.topic, record.value, record.key, headers=record.headers, on_delivery=_task_delivered)
            counted(record)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None and (err.fatal() or err.code() == KafkaError._FATAL):
            self._fatal = self._fatal or err
        elif err is not None:
            self._produce_error = err
        elif msg.topic() == topics.HISTORY:
            partition, offset = msg.partition(), msg.offset()
            if partition is None or offset is None:
                # Written, its offset not said: the broker had the batch from an earlier try of the
                # idempotent producer (a leader change mid-request). history_offset stays before it,
                # so a recovery from the next checkpoint reads it again, and the fencing rule skips it.
                log.info("event=batch_delivered_without_offset partition=%s", partition)
            if partition is None:
                return
            with self._offsets_lock:  # the delivery thread and a flush elsewhere may both serve reports
                if (state := self.partitions.get(partition)) is not None:
                    state.batch_acknowledged(offset)

    def _on_delivery(self, replies: list[Reply] | None = None) -> Callable[[KafkaError | None, Message], None]:
        """The delivery callback for the current producer: a replaced one's reports are ignored.
        The batch's replies are produced once the broker acknowledged it."""
        generation = self._producer_generation

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if generation != self._producer_generation:
                return
            self._delivered(err, msg)
            if replies and err is None:
                self._send_replies(replies)

        return delivered

    def _send_replies(self, replies: list[Reply]) -> None:
        """Best effort: a reply lost costs its client the few milliseconds the read model takes."""
        for reply in replies:
            try:
                self.producer.produce(
                    topics.REPLIES, reply.value, reply.key, partition=reply.partition, headers=self.replies.codec.headers(),
                    on_delivery=_reply_delivered,
                )
            except (BufferError, KafkaException) as exc:
                log.warning("event=reply_not_sent partition=%d error=%r", reply.partition, str(exc))

    def _dead_letter(self, msg: Message, error: str) -> None:
        ERRORS.labels("history", "dead_lettered_command").inc()
        log.warning("event=command_dead_lettered partition=%d offset=%d error=%r", msg.partition(), msg.offset(), error)
        self._send_elsewhere(msg, "", topics.DLQ, msg.value(), headers=dead_letter_headers(msg, error))

    def _forward(self, msg: Message, command: Record, owner: int) -> None:
        """Send a command produced to the wrong partition on to its owner. A command without a
        request id gets one named after where it was read, so if a restart forwards it again
        (between this and the batch that passes it) the owner applies it once."""
        workflow_id = command["workflow_id"]
        log.warning(
            "event=command_forwarded workflow_id=%s from_partition=%d offset=%d to_partition=%d reason=%r",
            workflow_id, msg.partition(), msg.offset(), owner, "producer did not partition by murmur2(workflow_id)",
        )
        kind, body = command["command"]
        request = body["start"] if kind in WITH_START else body
        if request.get("request_id") == "":
            request["request_id"] = f"forwarded:{msg.partition()}@{msg.offset()}"
        self._send_elsewhere(msg, workflow_id, topics.COMMANDS, self.commands.encode(command), partition=owner,
                             headers=msg.headers())

    def _send_elsewhere(self, msg: Message, workflow_id: str, topic: str, value: bytes | None, **produce: Any) -> None:
        """Produce what a command becomes elsewhere (a dead letter, a forward); the batch that
        passes the command, and every batch after it, wait for the broker to acknowledge it (`_write_held`)."""
        loop = asyncio.get_running_loop()
        acknowledged: asyncio.Future[KafkaError | None] = loop.create_future()
        on_delivery = self._on_delivery()

        def delivered(err: KafkaError | None, record: Message) -> None:
            on_delivery(err, record)
            loop.call_soon_threadsafe(_settle, acknowledged, err)

        self.producer.produce(topic, value, msg.key(), on_delivery=delivered, **produce)
        self._held.append(SentElsewhere(topic, position(msg)[1], acknowledged))
        self._write_passed(msg, workflow_id)

    async def _write_held(self) -> None:
        """Produce the history batches held behind dead letters and forwards, each once the broker
        has acknowledged those written before it. A dead letter and the batch that passes its
        command are on different partitions: were the batch (or a later one of its partition)
        produced first, it could be acknowledged alone, and a crash then would lose the dead letter
        or the forward, where this way it repeats it (at least once). A storm of them waits one
        round trip a slice, not one each."""
        held, self._held = self._held, []
        for item in held:
            if not isinstance(item, SentElsewhere):
                item()
            elif (err := await item.acknowledged) is not None:
                if self._fatal is not None:  # the producer is replaced and these commands read again
                    return
                raise FatalProduceError(f"{item.topic} record for {topics.COMMANDS} offset {item.offset} not written: {err}")

    def _write_passed(self, msg: Message, workflow_id: str) -> None:
        """A batch that records only that the command at this offset was dealt with elsewhere
        (forwarded, dead-lettered): the resume position passes it, so a restart does not deal
        with it again."""
        partition, offset = position(msg)
        self._write(partition, eventless(self.partitions[partition], workflow_id, partition, offset, effects=[]),
                    self._decision_time_ms(msg))


def _stored_ids_to_write(state: PartitionState, snapshot: Snapshot) -> bytes | None:
    """The partition's StoredIds with the snapshot's workflow ids, if they changed since last stored."""
    if state.stored_ids is None:
        return None
    for workflow_id in snapshot.rows:
        state.stored_ids.add(workflow_id)
    return state.stored_ids.to_bytes() if state.stored_ids.changed else None


async def run_history_service(stop: asyncio.Event) -> None:
    """One history service instance, set by the KADENCE_* variables, until `stop`."""
    # Without a Postgres DSN the service still runs, recovering every partition from offset 0 and
    # holding every run in memory, closed runs' events included: for tests of the log alone.
    dsn = os.environ.get("KADENCE_POSTGRES_DSN", "")
    interval_s = env_int("KADENCE_CHECKPOINT_INTERVAL_MS", 30_000) / 1000
    reset_retention_ms()  # a malformed setting stops the start, not a reset
    cache_runs = env_int("KADENCE_HISTORY_CACHE_RUNS", DEFAULT_CACHE_RUNS)
    service = HistoryService(KafkaSettings.from_env(), CheckpointStore(dsn) if dsn else None, interval_s, cache_runs)
    await service.run(stop)
