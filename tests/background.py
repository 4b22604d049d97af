"""Slow preparations that need no stack, begun on a thread as soon as the session knows a selected
test needs them (tests/conftest.py), so they overlap the tests that run before theirs instead of
adding to the run: the fresh venv of tests/test_install.py is about 20 s of pip on two cores."""

from __future__ import annotations

import atexit
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEV_INSTALL = ".[dev]"  # what the README's first command installs

_running: set[subprocess.Popen[bytes]] = set()  # the preparations' processes under way


def _run(argv: list[str], timeout: float) -> None:
    """argv to its end, killed by `abandon` when the session ends first."""
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _running.add(process)
    try:
        _, errors = process.communicate(timeout=timeout)
    finally:
        _running.discard(process)
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, argv, stderr=errors)


def dev_venv() -> Path:
    """A fresh venv with this checkout installed as the README's first command installs it; its bin/."""
    venv = Path(tempfile.mkdtemp(prefix="kadence-test-dev-venv-"))
    atexit.register(shutil.rmtree, venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)], timeout=60)
    _run([str(venv / "bin" / "pip"), "install", "-q", "-e", f"{ROOT}/{DEV_INSTALL}"], timeout=240)
    return venv / "bin"


# Per fixture name, what it waits for.
PREPARATIONS: dict[str, Callable[[], Path]] = {"venv_bin": dev_venv}

_pool = ThreadPoolExecutor(max_workers=len(PREPARATIONS), thread_name_prefix="test-preparation")
_begun: dict[str, Future[Path]] = {}


def begin(fixture_names: Iterable[str]) -> None:
    """Start the preparations of these fixtures that have one and are not under way yet."""
    for name in fixture_names:
        if name in PREPARATIONS and name not in _begun:
            _begun[name] = _pool.submit(PREPARATIONS[name])


def prepared(fixture_name: str) -> Path:
    """The fixture's preparation, begun now if the session did not begin it (a test run by node id)."""
    begin([fixture_name])
    return _begun[fixture_name].result(timeout=300)


def abandon() -> None:
    """Stop what is still being prepared: the session ended before its tests ran (-x, Ctrl-C)."""
    for process in list(_running):
        process.kill()
