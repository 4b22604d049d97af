"""Record what temporalio raises at the client for each failure chain of failure_chains.py, on
Temporal's dev server, into failure_chains.json (tests/test_failure_chains.py compares Kadence's
with it, field by field). Needs temporalio and a dev server on 127.0.0.1:7233, as
../shared/peers/ installs and starts (setup.sh; start.sh temporal):

    ~/.cache/kadence-peers/venv/bin/python tests/temporal_reference/record.py
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path

import temporalio
from temporalio.client import Client
from temporalio.worker import Worker

sys.path.insert(0, str(Path(__file__).parent))
from failure_chains import ACTIVITIES, SCENARIOS, ChainWorkflow, ChildWorkflow, run_scenario  # noqa: E402

OUT = Path(__file__).with_name("failure_chains.json")


async def main() -> None:
    client = await Client.connect("127.0.0.1:7233")
    task_queue = f"failure-chains-{uuid.uuid4()}"
    recorded = {}
    async with Worker(client, task_queue=task_queue, workflows=[ChainWorkflow, ChildWorkflow], activities=ACTIVITIES):
        for scenario in SCENARIOS:
            recorded[scenario] = await run_scenario(client, task_queue, scenario, f"chain-{scenario}-{uuid.uuid4()}")
            print(scenario, json.dumps(recorded[scenario], indent=1))
    for chain_ in recorded.values():  # the workflow ids hold a uuid: keep the part that says what they are
        for entry in chain_:
            if "workflow_id" in entry:
                entry["workflow_id"] = "<chain id>-child"
    OUT.write_text(json.dumps({"temporalio": temporalio.__version__, "chains": recorded}, indent=2) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    asyncio.run(main())
