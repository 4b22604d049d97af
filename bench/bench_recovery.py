"""Recovery time of one history partition: from offset 0, and from a checkpoint.

    python -m bench.bench_recovery --events 100000 [--broker kafka|tansu]

Writes real histories (built with the history state machine: start, workflow tasks, one
activity, completion; a tenth of the runs left open) to a one-partition kadence.history on a
local broker (--broker kafka|tansu), then times the history service's recovery of that partition from offset 0, the
checkpoint's encode and decode, and recovery from that checkpoint with 1,000 more batches after it.
The checkpoint holds the open runs; closed runs live in their own table, not in memory.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from bench.local import add_broker_option, describe_broker
from kadence.dev.local_stack import LocalStack
from kadence.protocol import topics
from kadence.protocol.codec import history_batch_codec
from kadence.protocol.kafka import core_topics, ensure_topics
from services.history.checkpoint import decode_state, encode_state
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000)
    add_broker_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kadence-bench-recovery-") as data_dir:
        stack = LocalStack(Path(data_dir), partitions=1, broker_kind=args.broker)
        stack.start_broker()
        print(describe_broker(stack))
        try:
            ensure_topics(stack.settings, core_topics(stack.settings))
            writer = HistoryWriter(stack)
            i = 0
            while writer.events < args.events:
                writer.run(f"order-{i}", finish=i % 10 != 0)
                i += 1
            writer.producer.flush(60)
            print(f"partition 0: {writer.batches} batches, {writer.events} events, {i} runs ({len(writer.state.executions)} ids)")

            began = time.perf_counter()
            recovered = recover_partitions(stack.settings, {0: PartitionState(0)})[0]
            from_zero = time.perf_counter() - began
            assert recovered.executions == writer.state.executions
            print(f"recovery from offset 0:      {from_zero:.2f} s ({writer.batches / from_zero:,.0f} batches/s)")

            began = time.perf_counter()
            saved = encode_state(recovered)
            encoded = time.perf_counter() - began
            began = time.perf_counter()
            restored = decode_state(0, saved, recovered.resume_offset - 1, history_offset=recovered.history_offset)
            decoded = time.perf_counter() - began
            print(f"checkpoint:                  {len(saved) / 1e6:.1f} MB, encode {encoded:.2f} s, decode+restore {decoded:.2f} s")

            for j in range(1000 // 7 + 1):
                writer.run(f"later-{j}", finish=True)
            writer.producer.flush(60)
            began = time.perf_counter()
            after = recover_partitions(stack.settings, {0: restored})[0]
            from_checkpoint = time.perf_counter() - began + decoded
            later = {f"later-{j}" for j in range(1000 // 7 + 1)}
            assert open_runs(after) == open_runs(writer.state) and closed_ids(after) == later
            print(f"recovery from the checkpoint: {from_checkpoint:.2f} s (decode+restore, then ~1,000 batches)")
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
