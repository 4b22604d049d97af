"""The worker: polls a task queue's workflow and activity topics and answers with commands (as temporalio.worker).

Workers on one queue share a consumer group per task kind, so Kafka spreads the partitions
(and the load) over them. Workflow tasks are keyed by workflow_id, so a worker keeps the same
executions while the assignment is stable and serves them from its cache.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import inspect
import logging
import pickle
import threading
import time
import typing
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from confluent_kafka import KafkaException, Message

from kadence import activity as activity_module
from kadence import workflow as workflow_module
from kadence._workflow_instance import (
    CacheInvalid,
    LocalActivity,
    WorkflowDefinition,
    WorkflowInfo,
    WorkflowInstance,
    WorkflowTaskError,
    replay,
)
from kadence.client import Client
from kadence.common import retry_backoff_ms
from kadence.exceptions import ApplicationError, ApplicationErrorCategory, CancelledError, CommandTooLargeError, NondeterminismError
from kadence.protocol import topics
from kadence.protocol.codec import UndecodableRecord, codec, task_codec
from kadence.protocol.events import CLOSE_COMMANDS, WORKFLOW_TASK_TOO_LARGE
from kadence.protocol.kafka import consume_batches, ensure_topics, make_consumer
from kadence.protocol.read_model import CommandOutcome
from kadence.protocol.task_token import TaskToken
from kadence.shared_state import ProcessHeartbeat, SharedStateManager, run_sync_activity
from kadence.visibility import fetch_event_ranges

log = logging.getLogger("kadence.worker")

POLLER_HEARTBEAT_S = 5.0
# How long a workflow task waits for the read model to hold the earlier events it needs (the
# visibility projector writes them a moment after history): the default workflow task timeout.
HISTORY_WAIT_S = 10.0
LOCAL_RETRY_BUDGET_MS = 5000  # retries of a local activity without schedule_to_close stay within this

Record = dict[str, Any]


class Worker:
    def __init__(
        self,
        client: Client,
        *,
        task_queue: str,
        workflows: Sequence[type] = (),
        activities: Sequence[Callable[..., Any]] = (),
        activity_executor: concurrent.futures.Executor | None = None,
        max_concurrent_activities: int = 100,
        max_cached_workflows: int = 1000,
        graceful_shutdown_timeout: timedelta = timedelta(),
        max_task_queue_activities_per_second: float | None = None,
        identity: str | None = None,
        shared_state_manager: SharedStateManager | None = None,
    ) -> None:
        if not workflows and not activities:
            raise ValueError("a Worker needs at least one workflow or activity")
        self.client = client
        self.task_queue = task_queue
        self.identity = identity or client.identity
        self._workflows: dict[str, WorkflowDefinition] = {}
        for cls in workflows:
            definition = workflow_module.definition(cls)
            assert isinstance(definition, WorkflowDefinition)
            self._workflows[definition.name] = definition
        # The callable registered is the one called: a bound method keeps its object (as temporalio).
        self._activities = {
            d.name: dataclasses.replace(d, fn=fn) for d, fn in ((activity_module.definition(fn), fn) for fn in activities)
        }
        _check_sync_activities(self._activities.values(), activity_executor, shared_state_manager)
        if activity_executor is None and any(not d.is_async for d in self._activities.values()):
            activity_executor = concurrent.futures.ThreadPoolExecutor(max_concurrent_activities, thread_name_prefix="kadence-activity")
        self._executor = activity_executor
        self._shared_state_manager = shared_state_manager
        self._max_concurrent_activities = max_concurrent_activities
        self._max_cached = max_cached_workflows
        self._graceful_shutdown_timeout = graceful_shutdown_timeout
        self._cache: collections.OrderedDict[str, WorkflowInstance] = collections.OrderedDict()
        self._tasks = task_codec()
        self._stop = asyncio.Event()
        self._running: asyncio.Task[None] | None = None
        self._attempts: dict[tuple[str, int, int], tuple[asyncio.Task[Any], _Heartbeater, bool]] = {}
        self._assigned: set[str] = set()
        self._partitions: dict[str, list[int]] = {}  # per kind, this worker's partitions of the queue's topic
        self._assignment_changed = asyncio.Event()
        self._activity_rate = _QueueShareRate(max_task_queue_activities_per_second)
        self._kinds: list[topics.TaskKind] = (["workflow"] if self._workflows else []) + (["activity"] if self._activities else [])
        self.ready = asyncio.Event()
        """Set once every poller of this worker has partitions assigned (useful for tests and probes)."""

    async def run(self) -> None:
        """Poll until shutdown() is called."""
        kinds = self._kinds
        settings = self.client.settings
        await asyncio.get_running_loop().run_in_executor(None, ensure_topics, settings, {
            topics.task_queue_topic(self.task_queue, kind): settings.task_queue_partitions for kind in kinds
        })
        log.info("event=worker_started task_queue=%s identity=%s workflows=%s activities=%s",
                 self.task_queue, self.identity, sorted(self._workflows), sorted(self._activities))
        pollers = {"workflow": self._poll_workflow_tasks, "activity": self._poll_activity_tasks}
        announcing = asyncio.create_task(self._announce())
        try:
            await asyncio.gather(*(pollers[kind]() for kind in kinds))
        finally:
            announcing.cancel()

    async def _announce(self) -> None:
        """Tell `kadence task-queue describe` this worker polls the queue (and which partitions)."""
        heartbeats = codec("PollerHeartbeat")
        while True:
            self._assignment_changed.clear()
            for kind, partitions in self._partitions.items():
                heartbeat = {"task_queue": self.task_queue, "kind": kind, "identity": self.identity,
                             "partitions": partitions, "sent_at_ms": int(time.time() * 1000)}
                self.client.produce(topics.POLLERS, heartbeats.encode(heartbeat), self.task_queue.encode(), heartbeats.headers())
            with contextlib.suppress(TimeoutError):  # every few seconds, and at once when the assignment changes
                await asyncio.wait_for(self._assignment_changed.wait(), POLLER_HEARTBEAT_S)

    async def readiness_problems(self) -> list[str]:
        """Why this worker is not ready (empty once it polls partitions of every task kind, while
        its client hears answers from Postgres): what a worker's /readyz reports."""
        problems = [] if self.ready.is_set() else [f"task queue {self.task_queue!r}: partitions not assigned yet"]
        return problems + self.client.readiness_problems()

    async def shutdown(self) -> None:
        self._stop.set()
        if self._running is not None:
            await self._running

    async def __aenter__(self) -> "Worker":
        self._running = asyncio.create_task(self.run())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    async def _subscribe(self, consumer: Any, kind: topics.TaskKind) -> None:
        loop = asyncio.get_running_loop()
        topic = topics.task_queue_topic(self.task_queue, kind)
        metadata = await loop.run_in_executor(None, lambda: consumer.list_topics(topic, timeout=30))
        total = len(metadata.topics[topic].partitions)

        def assigned(consumer: Any, partitions: list[Any]) -> None:
            log.info("event=worker_partitions_assigned task_queue=%s kind=%s identity=%s partitions=%s",
                     self.task_queue, kind, self.identity, [tp.partition for tp in partitions])
            loop.call_soon_threadsafe(self._mark_assigned, kind, sorted(tp.partition for tp in partitions), total)

        def revoked(consumer: Any, partitions: list[Any]) -> None:
            loop.call_soon_threadsafe(self._partitions.__setitem__, kind, [])

        consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)

    def _mark_assigned(self, kind: str, partitions: list[int], total: int) -> None:
        self._partitions[kind] = partitions
        self._assignment_changed.set()
        if kind == "activity":
            self._activity_rate.share = len(partitions) / total
        self._assigned.add(kind)
        if self._assigned >= set(self._kinds):
            self.ready.set()

    # ---- workflow tasks ----------------------------------------------------------------------

    async def _poll_workflow_tasks(self) -> None:
        consumer = make_consumer(self.client.settings, topics.worker_group(self.task_queue, "workflow"))
        await self._subscribe(consumer, "workflow")
        try:
            async for messages in consume_batches(consumer, self._stop):
                try:
                    await self._handle_workflow_tasks(messages)
                except Exception as exc:  # a bug must not stop the poller: history dispatches the tasks again
                    log.exception("event=workflow_task_batch_failed task_queue=%s tasks=%d error=%r",
                                  self.task_queue, len(messages), str(exc))
                for msg in messages:
                    consumer.store_offsets(msg)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, consumer.close)

    async def _handle_workflow_tasks(self, messages: list[Message]) -> None:
        """One batch: each task is answered, and a task whose payloads cannot be decoded fails."""
        tasks: list[Record] = []
        deliveries: list[tuple[Record, asyncio.Future[Any]]] = []
        for msg in messages:
            decoded = await self._decode(msg)
            if decoded is None:
                continue
            task, problem = decoded
            if problem is None:
                tasks.append(task)
            elif task["task"][0] == "QueryTask":
                deliveries.append((task, asyncio.ensure_future(self._answer_query(task, problem))))
            else:
                deliveries.append((task, self._fail_workflow_task(task, problem)))
        earlier = await self._earlier_events([task for task in tasks if self._lacks(task) is not None])
        for task in tasks:
            deliveries += [(task, delivery) for delivery in await self._handle_workflow_task(task, earlier)]
        outcomes = await asyncio.gather(*(delivery for _, delivery in deliveries), return_exceptions=True)
        for (task, _), outcome in zip(deliveries, outcomes, strict=True):
            if isinstance(outcome, Exception):
                log.error("event=workflow_task_answer_failed workflow_id=%s run_id=%s error=%r",
                          task["workflow_id"], task["run_id"], str(outcome))

    async def _handle_workflow_task(
        self, task: Record, earlier: dict[tuple[str, str], list[Record] | None],
    ) -> list[asyncio.Future[Message]]:
        if task["task"][0] == "QueryTask":
            return [asyncio.ensure_future(self._answer_query(task))]
        workflow_id, run_id = task["workflow_id"], task["run_id"]
        wt = task["task"][1]
        cached = self._cache.get(run_id)
        if cached is not None and cached.last_activated_task >= wt["scheduled_event_id"]:
            return []  # a duplicate dispatch of a task this worker already answered
        started_time_ms = int(time.time() * 1000)  # workflow.now() for this task, recorded as its WorkflowTaskStarted time
        started = self._send(workflow_id, "RecordWorkflowTaskStarted", {
            "run_id": run_id, "scheduled_event_id": wt["scheduled_event_id"], "started_time_ms": started_time_ms,
        })
        try:
            history = await self._task_history(task, earlier)
            try:
                instance, commands = self._activate(task, cached, history, started_time_ms)
            except CacheInvalid as reason:
                log.info("event=workflow_cache_evicted workflow_id=%s run_id=%s reason=%r", workflow_id, run_id, str(reason))
                self._cache.pop(run_id, None)
                instance, commands = self._activate(task, None, await self._task_history(task, {}), started_time_ms)
        except Exception as exc:  # the workflow task fails with the reason, visible in the history; the run goes on
            return [started, self._fail_workflow_task(task, exc)]
        if instance.local_activities_to_run():
            return [started, asyncio.ensure_future(self._complete_after_local_activities(task, instance, commands))]
        return [started, self._complete_workflow_task(task, instance, commands)]

    def _lacks(self, task: Record) -> tuple[int, int] | None:
        """The events (after, before; both exclusive) a workflow task needs that neither this worker's
        cache nor the task holds: the task brings those after the previous task's (what a worker
        that ran it has), or none when they were too large to carry."""
        if task["task"][0] != "WorkflowTask":
            return None
        wt = task["task"][1]
        cached = self._cache.get(task["run_id"])
        have = cached.processed_event_id if cached is not None else 0
        first = wt["first_event_id"] if wt["history"] else wt["scheduled_event_id"] + 1
        return (have, first) if first > have + 1 else None

    async def _earlier_events(self, tasks: list[Record]) -> dict[tuple[str, str], list[Record] | None]:
        """The events these workflow tasks lack, from the read model in one query, asked again
        while the visibility projector has not written them all yet (for at most
        HISTORY_WAIT_S). None for a run whose events did not all arrive: its task fails."""
        wanted = {(t["workflow_id"], t["run_id"]): lacks for t in tasks if (lacks := self._lacks(t)) is not None}
        found: dict[tuple[str, str], list[Record] | None] = dict.fromkeys(wanted)
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
                    found[run] = events
                    del wanted[run]
            if not wanted or time.monotonic() + delay > deadline:
                break
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
        await self.client.data_converter.decode_payloads([events for events in found.values() if events is not None])
        return found

    async def _task_history(self, task: Record, earlier: dict[tuple[str, str], list[Record] | None]) -> list[Record]:
        """The events to activate the task with: those it lacks (read with the batch it came in,
        else now: the cache may have changed since), then those it brings."""
        wt = task["task"][1]
        lacks = self._lacks(task)
        if lacks is None:
            return wt["history"]
        run = (task["workflow_id"], task["run_id"])
        events = earlier.get(run, [])
        if events is not None and (len(events) != lacks[1] - lacks[0] - 1 or (events and events[0]["event_id"] != lacks[0] + 1)):
            events = (await self._earlier_events([task]))[run]
        if events is None:
            raise WorkflowTaskError(
                f"workflow task {wt['scheduled_event_id']} of {task['workflow_id']} (run {task['run_id']}) needs events "
                f"{lacks[0] + 1} to {lacks[1] - 1}, which the read model did not hold within {HISTORY_WAIT_S:.0f} s: "
                "check that the visibility service runs and keeps up (kadence_consumer_lag) and that Postgres is reachable"
            )
        return events + wt["history"]

    def _fail_workflow_task(self, task: Record, exc: Exception) -> asyncio.Future[Message]:
        workflow_id, run_id, wt = task["workflow_id"], task["run_id"], task["task"][1]
        self._cache.pop(run_id, None)
        cause = "NON_DETERMINISTIC_ERROR" if isinstance(exc, NondeterminismError) else "WORKFLOW_WORKER_UNHANDLED_FAILURE"
        log.error("event=workflow_task_failed workflow_id=%s run_id=%s cause=%s error=%r", workflow_id, run_id, cause, str(exc))
        return self._send(workflow_id, "RespondWorkflowTaskFailed", {
            "run_id": run_id, "scheduled_event_id": wt["scheduled_event_id"], "cause": cause,
            "failure": self.client.data_converter.to_failure(exc),
        })

    def _complete_workflow_task(self, task: Record, instance: WorkflowInstance, commands: list[Any]) -> asyncio.Future[Message]:
        run_id = task["run_id"]
        sent = self._send(task["workflow_id"], "RespondWorkflowTaskCompleted", {
            "run_id": run_id, "scheduled_event_id": task["task"][1]["scheduled_event_id"], "commands": commands,
        })
        completed = asyncio.ensure_future(self._completed_or_too_large(task, sent))
        if instance.closed or any(kind in CLOSE_COMMANDS for kind, _ in commands):
            self._cache.pop(run_id, None)
        else:
            self._cache[run_id] = instance
            self._cache.move_to_end(run_id)
            while len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)
        return completed

    async def _completed_or_too_large(self, task: Record, completed: asyncio.Future[Message]) -> Message:
        """A completion too large for a record fails the workflow task instead, with the cause that
        ends the run (as Temporal ends a run whose completion exceeds gRPC's message size): the
        workflow code would issue the same commands on every attempt."""
        try:
            return await completed
        except CommandTooLargeError as exc:
            self._cache.pop(task["run_id"], None)
            log.error("event=workflow_task_failed workflow_id=%s run_id=%s cause=%s error=%r",
                      task["workflow_id"], task["run_id"], WORKFLOW_TASK_TOO_LARGE, str(exc))
            return await self._send(task["workflow_id"], "RespondWorkflowTaskFailed", {
                "run_id": task["run_id"], "scheduled_event_id": task["task"][1]["scheduled_event_id"],
                "cause": WORKFLOW_TASK_TOO_LARGE, "failure": self.client.data_converter.to_failure(exc),
            })

    async def _complete_after_local_activities(self, task: Record, instance: WorkflowInstance, commands: list[Any]) -> None:
        """Run the local activities the workflow waits on, record their outcomes, and run on until
        it waits on nothing local; then complete the task with every command."""
        try:
            while pending := instance.local_activities_to_run():
                outcomes = await asyncio.gather(*(self._run_local_activity(task, local) for local in pending))
                commands += instance.resolve_local_activities(dict(outcomes))
        except Exception as exc:
            await self._fail_workflow_task(task, exc)
            return
        await self._complete_workflow_task(task, instance, commands)

    async def _run_local_activity(self, task: Record, local: LocalActivity) -> tuple[int, dict[str, list[Record]]]:
        """Attempts per the retry policy, within the workflow task; the outcome as marker details."""
        attrs = local.attributes
        payloads = self.client.data_converter.payload_converter
        details = {"seq": payloads.to_payloads([local.seq]), "activity_type": payloads.to_payloads([attrs["activity_type"]])}
        policy = attrs["retry_policy"] or {}
        budget_ms = attrs["schedule_to_close_timeout_ms"] or LOCAL_RETRY_BUDGET_MS
        deadline = time.monotonic() + budget_ms / 1000
        attempt = 1
        while True:
            context = contextvars.copy_context()
            context.run(activity_module._current_info.set, activity_module.Info(
                activity_id=str(local.seq), activity_type=attrs["activity_type"], attempt=attempt, scheduled_time=datetime.now(UTC),
                task_queue=self.task_queue, workflow_id=task["workflow_id"], workflow_run_id=task["run_id"],
                workflow_type=task["task"][1]["workflow_type"], is_local=True,
            ))
            context.run(activity_module._current_heartbeat.set, lambda *details: None)
            try:
                result = await asyncio.wait_for(
                    self._call_activity(attrs["activity_type"], attrs["input"], context),
                    (attrs["start_to_close_timeout_ms"] or attrs["schedule_to_close_timeout_ms"]) / 1000,
                )
                return local.seq, {**details, "result": [payloads.to_payload(result)]}
            except Exception as exc:  # an attempt failed: retry, or record the failure
                failure = self.client.data_converter.to_failure(exc)
                maximum = policy.get("maximum_attempts") or 0
                asked_ms = failure["next_retry_delay_ms"]  # ApplicationError(next_retry_delay=...) overrides the policy
                backoff_s = (asked_ms if asked_ms is not None else retry_backoff_ms(policy, attempt)) / 1000
                if failure["non_retryable"] or failure["type"] in policy.get("non_retryable_error_types", ()):
                    retry_state = "NON_RETRYABLE_FAILURE"
                elif maximum and attempt >= maximum:
                    retry_state = "MAXIMUM_ATTEMPTS_REACHED"
                elif time.monotonic() + backoff_s >= deadline:
                    retry_state = "TIMEOUT"
                else:
                    attempt += 1
                    await asyncio.sleep(backoff_s)
                    continue
                log.log(_failure_log_level(exc),
                        "event=local_activity_failed workflow_id=%s run_id=%s activity_type=%s attempt=%d retry_state=%s error=%r",
                        task["workflow_id"], task["run_id"], attrs["activity_type"], attempt, retry_state, str(exc))
                recorded = {"message": failure["message"], "type": failure["type"], "non_retryable": failure["non_retryable"],
                            "retry_state": retry_state}
                return local.seq, {**details, "failure": [payloads.to_payload(recorded)]}

    async def _answer_query(self, task: Record, problem: Exception | None = None) -> None:
        """Answer from the cached run, or from a replay of its recorded history (a closed run too);
        a query whose arguments or answer the payload codec cannot handle is answered with the error."""
        query = task["task"][1]
        answer: Record = {"query_id": query["query_id"], "result": None, "error": None}
        try:
            if problem is not None:
                raise problem
            instance = self._cache.get(task["run_id"]) or await self._replay(task)
            answer["result"] = instance.query(query["query_type"], query["args"])
            await self.client.data_converter.encode_payloads(answer)
        except Exception as exc:  # the query failed: the caller hears why
            log.info("event=query_failed workflow_id=%s run_id=%s query_type=%s error=%r",
                     task["workflow_id"], task["run_id"], query["query_type"], str(exc))
            answer = {"query_id": query["query_id"], "result": None, "error": self.client.data_converter.to_failure(exc)}
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

    async def _replay(self, task: Record) -> WorkflowInstance:
        workflow_type = task["task"][1]["workflow_type"]
        definition = self._workflows.get(workflow_type)
        if definition is None:
            raise ApplicationError(f"workflow type {workflow_type!r} is not registered on this worker", type="NotFoundError")
        history = await self.client.get_workflow_handle(task["workflow_id"], run_id=task["run_id"]).fetch_history()
        if not history.events:
            raise ApplicationError(f"workflow {task['workflow_id']} has no recorded history yet", type="NotFoundError")
        await self.client.data_converter.decode_payloads(history.events)
        info = WorkflowInfo(task["workflow_id"], task["run_id"], definition.name, self.task_queue)
        return replay(definition, info, self.client.data_converter, history.events)

    def _activate(
        self, task: Record, cached: WorkflowInstance | None, history: list[Record], started_time_ms: int,
    ) -> tuple[WorkflowInstance, list[Any]]:
        wt = task["task"][1]
        if cached is not None:
            return cached, cached.activate(history, wt["scheduled_event_id"], started_time_ms)
        definition = self._workflows.get(wt["workflow_type"])
        if definition is None:
            raise WorkflowTaskError(
                f"workflow type {wt['workflow_type']!r} is not registered on this worker "
                f"(task queue {self.task_queue}; registered: {sorted(self._workflows)})"
            )
        info = WorkflowInfo(task["workflow_id"], task["run_id"], definition.name, wt["task_queue"])
        instance = WorkflowInstance(definition, info, self.client.data_converter)
        return instance, instance.activate(history, wt["scheduled_event_id"], started_time_ms)

    # ---- activity tasks ----------------------------------------------------------------------

    async def _poll_activity_tasks(self) -> None:
        consumer = make_consumer(self.client.settings, topics.worker_group(self.task_queue, "activity"))
        await self._subscribe(consumer, "activity")
        slots = asyncio.Semaphore(self._max_concurrent_activities)
        running: set[asyncio.Task[None]] = set()
        try:
            async for messages in consume_batches(consumer, self._stop, max_messages=self._max_concurrent_activities):
                started = []
                for msg in messages:
                    try:
                        started += await self._start_activity_task(msg, slots, running)
                    except Exception as exc:  # a bug must not stop the poller: history dispatches the attempt again
                        log.exception("event=activity_task_not_started topic=%s partition=%d offset=%d error=%r",
                                      msg.topic(), msg.partition(), msg.offset(), str(exc))
                for outcome in await asyncio.gather(*started, return_exceptions=True):
                    if isinstance(outcome, Exception):
                        log.error("event=activity_start_not_sent task_queue=%s error=%r", self.task_queue, str(outcome))
                for msg in messages:
                    consumer.store_offsets(msg)
            await self._drain_activities(running)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, consumer.close)

    async def _start_activity_task(
        self, msg: Message, slots: asyncio.Semaphore, running: set[asyncio.Task[None]],
    ) -> list[asyncio.Future[Message]]:
        """Ask history to start the attempt the record holds, and run it once accepted (a record
        whose payloads cannot be decoded runs as an attempt that fails with the reason)."""
        decoded = await self._decode(msg)
        if decoded is None:
            return []
        task, problem = decoded
        if task["task"][0] == "ActivityCancellation":
            self._cancel_attempt(task)
            return []
        at = task["task"][1]
        if 0 < at["schedule_to_start_deadline_ms"] < time.time() * 1000:
            log.info("event=activity_task_expired workflow_id=%s run_id=%s activity_type=%s attempt=%d",
                     task["workflow_id"], task["run_id"], at["activity_type"], at["attempt"])
            return []  # its schedule-to-start timeout fires instead
        await slots.acquire()
        try:
            await self._activity_rate.wait()
            # The attempt runs only once the history service accepted its start: not for a
            # closed run, a stale attempt or one whose schedule-to-start timeout fired. Each
            # delivery asks with its own request id (as each Temporal poll does): matching may
            # route a task again, and the copy's refusal must not read as the first's acceptance.
            request_id = f"{task['run_id']}/{at['scheduled_event_id']}/{at['attempt']}/{uuid.uuid4()}"
            answer = await self.client.expect_outcome(request_id)
            started = self._send(task["workflow_id"], "RecordActivityTaskStarted", {
                "run_id": task["run_id"], "scheduled_event_id": at["scheduled_event_id"], "attempt": at["attempt"],
                "request_id": request_id,
            })
        except BaseException:
            slots.release()
            raise
        job = asyncio.create_task(self._run_activity_once_started(task, answer, problem))
        running.add(job)
        job.add_done_callback(lambda j: (running.discard(j), slots.release(), _log_lost_activity(j, task)))
        return [started]

    async def _drain_activities(self, running: set[asyncio.Task[None]]) -> None:
        """On shutdown, give running activities the grace period, then cancel them (as temporalio does)."""
        if not running:
            return
        _, pending = await asyncio.wait(running, timeout=self._graceful_shutdown_timeout.total_seconds())
        for job in pending:
            job.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _cancel_attempt(self, task: Record) -> None:
        """The workflow asked to cancel this attempt: an async activity is cancelled where it awaits,
        a sync one raises CancelledError at its next heartbeat (as temporalio)."""
        cancellation = task["task"][1]
        attempt = self._attempts.get((task["run_id"], cancellation["scheduled_event_id"], cancellation["attempt"]))
        if attempt is None:
            return  # finished already, or running elsewhere
        job, heartbeater, is_async = attempt
        heartbeater.request_cancel()
        if is_async:
            job.cancel()

    async def _run_activity_once_started(
        self, task: Record, answer: asyncio.Future[CommandOutcome], problem: Exception | None = None,
    ) -> None:
        outcome = await answer
        if outcome.accepted:
            await self._run_activity(task, problem)
            return
        at = task["task"][1]
        log.info("event=activity_task_dropped workflow_id=%s run_id=%s activity_type=%s attempt=%d cause=%s reason=%r",
                 task["workflow_id"], task["run_id"], at["activity_type"], at["attempt"], outcome.cause, outcome.reason)

    async def _run_activity(self, task: Record, problem: Exception | None = None) -> None:
        at = task["task"][1]
        workflow_id, run_id = task["workflow_id"], task["run_id"]
        converter = self.client.data_converter
        reply = {"run_id": run_id, "scheduled_event_id": at["scheduled_event_id"], "attempt": at["attempt"]}
        key = (run_id, at["scheduled_event_id"], at["attempt"])
        heartbeater = _Heartbeater(self, task)
        definition = self._activities.get(at["activity_type"])
        current = asyncio.current_task()
        assert current is not None
        self._attempts[key] = (current, heartbeater, definition is None or definition.is_async)
        try:
            if problem is not None:
                raise problem
            result = converter.payload_converter.to_payload(await self._execute_activity(task, heartbeater))
        except activity_module._CompleteAsyncError:  # completed later, by task token; its timeouts still run
            log.info("event=activity_completing_async workflow_id=%s run_id=%s activity_type=%s attempt=%d",
                     workflow_id, run_id, at["activity_type"], at["attempt"])
            return
        except (asyncio.CancelledError, CancelledError) as exc:
            if heartbeater.cancel_requested:
                await self._send(workflow_id, "RespondActivityTaskCanceled", {**reply, "details": []})
                return
            if isinstance(exc, CancelledError):
                await self._send(workflow_id, "RespondActivityTaskFailed", {**reply, "failure": converter.to_failure(exc)})
                return
            # Report it, so the retry policy schedules the next attempt without waiting for a timeout.
            shutdown = ApplicationError("activity cancelled: the worker is shutting down", type="WorkerShutdown")
            await self._send(workflow_id, "RespondActivityTaskFailed", {**reply, "failure": converter.to_failure(shutdown)})
            return
        except Exception as exc:  # an activity's failure is data: it goes back to history
            log.log(_failure_log_level(exc), "event=activity_failed workflow_id=%s run_id=%s activity_type=%s attempt=%d error=%r",
                    workflow_id, run_id, at["activity_type"], at["attempt"], str(exc))
            await self._send(workflow_id, "RespondActivityTaskFailed", {**reply, "failure": converter.to_failure(exc)})
            return
        finally:
            self._attempts.pop(key, None)
            heartbeater.close()
        await self._send(workflow_id, "RespondActivityTaskCompleted", {**reply, "result": result})

    async def _execute_activity(self, task: Record, heartbeater: "_Heartbeater") -> Any:
        at = task["task"][1]
        info = activity_module.Info(
            activity_id=at["activity_id"], activity_type=at["activity_type"], attempt=at["attempt"],
            scheduled_time=datetime.fromtimestamp(at["scheduled_time_ms"] / 1000, UTC), task_queue=at["task_queue"],
            workflow_id=task["workflow_id"], workflow_run_id=task["run_id"], workflow_type=at["workflow_type"],
            heartbeat_details=tuple(self.client.data_converter.payload_converter.from_payloads(at["heartbeat_details"])),
            task_token=TaskToken(task["workflow_id"], task["run_id"], at["scheduled_event_id"], at["attempt"], at["activity_id"]).encode(),
        )
        context = contextvars.copy_context()
        context.run(activity_module._current_info.set, info)
        context.run(activity_module._current_heartbeat.set, heartbeater)
        return await self._call_activity(at["activity_type"], at["input"], context)

    async def _call_activity(self, activity_type: str, payloads: list[Record], context: contextvars.Context | None = None) -> Any:
        """Call the registered activity with its decoded arguments: async ones on the loop, sync ones in the pool."""
        definition = self._activities.get(activity_type)
        if definition is None:
            raise ApplicationError(
                f"activity type {activity_type!r} is not registered on this worker "
                f"(task queue {self.task_queue}; registered: {sorted(self._activities)})",
                type="NotFoundError",
            )
        hints = typing.get_type_hints(definition.fn)
        arg_types = [hints.get(name) for name in inspect.signature(definition.fn).parameters]
        args = self.client.data_converter.payload_converter.from_payloads(payloads, arg_types)
        context = context or contextvars.copy_context()
        if definition.is_async:
            return await asyncio.create_task(definition.fn(*args), context=context)
        if isinstance(self._executor, concurrent.futures.ThreadPoolExecutor):
            return await asyncio.get_running_loop().run_in_executor(self._executor, context.run, definition.fn, *args)
        return await self._call_in_process(definition.fn, args, context)

    async def _call_in_process(self, fn: Callable[..., Any], args: list[Any], context: contextvars.Context) -> Any:
        """A sync activity on an executor of other processes: the context cannot cross to them, so
        its info goes as an argument, its heartbeats come back over the shared state manager's queue
        and its cancellation goes there as a shared event."""
        manager = self._shared_state_manager
        assert manager is not None  # checked when the worker was made
        loop = asyncio.get_running_loop()
        info = context[activity_module._current_info]
        heartbeat = context[activity_module._current_heartbeat]
        task_token = f"{info.workflow_run_id}/{info.activity_id}/{info.attempt}/{uuid.uuid4()}".encode()
        cancelled = await loop.run_in_executor(None, manager.new_event)
        if isinstance(heartbeat, _Heartbeater):
            relay = heartbeat.relay_from_thread
            await loop.run_in_executor(None, heartbeat.share_cancellation, cancelled)
        else:  # a local activity: heartbeats are ignored
            relay = _ignore_heartbeat
        sender = await manager.register_heartbeater(task_token, relay)
        try:
            return await loop.run_in_executor(
                self._executor, run_sync_activity, info, ProcessHeartbeat(task_token, sender, cancelled), fn, *args,
            )
        finally:
            await manager.unregister_heartbeater(task_token)

    def _send(self, workflow_id: str, kind: str, body: Record, *, until_delivered: bool = True) -> asyncio.Future[Message]:
        """A task's result (or start) goes to history however long the broker is away: a failed
        delivery is tried again until it succeeds (a repeat is rejected as stale; a loss would leave
        the task to its timeout, or for ever when it has none)."""
        return self.client.send_command(workflow_id, kind, body, identity=self.identity, until_delivered=until_delivered)

    async def _decode(self, msg: Message) -> tuple[Record, Exception | None] | None:
        """The task, its payloads through the payload codec, and why the codec could not decode
        them (the task then fails with that reason); None (logged) for bytes that are no task."""
        try:
            task = self._tasks.decode(msg.value(), msg.headers())
        except UndecodableRecord as exc:
            log.error("event=task_undecodable topic=%s partition=%d offset=%d error=%s", msg.topic(), msg.partition(), msg.offset(), exc)
            return None
        try:
            await self.client.data_converter.decode_payloads(task)
        except Exception as exc:
            log.error("event=task_payloads_undecodable workflow_id=%s run_id=%s error=%r", task["workflow_id"], task["run_id"], str(exc))
            return task, exc
        return task, None


