"""The workflow side of a worker (as temporalio.worker's _WorkflowWorker): polls the task
queue's workflow topic, runs each workflow task on the deterministic loop over the run's history
(its cache, else the read model), runs the local activities it waits on, and answers queries. It
also runs the first workflow task of a run an eager start of its client began, which comes in the
start's answer instead of through the queue (docs/architecture.md, "Eager workflow start")."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import functools
import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import psycopg
from confluent_kafka import KafkaException, Message

from kadence import activity as activity_module
from kadence.api.common.v1 import Payload
from kadence.common import RetryPolicy, attempt_timeout_ms, next_attempt_backoff_ms, retry_state
from kadence.exceptions import ApplicationError, CommandTooLargeError, NondeterminismError, RetryState
from kadence.protocol import topics, tracing
from kadence.protocol.codec import codec, command_codec, writes_field
from kadence.protocol.events import CLOSE_COMMANDS, ONE_EVENT_COMMANDS, WORKFLOW_TASK_TOO_LARGE
from kadence.protocol.kafka import consume_batches, make_consumer, store_offsets
from kadence.protocol.names import CommandType, EffectType
from kadence.protocol.read_model import CommandOutcome
from kadence.protocol.records import (
    ActivityTask,
    HistoryEvent,
    QueryAnswer,
    RecordWorkflowTaskStarted,
    RespondWorkflowTaskCompleted,
    RespondWorkflowTaskFailed,
    ScheduleActivityTask,
    Task,
)
from kadence.protocol.records import Payload as PayloadRecord
from kadence.visibility import fetch_event_ranges
from kadence.worker._activity import ActivityWorker, dispatched_ms, failure_log_level, run_by_ms
from kadence.worker._context import WorkerContext, query_task, workflow_task
from kadence.worker._interceptor import WorkflowInboundInterceptor
from kadence.worker._task_starts import HeldStart, HeldStarts, log_unsent
from kadence.worker._workflow_instance import (
    CacheInvalid,
    Command,
    LocalActivity,
    WorkflowInstance,
    WorkflowTaskError,
    failure_record,
    replay,
)
from kadence.workflow._definition import WorkflowDefinition
from kadence.workflow._runtime import WorkflowInfo

log = logging.getLogger("kadence.worker")

# How long a workflow task waits for the read model to hold the earlier events it needs (the
# visibility projector writes them a moment after history): the default workflow task timeout.
HISTORY_WAIT_S = 10.0
LOCAL_RETRY_BUDGET_MS = 5000  # retries of a local activity without schedule_to_close stay within this
WORKFLOW_TASK_SLOTS = 100  # temporalio's max_concurrent_workflow_tasks when not given
# The last workflow task answered, for this many runs beyond the cache: a copy history dispatches
# again while the first waits in a backlog comes after it on the same partition, so it finds the
# answer sent (20 s of tasks at 1,000 a second).
ANSWERED_RUNS = 20_000


def run_clock_ms(task: Task) -> int:
    """The time on the clock of the workflow task's run: this host's, plus the run's offset when it
    skips time (docs/decisions/0006-time-skipping.md). It becomes workflow.now() and the task's start."""
    return int(time.time() * 1000) + workflow_task(task).get("clock_offset_ms", 0)


def _activity_task(task: Task, attrs: ScheduleActivityTask, scheduled_event_id: int, now_ms: int) -> Task:
    """An eager attempt's task, as history's dispatch would make it (its payloads copied: sending
    the completion runs the payload codec over the command's in place)."""
    wt = workflow_task(task)
    activity: ActivityTask = {
        "task_queue": attrs["task_queue"] or wt["task_queue"], "workflow_type": wt["workflow_type"],
        "scheduled_event_id": scheduled_event_id, "attempt": 1, "activity_id": attrs["activity_id"],
        "activity_type": attrs["activity_type"], "input": [_copy(payload) for payload in attrs["input"]],
        "start_to_close_timeout_ms": attempt_timeout_ms(attrs),
        "scheduled_time_ms": now_ms, "heartbeat_timeout_ms": attrs["heartbeat_timeout_ms"], "heartbeat_details": [],
        "schedule_to_start_deadline_ms": 0, "header": {name: _copy(payload) for name, payload in (attrs.get("header") or {}).items()},
        "schedule_to_close_timeout_ms": attrs["schedule_to_close_timeout_ms"], "retry_policy": attrs["retry_policy"],
        "current_attempt_scheduled_time_ms": now_ms, "clock_offset_ms": wt.get("clock_offset_ms", 0),
    }
    return {"workflow_id": task["workflow_id"], "run_id": task["run_id"], "history_length": 0, "task": ("ActivityTask", activity)}


def _answer(sent: list[asyncio.Future[Message]]) -> asyncio.Future[Message]:
    """The delivery of the last command sent, the task's answer; a start sent before it logs its own failure."""
    for start in sent[:-1]:
        start.add_done_callback(log_unsent)
    return sent[-1]


def _copy(payload: PayloadRecord) -> PayloadRecord:
    return {"metadata": dict(payload["metadata"]), "data": payload["data"]}


@dataclass
class StartAnswer:
    """The answer a workflow task's start is sent to get (its request id)."""

    request_id: str
    answer: asyncio.Future[CommandOutcome]


