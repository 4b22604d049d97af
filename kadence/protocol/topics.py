"""Topic names. Commands and history have the same partition count: command partition p is answered on history partition p."""

from __future__ import annotations

from typing import Literal

COMMANDS = "kadence.commands"
HISTORY = "kadence.history"
DLQ = "kadence.dlq"
POLLERS = "kadence.pollers"  # workers' heartbeats, for task queue stats
REPLIES = "kadence.replies"  # answers to queries, read by the client that asked

TaskKind = Literal["workflow", "activity"]


def task_queue_topic(task_queue: str, kind: TaskKind) -> str:
    return f"kadence.tq.{task_queue}.{kind}"


def worker_group(task_queue: str, kind: TaskKind) -> str:
    """Workers on one queue share this consumer group: that is the load balancing."""
    return f"kadence.worker.{task_queue}.{kind}"
