"""Recovery time of one history partition: from offset 0, and from a checkpoint.

    python -m bench.bench_recovery --events 100000 [--broker kafka|tansu]

Writes real histories (built with the history state machine: start, workflow tasks, one
activity, completion; a tenth of the runs left open) to a one-partition kadence.history on a
local broker (--broker kafka|tansu), then times the history service's recovery of that partition from offset 0, the
first checkpoint after it (every run's row: what an upgrade or a recovery without checkpoints writes
once), and recovery from that checkpoint with 1,000 more batches after it, which reads back from
Postgres only the runs those batches name.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Producer

from bench.local import add_broker_option, describe_broker
from kadence.dev.local_stack import LocalStack
from kadence.protocol import topics
from kadence.protocol.codec import history_batch_codec
from kadence.protocol.kafka import core_topics, ensure_topics
from kadence.protocol.postgres import apply_ddl
from services.history.checkpoint import CHECKPOINT_DDL, CheckpointStore
from services.history.machine.dispatch import decide
from services.history.machine.lifecycle import decide_start
from services.history.partition import PartitionState
from services.history.recovery import recover_partitions
from services.history.step import commit

START = {
    "workflow_type": "OrderWorkflow", "task_queue": "orders", "input": [], "request_id": "", "workflow_task_timeout_ms": 0,
    "id_reuse_policy": "ALLOW_DUPLICATE", "id_conflict_policy": "FAIL", "execution_timeout_ms": 0, "run_timeout_ms": 0,
    "search_attributes": {},
}
ACTIVITY = {
    "activity_id": "1", "activity_type": "charge", "task_queue": "", "input": [], "schedule_to_close_timeout_ms": 0,
    "schedule_to_start_timeout_ms": 0, "start_to_close_timeout_ms": 10_000, "heartbeat_timeout_ms": 0, "retry_policy": None,
}


class HistoryWriter:
    """Drives the state machine like the live service and produces its batches to one partition."""

    def __init__(self, stack: LocalStack, partition: int = 0) -> None:
        self.partition = partition
        self.state = PartitionState(partition)
        self.offset = 0
        self.batches = 0
        self.events = 0
        self.codec = history_batch_codec()
        self.producer = Producer({"bootstrap.servers": stack.bootstrap_servers, "linger.ms": 20, "compression.type": "lz4"})

    def write(self, transition: Any) -> dict[str, Any]:
        batch = commit(self.state, transition, self.partition, self.offset).batch
        self.producer.produce(topics.HISTORY, self.codec.encode(batch), batch["workflow_id"].encode(), partition=self.partition)
        self.producer.poll(0)
        self.offset += 1
        self.batches += 1
        self.events += len(batch["events"])
        return batch

    def run(self, workflow_id: str, finish: bool) -> None:
        run_id = self.write(decide_start(None, workflow_id, START, "bench", int(time.time() * 1000), self.partition, self.offset))["run_id"]
        ex = self.state.executions[workflow_id]
        steps: list[tuple[str, dict[str, Any]]] = [
            ("RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 2}),
            ("RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 2, "commands": [("ScheduleActivityTask", ACTIVITY)]}),
            ("RecordActivityTaskStarted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1}),
            ("RespondActivityTaskCompleted", {"run_id": run_id, "scheduled_event_id": 5, "attempt": 1, "result": None}),
        ]
        if finish:
            steps += [
                ("RecordWorkflowTaskStarted", {"run_id": run_id, "scheduled_event_id": 8}),
                ("RespondWorkflowTaskCompleted", {"run_id": run_id, "scheduled_event_id": 8,
                                                  "commands": [("CompleteWorkflowExecution", {"result": None})]}),
            ]
        for kind, body in steps:
            self.write(decide(ex, kind, body, "bench", int(time.time() * 1000)))


def open_runs(state: PartitionState) -> dict[str, Any]:
    return {wid: ex for wid, ex in state.executions.items() if ex.status == "Running"}


def closed_ids(state: PartitionState) -> set[str]:
    return {wid for wid, ex in state.executions.items() if ex.status != "Running"}


async def _create_tables(dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await apply_ddl(conn, CHECKPOINT_DDL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    add_broker_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kadence-bench-recovery-") as data_dir:
        stack = LocalStack(Path(data_dir), partitions=1, broker_kind=args.broker)
        stack.start_broker()
        stack.start_postgres()
        print(describe_broker(stack))
        store = CheckpointStore(stack.postgres_dsn)
        try:
            asyncio.run(_create_tables(stack.postgres_dsn))
            ensure_topics(stack.settings, core_topics(stack.settings))
            writer = HistoryWriter(stack)
            i = 0
            while writer.events < args.events:
                writer.run(f"order-{i}", finish=i % 10 != 0)
                i += 1
            writer.producer.flush(60)
            print(f"partition 0: {writer.batches} batches, {writer.events} events, {i} runs ({len(writer.state.executions)} ids)")

            claimed = store.claim([0])[0]  # as the service does on an assignment: no checkpoint yet, and this claim's epoch
            began = time.perf_counter()
            recovered = recover_partitions(stack.settings, {0: claimed.state(0)})[0]
            from_zero = time.perf_counter() - began
            assert recovered.executions == writer.state.executions
            print(f"recovery from offset 0:      {from_zero:.2f} s ({writer.batches / from_zero:,.0f} batches/s)")

            began = time.perf_counter()
            snapshot = recovered.begin_snapshot()
            snapshot.encode_some(len(snapshot.pending))
            encoded = time.perf_counter() - began
            assert store.save(snapshot, None)
            saved = time.perf_counter() - began
            size = sum(len(row.state or b"") for row in snapshot.rows.values())
            print(f"first checkpoint:            {len(snapshot.rows):,} rows, {size / 1e6:.1f} MB, encode {encoded:.2f} s, "
                  f"encode and store {saved:.2f} s")

            for j in range(1000 // 7 + 1):
                writer.run(f"later-{j}", finish=True)
            writer.producer.flush(60)
            began = time.perf_counter()
            claimed = store.claim([0])[0]
            after = recover_partitions(stack.settings, {0: claimed.state(0)}, store.load_runs)[0]
            from_checkpoint = time.perf_counter() - began
            later = {f"later-{j}" for j in range(1000 // 7 + 1)}
            assert open_runs(after) == {} and closed_ids(after) == later, "only the runs the batches after it name"
            print(f"recovery from the checkpoint: {from_checkpoint:.2f} s (claim, then ~1,000 batches)")
        finally:
            store.close()
            stack.stop()


if __name__ == "__main__":
    main()
