"""The README's first command installs `.[dev]`: in a fresh venv, that install is enough for every
`kadence` command and subcommand to answer --help, and for every module of kadence/ and services/
to import, but those of the opentelemetry and pydantic extras, which say to install them. The two venv tests are
marked `slow`: the venv and its pip install take 20 s from pip's cache (begun in the background as
the session starts), the module 30 s (2 cores)."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.background import DEV_INSTALL, prepared

ROOT = Path(__file__).resolve().parents[1]

# What importing each module that needs an extra raises without it.
NEEDS_AN_EXTRA = {
    module: f"ModuleNotFoundError: {module} needs the {extra} extra: pip install 'kadence[{extra}]'"
    for module, extra in (("kadence.contrib.opentelemetry", "opentelemetry"), ("kadence.dev.otlp", "opentelemetry"),
                          ("kadence.contrib.pydantic", "pydantic"))
}

# In the venv: every command path of the click group, [] being `kadence` itself.
COMMAND_PATHS = """
import json
import click
from kadence.ops.cli import main

def paths(command, path):
    yield path
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from paths(sub, [*path, name])

print(json.dumps(list(paths(main, []))))
"""

# In the venv: import every module of kadence/ and services/ and the packages given as arguments
# (kadence.schemas lives in schemas/, where walking kadence/ does not find it); the failures.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
import kadence, services

names = {*sys.argv[1:], *(m.name for p in (kadence, services) for m in pkgutil.walk_packages(p.__path__, p.__name__ + "."))}
failed = {}
for name in sorted(names):
    try:
        importlib.import_module(name)
    except Exception as err:
        failed[name] = f"{type(err).__name__}: {err}"
print(json.dumps({"imported": len(names), "failed": failed}))
"""


def pyproject_packages() -> tuple[list[str], dict[str, str]]:
    """pyproject.toml's `packages` and `package-dir`."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return setuptools["packages"], setuptools["package-dir"]


@pytest.fixture(scope="module")
def venv_bin() -> Path:
    """A fresh venv with this checkout installed as the README's first command installs it, begun
    in the background when the session selected these tests (tests/background.py)."""
    return prepared("venv_bin")


def in_venv(venv_bin: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run from the venv's directory, not the checkout (which `python -c` would put on sys.path),
    and without a PYTHONPATH that could supply what the install lacks."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(argv, cwd=venv_bin.parent, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_every_command_answers_help(venv_bin: Path) -> None:
    listed = in_venv(venv_bin, str(venv_bin / "python"), "-c", COMMAND_PATHS)
    assert listed.returncode == 0, listed.stderr
    paths = json.loads(listed.stdout)
    assert ["audit", "replay"] in paths and ["workflow", "start"] in paths, "the walk reaches the subcommands"
    with ThreadPoolExecutor(os.cpu_count()) as pool:  # some 30 processes of 0.3 s each
        helped = pool.map(lambda path: in_venv(venv_bin, str(venv_bin / "kadence"), *path, "--help"), paths)
        failed = {" ".join(done.args[1:]): done.stderr[-2000:] for done in helped
                  if done.returncode != 0 or "Usage: kadence" not in done.stdout}
    assert failed == {}


@pytest.mark.slow
def test_every_module_imports_or_names_its_extra(venv_bin: Path) -> None:
    packages, _ = pyproject_packages()
    done = in_venv(venv_bin, str(venv_bin / "python"), "-c", IMPORT_ALL, *packages)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["failed"] == NEEDS_AN_EXTRA
    assert found["imported"] > len(packages), "the walk reaches the modules"


def test_pyproject_lists_every_package() -> None:
    """setuptools builds a wheel (the image's) of the packages pyproject.toml lists, and no other;
    the editable install above would not notice one missing: it finds subpackages in the checkout."""
    packages, package_dir = pyproject_packages()
    inits = [*(ROOT / "kadence").rglob("__init__.py"), *(ROOT / "services").rglob("__init__.py")]
    on_disk = {".".join(init.parent.relative_to(ROOT).parts) for init in inits}
    assert sorted(packages) == sorted(on_disk | set(package_dir))


def test_the_readmes_two_commands_are_the_ones_checked() -> None:
    """The first installs what the venv above does; the second is .ci/run, which CI runs."""
    section = (ROOT / "README.md").read_text().split("## Two commands", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2
    assert f"pip install -q -e '{DEV_INSTALL}'" in commands[0]
    assert commands[1] == "bash .ci/run"
