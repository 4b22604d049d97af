"""The Nexus side of a worker (as temporalio.worker's _NexusWorker): polls the task queue's nexus
topic and runs each operation's start in its service handler, through nexusrpc's Handler, and
answers history with the result, the asynchronous operation's token, or the failure
(docs/decisions/0008-nexus.md).

A task's offset is stored as soon as its handler starts: a worker that dies costs the attempt in
flight, which history retries at its request deadline, and a rebalance hands no running attempt
to a second worker. A handler that completed and whose answer was lost runs again: handlers must
be idempotent, as Temporal asks (a workflow-run operation starts its workflow once, by its request id)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import nexusrpc
from confluent_kafka import Message
from nexusrpc import HandlerError, LazyValue, OperationError, OperationErrorState
from nexusrpc.handler import (
    Handler,
    OperationTaskCancellation,
    StartOperationContext,
    StartOperationResultAsync,
    StartOperationResultSync,
)

from kadence.api.common.v1 import Payload
from kadence.exceptions import ApplicationError
from kadence.nexus._operation_context import Info, _current, _Operation
from kadence.protocol import topics
from kadence.protocol.kafka import consume_batches, make_consumer, store_offsets
from kadence.protocol.names import CommandType
from kadence.protocol.records import NexusTask, RespondNexusTaskCompleted, RespondNexusTaskFailed, Task
from kadence.protocol.records import Payload as PayloadRecord
from kadence.worker._context import WorkerContext
from kadence.worker._workflow_instance import failure_record, payload_record

log = logging.getLogger("kadence.worker")


def nexus_task(task: Task) -> NexusTask:
    match task["task"]:
        case ("NexusTask", body):
            return body
    raise AssertionError(f"{task['task'][0]} is no NexusTask")


class _PayloadSerializer:
    """The operation's input, as nexusrpc's LazyValue reads it: the task's payload through the client's converter."""

    def __init__(self, worker: NexusWorker, payload: PayloadRecord | None) -> None:
        self._worker = worker
        self._payload = payload

    async def serialize(self, value: Any) -> nexusrpc.Content:
        raise NotImplementedError("a Nexus task's input is only read")

    async def deserialize(self, content: nexusrpc.Content, as_type: type[Any] | None = None) -> Any:
        if self._payload is None:
            return None
        return self._worker.context.client.data_converter.payload_converter.from_payload(Payload.of(self._payload), as_type)


class _TaskCancellation(OperationTaskCancellation):
    """The task's cancellation (the worker shutting down), as a handler may check it."""

    def __init__(self, shutting_down: asyncio.Event) -> None:
        self._shutting_down = shutting_down

    def is_cancelled(self) -> bool:
        return self._shutting_down.is_set()

    def cancellation_reason(self) -> str | None:
        return "the worker is shutting down" if self._shutting_down.is_set() else None

    def wait_until_cancelled_sync(self, timeout: float | None = None) -> bool:
        raise NotImplementedError("wait for a Nexus task's cancellation with `await wait_until_cancelled()` on the worker's loop")

    async def wait_until_cancelled(self) -> None:
        await self._shutting_down.wait()


