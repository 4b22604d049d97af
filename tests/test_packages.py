"""The package shows who uses what: a user's `import kadence` and the SDK modules a user imports
pull in the SDK and the part of kadence.protocol it needs, never the operator tools
(kadence.ops), the dev stack (kadence.dev), the services, or what only those need; and no module
imports one that imports it back (docs/development.md, "Layout")."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

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


@functools.cache  # two tests read it: kadence/ is parsed once
def kadence_imports() -> dict[str, set[str]]:
    """Each module of kadence/ and the kadence modules it imports anywhere in its file: at the top,
    under TYPE_CHECKING or inside a function (a cycle hidden there is still a cycle to read)."""
    root = Path(__file__).resolve().parents[1]
    files = {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p for p in (root / "kadence").rglob("*.py")}

    def module_of(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    imports: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                # `from kadence import activity` imports the module kadence.activity; `from
                # kadence.client import Client`, the name Client of the module kadence.client.
                found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in files else base for alias in node.names)
        imports[name] = {m for m in map(module_of, found) if m is not None and m != name}
    return imports


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_kadence_imports_one_that_imports_it_back() -> None:
    assert cycles(kadence_imports()) == []


def test_a_private_module_never_imports_its_own_package() -> None:
    """kadence/client/__init__.py re-exports kadence/client/_handles.py, never the reverse."""
    upward = {(name, imported) for name, found in kadence_imports().items() if "._" in name
              for imported in found if name.startswith(imported + ".")}
    assert upward == set()


def test_the_cycle_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
