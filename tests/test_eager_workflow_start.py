"""start_workflow(request_eager_start=True) as temporalio's signature has it: taken, handed to the
client's interceptors, and the workflow runs, its first workflow task through the task queue as
any start's (Kadence does not start workflows eagerly yet: docs/temporal-differences.md, "The
client")."""

from __future__ import annotations

import uuid

from kadence.client import Client, Interceptor, OutboundInterceptor, StartWorkflowInput, WorkflowHandle
from kadence.dev.local_stack import LocalStack
from kadence.worker import Worker
from tests.workflows import EchoWorkflow, echo


class RecordEagerRequests(Interceptor):
    def __init__(self) -> None:
        self.requested: list[bool] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        requested = self.requested

        class Recording(OutboundInterceptor):
            async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle:
                requested.append(input.request_eager_start)
                return await super().start_workflow(input)

        return Recording(next)


async def test_a_start_requesting_eager_execution_runs_through_the_task_queue(stack: LocalStack, task_queue: str) -> None:
    recorder = RecordEagerRequests()
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, interceptors=[recorder])
    workflow_id = f"eager-start-{uuid.uuid4()}"
    try:
        async with Worker(client, task_queue=task_queue, workflows=[EchoWorkflow], activities=[echo], identity="the-worker"):
            handle = await client.start_workflow(EchoWorkflow.run, "hi", id=workflow_id, task_queue=task_queue, request_eager_start=True)
            assert getattr(handle, "__temporal_eagerly_started") is False  # noqa: B009 (as temporalio's sample reads it)
            assert await handle.result() == "hi"
        events = (await handle.fetch_history()).events
    finally:
        await client.close()
    assert recorder.requested == [True]
    # The first workflow task was dispatched and started as any start's: scheduled, then started by the worker.
    kinds = [event["attributes"][0] for event in events]
    assert kinds[:3] == ["WorkflowExecutionStarted", "WorkflowTaskScheduled", "WorkflowTaskStarted"]
    assert events[2]["attributes"][1]["identity"] == "the-worker"
