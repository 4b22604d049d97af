"""Every service's /healthz, /readyz and /metrics, scraped from the running stack."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiohttp
import psycopg
import pytest

from kadence.client import Client
from kadence.dev.local_stack import SERVICES, LocalStack, free_port
from kadence.protocol.observability import serve
from kadence.worker import Worker
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, ParentOfTwoStepWorkflow, SleepyWorkflow

# Each service reports its consumer lag per partition of the topic it follows.
LAGGING = {"history": "kadence.commands", "matching": "kadence.history", "timer": "kadence.history", "visibility": "kadence.history"}
METRICS = {
    "history": ["kadence_history_commands_total", "kadence_history_batches_written_total", "kadence_history_recovery_seconds",
                "kadence_tasks_dispatched_total"],
    "matching": ["kadence_matching_commands_relayed_total"],
    "timer": ["kadence_timer_fired_total", "kadence_timer_firing_lag_seconds_bucket"],
    "visibility": ["kadence_projection_records_total"],
}


async def test_each_service_is_healthy_ready_and_counts_its_work(stack: LocalStack, client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        await client.execute_workflow(SleepyWorkflow.run, 0.2, id=f"observed-{uuid.uuid4()}", task_queue=task_queue)
        # A child's start and its answer to the parent go through matching's relay.
        await client.execute_workflow(ParentOfTwoStepWorkflow.run, "x", id=f"observed-parent-{uuid.uuid4()}", task_queue=task_queue)

    async with aiohttp.ClientSession() as http:
        for service in SERVICES:
            base = f"http://127.0.0.1:{stack.http_ports[service]}"
            async with http.get(f"{base}/healthz") as health:
                assert health.status == 200, service
            for _ in range(100):  # ready once its partitions are assigned and read to their end
                async with http.get(f"{base}/readyz") as ready:
                    if ready.status == 200:
                        break
                await asyncio.sleep(0.1)
            assert ready.status == 200, f"{service}: {await ready.text()}"
            for _ in range(100):  # librdkafka reports statistics every 5 s
                async with http.get(f"{base}/metrics") as scraped:
                    text = await scraped.text()
                if service not in LAGGING or "kadence_consumer_lag{" in text:
                    break
                await asyncio.sleep(0.1)
            if service in LAGGING:
                lag = [line for line in text.splitlines() if line.startswith("kadence_consumer_lag{")]
                assert lag and all(f'topic="{LAGGING[service]}"' in line for line in lag), f"{service}: {lag}"
            for metric in METRICS[service]:
                samples = [line for line in text.splitlines() if line.startswith(metric) and not line.endswith(" 0.0")]
                assert samples, f"{service} has no {metric} samples above zero"


DASHBOARD = Path(__file__).parent.parent / "deploy" / "base" / "dashboards" / "kadence.json"


def scraped_series(text: str) -> set[str]:
    """The series names a /metrics page (Prometheus text) serves, families without samples yet included."""
    series = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        series |= {name + suffix for suffix in ("_bucket", "_sum", "_count")} if kind == "histogram" else {name}
    return series


async def test_the_dashboard_queries_only_series_the_running_services_serve(stack: LocalStack) -> None:
    """Every kadence_ series a panel of deploy/'s Grafana dashboard queries is on some service's
    /metrics, scraped from the running stack (not only registered by importing the code)."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    exprs.append(dashboard["templating"]["list"][1]["definition"])
    queried = set(re.findall(r"\bkadence_[a-z_]+", " ".join(exprs)))
    served: set[str] = set()
    async with aiohttp.ClientSession() as http:
        for service in SERVICES:
            async with http.get(f"http://127.0.0.1:{stack.http_ports[service]}/metrics") as scraped:
                served |= scraped_series(await scraped.text())
    assert queried and queried <= served, f"the dashboard queries series no service serves: {sorted(queried - served)}"


