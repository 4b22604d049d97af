"""The activity side of a worker (as temporalio.worker's _ActivityWorker): polls the task queue's
activity topic, asks history to start each attempt and runs it (async ones on the loop, sync ones
in the activity executor), and reports its outcome; cancels attempts the workflow cancels, and
those whose start history refuses. An attempt read for the first time runs once its start is in
the log; one that may be a redelivery runs only once history accepted its start."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import dataclasses
import functools
import inspect
import logging
import pickle
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message

from kadence import activity as activity_module
from kadence.api.common.v1 import Payload
from kadence.common import RetryPolicy
from kadence.converter import callable_arg_types
from kadence.exceptions import ApplicationError, ApplicationErrorCategory, CancelledError
from kadence.protocol import topics, tracing
from kadence.protocol.codec import command_codec, writes_field
from kadence.protocol.kafka import consume_batches, make_consumer, store_offsets
from kadence.protocol.names import ACTIVITY_KEY_PREFIX, CommandType, EffectType
from kadence.protocol.read_model import CommandOutcome
from kadence.protocol.records import Failure as FailureRecord
from kadence.protocol.records import Payload as PayloadRecord
from kadence.protocol.records import (
    RecordActivityTaskStarted,
    RespondActivityTaskCanceled,
    RespondActivityTaskCompleted,
    RespondActivityTaskFailed,
    ScheduleActivityTask,
    Task,
)
from kadence.protocol.task_token import TaskToken
from kadence.worker._context import WorkerContext, activity_cancellation, activity_task
from kadence.worker._heartbeats import Heartbeater, ignore_heartbeat
from kadence.worker._interceptor import ActivityInboundInterceptor, ActivityOutboundInterceptor, ExecuteActivityInput, Interceptor
from kadence.worker._shared_state import ProcessHeartbeat, SharedStateManager, run_sync_activity
from kadence.worker._workflow_instance import failure_record, payload_record

log = logging.getLogger("kadence.worker")

# How many attempts a worker remembers asking to start: a later copy of one of their tasks is dropped.
REMEMBERED_STARTS = 10_000

# A start that reaches the log this long after its task was dispatched (the broker away, a backlog)
# may come after history timed the task out or dispatched a copy of it (10 s after, by default):
# its work runs only once history accepted it (docs/architecture.md, "Exactly once").
PROMPT_START_S = 5.0


def dispatched_ms(msg: Message) -> float:
    """When history dispatched the task `msg` holds (the record's timestamp, ms). A record without
    a timestamp counts as dispatched long ago: its work waits for the answer."""
    kind, timestamp_ms = msg.timestamp()
    return float("-inf") if kind == TIMESTAMP_NOT_AVAILABLE or timestamp_ms <= 0 else float(timestamp_ms)


def run_by_ms(dispatched: float, task_timeout: timedelta | None = None) -> float:
    """By when (wall clock, ms) the start of a task history `dispatched` must be in the log for its
    work to run on delivery alone: PROMPT_START_S after, and for the eager attempts of a workflow
    task's completion within half that task's timeout too (after it, history may time it out)."""
    limit_s = PROMPT_START_S if task_timeout is None else min(PROMPT_START_S, task_timeout.total_seconds() / 2)
    return dispatched + limit_s * 1000

AttemptKey = tuple[str, int, int]  # run_id, scheduled_event_id, attempt

# Why an attempt whose start history refused is cancelled: for history, it does not run (Temporal's
# NotFound, which temporalio's heartbeat hears for an attempt that is no longer current).
REFUSED = activity_module.ActivityCancellationDetails(not_found=True)

# An attempt's report to history: the command that records how it ended.
ActivityReport = (
    tuple[Literal["RespondActivityTaskCompleted"], RespondActivityTaskCompleted]
    | tuple[Literal["RespondActivityTaskFailed"], RespondActivityTaskFailed]
    | tuple[Literal["RespondActivityTaskCanceled"], RespondActivityTaskCanceled]
)


@dataclasses.dataclass
class _Attempt:
    """An attempt this worker runs: cancelled when the workflow asks, or when history refuses its start."""

    heartbeater: Heartbeater
    is_async: bool
    eager: bool = False  # started by the workflow task completion that scheduled it
    job: asyncio.Task[None] | None = None
    refused: bool = False

    def cancel(self, details: activity_module.ActivityCancellationDetails) -> None:
        """An async activity is cancelled where it awaits, a sync one raises CancelledError at its
        next heartbeat (as temporalio)."""
        self.heartbeater.request_cancel(details)
        if self.is_async and self.job is not None:
            self.job.cancel()


@dataclasses.dataclass
class EagerStarts:
    """The eager attempts a workflow task's completion starts (their slots claimed), and the
    answer to the completion's eager_request_id: history starts them all with it, or refuses."""

    tasks: list[Task]
    request_id: str
    answer: asyncio.Future[CommandOutcome]


class ActivityWorker:
    def __init__(
        self,
        context: WorkerContext,
        activities: Sequence[Callable[..., Any]],
        interceptors: Sequence[Interceptor],
        executor: concurrent.futures.Executor | None,
        shared_state_manager: SharedStateManager | None,
        max_concurrent_activities: int,
        graceful_shutdown_timeout: timedelta,
        max_task_queue_activities_per_second: float | None,
        disable_eager_activity_execution: bool,
    ) -> None:
        self._context = context
        self.client = context.client
        self.task_queue = context.task_queue
        self._interceptors = interceptors
        # The callable registered is the one called: a bound method keeps its object (as temporalio).
        self._activities = {
            d.name: dataclasses.replace(d, fn=fn) for d, fn in ((activity_module.definition(fn), fn) for fn in activities)
        }
        _check_sync_activities(self._activities.values(), executor, shared_state_manager)
        if executor is None and any(not d.is_async for d in self._activities.values()):
            executor = concurrent.futures.ThreadPoolExecutor(max_concurrent_activities, thread_name_prefix="kadence-activity")
        self._executor = executor
        self._shared_state_manager = shared_state_manager
        self._max_concurrent_activities = max_concurrent_activities
        self._slots = _Slots(max_concurrent_activities, context if self._activities else None)
        self._running: set[asyncio.Future[Any]] = set()  # the attempts running
        self._graceful_shutdown_timeout = graceful_shutdown_timeout
        # A build pinned to a Command version without eager_request_id runs every attempt from the queue.
        self._eager = (not disable_eager_activity_execution and max_task_queue_activities_per_second is None
                       and writes_field(command_codec(), CommandType.RespondWorkflowTaskCompleted, "eager_request_id"))
        self._attempts: dict[AttemptKey, _Attempt] = {}
        self._asked: collections.OrderedDict[AttemptKey, None] = collections.OrderedDict()  # starts sent, the latest last
        self._rate = _QueueShareRate(max_task_queue_activities_per_second)
        self._worker_shutdown = activity_module._Event()  # what activity.is_worker_shutdown() and the like read

    @property
    def types(self) -> list[str]:
        """The activity types registered."""
        return sorted(self._activities)

    async def poll(self) -> None:
        consumer = make_consumer(self.client.settings, topics.worker_group(self.task_queue, "activity"))
        await self._context.assignment.subscribe(consumer, "activity")
        try:
            async for messages in consume_batches(consumer, self._context.shutting_down, max_messages=self._max_concurrent_activities):
                started = []
                for msg in messages:
                    try:
                        started += await self._start_activity_task(msg)
                    except Exception as exc:  # a bug must not stop the poller: history dispatches the attempt again
                        log.exception("event=activity_task_not_started topic=%s partition=%d offset=%d error=%r",
                                      msg.topic(), msg.partition(), msg.offset(), str(exc))
                for outcome in await asyncio.gather(*started, return_exceptions=True):
                    if isinstance(outcome, Exception):
                        log.error("event=activity_start_not_sent task_queue=%s error=%r", self.task_queue, str(outcome))
                store_offsets(consumer, messages)
            self._worker_shutdown.set()  # before the grace period, as temporalio: activities may wind down in it
            await self._drain_activities(self._running)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, consumer.close)

    async def _start_activity_task(self, msg: Message) -> list[asyncio.Future[Message]]:
        """Ask history to start the attempt the record holds, and run it (a record whose payloads
        cannot be decoded runs as an attempt that fails with the reason)."""
        decoded = await self._context.decode(msg)
        if decoded is None:
            return []
        task, problem = decoded
        if task["task"][0] == EffectType.ActivityCancellation:
            self._cancel_attempt(task)
            return []
        redelivered = self._context.assignment.may_be_redelivered("activity", msg, task)
        with tracing.hop("worker ActivityTask", msg.headers(), timestamp_ms=msg.timestamp()[1], attributes={
            "messaging.destination.name": msg.topic(), "messaging.kafka.destination.partition": msg.partition(),
            "messaging.kafka.message.offset": msg.offset(), "kadence.workflow_id": task["workflow_id"],
        }):  # the attempt runs in a task made within: its start and outcome carry this span's traceparent
            return await self._start_attempt(task, problem, accepted_first=redelivered, run_by=run_by_ms(dispatched_ms(msg)))

    def claim_eager_slot(self, workflow_id: str, activity: ScheduleActivityTask, scheduled_event_id: int) -> bool:
        """Whether this worker runs an activity that a workflow task it completes schedules itself
        (Temporal's eager activity execution), taking a slot for it if so: eager execution is on,
        the activity is for this worker's queue and registered here, a slot is free now, and the
        attempt's cancellation would come to this worker (it owns the activity topic's partition
        for the foreseen id), and the read model that answers its start is started. The attempt
        `run_eagerly` starts holds the slot, or `drop_eager_starts` gives it back."""
        return (
            self._eager and activity["task_queue"] in ("", self.task_queue) and activity["activity_type"] in self._activities
            and not self._context.shutting_down.is_set() and self.client.read_model_started
            and self._context.assignment.owns("activity", topics.activity_task_key(workflow_id, scheduled_event_id))
            and self._slots.try_acquire()
        )

    def eager_starts(self, tasks: list[Task]) -> EagerStarts | None:
        """The starts of the eager attempts a workflow task's completion schedules (their slots
        claimed), which the completion carries under one request id (its eager_request_id)."""
        if not tasks:
            return None
        request_id = f"{tasks[0]['run_id']}/eager/{uuid.uuid4()}"
        return EagerStarts(tasks, request_id, self.client.expect_outcome_now(request_id))

    def drop_eager_starts(self, starts: EagerStarts) -> None:
        """Eager attempts that will not run (their workflow task's completion was not sent): their
        slots back, their starts' answer not waited for."""
        self.client.forget_outcome(starts.request_id, starts.answer)
        for _ in starts.tasks:
            self._slots.release()

    def run_eagerly(self, starts: EagerStarts, completion: asyncio.Future[Message], *, accepted_first: bool, run_by: float) -> None:
        """Run the eager attempts once the completion that starts them is delivered, as attempts
        from the task queue run once their starts are (`accepted_first`, or delivered after
        `run_by`: once history accepted them)."""
        for task in starts.tasks:
            with tracing.child("worker eager ActivityTask", {"kadence.workflow_id": task["workflow_id"]}):
                self._run_started(task, starts.request_id, starts.answer, completion, None, eager=True,
                                  accepted_first=accepted_first, run_by=run_by)

    async def _start_attempt(
        self, task: Task, problem: Exception | None, *, accepted_first: bool, run_by: float,
    ) -> list[asyncio.Future[Message]]:
        """Ask history to start the attempt the task queue handed out, and run it: once its start is
        in the log, or once history accepted it where the record may be a redelivery, whose attempt
        may have run already (`accepted_first`), or where the start reached the log after `run_by`."""
        at = activity_task(task)
        key = (task["run_id"], at["scheduled_event_id"], at["attempt"])
        # A copy (a task produced again after a crash or rebalance): history would refuse its start.
        # Past its schedule-to-start deadline: its timeout fires instead.
        skipped = "duplicate" if key in self._asked else "expired" if 0 < at["schedule_to_start_deadline_ms"] < time.time() * 1000 else None
        if skipped:
            log.info("event=activity_task_%s workflow_id=%s run_id=%s activity_type=%s attempt=%d",
                     skipped, task["workflow_id"], task["run_id"], at["activity_type"], at["attempt"])
            return []
        await self._slots.acquire()
        try:
            await self._rate.wait(self._context.assignment.share("activity"))
            request_id = _start_request_id(task)
            answer = await self.client.expect_outcome(request_id)
            self._displace_eager_attempt(task, key)
            started = self._context.send(task["workflow_id"], *_start_command(task, request_id))
        except BaseException:
            self._slots.release()
            raise
        self._remember_asked(key)
        self._run_started(task, request_id, answer, started, problem, accepted_first=accepted_first, run_by=run_by)
        return [started]

    def _displace_eager_attempt(self, task: Task, key: AttemptKey) -> None:
        """A task from the queue for the key an eager attempt of this worker runs under: history
        dispatches no task for an eager attempt it started, so that one was foreseen at a shifted
        id (its refusal is on its way) and the key is another activity's. The eager attempt stops
        here and reports nothing: sent after this task's start, its report would count as this
        attempt's. One that already reported did so before this start, and was refused."""
        displaced = self._attempts.get(key)
        if displaced is None or not displaced.eager:
            return
        log.info("event=activity_eager_displaced workflow_id=%s run_id=%s scheduled_event_id=%d attempt=%d reason=%r",
                 task["workflow_id"], task["run_id"], key[1], key[2], "the task queue handed out another activity at its foreseen id")
        del self._attempts[key]
        displaced.refused = True
        displaced.heartbeater.close()
        displaced.cancel(REFUSED)

    def _run_started(
        self, task: Task, request_id: str, answer: asyncio.Future[CommandOutcome], started: asyncio.Future[Message],
        problem: Exception | None, *, eager: bool = False, accepted_first: bool, run_by: float,
    ) -> None:
        """Run an attempt whose start was sent, in the slot taken for it (`accepted_first`, or its
        start delivered after `run_by`: once its start is accepted); a start that could not be sent
        is answered by nobody, so its answer is not waited for."""
        at = activity_task(task)
        key = (task["run_id"], at["scheduled_event_id"], at["attempt"])
        started.add_done_callback(lambda sent: None if sent.cancelled() or sent.exception() is None
                                  else self.client.forget_outcome(request_id, answer))
        definition = self._activities.get(at["activity_type"])
        attempt = _Attempt(Heartbeater(self._context, task), definition is None or definition.is_async, eager)
        job = attempt.job = asyncio.create_task(self._run_activity(task, attempt, started, answer, accepted_first, run_by, problem))
        self._attempts[key] = attempt
        self._running.add(job)
        answer.add_done_callback(functools.partial(self._start_answered, task, attempt))

        def finished(job: asyncio.Task[None]) -> None:
            self._running.discard(job)
            self._slots.release()
            _log_lost_activity(job, task)

        job.add_done_callback(finished)

    def _remember_asked(self, key: AttemptKey) -> None:
        self._asked[key] = None
        if len(self._asked) > REMEMBERED_STARTS:
            self._asked.popitem(last=False)

    def _start_answered(self, task: Task, attempt: _Attempt, answer: asyncio.Future[CommandOutcome]) -> None:
        """History refused the attempt's start: the attempt is cancelled if it still runs, and
        reports nothing (a report it sent already is refused too, as the start was)."""
        if answer.cancelled() or answer.result().accepted:
            return
        outcome = answer.result()
        at = activity_task(task)
        running = self._attempts.get((task["run_id"], at["scheduled_event_id"], at["attempt"])) is attempt
        log.info("event=activity_start_refused workflow_id=%s run_id=%s activity_type=%s attempt=%d running=%s cause=%s reason=%r",
                 task["workflow_id"], task["run_id"], at["activity_type"], at["attempt"], running, outcome.cause, outcome.reason)
        attempt.refused = True
        if running:
            attempt.cancel(REFUSED)

    async def _drain_activities(self, running: set[asyncio.Future[Any]]) -> None:
        """On shutdown, give running activities the grace period, then cancel them (as temporalio does)."""
        if not running:
            return
        _, pending = await asyncio.wait(running, timeout=self._graceful_shutdown_timeout.total_seconds())
        for job in pending:
            job.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _cancel_attempt(self, task: Task) -> None:
        """The workflow asked to cancel this attempt (or its run closed)."""
        cancellation = activity_cancellation(task)
        attempt = self._attempts.get((task["run_id"], cancellation["scheduled_event_id"], cancellation["attempt"]))
        if attempt is not None:  # else finished already, or running elsewhere
            attempt.cancel(activity_module.ActivityCancellationDetails(cancel_requested=True))

    async def _run_activity(
        self, task: Task, attempt: _Attempt, started: asyncio.Future[Message], answer: asyncio.Future[CommandOutcome],
        accepted_first: bool, run_by: float, problem: Exception | None,
    ) -> None:
        at = activity_task(task)
        try:
            outcome = await self._attempt_outcome(task, attempt.heartbeater, started, answer, accepted_first, run_by, problem)
        finally:
            key = (task["run_id"], at["scheduled_event_id"], at["attempt"])
            if self._attempts.get(key) is attempt:  # else displaced by the attempt now under its key
                del self._attempts[key]
            attempt.heartbeater.close()
        if outcome is None or attempt.refused:  # completed later by task token, or its start was refused
            return
        await self._context.send(task["workflow_id"], *outcome)

    async def _attempt_outcome(
        self, task: Task, heartbeater: Heartbeater, started: asyncio.Future[Message], answer: asyncio.Future[CommandOutcome],
        accepted_first: bool, run_by: float, problem: Exception | None,
    ) -> ActivityReport | None:
        """The report on the attempt (its command), once it ran;
        None for one completed later, by task token, and for one that did not run (its start not
        sent, or, where it waits for the `answer` to its start, not accepted)."""
        at = activity_task(task)
        workflow_id, run_id = task["workflow_id"], task["run_id"]
        converter = self.client.data_converter
        metrics = _AttemptMetrics(self._context, task)
        # The start delivered first (a produce round trip): so it is in the log before anything
        # the attempt prompts elsewhere, say another process completing it by task token.
        if not await _delivered(started):
            log.warning("event=activity_start_not_sent workflow_id=%s run_id=%s activity_type=%s attempt=%d error=%r",
                        workflow_id, run_id, at["activity_type"], at["attempt"], str(started.exception()))
            # Not started: its retry timer dispatches it again (an eager one's completion, if it
            # landed after all, leaves it to its start-to-close timeout).
            return None
        late = not accepted_first and time.time() * 1000 > run_by
        if late:
            log.info("event=activity_start_late workflow_id=%s run_id=%s activity_type=%s attempt=%d consequence=%r",
                     workflow_id, run_id, at["activity_type"], at["attempt"],
                     "runs once history accepts its start: its task may have timed out or gone to another worker meanwhile")
        try:
            # Within: a cancellation or a shutdown while the start's answer is awaited is reported
            # (history refuses the report unless the start was this worker's).
            if (accepted_first or late) and not await _start_accepted(task, answer):
                return None
            if problem is not None:
                raise problem
            metrics.began()
            result = payload_record(converter.payload_converter.to_payload(await self._execute_activity(task, heartbeater)))
        except activity_module._CompleteAsyncError:  # completed later, by task token; its timeouts still run
            log.info("event=activity_completing_async workflow_id=%s run_id=%s activity_type=%s attempt=%d",
                     workflow_id, run_id, at["activity_type"], at["attempt"])
            return None
        except (asyncio.CancelledError, CancelledError) as exc:
            metrics.ended(cancelled=True)
            if heartbeater.cancel_requested:
                return _canceled(task)
            if isinstance(exc, CancelledError):
                return _failed(task, failure_record(converter.to_failure(exc)))
            # Report it, so the retry policy schedules the next attempt without waiting for a timeout.
            shutdown = ApplicationError("activity cancelled: the worker is shutting down", type="WorkerShutdown")
            return _failed(task, failure_record(converter.to_failure(shutdown)))
        except Exception as exc:  # an activity's failure is data: it goes back to history
            metrics.ended(failed=True)
            log.log(failure_log_level(exc), "event=activity_failed workflow_id=%s run_id=%s activity_type=%s attempt=%d error=%r",
                    workflow_id, run_id, at["activity_type"], at["attempt"], str(exc),
                    extra={"__temporal_error_identifier": "ActivityFailure"})  # temporalio's mark, which log filters match
            return _failed(task, failure_record(converter.to_failure(exc)))
        metrics.ended()
        return _completed(task, result)

    async def _execute_activity(self, task: Task, heartbeater: Heartbeater) -> Any:
        at = activity_task(task)
        retry_policy = at.get("retry_policy")
        standalone = task["workflow_id"].startswith(ACTIVITY_KEY_PREFIX)  # no workflow: its own run (decision 0007)
        info = activity_module.Info(
            activity_id=at["activity_id"], activity_type=at["activity_type"], attempt=at["attempt"],
            scheduled_time=_time(at["scheduled_time_ms"]), task_queue=at["task_queue"],
            workflow_id=None if standalone else task["workflow_id"], workflow_run_id=None if standalone else task["run_id"],
            workflow_type=None if standalone else at["workflow_type"], workflow_namespace=None if standalone else "default",
            activity_run_id=task["run_id"] if standalone else None,
            heartbeat_details=tuple(self.client.data_converter.payload_converter.from_payloads(at["heartbeat_details"])),
            task_token=TaskToken(task["workflow_id"], task["run_id"], at["scheduled_event_id"], at["attempt"], at["activity_id"]).encode(),
            current_attempt_scheduled_time=_time(at.get("current_attempt_scheduled_time_ms") or at["scheduled_time_ms"]),
            started_time=_time(int(time.time() * 1000) + at.get("clock_offset_ms", 0)),  # on the run's clock
            heartbeat_timeout=_timeout(at["heartbeat_timeout_ms"]), start_to_close_timeout=_timeout(at["start_to_close_timeout_ms"]),
            schedule_to_close_timeout=_timeout(at.get("schedule_to_close_timeout_ms", 0)),
            retry_policy=RetryPolicy.from_record(retry_policy) if retry_policy is not None else None,
        )
        context = contextvars.copy_context()
        context.run(activity_module._current_info.set, info)
        return await self.call(at["activity_type"], at["input"], context, at.get("header") or {}, heartbeater)

    async def call(
        self, activity_type: str, payloads: Sequence[Mapping[str, Any]], context: contextvars.Context,
        header: Mapping[str, Mapping[str, Any]], heartbeat: Heartbeater | None,
    ) -> Any:
        """Call the registered activity with its decoded arguments through the worker's interceptors
        (async ones on the loop, sync ones in the executor), in `context`, which holds its info;
        `heartbeat` None for a local activity, whose heartbeats are ignored. Its payloads: a task's
        records, or a local activity's from the payload converter."""
        definition = self._activities.get(activity_type)
        if definition is None:
            raise ApplicationError(
                f"activity type {activity_type!r} is not registered on this worker "
                f"(task queue {self.task_queue}; registered: {sorted(self._activities)})",
                type="NotFoundError",
            )
        arg_types = callable_arg_types(definition.fn)
        args = self.client.data_converter.payload_converter.from_payloads(payloads, arg_types)
        # As temporalio: a chain per attempt, the first interceptor outermost; activity.heartbeat()
        # and activity.info() go through the outbound chain init hands down.
        root = _ActivityInboundImpl(self, heartbeat)
        inbound: ActivityInboundInterceptor = root
        for interceptor in reversed(self._interceptors):
            inbound = interceptor.intercept_activity(inbound)
        inbound.init(_ActivityOutboundImpl(context[activity_module._current_info], heartbeat or ignore_heartbeat))
        activity_module._fill_context(
            context, info=root.outbound.info(), heartbeat=root.outbound.heartbeat,
            payload_converter=self.client.data_converter.payload_converter,
            metric_meter=self.client.runtime.metric_meter.with_additional_attributes(self._context.metric_attributes(activity_type=activity_type)),
            # A local activity's is never requested: it is stopped by cancelling its task.
            cancellation=heartbeat.cancellation if heartbeat is not None else activity_module._Cancellation(),
            worker_shutdown=self._worker_shutdown, client=self.client if definition.is_async else None,
            thread_cancel_shield=None,  # a sync attempt sees its cancellation at its next heartbeat, not raised in its thread
        )
        execution = ExecuteActivityInput(
            fn=definition.fn, args=args, executor=None if definition.is_async else self._executor,
            headers={name: Payload.of(payload) for name, payload in header.items()},
        )
        return await asyncio.create_task(inbound.execute_activity(execution), context=context)

    async def run_fn(self, input: ExecuteActivityInput, heartbeat: Heartbeater | None) -> Any:
        """The activity function itself, past the interceptors: async ones on the loop, sync ones in
        the executor with a copy of the context the interceptors ran in."""
        if inspect.iscoroutinefunction(input.fn):
            return await input.fn(*input.args)
        context = contextvars.copy_context()
        if isinstance(input.executor, concurrent.futures.ThreadPoolExecutor):
            return await asyncio.get_running_loop().run_in_executor(input.executor, context.run, input.fn, *input.args)
        return await self._call_in_process(input.fn, list(input.args), context, heartbeat)

    async def _call_in_process(
        self, fn: Callable[..., Any], args: list[Any], context: contextvars.Context, heartbeat: Heartbeater | None,
    ) -> Any:
        """A sync activity on an executor of other processes: the context cannot cross to them, so
        its info goes as an argument, its heartbeats come back over the shared state manager's queue
        and its cancellation goes there as a shared event."""
        manager = self._shared_state_manager
        assert manager is not None  # checked when the worker was made
        loop = asyncio.get_running_loop()
        info = context[activity_module._current_info]
        task_token = f"{info.workflow_run_id}/{info.activity_id}/{info.attempt}/{uuid.uuid4()}".encode()
        cancelled = await loop.run_in_executor(None, manager.new_event)
        if heartbeat is not None:
            relay = heartbeat.relay_from_thread
            await loop.run_in_executor(None, heartbeat.share_cancellation, cancelled)
        else:  # a local activity: heartbeats are ignored
            relay = ignore_heartbeat
        sender = await manager.register_heartbeater(task_token, relay)
        try:
            return await loop.run_in_executor(
                self._executor, run_sync_activity, info, ProcessHeartbeat(task_token, sender, cancelled), fn, *args,
            )
        finally:
            await manager.unregister_heartbeater(task_token)


