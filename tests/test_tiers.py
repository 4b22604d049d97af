"""The fast tier (`pytest -m 'not stack'`) holds the tests that need no broker and no Postgres: a
test is marked `stack` as it is collected (tests/conftest.py) when its fixtures reach the session
stack or its module starts one of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def collected(marker_expression: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marker_expression],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.split("::", 1)[0] for line in done.stdout.splitlines() if "::" in line}


def test_the_fast_tier_leaves_out_every_module_that_starts_a_stack_and_keeps_the_pure_ones() -> None:
    fast = collected("not stack")
    # Modules that start stacks of their own (test_rebalances, test_server; test_broker_cluster
    # through broker_load's stack_of_its_own), one whose fixture reaches the session's
    # (test_projection_reader's `dsn` needs `stack`), and one whose tests without the stack use the
    # S3 server (test_s3_storage's `s3`).
    assert not {"tests/test_rebalances.py", "tests/test_projection_reader.py", "tests/test_server.py",
                "tests/test_s3_storage.py", "tests/test_broker_cluster.py"} & fast
    assert {"tests/test_fence.py", "tests/test_machine_step.py", "tests/test_codec.py", "tests/test_manifests.py",
            "tests/test_sdk_replay.py"} <= fast
    assert "tests/test_tiers.py" in fast
