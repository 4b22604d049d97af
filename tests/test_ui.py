"""The web UI in a real browser: Debian's chromium driven by Playwright (executable_path: no browser
download), against the session's stack with real workflows run by a worker. One browser and one
UI server for the module. The run takes the screenshots in docs/ that the README shows."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from playwright import async_api as playwright_api
from yarl import URL

from kadence import activity, workflow
from kadence.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleCalendarSpec,
    ScheduleDescription,
    ScheduleHandle,
    ScheduleIntervalSpec,
    ScheduleNotFoundError,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleRange,
    ScheduleSpec,
    ScheduleState,
)
from kadence.converter import DataConverter
from kadence.dev.local_stack import LocalStack, free_port
from kadence.exceptions import RetryState, WorkflowFailureError
from kadence.ops.ui.execution import timeline
from kadence.ops.ui.server import make_app
from kadence.ops.ui.state import Ui, UiSettings
from kadence.protocol import topics
from kadence.protocol.dead_letters import DeadLetter, dead_letters
from kadence.protocol.kafka import make_producer
from kadence.worker import Worker
from tests.codec_server import build_codec_server, serving
from tests.conftest import wait_for_event
from tests.test_payload_codecs import SECRET, AesGcmCodec
from tests.workflows import (
    ALL_ACTIVITIES,
    ALL_WORKFLOWS,
    FIXED,
    ApprovalWorkflow,
    BuggyUntilFixedWorkflow,
    CancellableWorkflow,
    EchoWorkflow,
    FamilyWorkflow,
    MixedWorkflow,
)

# Every run takes the docs' screenshots (rendering them is part of the test); only
# KADENCE_UPDATE_SCREENSHOTS=1 writes them into docs/, so a test run leaves the checkout as it was.
SCREENSHOTS = (Path(__file__).resolve().parents[1] / "docs" if os.environ.get("KADENCE_UPDATE_SCREENSHOTS") == "1"
               else Path(tempfile.mkdtemp(prefix="kadence-ui-screenshots-")))
TOKEN = "ui-test-token"
QUEUE = "tq-ui"
RELEASED = asyncio.Event()  # lets heartbeat_then_wait finish


@activity.defn
async def heartbeat_then_wait(rows: int) -> str:
    activity.heartbeat({"rows_done": rows})
    await RELEASED.wait()
    return f"{rows} rows"


@workflow.defn
class ImportWorkflow:
    @workflow.run
    async def run(self, rows: int) -> str:
        return await workflow.execute_activity(heartbeat_then_wait, rows, start_to_close_timeout=timedelta(seconds=60))


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("no chromium on this machine: install Debian's package (apt-get install chromium), as .ci/run does")
    return found


@pytest.fixture(scope="module")
async def worker(stack: LocalStack, client: Client) -> AsyncIterator[None]:
    async with Worker(client, task_queue=QUEUE, workflows=[*ALL_WORKFLOWS, ImportWorkflow, BuggyUntilFixedWorkflow],
                      activities=[*ALL_ACTIVITIES, heartbeat_then_wait]):
        yield


@pytest.fixture(scope="module")
async def ui_url(stack: LocalStack) -> AsyncIterator[str]:
    # Two rows a page, so three workflows page twice; 15 events a page, so a few activities page too.
    async with serving(make_app(Ui(UiSettings(token=TOKEN, page_size=2, events_page=15), stack.settings, stack.postgres_dsn))) as url:
        yield url


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield launched
        await launched.close()


@pytest.fixture
async def page(browser: Any, ui_url: str) -> AsyncIterator[Any]:
    context = await browser.new_context(base_url=ui_url, viewport={"width": 1400, "height": 900})
    urls: list[str] = []
    context.on("request", lambda request: urls.append(request.url))
    signed_in = await context.new_page()
    await signed_in.goto("/workflows")
    await signed_in.fill("header input[name=token]", TOKEN)
    async with signed_in.expect_navigation():
        await signed_in.click("header form button[type=submit]")
    assert await signed_in.inner_text("#mode") == "actions enabled"
    yield signed_in
    await context.close()
    assert not [url for url in urls if TOKEN in url]  # the token never sits in a URL (history, proxies' logs)


async def test_the_list_filters_counts_and_pages_by_keyset(page: Any, client: Client, worker: None) -> None:
    prefix = f"ui-list-{uuid.uuid4()}"
    for n in range(3):
        await client.execute_workflow(EchoWorkflow.run, f"value-{n}", id=f"{prefix}-{n}", task_queue=QUEUE)
    await client.count_workflows()  # the UI reads the read model, which the results' replies may precede
    await page.goto("/workflows")
    await page.fill("#query", f"WorkflowId STARTS_WITH '{prefix}' AND ExecutionStatus = 'Completed'")
    await page.press("#query", "Enter")
    await page.wait_for_selector("#counts")
    assert "3 matching" in await page.inner_text("#counts")
    first = await page.locator("#workflows tbody tr td.id a").all_inner_texts()
    assert first == [f"{prefix}-2", f"{prefix}-1"]  # newest first, two a page
    await page.click("#next-page")
    second = await page.locator("#workflows tbody tr td.id a").all_inner_texts()
    assert second == [f"{prefix}-0"] and await page.locator("#next-page").count() == 0

    # Ordered by a column open runs leave NULL, the keyset still visits every row once.
    running = await client.start_workflow(ApprovalWorkflow.run, "x", id=f"{prefix}-open", task_queue=QUEUE)
    await running.describe()  # the UI reads the read model, which the start's reply may precede
    await page.fill("#query", f"WorkflowId STARTS_WITH '{prefix}' ORDER BY CloseTime DESC")
    await page.press("#query", "Enter")
    seen = await page.locator("#workflows tbody tr td.id a").all_inner_texts()
    while await page.locator("#next-page").count():
        await page.click("#next-page")
        seen += await page.locator("#workflows tbody tr td.id a").all_inner_texts()
    assert seen == [f"{prefix}-open", f"{prefix}-2", f"{prefix}-1", f"{prefix}-0"]
    await running.terminate(reason="test over")

    await page.fill("#query", "WorkflowType = ")
    await page.press("#query", "Enter")
    assert "the filter does not parse" in await page.inner_text("[role=alert]")

    await page.goto("/workflows")
    await page.screenshot(path=str(SCREENSHOTS / "ui-workflows.png"))


async def test_an_execution_shows_its_timeline_with_a_retry_and_a_signal_sent_from_the_ui_reaches_it(
    page: Any, client: Client, stack: LocalStack, worker: None,
) -> None:
    workflow_id = f"ui-mixed-{uuid.uuid4()}"
    handle = await client.start_workflow(MixedWorkflow.run, "order-7", id=workflow_id, task_queue=QUEUE)
    await wait_for_event(stack, workflow_id, "ActivityTaskCompleted", timeout=30)
    await page.goto(f"/workflow?workflow_id={workflow_id}")
    activity = page.locator(".timeline .bar.activity")
    assert await activity.locator(".segment.failed").count() == 1  # the first attempt, red
    assert await activity.locator(".segment.completed").count() == 1  # the retry
    assert await page.locator(".timeline .bar.timer .segment.completed").count() == 1
    assert "ActivityTaskFailed" in await page.inner_text("#events")
    assert "first attempts fail" in await page.inner_text("#events")
    assert '"order-7"' in await page.inner_text("#input")

    await page.fill("#signal-name", "deliver")
    await page.fill("#signal-input", '"from the UI"')
    await page.click("#signal-form button[type=submit]")
    assert "Send signal 'deliver'" in await page.inner_text("#question")
    await page.click("#confirm")
    assert "is in the history" in await page.inner_text("#outcome")
    assert await handle.result() == "ORDER-7+from the UI"
    # The result may come on the reply topic before the read model, which the UI reads, records the close.
    await wait_for_event(stack, workflow_id, "WorkflowExecutionCompleted", timeout=30)

    await page.goto(f"/workflow?workflow_id={workflow_id}")
    assert "ORDER-7+from the UI" in await page.inner_text("#result")
    total = (await handle.describe()).history_length
    assert f"Events 1 to 15 of {total}" in await page.inner_text("#events")
    await page.click("#next-events")
    assert await page.locator("#events tbody tr td:first-child").all_inner_texts() == [str(i) for i in range(16, total + 1)]
    await page.goto(f"/workflow?workflow_id={workflow_id}")
    await page.screenshot(path=str(SCREENSHOTS / "ui-execution.png"))
    async with page.expect_download() as download:
        await page.click("#export")
    exported = await (await download.value).path()
    assert '"WorkflowExecutionSignaled"' in Path(exported).read_text()


async def test_terminate_asks_for_confirmation_then_terminates(page: Any, client: Client, worker: None) -> None:
    workflow_id = f"ui-terminate-{uuid.uuid4()}"
    handle = await client.start_workflow(ApprovalWorkflow.run, "order-8", id=workflow_id, task_queue=QUEUE)
    await handle.describe()  # the UI reads the read model, which the start's reply may precede
    await page.goto(f"/workflow?workflow_id={workflow_id}")
    await page.fill("#terminate-reason", "stuck order")
    await page.click("#terminate-form button[type=submit]")
    assert "Terminate workflow" in await page.inner_text("#question")
    assert (await handle.describe()).status.value == "Running"  # asked, not done
    await page.click("#confirm")
    assert "is terminated" in await page.inner_text("#outcome")
    assert (await handle.describe()).status.value == "Terminated"
    await page.goto(f"/workflow?workflow_id={workflow_id}")
    assert "stuck order" in await page.inner_text("#events")


async def test_reset_picks_a_workflow_task_asks_then_lands_on_the_new_run_and_a_read_only_ui_refuses_it(
    page: Any, client: Client, stack: LocalStack, worker: None, caplog: pytest.LogCaptureFixture,
) -> None:
    workflow_id = f"ui-reset-{uuid.uuid4()}"
    handle = await client.start_workflow(ApprovalWorkflow.run, "order-14", id=workflow_id, task_queue=QUEUE)
    await wait_for_event(stack, workflow_id, "WorkflowTaskCompleted", timeout=30)
    await handle.signal(ApprovalWorkflow.add_note, "after the first task")
    await wait_for_event(stack, workflow_id, "WorkflowTaskCompleted", timeout=30, count=2)
    ends = [e["event_id"] for e in (await handle.fetch_history()).events if e["attributes"][0] == "WorkflowTaskCompleted"]
    first_task, base_run = ends[0], handle.result_run_id or ""

    await page.goto(f"/workflow?workflow_id={workflow_id}")
    offered = await page.locator("#reset-point option").all_inner_texts()
    assert offered[0].startswith("Last completed workflow task") and offered[1].startswith("First completed workflow task")
    assert [o.split(":")[0] for o in offered[2:]] == [f"Event {i}" for i in reversed(ends)]  # newest first
    await page.select_option("#reset-point", str(first_task))
    await page.fill("#reset-reason", "bad deploy")
    await page.check("#reset-exclude-signal")
    await page.click("#reset-form button[type=submit]")
    question = await page.inner_text("#question")
    assert f"Reset workflow {workflow_id} run {base_run} to the end of the workflow task of event {first_task}" in question
    assert "not reapplying signals" in question
    assert (await handle.describe()).status.value == "Running"  # asked, not done
    with caplog.at_level(logging.INFO, logger="kadence.ops.ui"):
        async with page.expect_navigation(url=lambda url: "run_id=" in url and base_run not in url):
            await page.click("#confirm")
    logged = [r.getMessage() for r in caplog.records if "action=reset" in r.getMessage()]
    assert logged == [f"event=ui_action action=reset workflow_id={workflow_id!r} run_id={base_run!r} "
                      f"point='{first_task}' exclude='Signal' actor='token'"]

    new_run = URL(page.url).query["run_id"]  # the new run's page
    assert await page.inner_text("h1") == workflow_id and "Running" in await page.inner_text("#summary")
    assert await page.locator("#summary tr:has-text('Reset from') a").inner_text() == base_run
    events = await page.inner_text("#events")
    assert "RESET_WORKFLOW" in events and "bad deploy (by token from the web UI)" in events
    assert (await client.get_workflow_handle(workflow_id, run_id=base_run).describe()).status.value == "Terminated"
    reset = client.get_workflow_handle(workflow_id, run_id=new_run)
    assert await reset.query(ApprovalWorkflow.notes_so_far) == ""  # the signal after the point was not reapplied
    await page.goto(f"/workflow?workflow_id={workflow_id}")  # the workflow id's page is the new run's
    assert await page.locator("#summary tr:has-text('Run id') td").inner_text() == new_run
    await page.click(f"#summary tr:has-text('Reset from') a:text-is('{base_run}')")  # the old run links the new one
    assert await page.locator("#summary tr:has-text('Reset as') a").inner_text() == new_run
    assert "reset to event" in await page.inner_text("#events")
    assert await page.locator("#reset-form").count() == 0  # reset already: its new run is the one to reset

    # A read-only UI shows no reset and refuses one.
    read_only = make_app(Ui(UiSettings(token=TOKEN, read_only=True), stack.settings, stack.postgres_dsn))
    async with serving(read_only) as read_only_url, aiohttp.ClientSession(
            cookie_jar=aiohttp.CookieJar(unsafe=True), headers={"Authorization": f"Bearer {TOKEN}"}) as session:
        async with session.get(f"{read_only_url}/workflow", params={"workflow_id": workflow_id, "run_id": new_run}) as shown:
            text = await shown.text()
        assert "reset-form" not in text and "read-only" in text
        csrf = session.cookie_jar.filter_cookies(URL(read_only_url))["kadence_ui_csrf"].value
        refused = await session.post(f"{read_only_url}/workflow/reset", data={
            "workflow_id": workflow_id, "run_id": new_run, "point": "LastWorkflowTask", "reason": "no", "csrf": csrf, "confirmed": "yes"})
        assert refused.status == 403 and "read-only" in await refused.text()
    await page.goto(f"/workflow?workflow_id={workflow_id}&run_id={new_run}")
    assert await page.locator("#reset-form").count() == 1  # the signed-in UI offers it
    await reset.signal(ApprovalWorkflow.approve, "ada")
    assert await reset.result() == "order-14 approved by ada with notes []"

    # Closed and followed by no other run: reset again, the run left as it closed.
    await page.goto(f"/workflow?workflow_id={workflow_id}&run_id={new_run}")
    assert "stays as it closed" in await page.inner_text("#reset-form")
    await page.select_option("#reset-point", "LastWorkflowTask")
    await page.fill("#reset-reason", "replay the approval")
    await page.click("#reset-form button[type=submit]")
    async with page.expect_navigation(url=lambda url: "run_id=" in url and new_run not in url):
        await page.click("#confirm")
    assert await page.locator("#summary tr:has-text('Reset from') a").inner_text() == new_run
    assert (await reset.describe()).status.value == "Completed"
    assert await client.get_workflow_handle(workflow_id).result() == "order-14 approved by ada with notes []"


async def test_a_hostile_workflow_id_and_search_attribute_show_as_text(page: Any, client: Client, worker: None) -> None:
    hostile = f'<script>window.pwned=1</script><img src=x onerror="window.pwned=2">{uuid.uuid4()}'
    await client.execute_workflow(EchoWorkflow.run, "<b>input</b>", id=hostile, task_queue=QUEUE,
                                  search_attributes={"Customer": "<i onmouseover=alert(1)>x</i>"}, memo={"Reviewer": "<u>ada</u>"})
    await client.count_workflows()  # the UI reads the read model, which the result's reply may precede
    await page.goto("/workflows")
    await page.fill("#query", f"WorkflowId = '{hostile}'")
    await page.press("#query", "Enter")
    assert await page.locator("#workflows td.id a").all_inner_texts() == [hostile]
    await page.click("#workflows td.id a")
    assert await page.inner_text("h1") == hostile
    summary = await page.inner_text("#summary")
    assert "<i onmouseover=alert(1)>x</i>" in summary and "<u>ada</u>" in summary  # the memo too, as text
    assert await page.locator("main script, main img, main i, main b, main u").count() == 0
    assert await page.evaluate("window.pwned") is None


async def test_actions_need_the_token_and_the_form_token(ui_url: str, client: Client, worker: None,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    workflow_id = f"ui-refused-{uuid.uuid4()}"
    handle = await client.start_workflow(ApprovalWorkflow.run, "order-9", id=workflow_id, task_queue=QUEUE)
    await handle.describe()  # the UI reads the read model, which the start's reply may precede
    form = {"workflow_id": workflow_id, "run_id": "", "reason": "x", "confirmed": "yes"}
    # unsafe: the jar keeps cookies of an IP address (127.0.0.1)
    async with aiohttp.ClientSession(ui_url, cookie_jar=aiohttp.CookieJar(unsafe=True)) as anonymous:
        await anonymous.get("/workflows")  # the form token's cookie
        csrf = anonymous.cookie_jar.filter_cookies(URL(ui_url))["kadence_ui_csrf"].value
        refused = await anonymous.post("/workflow/terminate", data={**form, "csrf": csrf})
        assert refused.status == 403 and "sign in with the UI's token" in await refused.text()
    async with aiohttp.ClientSession(ui_url, headers={"Authorization": f"Bearer {TOKEN}"},
                                     cookie_jar=aiohttp.CookieJar(unsafe=True)) as signed_in:
        await signed_in.get("/workflows")
        no_form_token = await signed_in.post("/workflow/terminate", data=form)
        assert no_form_token.status == 403 and "form's token" in await no_form_token.text()
        csrf = signed_in.cookie_jar.filter_cookies(URL(ui_url))["kadence_ui_csrf"].value
        cross_site = await signed_in.post("/workflow/terminate", data={**form, "csrf": csrf}, headers={"Origin": "https://evil.example"})
        assert cross_site.status == 403
        # A refusal carries the pages' security headers too.
        assert cross_site.headers["X-Content-Type-Options"] == "nosniff" and cross_site.headers["X-Frame-Options"] == "DENY"
        assert "frame-ancestors 'none'" in cross_site.headers["Content-Security-Policy"]
        # A query name that would forge log fields is logged quoted, on one line.
        forged = "nope\nevent=ui_action action=terminate actor=mallory"
        with caplog.at_level(logging.INFO, logger="kadence.ops.ui"):
            await signed_in.post("/workflow/query", data={"workflow_id": workflow_id, "name": forged, "args": "[]", "csrf": csrf})
        logged = [r.getMessage() for r in caplog.records if "action=query" in r.getMessage()]
        assert logged and "\n" not in logged[0] and logged[0].endswith("actor='token'")
    assert (await handle.describe()).status.value == "Running"
    await handle.terminate(reason="test over")


async def test_a_loopback_ui_answers_only_loopback_host_names_and_a_strange_cookie_is_no_error(ui_url: str) -> None:
    port = URL(ui_url).port
    async with aiohttp.ClientSession(ui_url) as session:
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            async with session.get("/workflows", headers={"Host": host}) as shown:
                assert shown.status == 200, host
        # A DNS-rebinding page: its name resolves to 127.0.0.1, and the browser sends that name.
        async with session.get("/workflows", headers={"Host": f"rebound.evil.example:{port}"}) as rebound:
            assert rebound.status == 421 and "Workflows" not in await rebound.text()
            assert rebound.headers["X-Frame-Options"] == "DENY"
        async with session.get("/healthz", headers={"Host": "10.0.0.7:8233"}) as probed:  # the kubelet's probe
            assert probed.status == 200
        async with session.get("/workflows", headers={"Cookie": "kadence_ui_auth=caf\u00e9"}) as strange:
            assert strange.status == 200


async def test_the_stack_trace_query_from_the_ui_shows_where_the_workflow_waits(page: Any, client: Client, worker: None) -> None:
    workflow_id = f"ui-stack-{uuid.uuid4()}"
    handle = await client.start_workflow(ApprovalWorkflow.run, "order-10", id=workflow_id, task_queue=QUEUE)
    await handle.describe()  # the UI reads the read model, which the start's reply may precede
    await page.goto(f"/workflow?workflow_id={workflow_id}")
    assert await page.input_value("#query-name") == "__stack_trace"
    await page.click("#query-form button[type=submit]")
    answer = await page.inner_text("#answer")
    assert "ApprovalWorkflow.run()" in answer  # the main coroutine's task
    assert "await workflow.wait_condition(" in answer  # the line it waits on
    await handle.terminate(reason="test over")


async def test_the_operations_pages_show_the_queue_the_dead_letters_with_replay_and_the_last_audit(
    page: Any, stack: LocalStack, client: Client, worker: None,
) -> None:
    await client.execute_workflow(EchoWorkflow.run, "warm", id=f"ui-ops-{uuid.uuid4()}", task_queue=QUEUE)
    await page.goto("/task-queues")
    await page.click(f"#queues a:text-is('{QUEUE}')")
    assert "workflow" in await page.inner_text("#kinds") and "activity" in await page.inner_text("#kinds")
    await page.wait_for_function("document.querySelectorAll('#pollers tbody tr').length > 0")
    await page.screenshot(path=str(SCREENSHOTS / "ui-task-queue.png"))

    key = f"ui-garbage-{uuid.uuid4()}"
    producer = make_producer(stack.settings)
    producer.produce(topics.COMMANDS, b"\x00\xff not a command", key.encode())
    assert producer.flush(10) == 0
    letters = await _dead_letters_of(stack, key, 1)
    await page.goto(f"/dlq?from={letters[0].offset}")
    row = page.locator("#dead-letters tbody tr", has_text=key)
    assert "kadence.commands/" in await row.inner_text() and "EOFError" in await row.inner_text()  # where from, and why
    await row.locator("input[type=checkbox]").check()
    await page.click("text=Replay the chosen records")
    assert str(letters[0].offset) in await page.inner_text("#question")
    await page.click("#confirm")
    assert f"replayed {letters[0].offset} to {topics.COMMANDS}" in await page.inner_text("#outcome")
    await _dead_letters_of(stack, key, 2)  # the history service refused it again: still garbage

    audited = subprocess.run([sys.executable, "-m", "kadence.ops.cli", "audit", "replay", "--stuck-after", "0", "--json"],
                             env=stack.env, capture_output=True, text=True, timeout=120)
    summary = json.loads(audited.stdout)
    await page.goto("/audit")
    assert ("found nothing wrong" if audited.returncode == 0 else "found problems") in await page.inner_text("#audit-verdict")
    assert f"{summary['records']}" in await page.inner_text("main")


async def _dead_letters_of(stack: LocalStack, key: str, count: int) -> list[DeadLetter]:
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        found = [d for d in await asyncio.to_thread(dead_letters, stack.settings) if d.key == key.encode()]
        if len(found) >= count or asyncio.get_running_loop().time() > deadline:
            assert len(found) == count, f"{len(found)} dead letters of {key}, not {count}"
            return found
        await asyncio.sleep(0.2)


async def test_a_pending_activity_shows_its_attempt_and_last_heartbeat(page: Any, client: Client, stack: LocalStack, worker: None) -> None:
    workflow_id = f"ui-heartbeat-{uuid.uuid4()}"
    handle = await client.start_workflow(ImportWorkflow.run, 1234, id=workflow_id, task_queue=QUEUE)
    await wait_for_event(stack, workflow_id, "ActivityTaskStarted", timeout=30)
    deadline = asyncio.get_running_loop().time() + 30
    while True:  # the heartbeat reaches the log just after the attempt's start
        await page.goto(f"/workflow?workflow_id={workflow_id}")
        pending = await page.inner_text("#pending")
        if "rows_done" in pending or asyncio.get_running_loop().time() > deadline:
            break
    assert "heartbeat_then_wait" in pending and "STARTED" in pending
    assert '"rows_done": 1234' in pending
    RELEASED.set()
    assert await handle.result() == "1234 rows"


async def test_a_workflow_task_being_retried_shows_its_attempt_and_last_failure(page: Any, client: Client, worker: None) -> None:
    workflow_id = f"ui-buggy-{uuid.uuid4()}"
    handle = await client.start_workflow(BuggyUntilFixedWorkflow.run, id=workflow_id, task_queue=QUEUE)
    deadline = asyncio.get_running_loop().time() + 30
    while (await handle.describe()).pending_workflow_task is None:  # its first failure, then the retry waits out its backoff
        assert asyncio.get_running_loop().time() < deadline, "the workflow task was not retried within 30 s"
        await asyncio.sleep(0.1)
    await page.goto(f"/workflow?workflow_id={workflow_id}")
    summary = await page.inner_text("#summary")
    assert "Workflow task" in summary and "attempt " in summary
    assert "WORKFLOW_WORKER_UNHANDLED_FAILURE: RuntimeError: a bug the next deploy fixes" in summary
    FIXED.add(workflow_id)
    assert await handle.result() == "fixed"


async def test_a_broker_that_stops_answering_fails_a_page_in_time_and_postgres_statements_are_bounded(stack: LocalStack) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:  # accepts, never answers
        await reader.read(-1)
        writer.close()

    black_hole = await asyncio.start_server(silent, "127.0.0.1", 0)
    ui = Ui(UiSettings(kafka_timeout_s=1.0), stack.settings, stack.postgres_dsn)
    try:
        async with serving(make_app(ui)) as url, aiohttp.ClientSession(url) as session:
            async with ui.pool.connection() as conn:
                assert await (await conn.execute("SHOW statement_timeout")).fetchone() == ("15s",)
            port = black_hole.sockets[0].getsockname()[1]
            ui.kafka = dataclasses.replace(stack.settings, bootstrap_servers=f"127.0.0.1:{port}")  # the broker goes silent
            for path in ("/task-queues", "/dlq"):
                started = time.monotonic()
                async with session.get(path) as page:
                    assert page.status == 504 and "did not answer within 1 s" in await page.text()
                assert time.monotonic() - started < 10, path
    finally:
        black_hole.close()


async def test_encrypted_payloads_show_as_encoded_unless_the_ui_has_a_codec_server(stack: LocalStack, client: Client, ui_url: str) -> None:
    codec = AesGcmCodec(AESGCM.generate_key(bit_length=256))
    sealing = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn,
                                   data_converter=dataclasses.replace(DataConverter.default, payload_codec=codec))
    workflow_id = f"ui-sealed-{uuid.uuid4()}"
    try:  # no worker polls the queue: the input stays in the started event, sealed
        handle = await sealing.start_workflow(EchoWorkflow.run, SECRET, id=workflow_id, task_queue=f"{QUEUE}-unpolled",
                                              memo={"note": "a sealed memo"})
        await handle.describe()  # the UI reads the read model, which the start's reply may precede
    finally:
        await sealing.close()

    async with serving(build_codec_server(codec)) as codec_url, serving(make_app(Ui(UiSettings(codec_endpoint=codec_url), stack.settings,
                                                                     stack.postgres_dsn))) as decoding_url:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{ui_url}/workflow", params={"workflow_id": workflow_id}) as plain:
                shown = await plain.text()
            assert "binary/encrypted" in shown and SECRET not in shown and "a sealed memo" not in shown
            async with session.get(f"{decoding_url}/workflow", params={"workflow_id": workflow_id}) as decoded:
                shown = await decoded.text()
            assert SECRET in shown and "a sealed memo" in shown and "binary/encrypted" not in shown
    await client.get_workflow_handle(workflow_id).terminate(reason="test over")



def test_the_timeline_of_a_run_closed_with_work_open_ends_at_its_close() -> None:
    def event(event_id: int, at_ms: int, kind: str, **attrs: Any) -> dict[str, Any]:
        return {"event_id": event_id, "event_time_ms": at_ms, "attributes": (kind, attrs)}

    closed_at = 1_000_000_003_000
    events = [  # terminated while its activity waited to retry
        event(1, 1_000_000_000_000, "WorkflowExecutionStarted"),
        event(5, 1_000_000_000_100, "ActivityTaskScheduled", activity_type="charge", activity_id="5"),
        event(6, 1_000_000_000_200, "ActivityTaskStarted", scheduled_event_id=5, attempt=1),
        event(7, 1_000_000_000_300, "ActivityTaskFailed", scheduled_event_id=5, failure={"message": "declined"},
              retry_state=RetryState.IN_PROGRESS),
        event(8, closed_at, "WorkflowExecutionTerminated", reason="stuck"),
    ]
    drawn = timeline(events, now_ms=closed_at + 86_400_000)  # looked at a day later
    assert drawn.end_ms == closed_at
    backoff = drawn.bars[0].segments[-1]
    assert (backoff.end_ms, backoff.state, backoff.label) == (closed_at, "canceled", "dropped: the run terminated")

async def test_an_execution_links_its_parent_children_and_continue_as_new_chain_and_shows_a_failure_chain(
    page: Any, client: Client, worker: None,
) -> None:
    prefix = f"ui-family-{uuid.uuid4()}"
    await client.execute_workflow(FamilyWorkflow.run, prefix, id=prefix, task_queue=QUEUE)
    await client.count_workflows()  # the UI reads the read model, which the result's reply may precede
    await page.goto(f"/workflow?workflow_id={prefix}")
    children = await page.locator("#summary ul a").all_inner_texts()
    assert {f"{prefix}-echo", f"{prefix}-countdown", f"{prefix}-declined", f"{prefix}-approval"} <= set(children)
    assert await page.locator(".timeline .bar.child-workflow").count() >= 5

    await page.click(f"#summary a:text-is('{prefix}-declined')")
    assert "Failed" in await page.inner_text("#summary") and prefix in await page.inner_text("#summary")  # its parent
    failures = page.locator("#failure .failure")
    assert await failures.count() >= 2  # the run's failure, then the activity's under it
    assert "payment declined for card" in await failures.last.inner_text()

    await page.goto(f"/workflow?workflow_id={prefix}-countdown")  # its last run
    summary = await page.inner_text("#summary")
    assert "Continued from" in summary and "First run of the chain" in summary
    await page.click("#summary tr:has-text('Continued from') a")
    assert "Continued as" in await page.inner_text("#summary")


async def test_cancel_asks_for_confirmation_then_the_workflow_cleans_up_and_ends_canceled(
    page: Any, client: Client, worker: None,
) -> None:
    handle = await client.start_workflow(CancellableWorkflow.run, "order-11", id=f"ui-cancel-{uuid.uuid4()}", task_queue=QUEUE)
    await handle.describe()  # the UI reads the read model, which the start's reply may precede
    await page.goto(f"/workflow?workflow_id={handle.id}")
    await page.click("#cancel-form button[type=submit]")
    assert "Request cancellation" in await page.inner_text("#question")
    await page.click("#confirm")
    assert "Cancellation of" in await page.inner_text("#outcome")
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    assert (await handle.describe()).status.value == "Canceled"


async def test_read_only_and_auth_proxy_modes(stack: LocalStack, client: Client, worker: None) -> None:
    handle = await client.start_workflow(ApprovalWorkflow.run, "order-12", id=f"ui-modes-{uuid.uuid4()}", task_queue=QUEUE)
    await handle.describe()  # the UI reads the read model, which the start's reply may precede
    read_only = make_app(Ui(UiSettings(token=TOKEN, read_only=True), stack.settings, stack.postgres_dsn))
    proxied = make_app(Ui(UiSettings(auth_proxy_header="X-Forwarded-User"), stack.settings, stack.postgres_dsn))
    async with serving(read_only) as read_only_url, serving(proxied) as proxied_url:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True),
                                         headers={"Authorization": f"Bearer {TOKEN}"}) as session:
            async with session.get(f"{read_only_url}/workflow", params={"workflow_id": handle.id}) as shown:
                page = await shown.text()
            assert "terminate-form" not in page and "read-only" in page
            csrf = session.cookie_jar.filter_cookies(URL(read_only_url))["kadence_ui_csrf"].value
            refused = await session.post(f"{read_only_url}/workflow/terminate",
                                         data={"workflow_id": handle.id, "csrf": csrf, "confirmed": "yes"})
            assert refused.status == 403
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            async with session.get(f"{proxied_url}/workflow", params={"workflow_id": handle.id}) as shown:
                assert "terminate-form" not in await shown.text()  # no user header: no actions
            async with session.get(f"{proxied_url}/workflow", params={"workflow_id": handle.id},
                                   headers={"X-Forwarded-User": "alice"}) as shown:
                assert "terminate-form" in await shown.text()
            csrf = session.cookie_jar.filter_cookies(URL(proxied_url))["kadence_ui_csrf"].value
            form = {"workflow_id": handle.id, "csrf": csrf, "confirmed": "yes", "reason": "proxied"}
            # The TLS-terminating proxy: the browser's Origin is https, the UI is reached over http.
            behind_tls = {"X-Forwarded-User": "alice", "X-Forwarded-Proto": "https",
                          "Origin": f"https://{URL(proxied_url).host}:{URL(proxied_url).port}"}
            cross_site = await session.post(f"{proxied_url}/workflow/terminate", data=form,
                                            headers={**behind_tls, "Origin": "https://evil.example"})
            assert cross_site.status == 403 and "evil.example" not in await cross_site.text()
            done = await session.post(f"{proxied_url}/workflow/terminate", headers=behind_tls, data=form)
            assert done.status == 200
    assert (await handle.describe()).status.value == "Terminated"
    events = (await handle.fetch_history()).events
    assert "proxied (by alice from the web UI)" in str(events[-1]["attributes"])


def test_kadence_ui_listens_on_loopback_and_prints_its_sign_in_link(stack: LocalStack) -> None:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "kadence.ops.cli", "ui", "--port", str(port)], env=stack.env,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        link = process.stderr.readline().strip().removeprefix("Kadence UI: ")
        hint = process.stderr.readline()
        assert link.startswith(f"http://127.0.0.1:{port}/login?code=")  # a one-time code, not the token
        token = hint.strip().removesuffix(")").rsplit(" ", 1)[-1]
        assert "signs in once" in hint and token not in link
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())
        deadline = time.monotonic() + 30
        while True:
            try:
                page = opener.open(link, timeout=5).read().decode()  # signs in, then the list
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert "actions enabled" in page and "<h1>Workflows</h1>" in page
        with pytest.raises(urllib.error.HTTPError) as spent:  # used once: the link no longer signs in
            urllib.request.build_opener(urllib.request.HTTPCookieProcessor()).open(link, timeout=5)
        assert spent.value.code == 403 and "used or is older than" in spent.value.read().decode()
        listening = [c for c in psutil.Process(process.pid).net_connections() if c.status == psutil.CONN_LISTEN]
        assert [c.laddr.ip for c in listening] == ["127.0.0.1"]
    finally:
        process.terminate()
        process.wait(10)



async def test_a_codec_server_that_does_not_answer_fails_an_action_with_its_error(stack: LocalStack, client: Client,
                                                                                   worker: None) -> None:
    handle = await client.start_workflow(ApprovalWorkflow.run, "order-13", id=f"ui-codec-down-{uuid.uuid4()}", task_queue=QUEUE)
    await handle.describe()  # the UI reads the read model, which the start's reply may precede
    gone = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with serving(make_app(Ui(UiSettings(token=TOKEN, codec_endpoint=gone), stack.settings, stack.postgres_dsn))) as url:
        async with aiohttp.ClientSession(url, headers={"Authorization": f"Bearer {TOKEN}"},
                                         cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            await session.get("/workflows")
            csrf = session.cookie_jar.filter_cookies(URL(url))["kadence_ui_csrf"].value
            form = {"workflow_id": handle.id, "run_id": "", "csrf": csrf}
            signalled = await session.post("/workflow/signal", data={**form, "name": "approve", "input": '"yes"', "confirmed": "yes"})
            assert signalled.status == 502 and f"the codec server at {gone}/encode does not answer" in await signalled.text()
            queried = await session.post("/workflow/query", data={**form, "name": "__stack_trace", "args": "[]"})
            assert queried.status == 502 and f"the codec server at {gone}/" in await queried.text()
    assert (await handle.describe()).status.value == "Running"
    await handle.terminate(reason="test over")


async def described_when(handle: ScheduleHandle, check: Callable[[ScheduleDescription], bool],
                         timeout_s: float = 30) -> ScheduleDescription:
    """The schedule's description once `check` holds (it acts on its own time)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        described = await handle.describe()
        if check(described):
            return described
        assert asyncio.get_running_loop().time() < deadline, f"the schedule never got there: {described}"
        await asyncio.sleep(0.2)


