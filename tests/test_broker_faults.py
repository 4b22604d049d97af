"""Broker faults against the real broker (Apache Kafka): a crash (SIGKILL, then a start on the same
log dir) and a freeze (SIGSTOP for 10 s, then SIGCONT) while 200 workflows with activities,
timers and signals are in flight; and the freeze again with every librdkafka producer's delivery
timeout (message.timeout.ms) at 2 s, so records time out while the broker is away (what a
longer outage does with the 5-minute default). Every workflow completes once with its result,
the audit finds nothing wrong, and every service resumes by itself: the same processes, not
ready while the broker is away, ready again after.

Each test runs a stack of its own, since it breaks the broker. Run with -s to see the recovery
times (also in the assertion message on failure).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import shutil
import time
from pathlib import Path

import pytest
from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.metadata import MetadataRequest
from confluent_kafka import KafkaError, Producer, TopicPartition
from prometheus_client import REGISTRY

from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.ops.audit import audit_history
from kadence.protocol import topics
from kadence.protocol.codec import command_codec
from kadence.protocol.kafka import AsyncProducer, _survive_closed_aiokafka_connections, read_to_end
from kadence.worker import Worker
from services.history.checkpoint import CheckpointStore
from services.history.service import HistoryService
from tests.broker_load import TIMER_SECONDS, Fault, assert_each_completed_once, logging_to, run_through, stack_of_its_own
from tests.conftest import local_stack, workflow_id_on
from tests.machine_steps import START
from tests.workflows import SignalOrTimerWorkflow, echo

# Dead for a second, then started: it is away about 20 s all the same, since the restarted node
# waits out its old registration (broker.session.timeout.ms, 15 s) before it serves. (It was 3 s,
# which only added to that.)
KILLED_FOR_SECONDS = 1.0
PAUSED_FOR_SECONDS = 10.0
SHORT_DELIVERY_TIMEOUT_MS = 2000  # pause-past-delivery-timeout: records wait 2 s for the broker, it is away for 10
# Every wait has its own bound; this one catches a wait without (a worker that cannot stop,
# say), so the test fails with its logs instead of hanging until pytest's timeout.
TEST_DEADLINE_S = 180.0


async def kill_and_restart(stack: LocalStack) -> float:
    """SIGKILL the broker, leave it dead a second, start it on the same port and log dir (it
    answers some 20 s later)."""
    assert stack.broker is not None
    await asyncio.to_thread(stack.broker.kill)
    await asyncio.sleep(KILLED_FOR_SECONDS)
    await asyncio.to_thread(stack.broker.start)
    return time.monotonic()


async def pause_and_resume(stack: LocalStack) -> float:
    """SIGSTOP the broker for 10 s (connections stay open, nothing answers), then SIGCONT."""
    assert stack.broker is not None
    stack.broker.pause()
    try:
        await asyncio.sleep(PAUSED_FOR_SECONDS)
    finally:
        stack.broker.resume()
    return time.monotonic()


FAULTS: dict[str, Fault] = {
    "kill": kill_and_restart,
    "pause": pause_and_resume,
    "pause-past-delivery-timeout": pause_and_resume,
}
# The environment of the stack's processes and of the test's client and worker, per fault.
FAULT_ENV = {"pause-past-delivery-timeout": {"KADENCE_KAFKA_MESSAGE_TIMEOUT_MS": str(SHORT_DELIVERY_TIMEOUT_MS)}}


@pytest.mark.kafka_only
@pytest.mark.parametrize("fault", list(FAULTS))
async def test_workflows_in_flight_complete_once_and_services_resume_after_a_broker_fault(
    fault: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    for key, value in FAULT_ENV.get(fault, {}).items():  # before the stack starts: its services inherit them
        monkeypatch.setenv(key, value)
    with stack_of_its_own(monkeypatch, tmp_path) as stack:
        try:
            async with asyncio.timeout(TEST_DEADLINE_S):
                await _run_through_a_fault(stack, fault)
        except TimeoutError:
            pytest.fail(f"the broker {fault} test did not end within {TEST_DEADLINE_S:.0f} s; see the logs in {tmp_path / 'logs'}")
    gc.collect()  # a failed future nobody read is logged by asyncio as it is collected
    unread = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and "never retrieved" in r.getMessage()]
    assert unread == [], "a record the broker did not take was left unread: asyncio logged it as an ERROR"


async def _run_through_a_fault(stack: LocalStack, fault: str) -> None:
    retried_before = REGISTRY.get_sample_value("kadence_produce_retried_total") or 0.0
    run = await run_through(stack, f"broker {fault}", FAULTS[fault])
    summary = run.summary()
    print(f"\n{summary}\nreadiness changes (seconds from the broker coming back):\n{run.readiness.describe(run.back_at)}")

    if fault in FAULT_ENV:  # the client's and the worker's records did time out, and went again
        retried = (REGISTRY.get_sample_value("kadence_produce_retried_total") or 0.0) - retried_before
        assert retried > 0, f"no record timed out while the broker was away; {summary}"
    assert run.readiness.went_unready(run.fault_at) == set(run.processes), (
        f"every service must say it is not ready while the broker is away; {summary}"
    )
    await assert_each_completed_once(stack, run, summary)


async def test_a_request_on_a_connection_the_broker_closed_is_a_connection_error_aiokafka_retries() -> None:
    """Matching (faust, aiokafka) on uvloop, when the broker dies under an open connection: the
    write raises RuntimeError, not the OSError aiokafka 0.14 catches, and its group coordination
    or metadata task died (faust crashed, or its consumer stalled for good). Kadence turns it into
    the KafkaConnectionError that aiokafka marks the connection broken for and retries."""
    _survive_closed_aiokafka_connections()
    server = await asyncio.start_server(lambda reader, writer: writer.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        connection = AIOKafkaConnection("127.0.0.1", port)
        connection._reader, connection._writer = await asyncio.open_connection("127.0.0.1", port)
        connection._read_task = asyncio.ensure_future(asyncio.sleep(3600))
        connection._versions = {MetadataRequest.API_KEY: (0, 12)}
        connection._writer.transport.close()  # the broker went away; aiokafka has not noticed yet
        await asyncio.sleep(0.01)
        with pytest.raises(RuntimeError, match="handler is closed"):  # what uvloop raises (the standard loop does not)
            connection._writer.write(b"x")
        with pytest.raises(KafkaConnectionError, match="broken"):
            connection.send(MetadataRequest([]))
        assert connection._writer is None, "the connection is closed, so aiokafka connects anew"
    finally:
        server.close()
        await server.wait_closed()


async def test_a_producer_that_hits_a_fatal_error_is_replaced_and_its_records_go_out_on_the_new_one(stack: LocalStack) -> None:
    """librdkafka raises a fatal error when the idempotent producer can no longer keep its
    guarantees (the broker lost its state, say); that instance never produces again. Here one is
    injected: the records the old producer still held are purged and, produced until delivered,
    go out on the replacement, as does everything produced after."""
    producer = AsyncProducer(stack.settings)
    try:
        retried_before = REGISTRY.get_sample_value("kadence_produce_retried_total") or 0.0
        before = [producer.produce(topics.POLLERS, b"before", b"fatal-test", until_delivered=True) for _ in range(200)]
        replaced = producer._producer
        producer._on_error(KafkaError(KafkaError._FATAL, "injected by the test", fatal=True))
        after = [producer.produce(topics.POLLERS, b"after", b"fatal-test", until_delivered=True) for _ in range(200)]
        delivered = await asyncio.wait_for(asyncio.gather(*before, *after), 30)
        assert producer._producer is not replaced
        assert all(msg.error() is None and msg.offset() >= 0 for msg in delivered)
        retried = (REGISTRY.get_sample_value("kadence_produce_retried_total") or 0.0) - retried_before
        print(f"\n{retried:.0f} of 400 records produced again on the new producer")
    finally:
        producer.close()


@pytest.mark.kafka_only
async def test_a_history_service_whose_producer_hits_a_fatal_error_recovers_its_partitions_in_place(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    """The history service's batches may or may not be in the log after a fatal producer error: it
    replaces the producer, recovers its partitions from the log and reads their commands again
    from just past the last one the log holds, without a restart. Every workflow completes once."""
    with local_stack(services=("matching", "timer", "visibility")) as stack, logging_to(tmp_path / "logs" / "test-process.log"):
        for key, value in stack.kadence_env.items():
            monkeypatch.setenv(key, value)
        history = HistoryService(stack.settings, CheckpointStore(stack.postgres_dsn), checkpoint_interval_s=1.0)
        stop = asyncio.Event()
        serving = asyncio.create_task(history.run(stop))
        client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
        worker = Worker(client, task_queue="fatal-history", workflows=[SignalOrTimerWorkflow], activities=[echo])
        working = asyncio.create_task(worker.run())
        try:
            async with asyncio.timeout(120):
                await worker.ready.wait()
                handles = await asyncio.gather(*(
                    client.start_workflow(SignalOrTimerWorkflow.run, args=[f"w{i}", TIMER_SECONDS], id=f"fatal-history-{i}",
                                          task_queue="fatal-history")
                    for i in range(100)
                ))
                replaced = history.producer
                history._on_producer_error(KafkaError(KafkaError._FATAL, "injected by the test", fatal=True))
                results = await asyncio.gather(*(handle.result() for handle in handles))
                assert history.producer is not replaced
                assert results == [f"w{i} after timer" for i in range(100)]
                await worker.shutdown()
                await working
        finally:
            working.cancel()
            stop.set()
            await asyncio.gather(working, serving, return_exceptions=True)
            await client.close()
            shutil.copytree(stack.data_dir / "logs", tmp_path / "logs", dirs_exist_ok=True)
        report = await asyncio.to_thread(audit_history, stack.settings)
        assert report.violations == []
        for handle in handles:
            assert [key for key in report.runs if key[0] == handle.id] == [(handle.id, handle.result_run_id)]
            kinds = report.event_types(handle.id, handle.result_run_id or "")
            assert kinds.count("ActivityTaskCompleted") == 2 and kinds.count("TimerFired") == 1, kinds
        assert "event=history_recovered_in_place" in (tmp_path / "logs" / "test-process.log").read_text()


@pytest.mark.kafka_only
async def test_a_partition_assigned_again_is_recovered_only_after_the_batches_this_instance_still_holds() -> None:
    """A revoke's flush gives up after 10 s while the broker is away and leaves the batches in the
    producer. When the partitions come back, recovery must read the log only once they are in it:
    one that read it before decided their commands again, and the broker kill test saw a run
    whose log kept the first decisions while the service went on from the second, every batch
    after skipped as a repeat. Here a long linger holds the batches of a start and a signal as the
    absent broker did: the partition recovered again resumes past both commands, each recorded by
    a record of its own (one record per command: a command decided again writes the same bounds)."""
    with local_stack(services=()) as stack:
        checkpoints = CheckpointStore(stack.postgres_dsn)
        history = HistoryService(dataclasses.replace(stack.settings, linger_ms=60_000), checkpoints, 3600.0)
        await history._create_tables()
        partition = 0
        workflow_id = workflow_id_on(partition, stack.partitions, "held")
        assigned = [TopicPartition(topics.COMMANDS, partition)]
        try:
            history._on_assign(history.consumer, assigned)
            start = {"workflow_id": workflow_id, "identity": "test", "command": ("StartWorkflowExecution", START)}
            signal = {"workflow_id": workflow_id, "identity": "test", "command": ("SignalWorkflowExecution", {
                "run_id": "", "signal_name": "go", "input": [], "request_id": "signal-1"})}
            producer = Producer({"bootstrap.servers": stack.bootstrap_servers})
            for command in (start, signal):
                producer.produce(topics.COMMANDS, command_codec().encode(command), workflow_id.encode(), partition=partition)
            producer.flush(10)
            messages = []
            while len(messages) < 2:  # the consumer also reports the partition's end (enable.partition.eof): not a command
                messages += [m for m in await asyncio.to_thread(history.consumer.consume, 2, 10.0) if m.error() is None]
            for msg in messages:
                history.handle(msg, history.commands.decode(msg.value(), msg.headers()))
            assert len(history.producer) > 0, "the batches are held in the producer, as while the broker is away"
            history._on_assign(history.consumer, assigned)  # as after a revoke whose flush timed out
            assert assigned[0].offset == messages[-1].offset() + 1, "the recovered partition would decide the commands again"
            batches = [history.batches.decode(m.value(), m.headers())
                       for m in read_to_end(stack.settings, topics.HISTORY, {partition: 0})]
            assert [(b["workflow_id"], b["source_offset"]) for b in batches] == [(workflow_id, m.offset()) for m in messages]
        finally:
            history.consumer.close()
            history.producer.flush(10)
            checkpoints.close()
