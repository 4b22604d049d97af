"""Listing, counting and describing executions, and fetching histories, from the read model."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from kadence.client import Client, WorkflowExecutionStatus
from kadence.dev.local_stack import LocalStack
from kadence.exceptions import KadenceError, WorkflowNotFoundError
from kadence.list_filter import ListFilterError, Scope, parse
from kadence.protocol.postgres import apply_ddl, connection_pool
from kadence.protocol.read_model import VISIBILITY_DDL
from kadence.worker import Worker
from services.visibility.retention import expire_outcomes
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
        for order in ("", " ORDER BY StartTime ASC", " ORDER BY CloseTime DESC"):  # pages of one row, by keyset
            assert [e.id async for e in client.list_workflows(mine + order, page_size=1)] == await ids(client, mine + order), order

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
    ("ActivityType = 'charge'", "ActivityType filter standalone activities: use list_activities"),
    ("Endpoint = 'payments'", "Endpoint filter standalone Nexus operations: use list_nexus_operations"),
])
def test_filters_that_do_not_parse_say_where_and_why(query: str, error: str) -> None:
    with pytest.raises(ListFilterError, match=error.replace("(", r"\(").replace(")", r"\)")):
        parse(query)


@pytest.mark.parametrize(("query", "error"), [
    ("ActivityId = 'a'", "ActivityId filter standalone activities: use list_activities"),
    ("Service = 'Payments'", "Service is not a filter of Kadence's Nexus operations"),
])
def test_nexus_operation_filters_that_do_not_apply_say_why(query: str, error: str) -> None:
    with pytest.raises(ListFilterError, match=error):
        parse(query, scope=Scope.NEXUS_OPERATIONS)


def test_values_are_parameters_and_names_are_whitelisted_or_json_keys() -> None:
    parsed = parse("WorkflowId = 'a''b' AND `Order Status` = \"x\" AND Amount >= 2.5")
    assert parsed.where == (
        # workflows only: standalone activities and Nexus operations are listed apart
        "NOT starts_with(workflow_id, %s) AND NOT starts_with(workflow_id, %s) AND "
        "((workflow_id = %s AND search_attributes -> %s = %s::jsonb AND search_attributes -> %s >= %s::jsonb))"
    )
    assert parsed.params == ["kadence-activity:", "kadence-nexus:", "a'b", "Order Status", '"x"', "Amount", "2.5"]
    activities = parse("ActivityType = 'charge' ORDER BY ActivityId", scope=Scope.ACTIVITIES)
    assert activities.where == "starts_with(workflow_id, %s) AND (workflow_type = %s)"
    assert (activities.params, activities.order_by) == (["kadence-activity:", "charge"], "workflow_id ASC")
    operations = parse("Endpoint = 'payments' AND OperationId STARTS_WITH 'pay-' ORDER BY OperationId DESC", scope=Scope.NEXUS_OPERATIONS)
    assert operations.where == "starts_with(workflow_id, %s) AND ((task_queue = %s AND starts_with(substr(workflow_id, 15)::text, %s)))"
    assert (operations.params, operations.order_by) == (["kadence-nexus:", "payments", "pay-"], "workflow_id DESC")


async def test_command_outcomes_past_their_retention_are_deleted_in_batches(stack: LocalStack, client: Client) -> None:
    """The visibility service's expiry job: outcome rows recorded more than the retention ago go,
    a batch at a time (here 100 of 250), and newer ones stay."""
    await client.count_workflows()  # the read model is up (the visibility projector created its tables)
    tag = f"retention-{uuid.uuid4().hex[:8]}"
    rows = [(f"{tag}/old/{i}", "8 days") for i in range(250)] + [(f"{tag}/new/{i}", "6 days") for i in range(20)]
    async with connection_pool(stack.postgres_dsn, min_size=1, max_size=2) as pool:
        async with pool.connection() as conn, conn.cursor() as cursor:
            await cursor.executemany(
                "INSERT INTO kadence_command_outcomes (request_id, workflow_id, run_id, accepted, recorded_at) "
                "VALUES (%s, 'retention-test', 'run', true, now() - %s::interval)", rows,
            )
        stop = asyncio.Event()
        expiring = asyncio.create_task(expire_outcomes(pool, timedelta(days=7), stop, interval_s=0.1, batch=100))
        try:
            for _ in range(100):
                async with pool.connection() as conn:
                    left = [row[0] async for row in await conn.execute(
                        "SELECT request_id FROM kadence_command_outcomes WHERE request_id LIKE %s", (f"{tag}/%",))]
                if len(left) == 20:
                    break
                await asyncio.sleep(0.1)
        finally:
            stop.set()
            await expiring
    assert sorted(left) == sorted(request_id for request_id, age in rows if age == "6 days")


async def test_schema_setup_beside_a_writer_of_two_tables_waits_instead_of_deadlocking(stack: LocalStack, client: Client) -> None:
    """A projector sets the read model's schema up while another's transaction writes executions,
    then outcomes (a visibility instance starting beside a running one): the setup holds one table's
    lock at a time, so the writer goes on and the setup finishes after it (one transaction for the
    whole setup deadlocked here, and CI saw it)."""
    await client.count_workflows()  # the tables exist, as when a projector starts beside a running one
    tag = f"ddl-{uuid.uuid4().hex[:8]}"
    dsn = stack.postgres_dsn
    async with (await psycopg.AsyncConnection.connect(dsn) as writer,
                await psycopg.AsyncConnection.connect(dsn, autocommit=True) as setup,
                await psycopg.AsyncConnection.connect(dsn, autocommit=True) as observer):
        await writer.execute(
            "INSERT INTO kadence_executions (workflow_id, run_id, workflow_type, task_queue, status, start_time, history_length) "
            "VALUES (%s, 'run', 'T', 'q', 'RUNNING', now(), 1)", (tag,))
        applying = asyncio.create_task(apply_ddl(setup, VISIBILITY_DDL))
        async with asyncio.timeout(10):  # the setup's CREATE INDEX waits for the writer's lock on executions
            while (await (await observer.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (setup.info.backend_pid,))).fetchone()) != ("Lock",):
                await asyncio.sleep(0.01)
        await writer.execute(
            "INSERT INTO kadence_command_outcomes (request_id, workflow_id, run_id, accepted) VALUES (%s, %s, 'run', true)", (tag, tag))
        await writer.rollback()
        await asyncio.wait_for(applying, 10)


async def test_a_client_on_a_database_without_the_read_models_tables_names_the_fix_or_waits_for_them(stack: LocalStack) -> None:
    """The services create the read model's tables, not the client: a read that cannot wait says
    how to fix it, and a lookup that can waits until the tables exist, then answers."""
    database = f"fresh_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as admin:
        await admin.execute(f"CREATE DATABASE {database}")
    dsn = psycopg.conninfo.make_conninfo(stack.postgres_dsn, dbname=database)
    fresh = await Client.connect(stack.bootstrap_servers, postgres_dsn=dsn)
    try:
        with pytest.raises(KadenceError, match="start the kadence services; they create the read model's tables"):
            await fresh.count_workflows()
        with pytest.raises(WorkflowNotFoundError, match="start the kadence services; they create the read model's tables"):
            await fresh.get_workflow_handle("nowhere").describe()
        cancel = asyncio.ensure_future(fresh.get_workflow_handle("nowhere", first_execution_run_id="run").cancel())
        await asyncio.sleep(1)
        assert not cancel.done()  # the chain's lookup waits for the tables
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await apply_ddl(conn, VISIBILITY_DDL)
        with pytest.raises(WorkflowNotFoundError, match="workflow nowhere run run not found"):
            await asyncio.wait_for(cancel, 10)
    finally:
        await fresh.close()
        async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as admin:
            await admin.execute(f"DROP DATABASE {database} WITH (FORCE)")
