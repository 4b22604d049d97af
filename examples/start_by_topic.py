"""Start the order workflow with nothing but a Kafka producer and the Avro schema.

    python examples/start_by_topic.py ORDER_ID AMOUNT

Any producer works the same way: key = the workflow id (UTF-8), Kafka's default murmur2
partitioner, value = a `Command` record (schemas/Command.avsc, Avro binary, no framing)
whose `command` branch is `StartWorkflowExecution`. Inputs are Payloads: JSON bytes with
metadata encoding=json/plain. The kadence-schema header is optional.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import fastavro
from confluent_kafka import Producer

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


def main(order_id: str, amount: float) -> None:
    schema = fastavro.schema.load_schema(str(SCHEMAS / "Command.avsc"))
    command = {
        "workflow_id": order_id,
        "identity": "start-by-topic-example",
        "command": ("StartWorkflowExecution", {
            "workflow_type": "OrderWorkflow",
            "task_queue": "orders",
            "input": [{"metadata": {"encoding": b"json/plain"}, "data": json.dumps({"order_id": order_id, "amount": amount}).encode()}],
            "request_id": "",
            "workflow_task_timeout_ms": 0,
            "id_reuse_policy": "ALLOW_DUPLICATE",
            "id_conflict_policy": "FAIL",
            "execution_timeout_ms": 0,
            "run_timeout_ms": 0,
            "search_attributes": {},
        }),
    }
    value = io.BytesIO()
    fastavro.schemaless_writer(value, schema, command)
    producer = Producer({
        "bootstrap.servers": os.environ.get("KADENCE_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        "partitioner": "murmur2_random",  # Kafka's default partitioner, as the Java client uses
    })
    producer.produce("kadence.commands", value.getvalue(), order_id.encode())
    producer.flush(10)
    print(f"start command for workflow {order_id} produced")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
