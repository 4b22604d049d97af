"""The container image, without a Docker engine: the Dockerfile passes hadolint and keeps its
promises (non-root, the CLI as entrypoint), and its install steps, run on this machine, give a
layout from which the commands deploy/ runs work against the local stack: a service, the example
worker, the start Job and the audit CronJob."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from kadence.dev.local_stack import LocalStack, free_port
from kadence.protocol.codec import KAFKA_RECORDS
from kadence.protocol.runner import SETTING_ERROR_EXIT_CODE
from tests.kustomize import render

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@dataclass
class Stage:
    base: str
    instructions: list[tuple[str, str]]  # (INSTRUCTION, arguments), continuation lines joined


def dockerfile_stages() -> list[Stage]:
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    stages: list[Stage] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, arguments = line.strip().partition(" ")
        if instruction == "FROM":
            stages.append(Stage(arguments.split()[0], []))
        stages[-1].instructions.append((instruction, arguments))
    return stages


def test_dockerfile_passes_hadolint() -> None:
    linted = subprocess.run([str(BIN / "hadolint"), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert linted.returncode == 0, linted.stdout + linted.stderr


def test_one_pinned_non_root_image_with_the_cli_as_entrypoint() -> None:
    stages = dockerfile_stages()
    assert all(re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+( AS \w+)?", stage.base) for stage in stages), "pinned slim bases"
    final = dict(stages[-1].instructions)
    user = final["USER"].split(":")[0]
    assert user.isdigit() and int(user) != 0, "a numeric non-root user, so runAsNonRoot can check it"
    assert json.loads(final["ENTRYPOINT"]) == ["kadence"]
    assert final["ENV"].count("KADENCE_HTTP_PORT=8080")


@pytest.fixture(scope="session")  # built once: this module's tests run in two parts, without the session stack and on it
def image_layout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """What the Dockerfile builds, on this machine: the build stage's COPY sources as the build
    context, its `pip wheel` (without the dependencies, which this environment already has), the
    final stage's install and COPY. Returns the working directory; packages are in its `site`."""
    root = tmp_path_factory.mktemp("image")
    build, runtime = dockerfile_stages()
    context = root / "src"
    context.mkdir()
    for instruction, arguments in build.instructions:
        if instruction == "COPY":
            *sources, _ = arguments.split()
            for source in sources:
                copy(ROOT / source, context / source)
    wheels = root / "wheels"
    pip("wheel", "--no-deps", "--wheel-dir", str(wheels), str(context))
    [wheel] = wheels.glob("kadence-*.whl")
    app = root / "app"
    app.mkdir()
    pip("install", "--no-deps", "--target", str(app / "site"), str(wheel))
    for instruction, arguments in runtime.instructions:
        if instruction == "COPY" and not arguments.startswith("--from"):
            source, _ = arguments.split()
            copy(ROOT / source, app / source)
    yield app


def copy(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copy(source, target)


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "-q", *args], check=True)


def image_env(stack: LocalStack, app: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, **stack.env, "PYTHONPATH": str(app / "site"), **extra}


def kadence(app: Path) -> list[str]:
    return [str(app / "site" / "bin" / "kadence")]


def test_the_installed_package_is_complete(image_layout: Path) -> None:
    site = image_layout / "site"
    assert (site / "kadence" / "schemas" / "Command.avsc").exists()
    assert {path.name.split(".")[0] for path in (site / "kadence" / "schemas" / "versions").glob("*.avsc")} == set(KAFKA_RECORDS)
    assert {path.name for path in (site / "services").iterdir()} >= {"history", "matching", "timer", "visibility"}
    where = subprocess.run(
        [sys.executable, "-c", "import kadence, services, examples.order; print(kadence.__file__)"],
        cwd=image_layout, env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, check=True,
    )
    assert where.stdout.startswith(str(site)), "the installed copy, not the checkout, is what runs"
    listed = subprocess.run([*kadence(image_layout), "schemas", "list", "--json"], cwd=image_layout,
                            env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True, check=True)
    versions = json.loads(listed.stdout)
    assert set(versions) == set(KAFKA_RECORDS), "the archived schema versions are packaged"
    assert all(row["current"] in row["reads"] and row["writes"] == row["current"] for row in versions.values())


