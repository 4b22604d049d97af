"""Topic names. Commands and history have the same partition count: command partition p is answered on history partition p."""

from __future__ import annotations

from typing import Literal

from kadence.protocol.limits import MAX_RECORD_BYTES

COMMANDS = "kadence.commands"
HISTORY = "kadence.history"
DLQ = "kadence.dlq"
POLLERS = "kadence.pollers"  # workers' heartbeats, for task queue stats
REPLIES = "kadence.replies"  # answers to queries, read by the client that asked
NEXUS_ENDPOINTS = "kadence.nexus-endpoints"  # compacted: a Nexus endpoint's name -> its task queue

TaskKind = Literal["workflow", "activity", "nexus"]

_HOUR_MS = 3_600_000
_DAY_MS = 24 * _HOUR_MS
# retention.ms of each topic. History is the source of truth and is kept forever; commands only
# until history has read them (a week covers any outage); the rest are short-lived.
RETENTION_MS = {
    COMMANDS: 7 * _DAY_MS,
    HISTORY: -1,
    DLQ: 30 * _DAY_MS,
    POLLERS: _HOUR_MS,
    REPLIES: _HOUR_MS,
    NEXUS_ENDPOINTS: -1,
}
TASK_QUEUE_RETENTION_MS = 7 * _DAY_MS


def min_insync_replicas(replication_factor: int) -> int:
    """All replicas but one must hold a write (acks=all) before it counts: one node may fail, or be
    restarted, without losing a write or refusing one. 2 of deploy/'s 3."""
    return max(1, replication_factor - 1)


def topic_config(topic: str, replication_factor: int = 1) -> dict[str, str]:
    """The settings Kadence creates `topic` with on `replication_factor` replicas
    (deploy/base/topics.yaml declares the same)."""
    retention_ms = RETENTION_MS.get(topic, TASK_QUEUE_RETENTION_MS)
    config = {
        "retention.ms": str(retention_ms), "max.message.bytes": str(MAX_RECORD_BYTES),
        "min.insync.replicas": str(min_insync_replicas(replication_factor)),
    }
    if topic == NEXUS_ENDPOINTS:  # the registry: each name's latest record, kept until deleted
        config["cleanup.policy"] = "compact"
    if topic == COMMANDS:  # the broker's clock stamps each command: history decides it at that time, on every instance
        config["message.timestamp.type"] = "LogAppendTime"
    return config


def task_queue_topic(task_queue: str, kind: TaskKind) -> str:
    return f"kadence.tq.{task_queue}.{kind}"


def activity_task_key(workflow_id: str, scheduled_event_id: int) -> bytes:
    """An activity task record's key: the activity, so activities spread over all workers, and a
    cancellation lands on the partition (so the worker) that holds the attempt; which is why a
    worker runs an activity eagerly only when it owns that partition. (Workflow tasks are keyed by
    workflow_id: the same worker keeps the same executions, its sticky cache.)"""
    return f"{workflow_id}/{scheduled_event_id}".encode()


def nexus_task_key(workflow_id: str, scheduled_event_id: int) -> bytes:
    """A Nexus task record's key: the operation, so operations spread over the queue's workers."""
    return activity_task_key(workflow_id, scheduled_event_id)


def worker_group(task_queue: str, kind: TaskKind) -> str:
    """Workers on one queue share this consumer group: that is the load balancing."""
    return f"kadence.worker.{task_queue}.{kind}"
