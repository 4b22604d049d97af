"""Interceptors as temporalio's: the context propagation sample, ported by import swap, carries a
user id from the client into the workflow, its handlers, activities and child; the headers are
recorded where Temporal records them."""

from __future__ import annotations

import uuid
from typing import Any

from kadence.client import Client
from kadence.converter import default
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import WorkflowUpdateFailedError
from kadence.worker import Worker
from tests.context_propagation import (
    HEADER_KEY,
    ChildOfUser,
    ContextPropagationInterceptor,
    SayHelloAsUser,
    user_id,
    whose_call,
    whose_call_sync,
)


async def test_context_propagation_sample_carries_the_user_everywhere(stack: LocalStack, task_queue: str) -> None:
    client = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn, interceptors=[ContextPropagationInterceptor()])
    workflow_id = f"context-{uuid.uuid4()}"
    try:
        # The worker takes the client's interceptors that are worker interceptors too, as temporalio's.
        async with Worker(client, task_queue=task_queue, workflows=[SayHelloAsUser, ChildOfUser], activities=[whose_call, whose_call_sync]):
            user_id.set("alice")
            handle = await client.start_workflow(SayHelloAsUser.run, id=workflow_id, task_queue=task_queue)
            user_id.set("bob")
            assert await handle.query(SayHelloAsUser.asked_by) == "bob"
            user_id.set("carol")
            assert await handle.execute_update(SayHelloAsUser.rename, "order") == "order by carol"
            user_id.set(None)
            try:
                await handle.execute_update(SayHelloAsUser.rename, "anonymous")
                raise AssertionError("the validator saw a user where none was set")
            except WorkflowUpdateFailedError as err:
                assert "an update needs a user" in str(err.cause)
            user_id.set("dave")
            await handle.signal(SayHelloAsUser.signal_complete)
            seen = await handle.result()
    finally:
        user_id.set(None)
        await client.close()
    assert seen == {
        "run": "alice", "signal": "dave", "activity": "alice", "sync_activity": "alice", "local_activity": "alice", "child": "alice",
    }

    # Recorded where Temporal records headers: the start, the update, the signal, the activities, the child.
    converter = default().payload_converter
    events = (await client_history(stack, workflow_id)).events
    assert [(kind, converter.from_payload(attrs["header"][HEADER_KEY], str))
            for kind, attrs in (event["attributes"] for event in events) if HEADER_KEY in attrs.get("header", {})] == [
        ("WorkflowExecutionStarted", "alice"), ("WorkflowExecutionUpdateAdmitted", "carol"), ("WorkflowExecutionSignaled", "dave"),
        ("ActivityTaskScheduled", "alice"), ("ActivityTaskScheduled", "alice"), ("StartChildWorkflowExecutionInitiated", "alice"),
    ]
    child = (await client_history(stack, f"{workflow_id}-child")).events
    assert converter.from_payload(child[0]["attributes"][1]["header"][HEADER_KEY], str) == "alice"


async def client_history(stack: LocalStack, workflow_id: str) -> Any:
    plain = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    try:
        return await plain.get_workflow_handle(workflow_id).fetch_history()
    finally:
        await plain.close()

