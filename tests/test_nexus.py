"""Nexus, in the style of temporalio's hello_nexus and nexus_cancel samples: a caller workflow calls
a service's operations through an endpoint (`kadence nexus endpoint create` maps it to the
handler's task queue); a sync operation answers at once, a workflow-run operation's handler
workflow completes it; a handler's failure, a retryable error retried, and a cancellation reach
the caller as Temporal's; and the caller's history records them as Temporal's
(docs/decisions/0008-nexus.md)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import nexusrpc
import pytest

from kadence import nexus, workflow
from kadence.client import Client, WorkflowFailureError, WorkflowHandle
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import ApplicationError, CancelledError, NexusOperationError
from kadence.protocol.nexus_endpoints import create_endpoint, delete_endpoint, list_endpoints
from kadence.worker import Worker


@dataclasses.dataclass
class Greeting:
    name: str


@dataclasses.dataclass
class Greeted:
    message: str


@nexusrpc.service
class Greeter:
    greet: nexusrpc.Operation[Greeting, Greeted]
    greet_by_workflow: nexusrpc.Operation[Greeting, Greeted]
    refuse: nexusrpc.Operation[Greeting, Greeted]
    greet_on_third_try: nexusrpc.Operation[Greeting, Greeted]
    wait_forever: nexusrpc.Operation[Greeting, Greeted]


@workflow.defn
class GreetingWorkflow:
    @workflow.run
    async def run(self, greeting: Greeting) -> Greeted:
        return Greeted(f"Hello {greeting.name} from a workflow ({nexus.in_operation()})")


@workflow.defn
class WaitingWorkflow:
    @workflow.run
    async def run(self, greeting: Greeting) -> Greeted:
        await workflow.wait_condition(lambda: False)
        raise AssertionError("never reached")


@nexusrpc.handler.service_handler(service=Greeter)
class GreeterHandler:
    def __init__(self) -> None:
        self.tries = 0

    @nexusrpc.handler.sync_operation
    async def greet(self, ctx: nexusrpc.handler.StartOperationContext, input: Greeting) -> Greeted:
        return Greeted(f"Hello {input.name} from {nexus.info().task_queue}")

    @nexus.workflow_run_operation
    async def greet_by_workflow(self, ctx: nexus.WorkflowRunOperationContext, input: Greeting) -> nexus.WorkflowHandle[Greeted]:
        return await ctx.start_workflow(GreetingWorkflow.run, input, id=f"greeting-{input.name}")

    @nexusrpc.handler.sync_operation
    async def refuse(self, ctx: nexusrpc.handler.StartOperationContext, input: Greeting) -> Greeted:
        raise ApplicationError(f"{input.name} is not welcome", type="NotWelcome", non_retryable=True)

    @nexusrpc.handler.sync_operation
    async def greet_on_third_try(self, ctx: nexusrpc.handler.StartOperationContext, input: Greeting) -> Greeted:
        self.tries += 1
        if self.tries < 3:
            raise nexusrpc.HandlerError("busy", type=nexusrpc.HandlerErrorType.UNAVAILABLE)
        return Greeted(f"Hello {input.name} on try {self.tries}")

    @nexus.temporal_operation
    async def wait_forever(
        self, ctx: nexus.TemporalStartOperationContext, client: nexus.TemporalNexusClient, input: Greeting,
    ) -> nexus.TemporalOperationResult[Greeted]:
        return await client.start_workflow(WaitingWorkflow.run, input, id=f"waiting-{input.name}")


@workflow.defn
class CallerWorkflow:
    def __init__(self) -> None:
        self.greeter = workflow.create_nexus_client(service=Greeter, endpoint=ENDPOINT)

    @workflow.run
    async def run(self, name: str) -> list[str]:
        sync = await self.greeter.execute_operation(Greeter.greet, Greeting(name))
        handle = await self.greeter.start_operation(Greeter.greet_by_workflow, Greeting(name))
        assert handle.operation_token
        by_workflow = await handle
        return [sync.message, by_workflow.message]


@workflow.defn
class RefusedCallerWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        greeter = workflow.create_nexus_client(service=Greeter, endpoint=ENDPOINT)
        try:
            await greeter.execute_operation(Greeter.refuse, Greeting(name))
        except NexusOperationError as err:
            assert isinstance(err.cause, ApplicationError)
            return f"{err.operation}: {err.cause.type}: {err.cause.message}"
        raise AssertionError("the operation should have failed")


@workflow.defn
class PatientCallerWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        greeter = workflow.create_nexus_client(service="Greeter", endpoint=ENDPOINT)
        greeted = await greeter.execute_operation("greet_on_third_try", Greeting(name), output_type=Greeted)
        return str(greeted.message)


@workflow.defn
class CancellingCallerWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        greeter = workflow.create_nexus_client(service=Greeter, endpoint=ENDPOINT)

        async def wait() -> Greeted:
            return await (await greeter.start_operation(Greeter.wait_forever, Greeting(name)))

        waiting = asyncio.create_task(wait())
        await workflow.sleep(timedelta(seconds=1))
        waiting.cancel()
        try:
            await waiting
        except NexusOperationError as err:
            assert isinstance(err.cause, CancelledError)
            return "canceled"
        raise AssertionError("the operation should have been canceled")


async def nexus_events(handle: WorkflowHandle[Any, Any]) -> list[str]:
    return [kind for kind in (event["attributes"][0] for event in (await handle.fetch_history()).events) if "Nexus" in kind]


ENDPOINT = f"greeter-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def workers(stack: LocalStack, client: Client, task_queue: str) -> AsyncIterator[str]:
    """A handler worker on the endpoint's queue, a caller worker on the test's: the caller's queue."""
    handler_queue = f"{task_queue}-handler"
    create_endpoint(stack.settings, ENDPOINT, handler_queue, "greets")
    handler = Worker(client, task_queue=handler_queue, workflows=[GreetingWorkflow, WaitingWorkflow],
                     nexus_service_handlers=[GreeterHandler()])
    caller = Worker(client, task_queue=task_queue,
                    workflows=[CallerWorkflow, RefusedCallerWorkflow, PatientCallerWorkflow, CancellingCallerWorkflow])
    async with handler, caller:
        yield task_queue


