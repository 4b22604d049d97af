"""The memo: given at start (to a client's start, a signal-with-start, a child), read and upserted in
workflow code, carried by continue-as-new, and shown by describe and list."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from kadence import workflow
from kadence.client import Client, WorkflowExecution
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import WorkflowNotFoundError
from kadence.worker import Worker
from tests.conftest import audit_of


@dataclass
class Owner:
    name: str
    team: str


@workflow.defn
class MemoWorkflow:
    """Round 1 upserts its memo (a key set, a key removed) and continues as new when told; round 2
    reports the memo it started with."""

    def __init__(self) -> None:
        self.proceed = False

    @workflow.signal
    def go(self) -> None:
        self.proceed = True

    @workflow.run
    async def run(self, round: int) -> dict[str, Any]:
        if round == 1:
            workflow.upsert_memo({"stage": "reviewed", "ticket": None})
            await workflow.wait_condition(lambda: self.proceed)
            workflow.continue_as_new(2)
        owner = workflow.memo_value("owner", type_hint=Owner)
        return {
            "memo": dict(workflow.memo()), "owner_is_typed": isinstance(owner, Owner), "team": owner.team,
            "ticket": workflow.memo_value("ticket", "gone"), "raw_keys": sorted(workflow.info().raw_memo),
        }


@workflow.defn
class MemoChild:
    @workflow.run
    async def run(self) -> dict[str, Any]:
        return dict(workflow.memo())


@workflow.defn
class MemoParent:
    """Starts a child with a memo, then continues as new with a memo of its own choosing."""

    @workflow.signal
    def hello(self, name: str) -> None:
        self.greeted = name

    @workflow.run
    async def run(self, round: int) -> dict[str, Any]:
        if round == 1:
            child_memo = await workflow.execute_child_workflow(
                MemoChild.run, id=f"{workflow.info().workflow_id}-child", memo={"parent": workflow.info().workflow_id},
            )
            workflow.continue_as_new(2, memo={"child_saw": child_memo["parent"]})
        return dict(workflow.memo())


async def memo_shown(client: Client, workflow_id: str, key: str) -> WorkflowExecution:
    """The current run once describe shows `key` in its memo: an upsert, or a run another process
    started (a child), reaches the read model a few milliseconds after the log."""
    deadline = asyncio.get_running_loop().time() + 15
    shown: dict[str, Any] | str = "no run"
    while asyncio.get_running_loop().time() < deadline:
        with contextlib.suppress(WorkflowNotFoundError):
            described = await client.get_workflow_handle(workflow_id).describe()
            if key in described.raw_memo:
                return described
            shown = await described.memo()
        await asyncio.sleep(0.1)
    raise AssertionError(f"{key!r} never reached the memo of {workflow_id}: {shown}")


async def test_memo_is_upserted_shown_and_carried_by_continue_as_new(stack: LocalStack, client: Client, task_queue: str) -> None:
    workflow_id = f"memo-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[MemoWorkflow]):
        handle = await client.start_workflow(MemoWorkflow.run, 1, id=workflow_id, task_queue=task_queue,
                                             memo={"owner": Owner("ada", "payments"), "ticket": 42})
        described = await memo_shown(client, workflow_id, "stage")
        assert await described.memo() == {"owner": {"name": "ada", "team": "payments"}, "stage": "reviewed"}
        assert await described.memo_value("owner", type_hint=Owner) == Owner("ada", "payments")
        assert await described.memo_value("ticket", "removed") == "removed"
        with pytest.raises(KeyError):
            await described.memo_value("ticket")
        [listed] = [e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
        assert await listed.memo() == await described.memo()

        await handle.signal(MemoWorkflow.go)
        result = await handle.result()
    assert result == {
        "memo": {"owner": {"name": "ada", "team": "payments"}, "stage": "reviewed"}, "owner_is_typed": True, "team": "payments",
        "ticket": "gone", "raw_keys": ["owner", "stage"],
    }
    runs = [e async for e in client.list_workflows(f"WorkflowId = '{workflow_id}'")]
    assert [await run.memo() for run in runs] == [result["memo"]] * 2  # the continued run's, and the first's as upserted

    report = audit_of(stack, workflow_id)
    assert report.violations == []
    assert report.event_types(workflow_id, handle.result_run_id).count("WorkflowPropertiesModified") == 1


async def test_a_child_and_a_continue_as_new_take_the_memo_given(client: Client, task_queue: str) -> None:
    workflow_id = f"memo-parent-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[MemoParent, MemoChild]):
        handle = await client.signal_with_start(MemoParent.run, 1, signal=MemoParent.hello, signal_args=["ada"], id=workflow_id,
                                                task_queue=task_queue, memo={"started_by": "signal-with-start"})
        first_run = await client.get_workflow_handle(workflow_id, run_id=handle.result_run_id).describe()
        assert await first_run.memo() == {"started_by": "signal-with-start"}
        assert await handle.result() == {"child_saw": workflow_id}  # the memo given replaces the run's
        child = await memo_shown(client, f"{workflow_id}-child", "parent")
        assert await child.memo() == {"parent": workflow_id}