class NexusWorker:
    def __init__(self, context: WorkerContext, service_handlers: Sequence[Any], max_concurrent: int) -> None:
        self.context = context
        self._handler = Handler(list(service_handlers)) if service_handlers else None
        self._slots = asyncio.Semaphore(max_concurrent)
        self._running: set[asyncio.Task[None]] = set()
        self.services = sorted(type(handler).__name__ for handler in service_handlers)

    async def poll(self) -> None:
        settings, task_queue = self.context.client.settings, self.context.task_queue
        consumer = make_consumer(settings, topics.worker_group(task_queue, "nexus"))
        await self.context.assignment.subscribe(consumer, "nexus")
        try:
            async for messages in consume_batches(consumer, self.context.shutting_down):
                for msg in messages:
                    await self._slots.acquire()
                    job = asyncio.create_task(self._run(msg))
                    self._running.add(job)
                    job.add_done_callback(self._finished)
                store_offsets(consumer, messages)
            if self._running:
                await asyncio.wait(self._running)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, consumer.close)

    def _finished(self, job: asyncio.Task[None]) -> None:
        self._running.discard(job)
        self._slots.release()
        if not job.cancelled() and job.exception() is not None:
            log.error("event=nexus_task_lost task_queue=%s error=%r", self.context.task_queue, str(job.exception()))

    async def _run(self, msg: Message) -> None:
        decoded = await self.context.decode(msg)
        if decoded is None:
            return
        task, problem = decoded
        body = nexus_task(task)
        answer: tuple[str, RespondNexusTaskCompleted | RespondNexusTaskFailed]
        if problem is not None:
            answer = self._failed(task, body, problem, retryable=False)
        else:
            answer = await self._start_operation(task, body)
        await self.context.send(task["workflow_id"], *answer)

    async def _start_operation(self, task: Task, body: NexusTask) -> tuple[str, RespondNexusTaskCompleted | RespondNexusTaskFailed]:
        """The handler's answer to the attempt, as the command that tells history."""
        if self._handler is None:  # registered with no handlers: nothing here serves the endpoint
            error = HandlerError(f"task queue {self.context.task_queue!r} has no Nexus service handlers",
                                 type=nexusrpc.HandlerErrorType.NOT_FOUND)
            return self._failed(task, body, error, retryable=True)
        ctx = StartOperationContext(
            service=body["service"], operation=body["operation"], headers=body["nexus_header"],
            task_cancellation=_TaskCancellation(self.context.shutting_down), request_id=body["request_id"],
            request_deadline=datetime.fromtimestamp(body["request_deadline_ms"] / 1000, UTC),
        )
        operation = _Operation(
            self.context.client, Info(self.context.task_queue),
            {"workflow_id": task["workflow_id"], "run_id": task["run_id"], "scheduled_event_id": body["scheduled_event_id"],
             "operation_token": ""},
            self.context.shutting_down,
        )
        reset = _current.set(operation)
        try:
            input = LazyValue(serializer=_PayloadSerializer(self, body["input"]), headers={}, stream=None)
            result = await self._handler.start_operation(ctx, input)
        except OperationError as exc:
            return self._failed(task, body, exc, retryable=False, canceled=exc.state == OperationErrorState.CANCELED)
        except HandlerError as exc:
            self._log_failure(task, body, exc)
            return self._failed(task, body, exc, retryable=exc.retryable)
        except Exception as exc:  # a handler's failure is data: it goes back to history
            self._log_failure(task, body, exc)
            return self._failed(task, body, exc, retryable=not (isinstance(exc, ApplicationError) and exc.non_retryable))
        finally:
            _current.reset(reset)
        return self._completed(task, body, result)

    def _log_failure(self, task: Task, body: NexusTask, exc: BaseException) -> None:
        log.warning("event=nexus_operation_failed workflow_id=%s run_id=%s service=%s operation=%s attempt=%d error=%r",
                    task["workflow_id"], task["run_id"], body["service"], body["operation"], body["attempt"], str(exc))

    def _completed(
        self, task: Task, body: NexusTask, result: StartOperationResultSync[Any] | StartOperationResultAsync,
    ) -> tuple[str, RespondNexusTaskCompleted]:
        answer: RespondNexusTaskCompleted = {
            "run_id": task["run_id"], "scheduled_event_id": body["scheduled_event_id"], "attempt": body["attempt"], "result": None,
        }
        if isinstance(result, StartOperationResultAsync):
            answer["operation_token"] = result.token
        else:
            answer["result"] = payload_record(self.context.client.data_converter.payload_converter.to_payload(result.value))
        return CommandType.RespondNexusTaskCompleted, answer

    def _failed(
        self, task: Task, body: NexusTask, exc: BaseException, *, retryable: bool, canceled: bool = False,
    ) -> tuple[str, RespondNexusTaskFailed]:
        failure = failure_record(self.context.client.data_converter.to_failure(exc))
        return CommandType.RespondNexusTaskFailed, {
            "run_id": task["run_id"], "scheduled_event_id": body["scheduled_event_id"], "attempt": body["attempt"], "failure": failure,
            "retryable": retryable, "canceled": canceled,
        }
