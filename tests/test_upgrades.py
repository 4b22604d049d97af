"""A reader of kadence.history that meets a record from a newer release (a schema version it does
not know) stops, rather than skip what the record says, and keeps its position before it: once
upgraded it reads the record. (How writers avoid this during an upgrade: tests/test_codec.py.)"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest
from confluent_kafka import Producer

from kadence.dev.local_stack import SERVICES, LocalStack
from kadence.protocol import topics
from kadence.protocol.codec import SCHEMA_HEADER
from kadence.protocol.runner import NEWER_SCHEMA_EXIT_CODE
from tests.conftest import local_stack


@pytest.fixture(scope="module")
def stack_without_services() -> Iterator[LocalStack]:
    with local_stack(services=()) as local:
        yield local


def test_every_history_reader_stops_at_a_record_of_a_newer_schema_version(stack_without_services: LocalStack) -> None:
    stack = stack_without_services
    producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
    delivered = []
    producer.produce(topics.HISTORY, b"\x02written by a later release", b"w", partition=0,
                     headers=[(SCHEMA_HEADER, b"feedfacefeedface")], on_delivery=lambda err, msg: delivered.append(msg.offset()))
    producer.flush(10)
    [newer_offset] = delivered

    processes = {name: stack.start_service(name) for name in SERVICES}
    deadline = time.monotonic() + 60
    while any(process.poll() is None for process in processes.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for name, process in processes.items():
        logged = (stack.data_dir / "logs" / f"{name}.log").read_text()
        assert process.poll() == NEWER_SCHEMA_EXIT_CODE, f"{name} exited with {process.poll()}: {logged[-3000:]}"
        assert "event=newer_schema_version" in logged and "feedfacefeedface" in logged, name
    with psycopg.connect(stack.postgres_dsn) as conn:
        positions = conn.execute("SELECT consumer, next_offset FROM kadence_consumer_offsets WHERE partition = 0").fetchall()
    assert all(next_offset <= newer_offset for _, next_offset in positions), positions