def test_a_service_refuses_a_missing_setting_in_one_line(stack: LocalStack, image_layout: Path) -> None:
    env = image_env(stack, image_layout)
    del env["KADENCE_POSTGRES_DSN"]
    refused = subprocess.run([*kadence(image_layout), "serve", "timer"], cwd=image_layout, env=env,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == SETTING_ERROR_EXIT_CODE
    assert "KADENCE_POSTGRES_DSN is not set" in refused.stderr and "Traceback" not in refused.stderr


async def wait_ready(port: int, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    async def poll() -> None:
        async with aiohttp.ClientSession() as http:
            while process.poll() is None:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/readyz") as ready:
                        if ready.status == 200:
                            return
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.1)
        raise AssertionError(f"exited with {process.returncode} before it was ready")

    await asyncio.wait_for(poll(), timeout)


def stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=60)


def expand(argument: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command and args."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), argument)


def container(resource: dict, kind: str) -> dict:
    spec = resource["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else resource["spec"]
    return spec["template"]["spec"]["containers"][0]


async def test_deploys_commands_run_from_the_image(stack: LocalStack, image_layout: Path) -> None:
    """The rendered dev overlay's commands, as the image runs them (its entrypoint is `kadence`):
    a service and the order worker become ready and stop cleanly on SIGTERM, the start Job starts
    an order that completes, and the audit CronJob finds no violation."""
    manifests = render(ROOT / "deploy" / "overlays" / "dev") + render(ROOT / "deploy" / "start-order")
    resources = {(r["kind"], r["metadata"]["name"]): r for r in manifests}

    def command(kind: str, name: str, env: dict[str, str]) -> list[str]:
        spec = container(resources[(kind, name)], kind)
        argv = spec.get("command", kadence(image_layout)) + spec.get("args", [])
        return [expand(argument, env) for argument in argv]

    processes = {}
    for kind, name in (("StatefulSet", "kadence-visibility"), ("Deployment", "kadence-order-worker")):
        port = free_port()
        env = image_env(stack, image_layout, KADENCE_HTTP_PORT=str(port))
        processes[name] = (subprocess.Popen(command(kind, name, env), cwd=image_layout, env=env), port)
    try:
        for process, port in processes.values():
            await wait_ready(port, process)
        job_env = image_env(stack, image_layout, JOB_NAME=f"kadence-start-order-{uuid.uuid4().hex[:8]}")
        started = subprocess.run(command("Job", "kadence-start-order", job_env), cwd=image_layout, env=job_env,
                                 capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["workflow_id"] == job_env["JOB_NAME"]
        retried = subprocess.run(command("Job", "kadence-start-order", job_env), cwd=image_layout, env=job_env,
                                 capture_output=True, text=True, timeout=120)
        assert json.loads(retried.stdout) == json.loads(started.stdout), "a retried Job pod answers with the same run"
        result = subprocess.run([*kadence(image_layout), "workflow", "result", "--workflow-id", job_env["JOB_NAME"]],
                                cwd=image_layout, env=job_env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == f"shipped_{job_env['JOB_NAME']}"
        audit_env = image_env(stack, image_layout)
        audited = subprocess.run(command("CronJob", "kadence-audit", audit_env), cwd=image_layout, env=audit_env,
                                 capture_output=True, text=True, timeout=300)
        assert audited.returncode == 0, audited.stdout + audited.stderr
        assert "0 violations" in audited.stdout
    finally:
        codes = {name: stop(process) for name, (process, _) in processes.items()}
    assert codes == {name: 0 for name in processes}, "SIGTERM is a clean stop"


def test_the_benchmark_measures_a_deployment_from_inside_the_image(stack: LocalStack, image_layout: Path) -> None:
    """What docs/operations.md tells operators to run in a pod, on a few workflows."""
    measured = subprocess.run(
        [sys.executable, "-m", "bench.bench_workflows", "--against-settings", "--workflows", "20", "--concurrency", "5", "--pings", "10"],
        cwd=image_layout, env=image_env(stack, image_layout), capture_output=True, text=True, timeout=180,
    )
    assert measured.returncode == 0, measured.stderr
    assert re.search(r"throughput: +\d+ workflows/s", measured.stdout) and "start-to-result:" in measured.stdout, measured.stdout
