"""kadence.dlq: the records a service could not apply, with why and where they came from.

A dead letter keeps the record's key, value and headers, and adds the `kadence-*` headers below.
Replaying one produces it again, as it was, to the topic and partition it came from: the fix for records that
failed for a reason since removed (say, a schema version the service did not know yet). A record of
kadence.history is not replayed: the history is the log itself, and a copy appended to it would be skipped
by every reader as a zombie's repeat; its readers apply it again when their projection is rebuilt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from dataclasses import dataclass

from confluent_kafka import Message

from kadence.protocol import topics
from kadence.protocol.codec import HeaderList, Headers, header_pairs, header_text
from kadence.protocol.kafka import make_producer, position, read_to_end
from kadence.protocol.settings import KafkaSettings

ERROR_HEADER = "kadence-error"
SOURCE_TOPIC_HEADER = "kadence-source-topic"
SOURCE_PARTITION_HEADER = "kadence-source-partition"
SOURCE_OFFSET_HEADER = "kadence-source-offset"
DEAD_LETTER_HEADERS = (ERROR_HEADER, SOURCE_TOPIC_HEADER, SOURCE_PARTITION_HEADER, SOURCE_OFFSET_HEADER)


def dead_letter_headers(source: Message, error: str) -> HeaderList:
    """The source record's headers plus why and where from: what a service writes to kadence.dlq."""
    return headers_for_dead_letter(source.headers() or [], source.topic() or "", *position(source), error)


def headers_for_dead_letter(headers: Headers, topic: str, partition: int, offset: int, error: str) -> HeaderList:
    """dead_letter_headers for a record read by another client than confluent-kafka's (faust's)."""
    return [*header_pairs(headers), (ERROR_HEADER, error.encode(errors="backslashreplace")), (SOURCE_TOPIC_HEADER, topic.encode()),
            (SOURCE_PARTITION_HEADER, str(partition).encode()), (SOURCE_OFFSET_HEADER, str(offset).encode())]


@dataclass
class DeadLetter:
    offset: int
    error: str
    source_topic: str
    source_partition: int
    source_offset: int
    key: bytes | None
    value: bytes | None
    headers: HeaderList  # the source record's own

    @classmethod
    def from_message(cls, msg: Message) -> "DeadLetter":
        headers = header_pairs(msg.headers())
        added = {key: header_text(value) for key, value in headers if key in DEAD_LETTER_HEADERS}
        return cls(
            offset=position(msg)[1], error=added.get(ERROR_HEADER, ""), source_topic=added.get(SOURCE_TOPIC_HEADER, ""),
            source_partition=int(added.get(SOURCE_PARTITION_HEADER, -1)), source_offset=int(added.get(SOURCE_OFFSET_HEADER, -1)),
            key=msg.key(), value=msg.value(), headers=[(k, v) for k, v in headers if k not in DEAD_LETTER_HEADERS],
        )

    def summary(self) -> dict[str, object]:
        return {
            "offset": self.offset, "error": self.error, "source": f"{self.source_topic}/{self.source_partition}@{self.source_offset}",
            "key": self.key.decode(errors="replace") if self.key is not None else None, "bytes": len(self.value or b""),
        }


def dead_letters(settings: KafkaSettings, from_offset: int = 0) -> list[DeadLetter]:
    return list(read_dead_letters(settings, from_offset))


def read_dead_letters(settings: KafkaSettings, from_offset: int = 0) -> Generator[DeadLetter]:
    """The dead letters from `from_offset` as they are read: a reader that needs a page stops
    there (close() the generator to close its consumer at once)."""
    with contextlib.closing(read_to_end(settings, topics.DLQ, {0: from_offset})) as messages:
        for msg in messages:
            yield DeadLetter.from_message(msg)


def replay(settings: KafkaSettings, letters: list[DeadLetter]) -> None:
    """Produce each record again to its source topic and partition, with its own key and headers: the
    partition, not the key's, because a record's partition can be its meaning (a command on the
    wrong one is forwarded by the history service, and garbage has no key to hash)."""
    for letter in letters:
        if not letter.source_topic:
            raise ValueError(f"dead letter at offset {letter.offset} does not say where it came from; replay it by hand")
        if letter.source_topic == topics.HISTORY:
            raise ValueError(
                f"dead letter at offset {letter.offset} is a record of {topics.HISTORY}, which is not produced again (a copy "
                "would be skipped as a repeat); fix the reader, then rebuild its projection (docs/operations.md)"
            )
    producer = make_producer(settings)
    for letter in letters:
        if letter.source_partition >= 0:
            producer.produce(letter.source_topic, letter.value, letter.key, partition=letter.source_partition, headers=letter.headers)
        else:
            producer.produce(letter.source_topic, letter.value, letter.key, headers=letter.headers)
    remaining = producer.flush(30)
    if remaining:
        raise RuntimeError(f"{remaining} replayed records were not acknowledged within 30 s; list kadence.dlq and retry")
