"""The web UI in a real browser: Debian's chromium driven by Playwright (executable_path: no browser
download), against the session's stack with real workflows run by a worker. One browser and one
UI server for the module. The run takes the screenshots in docs/ that the README shows."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from playwright import async_api as playwright_api

from kadence import activity, workflow
from kadence.client import Client
from kadence.converter import DataConverter
from kadence.dev.local_stack import LocalStack
from kadence.ops.ui.codec_server import from_json, to_json
from kadence.ops.ui.server import Ui, UiSettings, make_app
from kadence.protocol import topics
from kadence.protocol.dead_letters import DeadLetter, dead_letters
from kadence.protocol.kafka import make_producer
from kadence.worker import Worker
from tests.conftest import wait_for_event
from tests.test_payload_codecs import SECRET, AesGcmCodec
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, ApprovalWorkflow, EchoWorkflow, MixedWorkflow

DOCS = Path(__file__).resolve().parents[1] / "docs"
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
    async with Worker(client, task_queue=QUEUE, workflows=[*ALL_WORKFLOWS, ImportWorkflow],
                      activities=[*ALL_ACTIVITIES, heartbeat_then_wait]):
        yield


@pytest.fixture(scope="module")
async def ui_url(stack: LocalStack) -> AsyncIterator[str]:
    # Two rows a page, so three workflows page twice.
    async with serving(make_app(Ui(UiSettings(token=TOKEN, page_size=2), stack.settings, stack.postgres_dsn))) as url:
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
    signed_in = await context.new_page()
    await signed_in.goto(f"/login?token={TOKEN}")
    yield signed_in
    await context.close()


async def test_the_list_filters_counts_and_pages_by_keyset(page: Any, client: Client, worker: None) -> None:
    prefix = f"ui-list-{uuid.uuid4()}"
    for n in range(3):
        await client.execute_workflow(EchoWorkflow.run, f"value-{n}", id=f"{prefix}-{n}", task_queue=QUEUE)
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

    await page.fill("#query", "WorkflowType = ")
    await page.press("#query", "Enter")
    assert "the filter does not parse" in await page.inner_text("[role=alert]")

    await page.goto("/workflows")
    await page.screenshot(path=str(DOCS / "ui-workflows.png"))


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

    await page.goto(f"/workflow?workflow_id={workflow_id}")
    assert "ORDER-7+from the UI" in await page.inner_text("#result")
    await page.screenshot(path=str(DOCS / "ui-execution.png"))
    async with page.expect_download() as download:
        await page.click("#export")
    exported = await (await download.value).path()
    assert '"WorkflowExecutionSignaled"' in Path(exported).read_text()


async def test_terminate_asks_for_confirmation_then_terminates(page: Any, client: Client, worker: None) -> None:
    workflow_id = f"ui-terminate-{uuid.uuid4()}"
    handle = await client.start_workflow(ApprovalWorkflow.run, "order-8", id=workflow_id, task_queue=QUEUE)
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


async def test_a_hostile_workflow_id_and_search_attribute_show_as_text(page: Any, client: Client, worker: None) -> None:
    hostile = f'<script>window.pwned=1</script><img src=x onerror="window.pwned=2">{uuid.uuid4()}'
    await client.execute_workflow(EchoWorkflow.run, "<b>input</b>", id=hostile, task_queue=QUEUE,
                                  search_attributes={"Customer": "<i onmouseover=alert(1)>x</i>"})
    await page.goto("/workflows")
    await page.fill("#query", f"WorkflowId = '{hostile}'")
    await page.press("#query", "Enter")
    assert await page.locator("#workflows td.id a").all_inner_texts() == [hostile]
    await page.click("#workflows td.id a")
    assert await page.inner_text("h1") == hostile
    assert "<i onmouseover=alert(1)>x</i>" in await page.inner_text("#summary")
    assert await page.locator("main script, main img, main i, main b").count() == 0
    assert await page.evaluate("window.pwned") is None


async def test_actions_need_the_token_and_the_form_token(ui_url: str, client: Client, worker: None) -> None:
    workflow_id = f"ui-refused-{uuid.uuid4()}"
    handle = await client.start_workflow(ApprovalWorkflow.run, "order-9", id=workflow_id, task_queue=QUEUE)
    form = {"workflow_id": workflow_id, "run_id": "", "reason": "x", "confirmed": "yes"}
    # unsafe: the jar keeps cookies of an IP address (127.0.0.1)
    async with aiohttp.ClientSession(ui_url, cookie_jar=aiohttp.CookieJar(unsafe=True)) as anonymous:
        await anonymous.get("/workflows")  # the form token's cookie
        csrf = anonymous.cookie_jar.filter_cookies(ui_url)["kadence_ui_csrf"].value
        refused = await anonymous.post("/workflow/terminate", data={**form, "csrf": csrf})
        assert refused.status == 403 and "sign in with the UI's token" in await refused.text()
    async with aiohttp.ClientSession(ui_url, headers={"Authorization": f"Bearer {TOKEN}"},
                                     cookie_jar=aiohttp.CookieJar(unsafe=True)) as signed_in:
        await signed_in.get("/workflows")
        no_form_token = await signed_in.post("/workflow/terminate", data=form)
        assert no_form_token.status == 403 and "form's token" in await no_form_token.text()
        csrf = signed_in.cookie_jar.filter_cookies(ui_url)["kadence_ui_csrf"].value
        cross_site = await signed_in.post("/workflow/terminate", data={**form, "csrf": csrf}, headers={"Origin": "https://evil.example"})
        assert cross_site.status == 403
    assert (await handle.describe()).status.value == "Running"
    await handle.terminate(reason="test over")


async def test_the_stack_trace_query_from_the_ui_shows_where_the_workflow_waits(page: Any, client: Client, worker: None) -> None:
    workflow_id = f"ui-stack-{uuid.uuid4()}"
    handle = await client.start_workflow(ApprovalWorkflow.run, "order-10", id=workflow_id, task_queue=QUEUE)
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


async def test_encrypted_payloads_show_as_encoded_unless_the_ui_has_a_codec_server(stack: LocalStack, client: Client, ui_url: str) -> None:
    codec = AesGcmCodec(AESGCM.generate_key(bit_length=256))
    sealing = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn,
                                   data_converter=dataclasses.replace(DataConverter.default, payload_codec=codec))
    workflow_id = f"ui-sealed-{uuid.uuid4()}"
    try:  # no worker polls the queue: the input stays in the started event, sealed
        await sealing.start_workflow(EchoWorkflow.run, SECRET, id=workflow_id, task_queue=f"{QUEUE}-unpolled")
    finally:
        await sealing.close()

    async def decode(request: web.Request) -> web.Response:  # a codec server, in Temporal's protocol
        payloads = [from_json(p) for p in (await request.json())["payloads"]]
        return web.json_response({"payloads": [to_json(p) for p in await codec.decode(payloads)]})

    codec_app = web.Application()
    codec_app.router.add_post("/decode", decode)
    async with serving(codec_app) as codec_url, serving(make_app(Ui(UiSettings(codec_endpoint=codec_url), stack.settings,
                                                                     stack.postgres_dsn))) as decoding_url:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{ui_url}/workflow", params={"workflow_id": workflow_id}) as plain:
                shown = await plain.text()
            assert "binary/encrypted" in shown and SECRET not in shown
            async with session.get(f"{decoding_url}/workflow", params={"workflow_id": workflow_id}) as decoded:
                shown = await decoded.text()
            assert SECRET in shown and "binary/encrypted" not in shown
    await client.get_workflow_handle(workflow_id).terminate(reason="test over")


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()

