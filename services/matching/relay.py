"""The relay of outbound commands: what a run asks of another execution (a child's start, a signal
or cancel request to another workflow, a child's answers to its parent) goes from the history
batch that decided it to kadence.commands, keyed by the target's workflow id."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import Counter

from kadence.protocol import topics, tracing
from kadence.protocol.codec import SCHEMA_HEADER, HeaderList, NewerSchemaVersion, history_batch_codec
from kadence.protocol.dead_letters import headers_for_dead_letter
from kadence.protocol.events import run_sections
from kadence.protocol.fence import PartitionFences
from kadence.protocol.names import EffectType
from kadence.protocol.observability import ERRORS

log = logging.getLogger("kadence.matching")

RELAYED = Counter("kadence_matching_commands_relayed_total", "Outbound commands relayed to kadence.commands")

Send = Callable[[str, bytes | None, bytes, HeaderList], Awaitable[Any]]


class OutboundRelay:
    def __init__(self, send: Send) -> None:
        self.send = send
        self.fences = PartitionFences()
        self.batches = history_batch_codec()

    async def relay(
        self, partition: int, offset: int, key: bytes | None, value: bytes, headers: HeaderList,
        timestamp_ms: int | None = None,
    ) -> None:
        """Relay one record's outbound commands; a record that cannot be read goes to the DLQ with the reason."""
        try:
            await self._relay(partition, offset, value, headers, timestamp_ms)
        except NewerSchemaVersion:
            raise
        except Exception as exc:  # bad input must not stop the partition: the reason goes with the record
            reason = f"matching: {type(exc).__name__}: {exc}"
            ERRORS.labels("matching", "dead_lettered_history_record").inc()
            log.error("event=history_record_dead_lettered partition=%d offset=%d error=%r", partition, offset, reason)
            await self.send(topics.DLQ, key, value, headers_for_dead_letter(headers, topics.HISTORY, partition, offset, reason))

    async def _relay(self, partition: int, offset: int, value: bytes, headers: HeaderList, timestamp_ms: int | None) -> None:
        batch = self.batches.decode(value, headers)  # UndecodableRecord: dead-lettered by relay
        if not self.fences.admit(partition, offset, batch):
            # Within one read of the partition: a history instance that just lost it repeating the owner.
            log.info("event=repeated_history_batch_skipped workflow_id=%s run_id=%s partition=%d offset=%d source_offset=%d",
                     batch["workflow_id"], batch["run_id"], partition, offset, batch["source_offset"])
            return
        outbound = [effect for section in run_sections(batch)
                    for effect_type, effect in section.effects if effect_type == EffectType.OutboundCommand]
        if not outbound:
            return  # tasks went to their task queues from the history service (services/matching/dispatch.py)
        with tracing.hop("matching relay", headers, timestamp_ms=timestamp_ms, attributes={
            "messaging.destination.name": topics.HISTORY, "messaging.kafka.destination.partition": partition,
            "messaging.kafka.message.offset": offset, "kadence.workflow_id": batch["workflow_id"],
        }) as traceparent:
            for effect in outbound:
                # Keyed by the target's workflow id; the producer's default partitioner is Kafka's murmur2.
                headers_out = [(SCHEMA_HEADER, effect["schema_fingerprint"].encode()), *tracing.headers_of(traceparent)]
                await self.send(topics.COMMANDS, effect["workflow_id"].encode(), effect["command"], headers_out)
                RELAYED.inc()
