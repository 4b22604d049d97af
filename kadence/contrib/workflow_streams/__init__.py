"""Workflow streams, as temporalio.contrib.workflow_streams: a workflow holds an offset-addressed
log of items on named topics, which the workflow, its activities and any client publish to and
outside subscribers read from, built on signals (publishes), updates (polls) and queries (a closed
run's items, the current offset). `WorkflowStream` is the workflow's side, made in
`@workflow.init`; `WorkflowStreamClient` the publishers' and subscribers'.
docs/temporal-differences.md, "Workflow streams", says where it differs from temporalio's.
"""

from kadence.contrib.workflow_streams._client import WorkflowStreamClient
from kadence.contrib.workflow_streams._stream import WorkflowStream
from kadence.contrib.workflow_streams._topic_handle import TopicHandle, WorkflowTopicHandle
from kadence.contrib.workflow_streams._types import (
    PollInput,
    PollResult,
    PublishEntry,
    PublisherState,
    PublishInput,
    WorkflowStreamItem,
    WorkflowStreamState,
)

__all__ = [
    "PollInput", "PollResult", "PublishEntry", "PublishInput", "PublisherState", "TopicHandle", "WorkflowStream",
    "WorkflowStreamClient", "WorkflowStreamItem", "WorkflowStreamState", "WorkflowTopicHandle",
]