class _ActivityInboundImpl(ActivityInboundInterceptor):
    """The innermost inbound interceptor of an attempt: runs the activity function."""

    def __init__(self, worker: ActivityWorker, heartbeat: Heartbeater | None) -> None:  # no next: the end of the chain
        self._worker = worker
        self._heartbeat = heartbeat
        self.outbound: ActivityOutboundInterceptor

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        self.outbound = outbound

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        return await self._worker.run_fn(input, self._heartbeat)


class _ActivityOutboundImpl(ActivityOutboundInterceptor):
    """The innermost outbound interceptor of an attempt: its info, and its heartbeats to history."""

    def __init__(self, info: activity_module.Info, heartbeat: Callable[..., None]) -> None:  # no next: the end of the chain
        self._info = info
        self._heartbeat = heartbeat

    def info(self) -> activity_module.Info:
        return self._info

    def heartbeat(self, *details: Any) -> None:
        self._heartbeat(*details)


class _AttemptMetrics:
    """An attempt's run into the SDK's metrics (as temporalio's): its schedule-to-start latency
    (a first attempt's: the task records when the activity was scheduled, not when a retry was),
    its execution latency, and whether it failed, was cancelled, or succeeded (and how long after
    it was scheduled)."""

    def __init__(self, context: WorkerContext, task: Task) -> None:
        at = activity_task(task)
        self._metrics = context.metrics
        self._attributes = context.metric_attributes(activity_type=at["activity_type"], workflow_type=at["workflow_type"])
        self._first_attempt = at["attempt"] == 1
        self._scheduled_ms = at["scheduled_time_ms"]
        self._began: float | None = None

    def began(self) -> None:
        self._began = time.monotonic()
        if self._first_attempt:
            self._metrics.activity_schedule_to_start_latency.record(_since_ms(self._scheduled_ms), self._attributes)

    def ended(self, *, failed: bool = False, cancelled: bool = False) -> None:
        if self._began is None:  # it did not run
            return
        metrics = self._metrics
        metrics.activity_execution_latency.record(timedelta(seconds=time.monotonic() - self._began), self._attributes)
        if failed:
            metrics.activity_execution_failed.add(1, self._attributes)
        elif cancelled:
            metrics.activity_execution_cancelled.add(1, self._attributes)
        else:
            metrics.activity_succeed_endtoend_latency.record(_since_ms(self._scheduled_ms), self._attributes)