def hourly(workflow_id: str, task_queue: str = QUEUE, **state: Any) -> Schedule:
    return Schedule(action=ScheduleActionStartWorkflow(EchoWorkflow.run, "hourly", id=workflow_id, task_queue=task_queue),
                    spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(hours=1))]), state=ScheduleState(**state))


async def test_a_schedule_shows_its_spec_recent_actions_and_next_times_and_is_paused_triggered_and_deleted_from_the_ui(
    page: Any, client: Client, worker: None,
) -> None:
    prefix = f"ui-schedule-{uuid.uuid4()}"
    schedule_id, action_id = f"{prefix}-b-every-second", f"ui-scheduled-{uuid.uuid4()}"
    ends = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    handle = await client.create_schedule(schedule_id, Schedule(
        action=ScheduleActionStartWorkflow(EchoWorkflow.run, "from a schedule", id=action_id, task_queue=QUEUE),
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(seconds=1))],
                          calendars=[ScheduleCalendarSpec(hour=[ScheduleRange(9)], day_of_week=[ScheduleRange(1, 5)],
                                                          comment="weekday mornings")],
                          cron_expressions=["30 17 * * FRI"], end_at=ends, jitter=timedelta(milliseconds=200),
                          time_zone_name="Europe/Berlin"),
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.ALLOW_ALL, catchup_window=timedelta(minutes=5)),
    ))
    others = [await client.create_schedule(f"{prefix}-a-hourly", hourly(f"ui-hourly-{uuid.uuid4()}", paused=True, note="kept paused")),
              await client.create_schedule(f"{prefix}-c-hourly", hourly(f"ui-hourly-{uuid.uuid4()}"))]
    try:
        await described_when(handle, lambda d: len([a for a in d.info.recent_actions if a.status == "Completed"]) >= 2)
        for other in others:
            await other.describe()  # the UI reads the read model, which the create's reply may precede

        # The list: by id, two a page (the UI's page size here), paused or running.
        await page.goto("/workflows")
        await page.click("header nav a:text-is('Schedules')")
        await page.fill("#prefix", prefix)
        await page.press("#prefix", "Enter")
        assert "3 schedules" in await page.inner_text("#counts")
        assert await page.locator("#schedules tbody td.id a").all_inner_texts() == [f"{prefix}-a-hourly", schedule_id]
        first_row, second_row = await page.locator("#schedules tbody tr").all_inner_texts()
        assert "Paused" in first_row and "EchoWorkflow" in first_row
        assert "Running" in second_row and "Completed" in second_row  # its last action
        await page.click("#next-page")
        assert await page.locator("#schedules tbody td.id a").all_inner_texts() == [f"{prefix}-c-hourly"]
        assert await page.locator("#next-page").count() == 0

        # The schedule's page: its spec, action and policies, its recent actions and next times.
        await page.click("a:text-is('First page')")
        await page.click(f"#schedules a:text-is('{schedule_id}')")
        assert await page.inner_text("h1") == schedule_id
        spec = await page.inner_text("#spec-table")
        for shown in ("every 1s", "hour 9", "day of week 1-5", "weekday mornings", "30 17 * * FRI", "Europe/Berlin", "200ms",
                      ends.strftime("%Y-%m-%d %H:%M:%S")):
            assert shown in spec, shown
        action = await page.inner_text("#action-table")
        assert "EchoWorkflow" in action and action_id in action and QUEUE in action and '"from a schedule"' in action
        policies = await page.inner_text("#policy-table")
        assert "ALLOW_ALL" in policies and "5m" in policies
        assert "Running" in await page.inner_text("#state-table")
        assert await page.locator("#next-times li").count() == 10
        recent = page.locator("#recent-actions tbody tr")
        assert await recent.count() >= 2 and "Completed" in await recent.last.inner_text()
        run_id = (await recent.last.locator("td.id a").inner_text())
        assert run_id.startswith(f"{action_id}-")
        await recent.last.locator("td.id a").click()  # the run it started, which links back to it
        assert await page.inner_text("h1") == run_id
        assert '"from a schedule"' in await page.inner_text("#input")
        await page.click(f"#summary a:text-is('{schedule_id}')")
        assert await page.inner_text("h1") == schedule_id

        # Pause, with a note: asked, then done.
        await page.fill("#pause-note", "for maintenance")
        await page.click("#pause-form button[type=submit]")
        assert "Pause schedule" in await page.inner_text("#question")
        assert not (await handle.describe()).schedule.state.paused  # asked, not done
        await page.click("#confirm")
        assert "is paused" in await page.inner_text("#outcome")
        await page.click("#outcome ~ p a")
        state = await page.inner_text("#state-table")
        assert "Paused" in state and "for maintenance" in state
        assert "paused" in await page.inner_text("#next-times")
        assert await page.locator("#pause-form").count() == 0 and await page.locator("#unpause-form").count() == 1
        paused = await handle.describe()
        assert paused.schedule.state.paused and "for maintenance" in (paused.schedule.state.note or "")

        # Trigger: one action now, though paused.
        taken = paused.info.num_actions
        await page.click("#trigger-form button[type=submit]")
        await page.click("#confirm")
        assert "is triggered" in await page.inner_text("#outcome")
        await described_when(handle, lambda d: d.info.num_actions == taken + 1)
        await page.goto(f"/schedule?schedule_id={schedule_id}")
        assert f"{taken + 1:,}" in await page.inner_text("#state-table tr:has-text('Actions taken')")

        # Unpause: it acts on its own again.
        await page.fill("#unpause-note", "maintenance over")
        await page.click("#unpause-form button[type=submit]")
        await page.click("#confirm")
        assert "is unpaused" in await page.inner_text("#outcome")
        await page.click("#outcome ~ p a")
        assert "Running" in await page.inner_text("#state-table") and await page.locator("#next-times li").count() == 10
        assert (await handle.describe()).schedule.state.note == "maintenance over (by token from the web UI)"

        # Delete: asked, then gone from the list; the page says it was deleted.
        await page.click("#delete-form button[type=submit]")
        assert "Delete schedule" in await page.inner_text("#question")
        await page.click("#confirm")
        assert "is deleted" in await page.inner_text("#outcome")
        with pytest.raises(ScheduleNotFoundError):
            await handle.describe()
        shown = await page.goto(f"/schedule?schedule_id={schedule_id}")
        assert shown is not None and shown.status == 404 and "was deleted" in await page.inner_text("main")
        await page.goto(f"/schedules?prefix={prefix}")
        assert schedule_id not in await page.inner_text("#schedules")
    finally:
        for leftover in (handle, *others):
            with contextlib.suppress(ScheduleNotFoundError):
                await leftover.delete()