class _QueueShareRate:
    """temporalio's max_task_queue_activities_per_second: the queue's rate is shared among its
    workers by the partitions they own (a worker with 2 of 8 partitions starts a quarter of it)."""

    def __init__(self, per_second: float | None) -> None:
        self.per_second = per_second
        self.share = 1.0
        self._next = 0.0

    async def wait(self) -> None:
        if not self.per_second or not self.share:
            return
        now = time.monotonic()
        self._next = max(self._next, now)
        delay = self._next - now
        self._next += 1 / (self.per_second * self.share)
        if delay > 0:
            await asyncio.sleep(delay)


class _Heartbeater:
    """Throttled heartbeats of one activity attempt, as temporalio: at most one send per 80% of the
    heartbeat timeout (30 s without one); between sends the latest details win. Callable from the
    activity's thread when the activity is sync."""

    def __init__(self, worker: Worker, task: Record) -> None:
        at = task["task"][1]
        self._worker = worker
        self._workflow_id = task["workflow_id"]
        self._reply = {"run_id": task["run_id"], "scheduled_event_id": at["scheduled_event_id"], "attempt": at["attempt"]}
        timeout_s = at["heartbeat_timeout_ms"] / 1000
        self._interval = min(timeout_s * 0.8, 30.0) if timeout_s else 30.0
        self._loop = asyncio.get_running_loop()
        self._last_sent = -self._interval
        self._pending: tuple[Any, ...] | None = None
        self._scheduled: asyncio.TimerHandle | None = None
        self._shared_cancel: threading.Event | None = None  # the attempt runs in another process
        self.cancel_requested = False

    def request_cancel(self) -> None:
        """The workflow asked to cancel the attempt: its next heartbeat raises CancelledError."""
        self.cancel_requested = True
        if self._shared_cancel is not None:
            self._shared_cancel.set()

    def share_cancellation(self, cancelled: threading.Event) -> None:
        """Set `cancelled` (an event of the attempt's process) when the attempt is cancelled."""
        self._shared_cancel = cancelled
        if self.cancel_requested:
            cancelled.set()

    def relay_from_thread(self, *details: Any) -> None:
        """A heartbeat the shared state manager's reader received from the attempt's process."""
        self._loop.call_soon_threadsafe(self._heartbeat, details)

    def __call__(self, *details: Any) -> None:
        if self.cancel_requested:
            raise CancelledError("activity cancelled: the workflow requested it")
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._heartbeat(details)
        else:
            self._loop.call_soon_threadsafe(self._heartbeat, details)

    def _heartbeat(self, details: tuple[Any, ...]) -> None:
        self._pending = details
        due = self._last_sent + self._interval
        if self._loop.time() >= due:
            self._send()
        elif self._scheduled is None:
            self._scheduled = self._loop.call_at(due, self._send)

    def _send(self) -> None:
        self._scheduled = None
        if self._pending is None:
            return
        details, self._pending = self._pending, None
        self._last_sent = self._loop.time()
        payloads = self._worker.client.data_converter.payload_converter.to_payloads(details)
        # Not tried again: a late heartbeat could overwrite newer details.
        sent = self._worker._send(
            self._workflow_id, "RecordActivityTaskHeartbeat", {**self._reply, "details": payloads}, until_delivered=False,
        )
        sent.add_done_callback(_log_failed_heartbeat)

    def close(self) -> None:
        if self._scheduled is not None:
            self._scheduled.cancel()


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


def _ignore_heartbeat(*details: Any) -> None:
    """Heartbeats of a local activity are ignored (as temporalio)."""


def _log_lost_activity(job: asyncio.Task[None], task: Record) -> None:
    """An attempt whose outcome could not be sent (its reply too large, say) is left to its timeout: say so."""
    if not job.cancelled() and job.exception() is not None:
        log.error("event=activity_outcome_not_sent workflow_id=%s run_id=%s activity_type=%s error=%r",
                  task["workflow_id"], task["run_id"], task["task"][1]["activity_type"], str(job.exception()))


def _log_failed_heartbeat(sent: asyncio.Future[Message]) -> None:
    if not sent.cancelled() and sent.exception() is not None:
        log.warning("event=heartbeat_not_sent error=%r", str(sent.exception()))


def _failure_log_level(exc: BaseException) -> int:
    """An ApplicationError of category BENIGN is expected by the application: logged at DEBUG (as temporalio)."""
    benign = isinstance(exc, ApplicationError) and exc.category == ApplicationErrorCategory.BENIGN
    return logging.DEBUG if benign else logging.INFO