def _since_ms(unix_ms: float) -> timedelta:
    return timedelta(milliseconds=max(0.0, time.time() * 1000 - unix_ms))


class _Slots(asyncio.Semaphore):
    """The worker's activity slots (max_concurrent_activities): an attempt from the task queue
    waits for one; an eager attempt is taken only when one is free at once. Each change is set on
    the SDK's slot gauges, given the worker's context."""

    def __init__(self, value: int, context: WorkerContext | None) -> None:
        super().__init__(value)
        self._size = value
        self._context = context  # None: not reported (a worker without activities)
        self._changed()

    def try_acquire(self) -> bool:
        if self.locked():
            return False
        self._value -= 1  # what acquire() does when not locked, without waiting
        self._changed()
        return True

    async def acquire(self) -> Literal[True]:
        await super().acquire()
        self._changed()
        return True

    def release(self) -> None:
        super().release()
        self._changed()

    def _changed(self) -> None:
        if self._context is None:
            return
        attributes = self._context.metric_attributes(worker_type="ActivityWorker")
        self._context.metrics.worker_task_slots_available.set(self._value, attributes)
        self._context.metrics.worker_task_slots_used.set(self._size - self._value, attributes)


class _QueueShareRate:
    """temporalio's max_task_queue_activities_per_second: the queue's rate is shared among its
    workers by the partitions they own (a worker with 2 of 8 partitions starts a quarter of it)."""

    def __init__(self, per_second: float | None) -> None:
        self.per_second = per_second
        self._next = 0.0

    async def wait(self, share: float) -> None:
        """Until the next start is due, at this worker's `share` of the queue's rate."""
        if not self.per_second or not share:
            return
        now = time.monotonic()
        self._next = max(self._next, now)
        delay = self._next - now
        self._next += 1 / (self.per_second * share)
        if delay > 0:
            await asyncio.sleep(delay)