async def test_a_read_only_ui_offers_no_schedule_actions_and_refuses_them(stack: LocalStack, client: Client, ui_url: str) -> None:
    schedule_id = f"ui-schedule-<b>read-only</b>-{uuid.uuid4()}"
    handle = await client.create_schedule(schedule_id, hourly(f"ui-hourly-{uuid.uuid4()}", task_queue=f"{QUEUE}-unpolled"))
    try:
        await handle.describe()  # the UI reads the read model, which the create's reply may precede
        read_only = make_app(Ui(UiSettings(token=TOKEN, read_only=True), stack.settings, stack.postgres_dsn))
        async with serving(read_only) as read_only_url, aiohttp.ClientSession(
                cookie_jar=aiohttp.CookieJar(unsafe=True), headers={"Authorization": f"Bearer {TOKEN}"}) as session:
            async with session.get(f"{read_only_url}/schedule", params={"schedule_id": schedule_id}) as shown:
                assert shown.status == 200
                text = await shown.text()
            assert "read-only" in text and "&lt;b&gt;read-only&lt;/b&gt;" in text and "<b>read-only" not in text
            assert not [form for form in ("pause-form", "unpause-form", "trigger-form", "delete-form") if form in text]
            csrf = session.cookie_jar.filter_cookies(URL(read_only_url))["kadence_ui_csrf"].value
            for action in ("pause", "unpause", "trigger", "delete"):
                refused = await session.post(f"{read_only_url}/schedule/{action}",
                                             data={"schedule_id": schedule_id, "note": "no", "csrf": csrf, "confirmed": "yes"})
                assert refused.status == 403 and "read-only" in await refused.text(), action
        # The signed-in UI offers them, and refuses a POST without the token or the form token.
        async with aiohttp.ClientSession(ui_url, cookie_jar=aiohttp.CookieJar(unsafe=True)) as anonymous:
            async with anonymous.get("/schedule", params={"schedule_id": schedule_id}) as shown:
                assert "pause-form" not in await shown.text()
            csrf = anonymous.cookie_jar.filter_cookies(URL(ui_url))["kadence_ui_csrf"].value
            refused = await anonymous.post("/schedule/delete", data={"schedule_id": schedule_id, "csrf": csrf, "confirmed": "yes"})
            assert refused.status == 403 and "sign in with the UI's token" in await refused.text()
        async with aiohttp.ClientSession(ui_url, headers={"Authorization": f"Bearer {TOKEN}"},
                                         cookie_jar=aiohttp.CookieJar(unsafe=True)) as signed_in:
            async with signed_in.get("/schedule", params={"schedule_id": schedule_id}) as shown:
                assert "pause-form" in await shown.text() and "delete-form" in await shown.text()
            no_form_token = await signed_in.post("/schedule/delete", data={"schedule_id": schedule_id, "confirmed": "yes"})
            assert no_form_token.status == 403 and "form's token" in await no_form_token.text()
        described = await handle.describe()
        assert not described.schedule.state.paused and described.info.num_actions == 0
    finally:
        await handle.delete()
