"""The failure a client sees for a parent failed by its child, field by field against what
temporalio raises for the same chain on Temporal's dev server (tests/temporal_reference/
failure_chains.json, recorded by tests/temporal_reference/record.py): the child's activity failed
(a non-retryable ApplicationError), timed out (start-to-close), was cancelled, or the child was
terminated."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from kadence.client import Client
from kadence.worker import Worker
from tests.temporal_reference.failure_chains import ACTIVITIES, SCENARIOS, ChainWorkflow, ChildWorkflow, run_scenario

REFERENCE = json.loads((Path(__file__).parent / "temporal_reference" / "failure_chains.json").read_text())["chains"]


def expected(scenario: str, started_event_id: int) -> list[dict[str, Any]]:
    """temporalio's chain, with the activity's started event id Kadence's history gives it (the
    child's ActivityTaskStarted): Temporal writes an attempt's ActivityTaskStarted only when the
    attempt ends (for a cancelled one, after the timer, workflow task and cancel request written
    meanwhile), Kadence when it starts (docs/temporal-differences.md, "The history")."""
    chain = json.loads(json.dumps(REFERENCE[scenario]))
    for entry in chain:
        if entry["class"] == "ActivityError":
            entry["started_event_id"] = started_event_id
    return chain


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_a_parent_failed_by_its_child_raises_temporalios_cause_chain(client: Client, task_queue: str, scenario: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[ChainWorkflow, ChildWorkflow], activities=ACTIVITIES):
        workflow_id = f"chain-{scenario}-{uuid.uuid4()}"
        chain = await run_scenario(client, task_queue, scenario, workflow_id)
    for entry in chain:
        if entry.get("workflow_id") == f"{workflow_id}-child":
            entry["workflow_id"] = "<chain id>-child"
    child_history = (await client.get_workflow_handle(f"{workflow_id}-child").fetch_history()).events
    started = [event["event_id"] for event in child_history if event["attributes"][0] == "ActivityTaskStarted"]
    assert chain == expected(scenario, started[-1] if started else 0)