class WorkflowWorker:
    def __init__(
        self, context: WorkerContext, workflows: dict[str, WorkflowDefinition],
        interceptor_classes: Sequence[type[WorkflowInboundInterceptor]], activities: ActivityWorker, max_cached: int,
        executor: concurrent.futures.ThreadPoolExecutor | None = None, max_concurrent: int | None = None,
    ) -> None:
        self._context = context
        self.client = context.client
        self.task_queue = context.task_queue
        self._workflows = workflows
        self._interceptor_classes = interceptor_classes
        self._activities = activities  # a local activity runs as the worker's activities do
        self._max_cached = max_cached
        self._executor = executor  # where activations run: this loop when None
        self._cache: collections.OrderedDict[str, WorkflowInstance] = collections.OrderedDict()
        self._last_answered: collections.OrderedDict[str, tuple[int, int]] = collections.OrderedDict()  # run id -> (task, attempt)
        self._starts = HeldStarts(context.send_all)
        self._slots = _TaskSlots(max_concurrent or WORKFLOW_TASK_SLOTS, context if workflows else None)
        # Held by the poller's batch, or an eager start's task, from its activation to its answer:
        # a worker runs one at a time, so a run is never activated twice at once.
        self._lane = asyncio.Lock()
        self._eager: set[asyncio.Task[None]] = set()  # eager starts' tasks running, awaited at shutdown
        self._answers_carry_starts = writes_field(command_codec(), CommandType.RespondWorkflowTaskCompleted, "started_time_ms")
        # A build pinned to a Command version whose starts carry no request id runs a redelivered
        # task's local activities without waiting for its start's answer, as releases before did.
        self._starts_answered = writes_field(command_codec(), CommandType.RecordWorkflowTaskStarted, "request_id")

    @property
    def types(self) -> list[str]:
        """The workflow types registered."""
        return sorted(self._workflows)

    async def poll(self) -> None:
        consumer = make_consumer(self.client.settings, topics.worker_group(self.task_queue, "workflow"))
        await self._context.assignment.subscribe(consumer, "workflow")
        try:
            async for messages in consume_batches(consumer, self._context.shutting_down):
                try:
                    async with self._lane:
                        with self._slots.taken(len(messages)):
                            await self._handle_workflow_tasks(messages)
                except Exception as exc:  # a bug must not stop the poller: history dispatches the tasks again
                    log.exception("event=workflow_task_batch_failed task_queue=%s tasks=%d error=%r",
                                  self.task_queue, len(messages), str(exc))
                store_offsets(consumer, messages)
        finally:
            await asyncio.gather(*self._eager, return_exceptions=True)
            self._starts.close()
            await asyncio.get_running_loop().run_in_executor(None, consumer.close)

    async def _handle_workflow_tasks(self, messages: list[Message]) -> None:
        """One batch: each task is answered, and a task whose payloads cannot be decoded fails."""
        tasks: list[tuple[Task, Message]] = []
        deliveries: list[tuple[Task, asyncio.Future[Any]]] = []
        for msg in messages:
            decoded = await self._context.decode(msg)
            if decoded is None:
                continue
            task, problem = decoded
            if problem is None:
                tasks.append((task, msg))
            elif task["task"][0] == EffectType.QueryTask:
                deliveries.append((task, asyncio.ensure_future(self._answer_query(task, problem))))
            else:  # failed with its start, so history records why (a task never started takes no failure)
                deliveries.append((task, self._fail_workflow_task(task, problem, self._hold_start(task, run_clock_ms(task)))))
        earlier = await self._earlier_events([task for task, _ in tasks if self._lacks(task) is not None])
        for task, msg in tasks:
            with tracing.hop(f"worker {task['task'][0]}", msg.headers(), timestamp_ms=msg.timestamp()[1], attributes={
                "messaging.destination.name": msg.topic(), "messaging.kafka.destination.partition": msg.partition(),
                "messaging.kafka.message.offset": msg.offset(), "kadence.workflow_id": task["workflow_id"],
            }):
                redelivered = self._context.assignment.may_be_redelivered("workflow", msg, task)
                handled = await self._handle_workflow_task(task, earlier, redelivered, dispatched_ms(msg))
                deliveries += [(task, delivery) for delivery in handled]
        await self._answered(deliveries)

    async def _answered(self, deliveries: list[tuple[Task, asyncio.Future[Any]]]) -> None:
        """Until the tasks' answers are delivered (or their local activities run first); a failure is logged."""
        outcomes = await asyncio.gather(*(delivery for _, delivery in deliveries), return_exceptions=True)
        self._context.metrics.sticky_cache_size.set(len(self._cache), self._context.metric_attributes())
        for (task, _), outcome in zip(deliveries, outcomes, strict=True):
            if isinstance(outcome, Exception):
                log.error("event=workflow_task_answer_failed workflow_id=%s run_id=%s error=%r",
                          task["workflow_id"], task["run_id"], str(outcome))

    def reserve_eager_slot(self, workflow_type: str, workflow_id: str) -> _EagerSlot | None:
        """A slot for the first task of a run an eager start of this worker's client begins (as
        temporalio's core reserves one of the worker's workflow task slots): given while the worker
        runs, registers `workflow_type` and has a slot free, unless the workflow id's tasks are
        assigned to another worker of the queue. The run's later tasks go to that partition's owner,
        which would have to read the run from the read model; before any assignment, when no worker
        of the queue may be polling yet, this one takes it."""
        if (self._context.shutting_down.is_set() or workflow_type not in self._workflows
                or self._context.assignment.assigned_elsewhere("workflow", workflow_id.encode()) or not self._slots.try_take()):
            return None
        return _EagerSlot(self._context.identity, self)

    def run_eager(self, task: Task, started_time_ms: int) -> None:
        """Run an eager start's first task, which history recorded started by this worker, in its
        slot (reserve_eager_slot)."""
        if self._context.shutting_down.is_set():  # its poller is stopping: nothing would await it
            self._slots.give_back()
            log.info("event=eager_workflow_task_dropped workflow_id=%s run_id=%s reason=%r consequence=%r",
                     task["workflow_id"], task["run_id"], "the worker is shutting down",
                     "it runs after its workflow task timeout, through the queue")
            return
        running = asyncio.create_task(self._run_eager(task, started_time_ms))
        self._eager.add(running)
        running.add_done_callback(self._eager.discard)

    async def _run_eager(self, task: Task, started_time_ms: int) -> None:
        """As a task from the queue runs, in the worker's lane, without a start of its own: history
        recorded it, at `started_time_ms`, which its activation takes as workflow.now(). Its slot is
        given back once its answer is delivered."""
        try:
            async with self._lane:
                await self._answered([(task, delivery) for delivery in await self._eager_answers(task, started_time_ms)])
        finally:
            self._slots.give_back()

    async def _eager_answers(self, task: Task, started_time_ms: int) -> list[asyncio.Future[Any]]:
        try:
            await self.client.data_converter.decode_payloads(task)
        except Exception as exc:  # the task fails with the reason, as one from the queue would
            log.error("event=task_payloads_undecodable workflow_id=%s run_id=%s error=%r", task["workflow_id"], task["run_id"], str(exc))
            return [self._fail_workflow_task(task, exc)]
        wt = workflow_task(task)
        dispatched = started_time_ms - wt.get("clock_offset_ms", 0)  # on this host's clock
        self._context.metrics.sticky_cache_miss.add(1, self._context.metric_attributes(workflow_type=wt["workflow_type"]))
        return await self._activate_and_answer(task, None, {}, started_time_ms, dispatched)

    async def _handle_workflow_task(
        self, task: Task, earlier: dict[tuple[str, str], list[HistoryEvent] | None], redelivered: bool, dispatched: float,
    ) -> list[asyncio.Future[Any]]:
        """Activate the run with the task and answer it. A task record that may be a redelivery
        (`redelivered`) runs its local activities only once history accepted its start: the worker
        that read the record before may have run them and completed the task. `dispatched`: when
        history dispatched the task (for the eager attempts its completion starts)."""
        if task["task"][0] == EffectType.QueryTask:
            return [asyncio.ensure_future(self._answer_query(task))]
        run_id = task["run_id"]
        wt = workflow_task(task)
        if self._last_answered.get(run_id, (0, 0)) >= (wt["scheduled_event_id"], wt["attempt"]):
            # A copy of a task this worker answered (history dispatched it again while the first waited
            # in the queue): its replay would be refused, or, with the run closed since, be a read and a
            # replay for nothing.
            return []
        if wt["attempt"] > 1:
            # A retried (transient) task: its failed attempts left no events, so a cached run may be one
            # whose completion history refused; it replays from the recorded events instead.
            self._cache.pop(run_id, None)
        cached = self._cache.get(run_id)
        if cached is not None and cached.last_activated_task >= wt["scheduled_event_id"]:
            return []  # a duplicate dispatch of a task this worker already answered
        started_time_ms = run_clock_ms(task)  # workflow.now() for this task, recorded as its WorkflowTaskStarted time
        attributes = self._context.metric_attributes(workflow_type=wt["workflow_type"])
        self._context.metrics.workflow_task_queue_poll_succeed.add(1, attributes)
        (self._context.metrics.sticky_cache_hit if cached is not None else self._context.metrics.sticky_cache_miss).add(1, attributes)
        # From when history dispatched it (the task record's time): a re-dispatched task counts from its re-dispatch.
        self._context.metrics.workflow_task_schedule_to_start_latency.record(
            timedelta(milliseconds=max(0.0, time.time() * 1000 - dispatched)), attributes)
        accepted = await self._start_answer(task) if redelivered and self._starts_answered else None
        start = self._hold_start(task, started_time_ms, accepted)
        return await self._activate_and_answer(task, cached, earlier, started_time_ms, dispatched, start, accepted, redelivered)

    async def _activate_and_answer(
        self, task: Task, cached: WorkflowInstance | None, earlier: dict[tuple[str, str], list[HistoryEvent] | None],
        started_time_ms: int, dispatched: float, start: HeldStart | None = None, accepted: StartAnswer | None = None,
        redelivered: bool = False,
    ) -> list[asyncio.Future[Any]]:
        """Activate the run with the task and answer it, with its `start` if held back (none for a
        task history started itself: an eager start's)."""
        workflow_id, run_id = task["workflow_id"], task["run_id"]
        try:
            history = await self._task_history(task, earlier)
            try:
                instance, commands = await self._activation(task, cached, history, started_time_ms)
            except CacheInvalid as reason:
                log.info("event=workflow_cache_evicted workflow_id=%s run_id=%s reason=%r", workflow_id, run_id, str(reason))
                self._cache.pop(run_id, None)
                instance, commands = await self._activation(task, None, await self._task_history(task, {}), started_time_ms)
        except Exception as exc:  # the workflow task fails with the reason, visible in the history; the run goes on
            self._forget_start_answer(accepted)
            return [self._fail_workflow_task(task, exc, start)]
        if instance.local_activities_to_run():  # they take a while: the start goes now
            if start is not None and self._starts.take(start):
                self._context.send_all(workflow_id, [start.command])[0].add_done_callback(log_unsent)
            return [asyncio.ensure_future(self._complete_after_local_activities(task, instance, commands, accepted, dispatched))]
        self._forget_start_answer(accepted)
        return [self._complete_workflow_task(task, instance, commands, dispatched, start, eager_once_accepted=redelivered)]

    async def _start_answer(self, task: Task) -> StartAnswer:
        """The answer to the start of a task that may be a redelivery, asked for before the start can be sent."""
        wt = workflow_task(task)
        request_id = f"{task['run_id']}/workflow-task/{wt['scheduled_event_id']}/{uuid.uuid4()}"
        return StartAnswer(request_id, await self.client.expect_outcome(request_id))

    def _forget_start_answer(self, accepted: StartAnswer | None) -> None:
        """No local activity waits for the start's answer (which comes only if the start went alone)."""
        if accepted is not None:
            self.client.forget_outcome(accepted.request_id, accepted.answer)

    def _hold_start(self, task: Task, started_time_ms: int, accepted: StartAnswer | None = None) -> HeldStart:
        """The task's start, sent with its answer (or by HeldStarts' thread if the task takes long): see
        _task_starts. With the request id `accepted` waits on, where its answer is wanted."""
        wt = workflow_task(task)
        start: RecordWorkflowTaskStarted = {"run_id": task["run_id"], "scheduled_event_id": wt["scheduled_event_id"],
                                            "attempt": wt["attempt"], "started_time_ms": started_time_ms}
        if accepted is not None:
            start["request_id"] = accepted.request_id
        return self._starts.hold(task["workflow_id"], ("RecordWorkflowTaskStarted", start))

    def _lacks(self, task: Task) -> tuple[int, int] | None:
        """The events (after, before; both exclusive) a workflow task needs that neither this worker's
        cache nor the task holds: the task brings those after the previous task's (what a worker
        that ran it has), or none when they were too large to carry."""
        if task["task"][0] != EffectType.WorkflowTask:
            return None
        wt = workflow_task(task)
        cached = self._cache.get(task["run_id"])
        have = cached.processed_event_id if cached is not None else 0
        # Without the events, the task's own: up to its WorkflowTaskScheduled, or, retried (transient), before the
        # id that event would take (it is written only by the attempt that completes).
        first = wt["first_event_id"] if wt["history"] else wt["scheduled_event_id"] + (1 if wt["attempt"] == 1 else 0)
        return (have, first) if first > have + 1 else None

    async def _earlier_events(self, tasks: list[Task]) -> dict[tuple[str, str], list[HistoryEvent] | None]:
        """The events these workflow tasks lack (see `_read_events`): per run, those any of its tasks lacks."""
        wanted: dict[tuple[str, str], tuple[int, int]] = {}
        for task in tasks:
            if (lacks := self._lacks(task)) is not None:
                run = (task["workflow_id"], task["run_id"])
                after, before = wanted.get(run, lacks)
                wanted[run] = (min(after, lacks[0]), max(before, lacks[1]))
        return await self._read_events(wanted)

    async def _read_events(self, wanted: dict[tuple[str, str], tuple[int, int]]) -> dict[tuple[str, str], list[HistoryEvent] | None]:
        """Per run, its events between (after, before), both exclusive, from the read model in one
        query, asked again while the visibility projector has not written them all yet (for at most
        HISTORY_WAIT_S). None for a run whose events did not all arrive."""
        found: dict[tuple[str, str], list[HistoryEvent] | None] = dict.fromkeys(wanted)
        wanted = dict(wanted)
        if not wanted:
            return found
        deadline = time.monotonic() + HISTORY_WAIT_S
        delay = 0.01
        while wanted:
            try:
                pool = (await self.client._read_model()).pool
                rows = await fetch_event_ranges(pool, [(*run, after, before) for run, (after, before) in wanted.items()])
            except (OSError, psycopg.Error) as exc:  # the tasks fail with the reason; their retries ask again
                log.warning("event=history_not_read runs=%d error=%r", len(wanted), str(exc))
                break
            for run, (after, before) in list(wanted.items()):
                events = rows.get(run, [])
                if len(events) == before - after - 1:
                    found[run] = cast(list[HistoryEvent], events)  # the read model's rows: decoded HistoryEvent records
                    del wanted[run]
            if not wanted or time.monotonic() + delay > deadline:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
        await self.client.data_converter.decode_payloads([events for events in found.values() if events is not None])
        return found

    async def _task_history(self, task: Task, earlier: dict[tuple[str, str], list[HistoryEvent] | None]) -> list[HistoryEvent]:
        """The events to activate the task with: those it lacks (read with the batch it came in,
        else now: the cache may have changed since), then those it brings."""
        wt = workflow_task(task)
        lacks = self._lacks(task)
        if lacks is None:
            return wt["history"]
        run = (task["workflow_id"], task["run_id"])
        events = earlier.get(run, [])
        if events is not None:
            events = [event for event in events if lacks[0] < event["event_id"] < lacks[1]]
            if len(events) != lacks[1] - lacks[0] - 1:  # not read with the batch, or the cache changed since
                events = (await self._earlier_events([task]))[run]
        if events is None:
            raise WorkflowTaskError(
                f"workflow task {wt['scheduled_event_id']} of {task['workflow_id']} (run {task['run_id']}) needs events "
                f"{lacks[0] + 1} to {lacks[1] - 1}, which the read model did not hold within {HISTORY_WAIT_S:.0f} s: "
                "check that the visibility service runs and keeps up (kadence_consumer_lag) and that Postgres is reachable"
            )
        return events + wt["history"]

    def _answering(self, task: Task) -> None:
        wt = workflow_task(task)
        self._last_answered[task["run_id"]] = (wt["scheduled_event_id"], wt["attempt"])
        self._last_answered.move_to_end(task["run_id"])
        if len(self._last_answered) > ANSWERED_RUNS:
            self._last_answered.popitem(last=False)

    def _fail_workflow_task(self, task: Task, exc: Exception, start: HeldStart | None = None) -> asyncio.Future[Message]:
        """Fail the task with the reason, after its start if it is still held."""
        self._cache.pop(task["run_id"], None)
        self._answering(task)
        cause = "NON_DETERMINISTIC_ERROR" if isinstance(exc, NondeterminismError) else "WORKFLOW_WORKER_UNHANDLED_FAILURE"
        self._context.metrics.workflow_task_execution_failed.add(1, self._context.metric_attributes(
            workflow_type=workflow_task(task)["workflow_type"], failure_reason=cause))
        return _answer(self._context.send_all(task["workflow_id"], self._with_start(
            start, CommandType.RespondWorkflowTaskFailed, self._failure(task, cause, exc),
        )))

    def _failure(self, task: Task, cause: str, exc: Exception) -> RespondWorkflowTaskFailed:
        """The task's RespondWorkflowTaskFailed (without its start), logged as it is decided."""
        log.error("event=workflow_task_failed workflow_id=%s run_id=%s cause=%s error=%r",
                  task["workflow_id"], task["run_id"], cause, str(exc),
                  extra={"__temporal_error_identifier": "WorkflowTaskFailure"})  # temporalio's mark, which log filters match
        wt = workflow_task(task)
        return {
            "run_id": task["run_id"], "scheduled_event_id": wt["scheduled_event_id"], "attempt": wt["attempt"],
            "cause": cause,
            "failure": failure_record(self.client.data_converter.to_failure(exc)),
        }

    def _with_start(
        self, start: HeldStart | None, kind: str, answer: RespondWorkflowTaskCompleted | RespondWorkflowTaskFailed,
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """The task's answer, carrying its start unless the thread sent that already (or after its
        start, when this worker writes a Command version whose answers carry none: a schema pin)."""
        if start is None or not self._starts.take(start):
            return [(kind, answer)]
        if not self._answers_carry_starts:
            return [start.command, (kind, answer)]
        return [(kind, {**answer, "started_time_ms": start.started_time_ms})]

    def _complete_workflow_task(
        self, task: Task, instance: WorkflowInstance, commands: list[Command], dispatched: float, start: HeldStart | None = None, *,
        eager_once_accepted: bool = False,
    ) -> asyncio.Future[Message]:
        """Complete the task with the commands, after its start if it is still held. The eager
        attempts the completion starts run once it is delivered, or once history accepted their
        starts where the completion may be refused: `eager_once_accepted` (a task that may be a
        redelivery, whose completion another worker's may precede), or the completion delivered
        late, PROMPT_START_S or half the task's timeout after history `dispatched` the task (it
        may have timed out meanwhile: the broker away)."""
        run_id = task["run_id"]
        self._count_completion(task, instance, commands)
        commands, eager = self._eager_attempts(task, instance, commands)
        starts = self._activities.eager_starts(eager)
        wt = workflow_task(task)
        completed_with: RespondWorkflowTaskCompleted = {
            "run_id": run_id, "scheduled_event_id": wt["scheduled_event_id"], "attempt": wt["attempt"], "commands": commands,
        }
        if starts is not None:
            completed_with["eager_request_id"] = starts.request_id
        answer = self._with_start(start, CommandType.RespondWorkflowTaskCompleted, completed_with)
        self._answering(task)
        try:
            sent = self._context.send_all(task["workflow_id"], answer)
        except BaseException:  # nothing sent: the client is closed (a command it cannot send is refused, not raised)
            if starts is not None:
                self._activities.drop_eager_starts(starts)
            raise
        completion = _answer(sent)
        if starts is not None:
            self._activities.run_eagerly(starts, completion, accepted_first=eager_once_accepted,
                                         run_by=run_by_ms(dispatched, instance.info.task_timeout))
        completed = asyncio.ensure_future(self._completed_or_too_large(task, completion, answer[-1][1].get("started_time_ms")))
        if instance.closed or any(kind in CLOSE_COMMANDS for kind, _ in commands) or wt["attempt"] > 1:
            # A retried task's events are written with ids past those it was dispatched with when others
            # came meanwhile: the next task replays the run from the recorded events.
            self._cache.pop(run_id, None)
        else:
            self._cache[run_id] = instance
            self._cache.move_to_end(run_id)
            while len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)
                self._context.metrics.sticky_cache_total_forced_eviction.add(1, self._context.metric_attributes())
        return completed

    def _count_completion(self, task: Task, instance: WorkflowInstance, commands: list[Command]) -> None:
        """The task's execution latency, and how the run closed if it did, into the SDK's metrics."""
        metrics = self._context.metrics
        attributes = self._context.metric_attributes(workflow_type=workflow_task(task)["workflow_type"])
        now_ms = run_clock_ms(task)  # task_started_ms is on the run's clock
        metrics.workflow_task_execution_latency.record(timedelta(milliseconds=max(0.0, now_ms - instance.task_started_ms)), attributes)
        closed = next((kind for kind, _ in commands if kind in CLOSE_COMMANDS), None)
        match closed:
            case "CompleteWorkflowExecution":
                metrics.workflow_completed.add(1, attributes)
                started = instance.info.workflow_start_time
                metrics.workflow_endtoend_latency.record(max(timedelta(), datetime.now(UTC) - started), attributes)
            case "FailWorkflowExecution":
                metrics.workflow_failed.add(1, attributes)
            case "CancelWorkflowExecution":
                metrics.workflow_canceled.add(1, attributes)
            case "ContinueAsNewWorkflowExecution":
                metrics.workflow_continue_as_new.add(1, attributes)

    def _eager_attempts(self, task: Task, instance: WorkflowInstance, commands: list[Command]) -> tuple[list[Command], list[Task]]:
        """The commands to send, and the first attempts of the activities they schedule that this
        worker runs itself (eager execution, saving the task queue's hop), made as history would
        dispatch them; their commands name the scheduled_event_id foreseen. The ids follow the task's:
        WorkflowTaskStarted right after its WorkflowTaskScheduled, WorkflowTaskCompleted, then one
        event per command, and nothing is foreseen past a command that may write more or fewer. An
        activity attempt's start or retried failure written between the task's WorkflowTaskScheduled
        and its completion would shift them, and the attempts would run here and from the queue
        until history's refusal of the completion's eager_request_id cancelled them: so nothing runs
        eagerly while an activity an earlier task scheduled is pending, nor from a retried task (its
        WorkflowTaskScheduled is written with its completion, past any event written meanwhile)."""
        wt = workflow_task(task)
        if any(kind in CLOSE_COMMANDS for kind, _ in commands) or instance.has_pending_activities() or wt["attempt"] > 1:
            return commands, []
        now_ms = run_clock_ms(task)  # the attempts' scheduled time, on the run's clock as history's is
        sent, attempts = list(commands), []
        scheduled_event_id = wt["scheduled_event_id"] + 3
        for index, command in enumerate(commands):
            if command[0] not in ONE_EVENT_COMMANDS:
                break
            match command:
                case ("ScheduleActivityTask", attrs) if (
                    not instance.eager_execution_disabled(attrs["activity_id"])
                    and self._activities.claim_eager_slot(task["workflow_id"], attrs, scheduled_event_id)
                ):
                    eager: ScheduleActivityTask = {**attrs, "eager_scheduled_event_id": scheduled_event_id}
                    sent[index] = ("ScheduleActivityTask", eager)
                    attempts.append(_activity_task(task, attrs, scheduled_event_id, now_ms))
            scheduled_event_id += 1
        return sent, attempts

    async def _completed_or_too_large(
        self, task: Task, completed: asyncio.Future[Message], started_time_ms: int | None,
    ) -> Message:
        """A completion too large for a record fails the workflow task instead, with the cause that
        ends the run (as Temporal ends a run whose completion exceeds gRPC's message size): the
        workflow code would issue the same commands on every attempt. One the client refused to
        send for another reason (a payload codec's failure) fails the task with that reason if it
        carried the task's start, which would otherwise be lost with it: a task never started
        records nothing and only goes round again. Either failure carries that start. A completion
        not sent leaves the run out of the cache, so the task, sent again, is not taken for a copy."""
        try:
            return await completed
        except Exception as exc:
            self._cache.pop(task["run_id"], None)
            if isinstance(exc, CommandTooLargeError):
                return await self._fail_unsent_completion(task, WORKFLOW_TASK_TOO_LARGE, exc, started_time_ms)
            # Not delivered (the task is dispatched again), or its start is recorded (it times out and goes again).
            if isinstance(exc, KafkaException) or started_time_ms is None:
                raise
            return await self._fail_unsent_completion(task, "WORKFLOW_WORKER_UNHANDLED_FAILURE", exc, started_time_ms)

    async def _fail_unsent_completion(self, task: Task, cause: str, exc: Exception, started_time_ms: int | None) -> Message:
        return await self._context.send(task["workflow_id"], CommandType.RespondWorkflowTaskFailed, {
            **self._failure(task, cause, exc), "started_time_ms": started_time_ms,
        })

    async def _complete_after_local_activities(
        self, task: Task, instance: WorkflowInstance, commands: list[Command], accepted: StartAnswer | None, dispatched: float,
    ) -> None:
        """Run the local activities the workflow waits on, record their outcomes, and run on until
        it waits on nothing local; then complete the task with every command. With `accepted`, only
        once history accepted the task's start."""
        if accepted is not None and not await self._start_accepted(task, accepted):
            self._cache.pop(task["run_id"], None)  # activated with a task another worker answered
            return
        try:
            while pending := instance.local_activities_to_run():
                outcomes = await asyncio.gather(*(self._run_local_activity(task, local) for local in pending))
                commands = instance.resolve_local_activities(dict(outcomes))
        except Exception as exc:
            await self._fail_workflow_task(task, exc)
            return
        await self._complete_workflow_task(task, instance, commands, dispatched)

    async def _start_accepted(self, task: Task, accepted: StartAnswer) -> bool:
        """Whether history accepted the start of a task that may be a redelivery, so its local
        activities may run: the worker that read the record before may have run them and completed
        the task. Not answered within HISTORY_WAIT_S (Postgres away), the task is left to its
        start-to-close timeout."""
        answer = accepted.answer
        await asyncio.wait({answer}, timeout=HISTORY_WAIT_S)
        outcome = answer.result() if answer.done() and not answer.cancelled() else None
        if outcome is None or not outcome.accepted:
            self.client.forget_outcome(accepted.request_id, answer)
            log.info("event=workflow_task_start_refused workflow_id=%s run_id=%s scheduled_event_id=%d cause=%s reason=%r consequence=%r",
                     task["workflow_id"], task["run_id"], workflow_task(task)["scheduled_event_id"],
                     outcome.cause if outcome else "UNANSWERED", outcome.reason if outcome else f"no answer within {HISTORY_WAIT_S:.0f} s",
                     "a redelivered task's local activities run only once its start is accepted")
            return False
        return True

    async def _run_local_activity(self, task: Task, local: LocalActivity) -> tuple[int, dict[str, list[Payload]]]:
        """Attempts per the retry policy, within the workflow task; the outcome as marker details."""
        attrs = local.attributes
        payloads = self.client.data_converter.payload_converter
        details = {"seq": payloads.to_payloads([local.seq]), "activity_type": payloads.to_payloads([attrs["activity_type"]])}
        policy = attrs["retry_policy"] or {}
        budget_ms = attrs["schedule_to_close_timeout_ms"] or LOCAL_RETRY_BUDGET_MS
        began = time.monotonic()
        deadline = began + budget_ms / 1000
        metrics = self._context.metrics
        attributes = self._context.metric_attributes(
            activity_type=attrs["activity_type"], workflow_type=workflow_task(task)["workflow_type"])
        attempt = 1
        while True:
            metrics.local_activity_total.add(1, attributes)
            attempt_began = time.monotonic()
            context = contextvars.copy_context()
            now = datetime.fromtimestamp(run_clock_ms(task) / 1000, UTC)
            context.run(activity_module._current_info.set, activity_module.Info(
                activity_id=str(local.seq), activity_type=attrs["activity_type"], attempt=attempt, scheduled_time=now,
                task_queue=self.task_queue, workflow_id=task["workflow_id"], workflow_run_id=task["run_id"],
                workflow_type=workflow_task(task)["workflow_type"], is_local=True, current_attempt_scheduled_time=now, started_time=now,
                start_to_close_timeout=timedelta(milliseconds=attempt_timeout_ms(attrs)),
                schedule_to_close_timeout=timedelta(milliseconds=budget_ms),  # what bounds its attempts
                retry_policy=RetryPolicy.from_record(attrs["retry_policy"]) if attrs.get("retry_policy") else None,
            ))
            try:
                result = await asyncio.wait_for(
                    self._activities.call(attrs["activity_type"], attrs["input"], context, attrs.get("header") or {}, heartbeat=None),
                    attempt_timeout_ms(attrs) / 1000,
                )
                metrics.local_activity_execution_latency.record(timedelta(seconds=time.monotonic() - attempt_began), attributes)
                metrics.local_activity_succeeded_endtoend_latency.record(timedelta(seconds=time.monotonic() - began), attributes)
                return local.seq, {**details, "result": [payloads.to_payload(result)]}
            except Exception as exc:  # an attempt failed: retry, or record the failure
                metrics.local_activity_execution_latency.record(timedelta(seconds=time.monotonic() - attempt_began), attributes)
                metrics.local_activity_execution_failed.add(1, attributes)
                failure = self.client.data_converter.to_failure(exc)
                # The rule an activity's attempts follow in the history service, with this budget as its deadline.
                state = retry_state(policy, attempt, failure, (deadline - time.monotonic()) * 1000)
                if state == RetryState.IN_PROGRESS:
                    await asyncio.sleep(next_attempt_backoff_ms(policy, attempt, failure) / 1000)
                    attempt += 1
                    continue
                log.log(failure_log_level(exc),
                        "event=local_activity_failed workflow_id=%s run_id=%s activity_type=%s attempt=%d retry_state=%s error=%r",
                        task["workflow_id"], task["run_id"], attrs["activity_type"], attempt, state.value, str(exc))
                recorded = {"message": failure["message"], "type": failure["type"], "non_retryable": failure["non_retryable"],
                            "retry_state": state.value}
                return local.seq, {**details, "failure": [payloads.to_payload(recorded)]}

    async def _answer_query(self, task: Task, problem: Exception | None = None) -> None:
        """Answer from the cached run, or from a replay of its recorded history (a closed run too);
        a query whose arguments or answer the payload codec cannot handle is answered with the error."""
        query = query_task(task)
        answer: QueryAnswer = {"query_id": query["query_id"], "result": None, "error": None}
        try:
            if problem is not None:
                raise problem
            instance = self._cache.get(task["run_id"]) or await self._replay(task)
            answer["result"] = instance.query(query["query_type"], query["args"], query.get("header") or {}, query["query_id"])
            await self.client.data_converter.encode_payloads(answer)
        except Exception as exc:  # the query failed: the caller hears why
            log.info("event=query_failed workflow_id=%s run_id=%s query_type=%s error=%r",
                     task["workflow_id"], task["run_id"], query["query_type"], str(exc))
            answer = {"query_id": query["query_id"], "result": None, "error": failure_record(self.client.data_converter.to_failure(exc))}
            with contextlib.suppress(Exception):  # the codec that failed: the error goes as it is
                await self.client.data_converter.encode_payloads(answer)
        answers = codec("QueryAnswer")
        try:
            await self.client.produce(
                topics.REPLIES, answers.encode(answer), query["query_id"].encode(), answers.headers(), partition=query["reply_partition"],
            )
        except KafkaException as exc:  # the broker was away past the delivery timeout: the caller's query times out
            log.warning("event=query_answer_not_sent workflow_id=%s run_id=%s query_type=%s error=%r",
                        task["workflow_id"], task["run_id"], query["query_type"], str(exc))

    async def _replay(self, task: Task) -> WorkflowInstance:
        workflow_type = query_task(task)["workflow_type"]
        definition = self._workflows.get(workflow_type)
        if definition is None:
            raise ApplicationError(f"workflow type {workflow_type!r} is not registered on this worker", type="NotFoundError")
        events = await self._history_to_answer_from(task)
        info = WorkflowInfo(task["workflow_id"], task["run_id"], definition.name, self.task_queue)
        return replay(definition, info, self.client.data_converter, events, self._interceptor_classes)

    async def _history_to_answer_from(self, task: Task) -> list[HistoryEvent]:
        """The run's events the query's answer must see: exactly the history it had when history
        released the query (the read model may not hold them all yet), or, from a task of a release
        that did not say, whatever the read model holds."""
        run = (task["workflow_id"], task["run_id"])
        if task["history_length"] > 0:
            events = (await self._read_events({run: (0, task["history_length"] + 1)}))[run]
            if events is None:
                raise ApplicationError(
                    f"workflow {run[0]} (run {run[1]}) has {task['history_length']} events, which the read model did not hold "
                    f"within {HISTORY_WAIT_S:.0f} s: check that the visibility service runs and keeps up (kadence_consumer_lag)",
                    type="NotFoundError",
                )
            return events
        history = await self.client.get_workflow_handle(run[0], run_id=run[1]).fetch_history()
        if not history.events:
            raise ApplicationError(f"workflow {run[0]} has no recorded history yet", type="NotFoundError")
        await self.client.data_converter.decode_payloads(history.events)
        return cast(list[HistoryEvent], history.events)  # read from JSON

    async def _activation(
        self, task: Task, cached: WorkflowInstance | None, history: list[HistoryEvent], started_time_ms: int,
    ) -> tuple[WorkflowInstance, list[Command]]:
        """`_activate`, on the workflow task executor when the worker has one. Awaited before the
        next task is taken, so a run never has two activations at once."""
        if self._executor is None:
            return self._activate(task, cached, history, started_time_ms)
        activate = functools.partial(contextvars.copy_context().run, self._activate, task, cached, history, started_time_ms)
        return await asyncio.get_running_loop().run_in_executor(self._executor, activate)

    def _activate(
        self, task: Task, cached: WorkflowInstance | None, history: list[HistoryEvent], started_time_ms: int,
    ) -> tuple[WorkflowInstance, list[Command]]:
        wt = workflow_task(task)
        if cached is not None:
            return cached, cached.activate(history, wt["scheduled_event_id"], started_time_ms)
        definition = self._workflows.get(wt["workflow_type"])
        if definition is None:
            raise WorkflowTaskError(
                f"workflow type {wt['workflow_type']!r} is not registered on this worker "
                f"(task queue {self.task_queue}; registered: {sorted(self._workflows)})"
            )
        info = WorkflowInfo(task["workflow_id"], task["run_id"], definition.name, wt["task_queue"])
        instance = WorkflowInstance(  # type: ignore[abstract]  # see WorkflowInstance
            definition, info, self.client.data_converter, self._interceptor_classes, self.client.runtime.metric_meter,
        )
        return instance, instance.activate(history, wt["scheduled_event_id"], started_time_ms)


