"""Eager workflow start, the client's side (temporalio's, which its core does for it): the workers
of the client's process register with its connection; a start that asks for it reserves a workflow
task slot of one polling the start's task queue and names that worker in the command, and when the
history service's answer brings the run's first workflow task, recorded started by that worker,
the client hands the task to it. Otherwise the slot goes back and the task goes through the queue
as any start's (docs/architecture.md, "Eager workflow start")."""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Protocol

from kadence.client._replies import ReplyListener
from kadence.protocol.codec import command_codec, writes_field
from kadence.protocol.names import CommandType
from kadence.protocol.records import EagerWorkflowTask, Task

log = logging.getLogger("kadence.client")

# How long a start answered from the read model first waits for its answer on kadence.replies,
# which alone carries the task (it normally comes first: the read model records it a hop later).
EAGER_TASK_WAIT_S = 1.0


class EagerSlot(Protocol):
    """A workflow task slot a worker holds for an eager start's first task (core's SlotPermit)."""

    @property
    def identity(self) -> str:
        """The worker's identity: the start names it, and history records the task started by it."""
        ...

    def run(self, task: Task, started_time_ms: int) -> None:
        """Run the task (started at `started_time_ms`, on the run's clock) and answer it; the slot is its until then."""

    def release(self) -> None:
        """Give the slot back: the start brought no task."""


class EagerWorker(Protocol):
    """A worker that may take an eager start's first task (what core's SlotProvider offers)."""

    def reserve_eager_slot(self, workflow_type: str, workflow_id: str) -> EagerSlot | None: ...


class EagerWorkers:
    """The workers of a client's process, by task queue, that may take eager starts' first tasks
    (core's worker registry): a Worker registers while it runs."""

    def __init__(self) -> None:
        self._by_queue: dict[str, list[EagerWorker]] = {}

    def register(self, task_queue: str, worker: EagerWorker) -> None:
        workers = self._by_queue.setdefault(task_queue, [])
        if worker not in workers:
            workers.append(worker)

    def unregister(self, task_queue: str, worker: EagerWorker) -> None:
        workers = self._by_queue.get(task_queue, [])
        if worker in workers:
            workers.remove(worker)

    def reserve(self, task_queue: str, workflow_type: str, workflow_id: str) -> EagerSlot | None:
        """A slot of the first worker of `task_queue` that has one for this start, if any."""
        for worker in self._by_queue.get(task_queue, ()):
            if (slot := worker.reserve_eager_slot(workflow_type, workflow_id)) is not None:
                return slot
        return None


@functools.cache
def starts_name_workers() -> bool:
    """Whether the Command version this process writes carries eager_worker_identity (not when
    pinned to an earlier release's, KADENCE_SCHEMA_PIN): else no start is eager."""
    return writes_field(command_codec(), CommandType.StartWorkflowExecution, "eager_worker_identity")


@dataclass
class EagerStart:
    """A start's reserved slot, and the first task its answer on kadence.replies may bring."""

    slot: EagerSlot
    request_id: str
    replies: ReplyListener
    task: asyncio.Future[EagerWorkflowTask | None]

    @classmethod
    def reserve(
        cls, workers: EagerWorkers, replies: ReplyListener | None, task_queue: str, workflow_type: str, workflow_id: str,
        request_id: str,
    ) -> EagerStart | None:
        """A slot for the start's first task, where a worker of the process has one and the client
        hears its answers on kadence.replies (ask before sending the start); else None."""
        if replies is None or not starts_name_workers():
            return None
        slot = workers.reserve(task_queue, workflow_type, workflow_id)
        if slot is None:
            return None
        return cls(slot, request_id, replies, replies.expect_eager_task(request_id))

    async def hand_over(self, workflow_id: str, run_id: str) -> bool:
        """Once the start is accepted: give the worker the run's first task if the answer brought
        it, else give the slot back (history started the task otherwise: a start answered before,
        the running run taken, a start delay; or the reply was lost, and the task, recorded
        started, goes through the queue after its timeout). Whether the worker took the task."""
        try:
            eager = await asyncio.wait_for(asyncio.shield(self.task), EAGER_TASK_WAIT_S)
        except TimeoutError:
            eager = None
            log.warning("event=eager_workflow_task_not_heard workflow_id=%s run_id=%s wait_s=%.1f consequence=%r",
                        workflow_id, run_id, EAGER_TASK_WAIT_S,
                        "if the start began the task eagerly, it runs after its workflow task timeout, through the queue")
        except BaseException:  # the caller was cancelled: the slot must not stay taken
            self.abandon()
            raise
        self.replies.forget_eager_task(self.request_id)
        if eager is None:
            self.slot.release()
            return False
        self.slot.run({"workflow_id": workflow_id, "run_id": run_id, "task": ("WorkflowTask", eager["task"]), "history_length": 0},
                      eager["started_time_ms"])
        return True

    def abandon(self) -> None:
        """The start was refused or not sent: no task comes."""
        self.replies.forget_eager_task(self.request_id)
        self.slot.release()
