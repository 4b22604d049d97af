"""The worker: polls a task queue's workflow and activity topics and answers with commands (as
temporalio.worker's Worker, which it splits likewise: the workflow side in _workflow.py, the
activity side in _activity.py, an attempt's heartbeats in _heartbeats.py). The Worker makes the
WorkerContext both sides share (_context.py), and with it the partitions assigned to them
(_assignment.py).

Workers on one queue share a consumer group per task kind, so Kafka spreads the partitions
(and the load) over them. Workflow tasks are keyed by workflow_id, so a worker keeps the same
executions while the assignment is stable and serves them from its cache.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from kadence import workflow as workflow_module
from kadence.client import Client
from kadence.protocol import topics
from kadence.protocol.codec import codec
from kadence.protocol.kafka import ensure_topics
from kadence.worker._activity import ActivityWorker
from kadence.worker._assignment import PartitionAssignment
from kadence.worker._context import WorkerContext
from kadence.worker._interceptor import Interceptor, WorkflowInterceptorClassInput
from kadence.worker._nexus import NexusWorker
from kadence.worker._polling import PollerBehavior, check_at_least_one
from kadence.worker._runner import WorkflowRunner
from kadence.worker._shared_state import SharedStateManager
from kadence.worker._workflow import WorkflowWorker
from kadence.workflow._definition import WorkflowDefinition

log = logging.getLogger("kadence.worker")

POLLER_HEARTBEAT_S = 5.0



def _heartbeat_unsent(sent: asyncio.Future[Any]) -> None:
    """A poller heartbeat the broker did not take in time (it is away: kafka_brokers_down says so
    already); the next, a few seconds on, says the same. Read here, so asyncio does not log the
    failure as an ERROR ("Future exception was never retrieved") when the future is collected."""
    if not sent.cancelled() and sent.exception() is not None:
        log.debug("event=poller_heartbeat_not_sent error=%r", str(sent.exception()))


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
        interceptors: Sequence[Interceptor] = (),
        disable_eager_activity_execution: bool = False,
        workflow_runner: WorkflowRunner | None = None,
        unsandboxed_workflow_runner: WorkflowRunner | None = None,
        workflow_failure_exception_types: Sequence[type[BaseException]] = (),
        workflow_task_executor: concurrent.futures.ThreadPoolExecutor | None = None,
        max_concurrent_workflow_tasks: int | None = None,
        max_concurrent_workflow_task_polls: int | None = None,
        max_concurrent_activity_task_polls: int | None = None,
        workflow_task_poller_behavior: PollerBehavior | None = None,
        activity_task_poller_behavior: PollerBehavior | None = None,
        nexus_service_handlers: Sequence[Any] = (),
        max_concurrent_nexus_tasks: int = 100,
    ) -> None:
        """`workflow_runner` and `unsandboxed_workflow_runner` are taken as temporalio's: Kadence runs
        every workflow unsandboxed whatever they say (kadence/worker/workflow_sandbox/).
        `workflow_failure_exception_types`: exceptions that fail any of its workflows rather than
        their workflow task, as each workflow's own `@workflow.defn(failure_exception_types=...)`.
        `workflow_task_executor`: workflow activations run on its threads (as temporalio's, which
        needs one; without it they run on the worker's event loop, one at a time either way).
        `max_concurrent_workflow_tasks` (100 unless given, as temporalio's) bounds the workflow
        tasks the worker holds at once where an eager start of its client would add one; the poll
        limits and behaviours are checked and bound nothing (kadence/worker/_polling.py).
        `nexus_service_handlers`: instances of @nexusrpc.handler.service_handler classes, whose
        operations this worker runs for the Nexus endpoints that target its task queue."""
        if not workflows and not activities and not nexus_service_handlers:
            raise ValueError("a Worker needs at least one workflow, activity or Nexus service handler")
        check_at_least_one(
            max_concurrent_workflow_tasks=max_concurrent_workflow_tasks,
            max_concurrent_workflow_task_polls=max_concurrent_workflow_task_polls,
            max_concurrent_activity_task_polls=max_concurrent_activity_task_polls,
        )
        self.client = client
        # As temporalio: the client's interceptors that are also worker interceptors come first.
        self.interceptors = [i for i in client.interceptors if isinstance(i, Interceptor)] + list(interceptors)
        class_input = WorkflowInterceptorClassInput(unsafe_extern_functions={})
        self.workflow_interceptor_classes = [
            cls for cls in (i.workflow_interceptor_class(class_input) for i in self.interceptors) if cls is not None
        ]
        self.task_queue = task_queue
        self.identity = identity or client.identity
        definitions: dict[str, WorkflowDefinition] = {}
        for cls in workflows:
            definition = workflow_module.definition(cls)
            assert isinstance(definition, WorkflowDefinition)
            if workflow_failure_exception_types:
                failing = definition.failure_exception_types + tuple(workflow_failure_exception_types)
                definition = dataclasses.replace(definition, failure_exception_types=failing)
            definitions[definition.name] = definition
        self._running: asyncio.Task[None] | None = None
        self._kinds: list[topics.TaskKind] = []  # the task kinds this worker polls
        if definitions:
            self._kinds.append("workflow")
        if activities:
            self._kinds.append("activity")
        if nexus_service_handlers:
            self._kinds.append("nexus")
        self._context = WorkerContext(client, task_queue, self.identity, PartitionAssignment(task_queue, self.identity, self._kinds))
        self._activity_worker = ActivityWorker(
            self._context, activities, self.interceptors, activity_executor, shared_state_manager, max_concurrent_activities,
            graceful_shutdown_timeout, max_task_queue_activities_per_second, disable_eager_activity_execution,
        )
        self._workflow_worker = WorkflowWorker(
            self._context, definitions, self.workflow_interceptor_classes, self._activity_worker, max_cached_workflows,
            workflow_task_executor, max_concurrent_workflow_tasks,
        )
        self._nexus_worker = NexusWorker(self._context, nexus_service_handlers, max_concurrent_nexus_tasks)
        self._context.metrics.worker_start.add(1, self._context.metric_attributes())
        self.ready = self._context.assignment.complete
        """Set once every poller of this worker has partitions assigned (useful for tests and probes)."""

    async def run(self) -> None:
        """Poll until shutdown() is called."""
        kinds = self._kinds
        await self.client._fit_to_broker()
        settings = self.client.settings
        self._take_eager_starts()
        try:
            await asyncio.get_running_loop().run_in_executor(None, ensure_topics, settings, {
                topics.task_queue_topic(self.task_queue, kind): settings.task_queue_partitions for kind in kinds
            })
            log.info("event=worker_started task_queue=%s identity=%s workflows=%s activities=%s nexus_services=%s",
                     self.task_queue, self.identity, self._workflow_worker.types, self._activity_worker.types,
                     self._nexus_worker.services)
            pollers = {"workflow": self._workflow_worker.poll, "activity": self._activity_worker.poll, "nexus": self._nexus_worker.poll}
            announcing = asyncio.create_task(self._announce())
            try:
                await asyncio.gather(*(pollers[kind]() for kind in kinds))
            finally:
                announcing.cancel()
                # Ended before run() returns: a task left cancelling would outlive the worker, and a
                # program that never runs its loop again would have it destroyed pending at exit.
                await asyncio.wait({announcing})
        finally:
            self.client._eager_workers.unregister(self.task_queue, self._workflow_worker)

    def _take_eager_starts(self) -> None:
        """Offer the client's eager starts on this queue slots of this worker, while it runs (as
        temporalio's worker registers with its client): at once, so a start right after `async with
        worker` finds it."""
        if "workflow" in self._kinds:
            self.client._eager_workers.register(self.task_queue, self._workflow_worker)

    async def _announce(self) -> None:
        """Tell `kadence task-queue describe` this worker polls the queue (and which partitions)."""
        heartbeats = codec("PollerHeartbeat")
        assignment = self._context.assignment
        while True:
            assignment.changed.clear()
            for kind, partitions in assignment.partitions.items():
                heartbeat = {"task_queue": self.task_queue, "kind": kind, "identity": self.identity,
                             "partitions": partitions, "sent_at_ms": int(time.time() * 1000)}
                sent = self.client.produce(topics.POLLERS, heartbeats.encode(heartbeat), self.task_queue.encode(), heartbeats.headers())
                sent.add_done_callback(_heartbeat_unsent)
            with contextlib.suppress(TimeoutError):  # every few seconds, and at once when the assignment changes
                await asyncio.wait_for(assignment.changed.wait(), POLLER_HEARTBEAT_S)

    async def readiness_problems(self) -> list[str]:
        """Why this worker is not ready (empty once it polls partitions of every task kind, while
        its client hears answers from Postgres): what a worker's /readyz reports."""
        problems = [] if self.ready.is_set() else [f"task queue {self.task_queue!r}: partitions not assigned yet"]
        return problems + self.client.readiness_problems()

    async def shutdown(self) -> None:
        self._context.shutting_down.set()
        if self._running is not None:
            await self._running

    async def __aenter__(self) -> "Worker":
        self._take_eager_starts()
        self._running = asyncio.create_task(self.run())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()
