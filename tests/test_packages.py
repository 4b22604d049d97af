"""The package shows who uses what: a user's `import kadence` and the SDK modules a user imports
pull in the SDK and the part of kadence.protocol it needs, never the operator tools
(kadence.ops), the dev stack (kadence.dev), the services, or what only those need."""

from __future__ import annotations

import json
import subprocess
import sys

SDK = ["kadence", "kadence.client", "kadence.worker", "kadence.workflow", "kadence.activity", "kadence.converter",
       "kadence.exceptions", "kadence.common", "kadence.testing"]
NOT_FOR_THE_SDK = ("kadence.ops", "kadence.dev", "services",
                   "faust", "aiohttp", "click", "rich")  # and the services', the CLI's and the dev stack's dependencies


def imported_by(modules: list[str]) -> list[str]:
    """sys.modules of a fresh interpreter after importing `modules`."""
    code = f"import importlib, json, sys\nfor m in {modules!r}: importlib.import_module(m)\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_importing_the_sdk_imports_no_operator_tool_dev_stack_or_service() -> None:
    loaded = imported_by(SDK)
    assert set(SDK) <= set(loaded)
    assert [m for m in loaded if any(m == name or m.startswith(name + ".") for name in NOT_FOR_THE_SDK)] == []


def test_the_cli_still_loads_everything_it_runs() -> None:
    """The check above would pass for an empty package: the operator side does import what the SDK must not."""
    loaded = imported_by(["kadence.ops.cli"])
    assert {"kadence.ops.cli_workflow", "kadence.dev.local_stack", "click"} <= set(loaded)
