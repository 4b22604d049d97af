"""`kadence nexus endpoint create | list | delete`: the Nexus endpoint registry, as Temporal's
`temporal operator nexus endpoint` manages it (docs/decisions/0008-nexus.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from kadence.protocol.nexus_endpoints import create_endpoint, delete_endpoint, list_endpoints
from kadence.protocol.settings import KafkaSettings


@click.group("nexus")
def nexus_group() -> None:
    """Nexus: endpoints that route operations to the task queues whose workers handle them."""


@nexus_group.group("endpoint")
def endpoint_group() -> None:
    """The Nexus endpoint registry (the compacted topic kadence.nexus-endpoints)."""


@endpoint_group.command("create")
@click.option("--name", required=True, help="The endpoint's name, as callers name it (workflow.create_nexus_client(endpoint=...)).")
@click.option("--target-task-queue", required=True, help="The task queue whose workers' nexus_service_handlers handle its operations.")
@click.option("--target-namespace", default=None, help="Taken as Temporal's CLI takes it; Kadence has one namespace per deployment.")
@click.option("--description", default="", help="What the endpoint offers (Markdown).")
@click.option("--description-file", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The description, read from a file.")
def create(name: str, target_task_queue: str, target_namespace: str | None, description: str, description_file: Path | None) -> None:
    """Create (or replace) an endpoint."""
    if description_file is not None:
        description = description_file.read_text()
    try:
        create_endpoint(KafkaSettings.from_env(), name, target_task_queue, description)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Endpoint {name} created: its operations go to task queue {target_task_queue}")


@endpoint_group.command("list")
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True)
def list_(output: str) -> None:
    """List the endpoints."""
    endpoints = list_endpoints(KafkaSettings.from_env())
    if output == "json":
        click.echo(json.dumps(sorted(endpoints.values(), key=lambda e: e["name"]), indent=2))
        return
    for name in sorted(endpoints):
        click.echo(f"{name}\t{endpoints[name]['task_queue']}")


@endpoint_group.command("delete")
@click.option("--name", required=True)
def delete(name: str) -> None:
    """Delete an endpoint: operations scheduled through it from now on fail their workflow task."""
    try:
        delete_endpoint(KafkaSettings.from_env(), name)
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from None
    click.echo(f"Endpoint {name} deleted")