def _check_sync_activities(
    activities: Iterable[activity_module.ActivityDefinition], executor: concurrent.futures.Executor | None,
    shared_state_manager: SharedStateManager | None,
) -> None:
    """temporalio's checks, with its messages: a sync activity on an executor of other processes
    needs a shared_state_manager, and on a process pool it must be picklable."""
    for definition in activities:
        if definition.is_async or executor is None or isinstance(executor, concurrent.futures.ThreadPoolExecutor):
            continue
        if shared_state_manager is None:
            raise ValueError(
                f"Activity {definition.name} is not async and executor is not thread-pool executor, "
                "so a shared_state_manager must be present"
            )
        if isinstance(executor, concurrent.futures.ProcessPoolExecutor):
            try:
                pickle.dumps(definition.fn)
            except Exception as err:
                raise TypeError(f"Activity {definition.name} must be picklable when using a process executor") from err


async def _start_accepted(task: Task, answer: asyncio.Future[CommandOutcome]) -> bool:
    """Whether history accepted the start of an attempt whose task record may be a redelivery: the
    attempt may have run already, on the worker that read the record before, so it runs here only
    once history says this start is the attempt's first. A refusal is logged where it is heard
    (_start_answered). An answer that does not come within the attempt's time limit (Postgres away)
    leaves the attempt to its start-to-close timeout."""
    at = activity_task(task)
    await asyncio.wait({answer}, timeout=at["start_to_close_timeout_ms"] / 1000 or None)
    if not answer.done():
        log.warning("event=activity_start_unanswered workflow_id=%s run_id=%s activity_type=%s attempt=%d consequence=%r",
                    task["workflow_id"], task["run_id"], at["activity_type"], at["attempt"],
                    "not run here: a redelivered task runs only once its start is accepted; its start-to-close timeout retries it")
        return False
    return not answer.cancelled() and answer.result().accepted


