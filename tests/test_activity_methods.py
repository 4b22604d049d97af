"""Methods of an instance registered as activities (`activities=[obj.method]`, as temporalio) run
with their instance, under the method's name."""

from __future__ import annotations

import uuid
from datetime import timedelta

from kadence import activity, workflow
from kadence.client import Client
from kadence.worker import Worker
from tests.workflows import GreetingActivities


@workflow.defn
class GreetingWorkflow:
    @workflow.run
    async def run(self, name: str) -> list[str]:
        timeout = timedelta(seconds=30)
        return [
            await workflow.execute_activity(GreetingActivities.greet, name, start_to_close_timeout=timeout),
            await workflow.execute_activity("shout", name, start_to_close_timeout=timeout),
        ]


async def test_methods_of_an_instance_run_as_activities_with_their_instance(client: Client, task_queue: str) -> None:
    greeter = GreetingActivities("hello")
    assert activity.definition(greeter.greet).name == "greet"
    async with Worker(client, task_queue=task_queue, workflows=[GreetingWorkflow], activities=[greeter.greet, greeter.shout_greeting]):
        result = await client.execute_workflow(GreetingWorkflow.run, "ann", id=f"greeting-{uuid.uuid4()}", task_queue=task_queue)
    assert result == ["hello, ann", "HELLO, ANN!"]