async def test_a_sync_and_a_workflow_run_operation_answer_the_caller(client: Client, workers: str) -> None:
    name = uuid.uuid4().hex[:8]
    handle = await client.start_workflow(CallerWorkflow.run, name, id=f"caller-{name}", task_queue=workers)
    assert await handle.result() == [f"Hello {name} from {workers}-handler", f"Hello {name} from a workflow (False)"]
    kinds = await nexus_events(handle)
    assert kinds == ["NexusOperationScheduled", "NexusOperationCompleted",
                     "NexusOperationScheduled", "NexusOperationStarted", "NexusOperationCompleted"]


async def test_a_handler_failure_fails_the_operation(client: Client, workers: str) -> None:
    name = uuid.uuid4().hex[:8]
    result = await client.execute_workflow(RefusedCallerWorkflow.run, name, id=f"refused-{name}", task_queue=workers)
    assert result == f"refuse: NotWelcome: {name} is not welcome"


async def test_a_retryable_handler_error_is_retried(client: Client, workers: str) -> None:
    name = uuid.uuid4().hex[:8]
    handle = await client.start_workflow(PatientCallerWorkflow.run, name, id=f"patient-{name}", task_queue=workers)
    assert await handle.result() == f"Hello {name} on try 3"
    kinds = await nexus_events(handle)
    assert kinds == ["NexusOperationScheduled", "NexusOperationAttemptFailed", "NexusOperationAttemptFailed", "NexusOperationCompleted"]


async def test_a_canceled_operation_cancels_its_handler_workflow(client: Client, workers: str) -> None:
    name = uuid.uuid4().hex[:8]
    assert await client.execute_workflow(CancellingCallerWorkflow.run, name, id=f"cancelling-{name}", task_queue=workers) == "canceled"
    with pytest.raises(WorkflowFailureError) as raised:
        await client.get_workflow_handle(f"waiting-{name}").result()
    assert isinstance(raised.value.cause, CancelledError)


async def test_endpoints_are_created_listed_and_deleted(stack: LocalStack) -> None:
    name = f"listed-{uuid.uuid4().hex[:8]}"
    create_endpoint(stack.settings, name, "some-queue", "a description")
    assert list_endpoints(stack.settings)[name] == {"name": name, "task_queue": "some-queue", "description": "a description"}
    delete_endpoint(stack.settings, name)
    assert name not in list_endpoints(stack.settings)
