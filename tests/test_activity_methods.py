"""Methods of an instance registered as activities (`activities=[obj.method]`, as temporalio) run
with their instance, under the method's name."""

from __future__ import annotations

import uuid
from datetime import timedelta

from kadence import activity, workflow
from kadence.client import Client
from kadence.worker import Worker


class Greeter:
    """Activities sharing state (a client, a connection pool: here a greeting)."""

    def __init__(self, greeting: str) -> None:
        self.greeting = greeting

    @activity.defn
    async def greet(self, name: str) -> str:
        return f"{self.greeting}, {name}"

    @activity.defn(name="shout")
    def greet_loudly(self, name: str) -> str:
        return f"{self.greeting.upper()}, {name.upper()}!"


@workflow.defn
class GreetingWorkflow:
    @workflow.run
    async def run(self, name: str) -> list[str]:
        timeout = timedelta(seconds=30)
        return [
            await workflow.execute_activity(Greeter.greet, name, start_to_close_timeout=timeout),
            await workflow.execute_activity("shout", name, start_to_close_timeout=timeout),
        ]


async def test_methods_of_an_instance_run_as_activities_with_their_instance(client: Client, task_queue: str) -> None:
    greeter = Greeter("hello")
    assert activity.definition(greeter.greet).name == "greet"
    async with Worker(client, task_queue=task_queue, workflows=[GreetingWorkflow], activities=[greeter.greet, greeter.greet_loudly]):
        result = await client.execute_workflow(GreetingWorkflow.run, "ann", id=f"greeting-{uuid.uuid4()}", task_queue=task_queue)
    assert result == ["hello, ann", "HELLO, ANN!"]
