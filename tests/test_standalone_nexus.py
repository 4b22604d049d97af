"""Standalone Nexus operations, in the style of temporalio's nexus_standalone_operations sample: a
client executes a sync operation with no workflow (`create_nexus_client(...).execute_operation`),
reads its result again by id, starts a workflow-backed one and waits on its handle, lists and
counts them by endpoint; a handler's failure, a cancel, a schedule-to-close timeout and a
termination end one as Temporal's statuses say. Their ids are of their own space, and listing
workflows leaves them out (docs/decisions/0008-nexus.md)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import nexusrpc
import pytest

from kadence import nexus, workflow
from kadence.client import Client, NexusOperationFailureError, WorkflowFailureError
from kadence.common import NexusOperationExecutionStatus
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import ApplicationError, CancelledError, CommandRejectedError, TerminatedError, TimeoutError, TimeoutType
from kadence.protocol.nexus_endpoints import create_endpoint
from kadence.worker import Worker
from tests.conftest import wait_for_event


@dataclasses.dataclass
class EchoInput:
    message: str


@dataclasses.dataclass
class EchoOutput:
    message: str


@dataclasses.dataclass
class HelloInput:
    name: str


@dataclasses.dataclass
class HelloOutput:
    greeting: str


@nexusrpc.service
class Messages:
    echo: nexusrpc.Operation[EchoInput, EchoOutput]
    hello: nexusrpc.Operation[HelloInput, HelloOutput]
    refuse: nexusrpc.Operation[EchoInput, EchoOutput]
    wait: nexusrpc.Operation[HelloInput, HelloOutput]


@workflow.defn
class HelloWorkflow:
    @workflow.run
    async def run(self, input: HelloInput) -> HelloOutput:
        return HelloOutput(f"Hello, {input.name}!")


@workflow.defn
class WaitWorkflow:
    @workflow.run
    async def run(self, input: HelloInput) -> HelloOutput:
        await workflow.wait_condition(lambda: False)
        raise AssertionError("never reached")


@nexusrpc.handler.service_handler(service=Messages)
class MessagesHandler:
    @nexusrpc.handler.sync_operation
    async def echo(self, ctx: nexusrpc.handler.StartOperationContext, input: EchoInput) -> EchoOutput:
        return EchoOutput(input.message)

    @nexus.temporal_operation
    async def hello(
        self, ctx: nexus.TemporalStartOperationContext, client: nexus.TemporalNexusClient, input: HelloInput,
    ) -> nexus.TemporalOperationResult[HelloOutput]:
        return await client.start_workflow(HelloWorkflow.run, input, id=f"hello-{input.name}")

    @nexusrpc.handler.sync_operation
    async def refuse(self, ctx: nexusrpc.handler.StartOperationContext, input: EchoInput) -> EchoOutput:
        raise ApplicationError(f"{input.message!r} is not echoed", type="NotEchoed", non_retryable=True)

    @nexus.temporal_operation
    async def wait(
        self, ctx: nexus.TemporalStartOperationContext, client: nexus.TemporalNexusClient, input: HelloInput,
    ) -> nexus.TemporalOperationResult[HelloOutput]:
        return await client.start_workflow(WaitWorkflow.run, input, id=f"wait-{input.name}")


@pytest.fixture
async def endpoint(stack: LocalStack, client: Client, task_queue: str) -> AsyncIterator[str]:
    """An endpoint to a handler worker's queue; `<endpoint>-unserved` goes to a queue no worker polls."""
    name = f"messages-{uuid.uuid4().hex[:8]}"
    create_endpoint(stack.settings, name, task_queue)
    create_endpoint(stack.settings, f"{name}-unserved", f"{task_queue}-unserved")
    async with Worker(client, task_queue=task_queue, workflows=[HelloWorkflow, WaitWorkflow], nexus_service_handlers=[MessagesHandler()]):
        yield name