async def _delivered(sent: asyncio.Future[Message]) -> bool:
    await asyncio.wait({sent})
    return not sent.cancelled() and sent.exception() is None


def _start_command(task: Task, request_id: str) -> tuple[str, RecordActivityTaskStarted]:
    """An attempt's RecordActivityTaskStarted."""
    at = activity_task(task)
    return CommandType.RecordActivityTaskStarted, {
        "run_id": task["run_id"], "scheduled_event_id": at["scheduled_event_id"], "attempt": at["attempt"], "request_id": request_id,
    }


def _completed(task: Task, result: PayloadRecord) -> ActivityReport:
    at = activity_task(task)
    completed: RespondActivityTaskCompleted = {
        "run_id": task["run_id"], "scheduled_event_id": at["scheduled_event_id"], "attempt": at["attempt"], "result": result,
    }
    return "RespondActivityTaskCompleted", completed


def _failed(task: Task, failure: FailureRecord) -> ActivityReport:
    at = activity_task(task)
    failed: RespondActivityTaskFailed = {
        "run_id": task["run_id"], "scheduled_event_id": at["scheduled_event_id"], "attempt": at["attempt"], "failure": failure,
    }
    return "RespondActivityTaskFailed", failed


def _canceled(task: Task) -> ActivityReport:
    at = activity_task(task)
    canceled: RespondActivityTaskCanceled = {
        "run_id": task["run_id"], "scheduled_event_id": at["scheduled_event_id"], "attempt": at["attempt"], "details": [],
    }
    return "RespondActivityTaskCanceled", canceled