class _TaskSlots:
    """The worker's workflow task slots (temporalio's max_concurrent_workflow_tasks): each task of
    the batch its poller runs holds one, taken whatever the count (its consumer fetched them
    already), and an eager start's first task one from its reservation to its answer, taken only
    when one is free. Each change is set on the SDK's slot gauges, as the activity slots' are,
    given the worker's context (none: a worker without workflows reports none)."""

    def __init__(self, size: int, context: WorkerContext | None) -> None:
        self._size = size
        self._used = 0
        self._context = context
        self._changed()

    def try_take(self) -> bool:
        if self._used >= self._size:
            return False
        self._used += 1
        self._changed()
        return True

    @contextlib.contextmanager
    def taken(self, count: int) -> Iterator[None]:
        if not count:  # the poller's empty batches, every 50 ms while idle: nothing to count
            yield
            return
        self._used += count
        self._changed()
        try:
            yield
        finally:
            self.give_back(count)

    def give_back(self, count: int = 1) -> None:
        self._used -= count
        self._changed()

    def _changed(self) -> None:
        if self._context is None:
            return
        attributes = self._context.metric_attributes(worker_type="WorkflowWorker")
        self._context.metrics.worker_task_slots_available.set(max(0, self._size - self._used), attributes)
        self._context.metrics.worker_task_slots_used.set(self._used, attributes)


@dataclass(frozen=True)
class _EagerSlot:
    """A slot WorkflowWorker.reserve_eager_slot gave an eager start (kadence.client._eager.EagerSlot)."""

    identity: str
    worker: WorkflowWorker

    def run(self, task: Task, started_time_ms: int) -> None:
        self.worker.run_eager(task, started_time_ms)

    def release(self) -> None:
        self.worker._slots.give_back()
