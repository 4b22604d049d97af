"""Answers and run closes sent straight to the clients waiting for them, on kadence.replies.

A command may name the kadence.replies partition its client reads (`reply_partition`). Its
request id's answer (accepted with the run id, or the rejection) goes there once the broker has
acknowledged the batch that records it, so a client never hears an answer the log does not hold.
A start's client also hears of its run's close (and of the close of every run a continue-as-new,
cron or retry chain goes on to): the watchers are kept in memory only, per history partition.
A restart or rebalance of the history service forgets them, and a reply may be lost; the client
also waits on the read model, which records the same answers and closes a few milliseconds later.
So the watchers are a shortcut, and bounded as one: a partition watches at most
`WATCHED_RUNS_PER_PARTITION` runs, the most recently started, and the client of a run that waits
longer than that many newer starts hears of its close from the read model (a run kept open for days
would otherwise hold its watcher in memory as long: docs/architecture.md, "The run cache").
An eager start's answer also carries the run's first workflow task, for the worker of the client's
process the start named (docs/architecture.md, "Eager workflow start").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from kadence.protocol.codec import Record, codec
from kadence.protocol.events import CLOSE_STATUS, close_failure, refused, run_sections
from kadence.protocol.names import CommandType, EventType
from kadence.protocol.records import CommandAnswer, EagerWorkflowTask
from services.history.machine.records import HistoryBatch

log = logging.getLogger("kadence.history")

# The commands whose accepted answer names a run the client may wait on the close of.
_STARTS = {CommandType.StartWorkflowExecution, CommandType.SignalWithStartWorkflowExecution, CommandType.UpdateWithStartWorkflowExecution}
WATCHED_RUNS_PER_PARTITION = 4096


@dataclass(frozen=True)
class Reply:
    """One record for kadence.replies: its partition, key and encoded value."""

    partition: int
    key: bytes
    value: bytes


@dataclass(frozen=True)
class _Asked:
    reply_partition: int
    start: bool  # a start's client also waits for the run's close


@dataclass
class _PartitionReplies:
    asked: dict[str, _Asked] = field(default_factory=dict)  # request id -> where to answer, until its command's batch is produced
    # (workflow_id, run_id) -> the (reply partition, start request id) of each client waiting for the close
    watchers: dict[tuple[str, str], set[tuple[int, str]]] = field(default_factory=dict)

    def watch(self, workflow_id: str, run_id: str, watchers: set[tuple[int, str]]) -> None:
        """Tell these clients of the run's close; the run watched longest is dropped past the bound."""
        self.watchers.setdefault((workflow_id, run_id), set()).update(watchers)
        if len(self.watchers) > WATCHED_RUNS_PER_PARTITION:
            del self.watchers[next(iter(self.watchers))]


class Replies:
    def __init__(self) -> None:
        self.codec = codec("Reply")
        self.partition_count = 0  # of kadence.replies, set once the topic is known
        self._partitions: dict[int, _PartitionReplies] = {}

    def asked(self, partition: int, command: Record, request_id: str) -> None:
        """Note where to answer a command read from `partition`, whose batch is produced later."""
        reply_partition = command.get("reply_partition")
        if reply_partition is None or not request_id:
            return
        if not 0 <= reply_partition < self.partition_count:
            log.warning("event=reply_partition_unknown workflow_id=%s request_id=%s reply_partition=%d partitions=%d",
                        command["workflow_id"], request_id, reply_partition, self.partition_count)
            return
        start = command["command"][0] in _STARTS
        self._partitions.setdefault(partition, _PartitionReplies()).asked[request_id] = _Asked(reply_partition, start)

    def of_batch(self, partition: int, batch: HistoryBatch, eager_task: EagerWorkflowTask | None = None) -> list[Reply]:
        """The replies `batch` calls for, to produce once it is acknowledged: its answers to the
        commands that asked for one (a start's with `eager_task`, the first workflow task of the run
        an eager start began), and the closes of watched runs (whose watchers move on to the run
        that follows, or are dropped)."""
        state = self._partitions.get(partition)
        if state is None:
            return []
        workflow_id = batch["workflow_id"]
        sections = run_sections(batch)
        current = sections[-1].run_id  # what an accepted command answers (a start's new run)
        replies = []
        for request_id in batch["request_ids"]:
            if (asked := state.asked.pop(request_id, None)) is None:
                continue
            answer: CommandAnswer = {
                "request_id": request_id, "workflow_id": workflow_id, "run_id": current, "accepted": True,
                "cause": None, "reason": None,
            }
            if asked.start and eager_task is not None:
                # Within the record limit: the task's events are the start's batch's, which is within it.
                answer["eager_workflow_task"] = eager_task
            replies.append(self._answer(asked.reply_partition, workflow_id, answer))
            if asked.start:
                state.watch(workflow_id, current, {(asked.reply_partition, request_id)})
        for rejection in refused(batch):
            if (asked := state.asked.pop(rejection["request_id"], None)) is not None:
                replies.append(self._answer(asked.reply_partition, workflow_id, {
                    "request_id": rejection["request_id"], "workflow_id": workflow_id, "run_id": batch["run_id"],
                    "accepted": False, "cause": rejection["cause"], "reason": rejection["reason"],
                }))
        if state.watchers:
            for section in sections:
                for event in section.events:
                    if event["attributes"][0] in CLOSE_STATUS:
                        replies += self._closed(state, workflow_id, section.run_id, event)
        return replies

    def _closed(self, state: _PartitionReplies, workflow_id: str, run_id: str, event: Record) -> list[Reply]:
        watchers = state.watchers.pop((workflow_id, run_id), None)
        if not watchers:
            return []
        kind, attrs = event["attributes"]
        # The run a chain goes on in (a reset's new run is not followed: a result() waiting on the
        # run it terminated raises TerminatedError, as Temporal's).
        next_run_id = (attrs.get("new_execution_run_id") or None) if kind != EventType.WorkflowExecutionTerminated else None
        if next_run_id is not None:
            state.watch(workflow_id, next_run_id, watchers)
        closed = {
            "workflow_id": workflow_id, "run_id": run_id, "status": CLOSE_STATUS[kind],
            "result": attrs.get("result"),
            "failure": close_failure(kind, attrs) if kind != EventType.WorkflowExecutionCompleted else None,
            "next_run_id": next_run_id,
        }
        key = workflow_id.encode()
        return [
            Reply(reply_partition, key, self.codec.encode({"reply": ("RunClosed", {**closed, "request_id": request_id})}))
            for reply_partition, request_id in sorted(watchers)
        ]

    def _answer(self, reply_partition: int, workflow_id: str, answer: CommandAnswer) -> Reply:
        return Reply(reply_partition, workflow_id.encode(), self.codec.encode({"reply": ("CommandAnswer", answer)}))

    def revoked(self, partition: int) -> None:
        self._partitions.pop(partition, None)