def _start_request_id(task: Task) -> str:
    """A request id for an attempt's start. The attempt runs once its start is in the log, without
    waiting for history to accept it; the answer comes later, and a refusal (a closed run, a stale
    attempt, a copy another worker started, a schedule-to-start timeout that fired) cancels it.
    History accepts a report only from the worker that started the attempt. Each delivery asks with
    its own request id (as each Temporal poll does): the copy's refusal must not read as the first's
    acceptance."""
    at = activity_task(task)
    return f"{task['run_id']}/{at['scheduled_event_id']}/{at['attempt']}/{uuid.uuid4()}"


def _log_lost_activity(job: asyncio.Task[None], task: Task) -> None:
    """An attempt whose outcome could not be sent (its reply too large, say) is left to its timeout: say so."""
    if not job.cancelled() and job.exception() is not None:
        log.error("event=activity_outcome_not_sent workflow_id=%s run_id=%s activity_type=%s error=%r",
                  task["workflow_id"], task["run_id"], activity_task(task)["activity_type"], str(job.exception()))


def failure_log_level(exc: BaseException) -> int:
    """An ApplicationError of category BENIGN is expected by the application: logged at DEBUG (as temporalio)."""
    benign = isinstance(exc, ApplicationError) and exc.category == ApplicationErrorCategory.BENIGN
    return logging.DEBUG if benign else logging.INFO


def _time(unix_ms: int) -> datetime:
    return datetime.fromtimestamp(unix_ms / 1000, UTC)


def _timeout(ms: int) -> timedelta | None:
    """A timeout of the activity as activity.info() gives it: None when it has none."""
    return timedelta(milliseconds=ms) if ms else None