def listening_addresses(port: int) -> set[str]:
    """The addresses with a TCP socket listening on `port` in this network namespace (/proc/net/tcp{,6})."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            next(rows)
            for row in rows:
                local, state = row.split()[1], row.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.add(str(ipaddress.ip_address(bytes.fromhex(address)[::-1])) if len(address) == 8 else address)
    return found


def test_the_local_stack_serves_its_endpoints_on_loopback_only(stack: LocalStack) -> None:
    """`kadence dev` runs on a laptop: its services' /metrics and /readyz are not for its network."""
    for service in SERVICES:
        assert listening_addresses(stack.http_ports[service]) == {"127.0.0.1"}, service


async def test_a_service_serves_its_endpoints_on_every_interface_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a container the kubelet's probes and Prometheus come from outside the pod."""
    port = free_port()
    monkeypatch.setenv("KADENCE_HTTP_PORT", str(port))
    monkeypatch.delenv("KADENCE_HTTP_HOST", raising=False)

    async def no_problems() -> list[str]:
        return []

    endpoints = await serve("test", no_problems)
    assert endpoints is not None
    try:
        assert listening_addresses(port) == {"0.0.0.0"}
    finally:
        await endpoints.cleanup()


async def test_a_flood_of_readiness_probes_opens_no_postgres_connections(stack: LocalStack) -> None:
    """/readyz answers from the background watch of Postgres (one connection per process): 400
    probes at once to each service that uses Postgres open no connection of their own."""

    async def connections() -> int:
        async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn:
            row = await (await conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")).fetchone()
            return int(row[0]) - 1  # not this one

    users = [stack.http_ports[service] for service in ("history", "timer", "visibility")]
    async with aiohttp.ClientSession() as http:
        for port in users:  # ready first: a service still starting serves no /readyz yet
            for _ in range(300):
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as ready:
                        if ready.status == 200:
                            break
                await asyncio.sleep(0.1)
    before = await connections()
    seen = [before]
    flooding = True

    async def sample() -> None:
        while flooding:
            seen.append(await connections())
            await asyncio.sleep(0.01)

    sampling = asyncio.create_task(sample())
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def probe(port: int) -> int:
            async with http.get(f"http://127.0.0.1:{port}/readyz") as response:
                return response.status

        statuses = await asyncio.gather(*(
            probe(port) for port in users for _ in range(400)
        ))
    flooding = False
    await sampling
    assert set(statuses) == {200}
    assert max(seen) <= before + 2, f"Postgres connections went from {before} to {max(seen)} during the probes"


@pytest.mark.kafka_only  # Tansu speaks no SASL either, but refuses the handshake otherwise
@pytest.mark.parametrize("service", ["history", "visibility"])
async def test_a_service_whose_security_settings_the_broker_refuses_is_not_ready_at_once_and_says_why(
    stack: LocalStack, service: str,
) -> None:
    """SASL against the plaintext broker: the service retries its topic setup off its event loop,
    so /readyz answers not ready at once, soon saying why; and it stops cleanly when asked."""
    port = free_port()
    env = {**stack.env, **stack.service_env, "KADENCE_HTTP_PORT": str(port), "KADENCE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
           "KADENCE_KAFKA_SASL_MECHANISM": "PLAIN", "KADENCE_KAFKA_SASL_USERNAME": "kadence", "KADENCE_KAFKA_SASL_PASSWORD": "x"}
    process = subprocess.Popen([sys.executable, "-m", f"services.{service}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        answers: list[tuple[float, int, str]] = []
        started = time.monotonic()
        async with aiohttp.ClientSession() as session:
            while time.monotonic() - started < 10 and not any("SASL" in body for _, _, body in answers):
                with contextlib.suppress(aiohttp.ClientConnectionError):
                    async with session.get(f"http://127.0.0.1:{port}/readyz", timeout=aiohttp.ClientTimeout(total=1)) as response:
                        answers.append((time.monotonic() - started, response.status, await response.text()))
                await asyncio.sleep(0.2)
        # Served from the start, not ready: how soon after the process began depends on the machine's
        # load (the interpreter's start), which a test does not time.
        assert answers and answers[0][1] == 503, answers[:3]
        assert all(status == 503 for _, status, _ in answers), answers
        assert any("SASL" in body for _, _, body in answers), answers[-1]
        asked = time.monotonic()
        process.terminate()
        assert process.wait(timeout=15) == 0
        assert time.monotonic() - asked < 10
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
