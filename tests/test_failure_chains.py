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


def expected(scenario: str) -> list[dict[str, Any]]:
    """temporalio's chain, with what Kadence does otherwise (docs/temporal-differences.md, "Errors")."""
    chain = json.loads(json.dumps(REFERENCE[scenario]))
    if scenario == "activity_cancelled":
        # A cancelled activity raises asyncio.CancelledError in the code awaiting it, not temporalio's
        # ActivityError caused by CancelledError: the child, not catching it, ends canceled.
        parent = chain[0]
        parent.update(message="Child Workflow execution cancelled", retry_state="NON_RETRYABLE_FAILURE")
        return [parent, {"class": "CancelledError", "message": "Child Workflow execution cancelled", "details": [],
                         "failure_info": "canceled_failure_info"}]
    return chain


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_a_parent_failed_by_its_child_raises_temporalios_cause_chain(client: Client, task_queue: str, scenario: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[ChainWorkflow, ChildWorkflow], activities=ACTIVITIES):
        workflow_id = f"chain-{scenario}-{uuid.uuid4()}"
        chain = await run_scenario(client, task_queue, scenario, workflow_id)
    for entry in chain:
        if entry.get("workflow_id") == f"{workflow_id}-child":
            entry["workflow_id"] = "<chain id>-child"
    assert chain == expected(scenario)
