"""Listing, counting and describing executions, and fetching histories, from the read model."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from kadence.client import Client, WorkflowExecutionStatus
from kadence.exceptions import WorkflowNotFoundError
from kadence.list_filter import ListFilterError, parse
from kadence.worker import Worker
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, ApprovalWorkflow, EchoWorkflow, IndexedWorkflow


async def ids(client: Client, query: str) -> list[str]:
    return [execution.id async for execution in client.list_workflows(query)]


async def test_list_and_count_with_temporal_filters(client: Client, task_queue: str) -> None:
    prefix = f"listed-{uuid.uuid4()}"
    mine = f"WorkflowId STARTS_WITH '{prefix}'"
    before = datetime.now(UTC) - timedelta(seconds=1)
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        for status in ("paid", "shipped"):
            await client.execute_workflow(IndexedWorkflow.run, status, id=f"{prefix}-{status}", task_queue=task_queue,
                                          search_attributes={"CustomerId": "c-7"})
        await client.execute_workflow(EchoWorkflow.run, "hi", id=f"{prefix}-echo", task_queue=task_queue)
        running = await client.start_workflow(ApprovalWorkflow.run, "o", id=f"{prefix}-waiting", task_queue=task_queue)

        assert sorted(await ids(client, mine)) == sorted(f"{prefix}-{s}" for s in ("paid", "shipped", "echo", "waiting"))
        assert await ids(client, f"{mine} AND ExecutionStatus = 'Running'") == [running.id]
        assert sorted(await ids(client, f"{mine} AND WorkflowType = 'IndexedWorkflow' AND OrderStatus = 'shipped'")) == [
            f"{prefix}-shipped"]
        assert sorted(await ids(client, f"{mine} AND OrderStatus IN ('paid', 'shipped') AND Amount BETWEEN 10 AND 20")) == [
            f"{prefix}-paid", f"{prefix}-shipped"]
        assert sorted(await ids(client, f"{mine} AND (WorkflowType = 'EchoWorkflow' OR CustomerId = 'c-7') AND CloseTime IS NOT NULL")) == [
            f"{prefix}-echo", f"{prefix}-paid", f"{prefix}-shipped"]
        assert len(await ids(client, f"{mine} AND StartTime > '{before.isoformat()}' AND TaskQueue = '{task_queue}'")) == 4
        assert await ids(client, f"{mine} AND WorkflowId = '{prefix}-echo'' OR ''1''=''1'") == []  # a value, never SQL
        assert (await client.count_workflows(f"{mine} AND ExecutionStatus != 'Running'")).count == 3
        ordered = await ids(client, f"{mine} ORDER BY WorkflowId ASC")
        assert ordered == sorted(ordered)
        assert len([e async for e in client.list_workflows(mine, limit=2, page_size=1)]) == 2

        described = await running.describe()
        assert (described.status, described.workflow_type, described.task_queue) == (
            WorkflowExecutionStatus.RUNNING, "ApprovalWorkflow", task_queue)
        await running.terminate(reason="listed enough")

    history = await client.get_workflow_handle(f"{prefix}-echo").fetch_history()
    kinds = [e["attributes"][0] for e in history.events]
    assert kinds[0] == "WorkflowExecutionStarted" and kinds[-1] == "WorkflowExecutionCompleted"
    assert history.to_json()["events"][0]["event_type"] == "WorkflowExecutionStarted"
    with pytest.raises(WorkflowNotFoundError):
        await client.get_workflow_handle(f"{prefix}-nobody").describe()
    with pytest.raises(ListFilterError, match="expected a value"):
        await ids(client, "WorkflowType =")


@pytest.mark.parametrize(("query", "error"), [
    ("WorkflowType", "a comparison after WorkflowType"),
    ("AND WorkflowType = 'x'", "a search attribute name"),
    ("StartTime > 'yesterday'", "not an ISO 8601 time"),
    ("HistoryLength > 'ten'", "compares with a number"),
    ("WorkflowType = 'x'; DROP TABLE kadence_executions", "cannot read the filter at character 18"),
    ("(WorkflowType = 'x'", "expected )"),
    ("WorkflowType = 'x' ORDER BY Amount", "ORDER BY takes a built-in search attribute"),
    ("(" * 5000 + "WorkflowId = 'a'" + ")" * 5000, "nests parentheses more than 64 deep"),
])
def test_filters_that_do_not_parse_say_where_and_why(query: str, error: str) -> None:
    with pytest.raises(ListFilterError, match=error.replace("(", r"\(").replace(")", r"\)")):
        parse(query)


def test_values_are_parameters_and_names_are_whitelisted_or_json_keys() -> None:
    parsed = parse("WorkflowId = 'a''b' AND `Order Status` = \"x\" AND Amount >= 2.5")
    assert parsed.where == "(workflow_id = %s AND search_attributes -> %s = %s::jsonb AND search_attributes -> %s >= %s::jsonb)"
    assert parsed.params == ["a'b", "Order Status", '"x"', "Amount", "2.5"]
