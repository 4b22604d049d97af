"""temporalio's sandbox names (kadence.worker.workflow_sandbox): code that configures the sandbox,
as temporalio's pydantic and sentry samples do, imports and runs; its workflows run unsandboxed."""

from __future__ import annotations

import uuid

from kadence import workflow
from kadence.client import Client
from kadence.exceptions import NondeterminismError
from kadence.worker import UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from kadence.worker.workflow_sandbox import RestrictedWorkflowAccessError, SandboxedWorkflowRunner, SandboxMatcher, SandboxRestrictions


@workflow.defn
class GreetingWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        return f"hello, {name}"


def test_restrictions_are_built_as_temporalio_builds_them() -> None:
    restrictions = SandboxRestrictions.default.with_passthrough_modules("pydantic", "sentry_sdk")
    assert {"pydantic", "sentry_sdk"} <= restrictions.passthrough_modules
    assert "pydantic" not in SandboxRestrictions.default.passthrough_modules  # a new value, the default untouched
    assert SandboxRestrictions.default.with_passthrough_all_modules().passthrough_all_modules
    assert (SandboxMatcher(access=frozenset({"os"})) | SandboxMatcher.all_uses).use == frozenset({"*"})
    runner = SandboxedWorkflowRunner(restrictions=restrictions)
    assert isinstance(runner, WorkflowRunner) and runner.restrictions is restrictions
    assert runner.runner_class is UnsandboxedWorkflowRunner
    assert issubclass(RestrictedWorkflowAccessError, NondeterminismError)
    # As the worker_multiprocessing sample lets its workflows read the process id:
    members = SandboxRestrictions.invalid_module_members_default
    assert members.child_matcher("os") == SandboxMatcher.all_uses
    assert members.with_child_unrestricted("os").child_matcher("os") == SandboxMatcher.none
    assert members.with_child_unrestricted("os").child_matcher("time") == SandboxMatcher.all_uses


async def test_a_worker_given_a_sandboxed_runner_runs_its_workflows(client: Client, task_queue: str) -> None:
    runner = SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules("json"))
    async with Worker(client, task_queue=task_queue, workflows=[GreetingWorkflow], workflow_runner=runner,
                      unsandboxed_workflow_runner=UnsandboxedWorkflowRunner()):
        result = await client.execute_workflow(GreetingWorkflow.run, "ann", id=f"greet-{uuid.uuid4()}", task_queue=task_queue)
    assert result == "hello, ann"