async def test_a_client_executes_and_starts_operations_without_a_workflow_and_lists_them(client: Client, endpoint: str) -> None:
    prefix = uuid.uuid4().hex[:8]
    messages = client.create_nexus_client(service=Messages, endpoint=endpoint)
    echoed = await messages.execute_operation(Messages.echo, EchoInput("hello"), id=f"echo-{prefix}",
                                              schedule_to_close_timeout=timedelta(seconds=10))
    again = await client.get_nexus_operation_handle(f"echo-{prefix}", operation=Messages.echo).result()
    handle = await messages.start_operation(Messages.hello, HelloInput(prefix), id=f"hello-{prefix}",
                                            schedule_to_close_timeout=timedelta(seconds=10))
    greeted = await handle.result()
    described = await handle.describe()

    assert (echoed, again, greeted) == (EchoOutput("hello"), EchoOutput("hello"), HelloOutput(f"Hello, {prefix}!"))
    assert (handle.operation_id, handle.endpoint, handle.service) == (f"hello-{prefix}", endpoint, "Messages")
    assert (described.operation, described.status, described.run_id) == ("hello", NexusOperationExecutionStatus.COMPLETED, handle.run_id)
    listed = {(op.operation_id, op.endpoint, op.service, op.operation, op.status.name)
              async for op in client.list_nexus_operations(f'Endpoint = "{endpoint}"')}
    assert listed == {(f"echo-{prefix}", endpoint, "Messages", "echo", "COMPLETED"),
                      (f"hello-{prefix}", endpoint, "Messages", "hello", "COMPLETED")}
    assert (await client.count_nexus_operations(f'Endpoint = "{endpoint}" AND Operation = "hello"')).count == 1
    # The operation's id is of its own space: the handler workflow has the same one, and only it is a workflow.
    assert [w.id async for w in client.list_workflows(f"WorkflowId = 'hello-{prefix}'")] == [f"hello-{prefix}"]


async def test_a_failed_canceled_timed_out_or_terminated_operation_raises_nexus_operation_failure_error(
    stack: LocalStack, client: Client, endpoint: str,
) -> None:
    prefix = uuid.uuid4().hex[:8]
    messages = client.create_nexus_client(service=Messages, endpoint=endpoint)
    unserved = client.create_nexus_client(service=Messages, endpoint=f"{endpoint}-unserved")
    with pytest.raises(NexusOperationFailureError) as failed:
        await messages.execute_operation(Messages.refuse, EchoInput("hi"), id=f"{prefix}-refused")
    waiting = await messages.start_operation(Messages.wait, HelloInput(prefix), id=f"{prefix}-canceled")
    await wait_for_event(stack, f"kadence-nexus:{waiting.operation_id}", "NexusOperationStarted", 30)
    await waiting.cancel(reason="no longer needed")
    with pytest.raises(NexusOperationFailureError) as canceled:
        await waiting.result()
    with pytest.raises(NexusOperationFailureError) as timed_out:
        await unserved.execute_operation(Messages.echo, EchoInput("hi"), id=f"{prefix}-timed-out",
                                         schedule_to_close_timeout=timedelta(seconds=1))
    stuck = await unserved.start_operation(Messages.echo, EchoInput("hi"), id=f"{prefix}-terminated")
    await stuck.terminate(reason="stuck")
    with pytest.raises(NexusOperationFailureError) as terminated:
        await stuck.result()

    assert isinstance(failed.value.cause, ApplicationError) and failed.value.cause.type == "NotEchoed"
    assert isinstance(canceled.value.cause, CancelledError)
    with pytest.raises(WorkflowFailureError) as handler_canceled:  # its handler workflow was asked to cancel
        await client.get_workflow_handle(f"wait-{prefix}").result()
    assert isinstance(handler_canceled.value.cause, CancelledError)
    assert isinstance(timed_out.value.cause, TimeoutError) and timed_out.value.cause.type == TimeoutType.SCHEDULE_TO_CLOSE
    assert isinstance(terminated.value.cause, TerminatedError)
    statuses = {op.operation_id: op.status async for op in client.list_nexus_operations(f"OperationId STARTS_WITH '{prefix}'")}
    assert statuses == {
        f"{prefix}-refused": NexusOperationExecutionStatus.FAILED, f"{prefix}-canceled": NexusOperationExecutionStatus.CANCELED,
        f"{prefix}-timed-out": NexusOperationExecutionStatus.TIMED_OUT, f"{prefix}-terminated": NexusOperationExecutionStatus.TERMINATED,
    }


async def test_what_a_standalone_operation_cannot_take_is_refused_with_the_reason(client: Client, endpoint: str) -> None:
    operation_id = uuid.uuid4().hex[:8]
    with pytest.raises(CommandRejectedError, match="kadence nexus endpoint create --name nowhere"):
        await client.create_nexus_client(service=Messages, endpoint="nowhere").start_operation(Messages.echo, EchoInput("hi"),
                                                                                               id=operation_id)
    handle = await client.create_nexus_client(service=Messages, endpoint=f"{endpoint}-unserved").start_operation(
        Messages.echo, EchoInput("hi"), id=operation_id)
    try:
        with pytest.raises(CommandRejectedError, match="does not apply to a standalone Nexus operation"):
            await client.get_workflow_handle(f"kadence-nexus:{operation_id}").signal("poke")
        with pytest.raises(ValueError, match="take a schedule_to_close_timeout only"):
            await client.create_nexus_client(service=Messages, endpoint=endpoint).start_operation(
                Messages.echo, EchoInput("hi"), id=f"{operation_id}-2", start_to_close_timeout=timedelta(seconds=1))
    finally:
        await handle.terminate()
