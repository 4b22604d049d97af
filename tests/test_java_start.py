"""examples/java-start, a Java service's start command, against Kadence.

The vectors in schemas/test-vectors/ are committed and only checked, here and by the Java
project's JUnit test (which the end-to-end test below runs with `mvn package`): what both sides
agree with, they agree on with each other.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pytest

from examples.order import order_worker
from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.protocol import topics
from kadence.protocol.codec import SCHEMA_HEADER, command_codec
from kadence.protocol.kafka import partition_for_key

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "examples" / "java-start"
VECTORS = REPO / "schemas" / "test-vectors"


def vectors(name: str) -> dict[str, Any]:
    return json.loads((VECTORS / name).read_text())


def test_partition_for_key_matches_every_vector() -> None:
    table = vectors("partitions.json")
    wrong, checked = [], 0
    for vector in table["keys"]:
        key = bytes.fromhex(vector["utf8_hex"])
        assert key == vector["key"].encode(), "utf8_hex is the key's UTF-8"
        assert sorted(int(count) for count in vector["partitions"]) == sorted(table["partition_counts"]), vector["key"]
        for count, partition in vector["partitions"].items():
            checked += 1
            if partition_for_key(key, int(count)) != partition:
                wrong.append((vector["key"][:40], int(count), partition, partition_for_key(key, int(count))))
    assert wrong == [], "(key, partitions, vector's partition, partition_for_key's)"
    assert checked >= 100


def test_the_sample_start_command_is_what_kadences_codec_writes() -> None:
    sample = vectors("start-command.json")
    codec = command_codec()
    value = bytes.fromhex(sample["value_hex"])
    assert sample["headers"] == {SCHEMA_HEADER: codec.current_fingerprint}, "Command.avsc changed: see schemas/test-vectors/generate.py"

    record = codec.decode(value, [(name, header.encode()) for name, header in sample["headers"].items()])
    # The bytes hold the vector's logical record (Avro's JSON encoding of it is the same), and
    # Kadence's codec writes that record as exactly these bytes.
    written = io.StringIO()
    fastavro.json_writer(written, codec.schema, [record])
    assert json.loads(written.getvalue()) == sample["record"]
    assert codec.encode(record) == value

    assert sample["topic"] == topics.COMMANDS
    assert sample["key"] == record["workflow_id"] and bytes.fromhex(sample["key_utf8_hex"]) == sample["key"].encode()
    kind, start = record["command"]
    assert (kind, start["workflow_type"], start["task_queue"]) == ("StartWorkflowExecution", "OrderWorkflow", "orders")
    [payload] = start["input"]
    assert payload["metadata"] == {"encoding": b"json/plain"}
    assert json.loads(payload["data"]) == sample["order"]
    assert payload["data"] == json.dumps(sample["order"]).encode(), "the same bytes as examples/start_by_topic.py writes"


def run(command: list[str], timeout: float, **options: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, **options)


@pytest.mark.kafka_only  # needs Java and Maven, as Apache Kafka does
@pytest.mark.timeout(900)
async def test_the_java_example_starts_the_order_workflow(stack: LocalStack, client: Client) -> None:
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"examples/java-start needs Java 17 and Maven, and {' and '.join(missing)} is not on PATH "
                    "(Debian: apt-get install openjdk-17-jdk-headless maven)", pytrace=False)
    # Also runs the Java side's vector checks (JUnit, via surefire); the first build downloads
    # the dependencies from Maven Central.
    build = await asyncio.to_thread(run, ["mvn", "-q", "-B", "-f", str(PROJECT / "pom.xml"), "package"], 600, cwd=REPO)
    assert build.returncode == 0, f"mvn package failed:\n{build.stdout[-5000:]}\n{build.stderr[-5000:]}"

    # A multibyte id: the UTF-8 key is hashed and decoded end to end. Java reads its arguments in
    # the locale's encoding, so the program gets a UTF-8 locale.
    order_id = f"order-java-ü-{uuid.uuid4()}"
    async with order_worker(client):
        produced = await asyncio.to_thread(
            run, ["java", "-jar", str(PROJECT / "target" / "java-start.jar"), order_id, "42.5"], 120,
            cwd=REPO, env={**stack.env, "LC_ALL": "C.UTF-8"},
        )
        assert produced.returncode == 0, produced.stdout + produced.stderr
        result = await asyncio.wait_for(client.get_workflow_handle(order_id).result(), 60)
    assert result == f"shipped_{order_id}"

    found = re.search(rf"for workflow {re.escape(order_id)} to {re.escape(topics.COMMANDS)} partition (\d+) offset (\d+)", produced.stdout)
    assert found, produced.stdout
    assert produced.stdout.count("\n") == 1, "one line says what was produced"
    assert int(found[1]) == partition_for_key(order_id.encode(), stack.partitions), "the Java default partitioner chose it"
