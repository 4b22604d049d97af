"""The client and the workflow API are typed as temporalio's: mypy (strict) passes a program typed
the way a temporalio user types one (tests/typing/typed_example.py), and fails one with wrong
argument and result types (tests/typing/wrong_types.py) on exactly the lines marked `# wrong`.

One mypy run checks both (the SDK they import analysed once: a few seconds from a fresh cache),
each file's errors told apart by path. The modules of tests/typing/ are never imported nor collected: their
names do not start with test_."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TYPED = "tests/typing/typed_example.py"
WRONG = "tests/typing/wrong_types.py"
ERROR = re.compile(r"^(?P<path>[^:\n]+):(?P<line>\d+): error: (?P<message>.*)$", re.MULTILINE)
MARK = re.compile(r"#\s*wrong\s*$")


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, list[str]]]:
    """mypy's errors in each of the two modules: path -> line -> messages."""
    cache = tmp_path_factory.mktemp("mypy-cache")
    done = subprocess.run(
        # The project's configuration (its module overrides for the libraries the SDK imports), made
        # --strict as a user's would be (warn_return_any too); errors only in the two modules checked,
        # not in the SDK's, which the project's own mypy run checks under the project's settings.
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--strict", "--follow-imports=silent",
         "--cache-dir", str(cache), "--no-pretty", "--no-color-output", "--hide-error-context", TYPED, WRONG],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode in (0, 1), f"mypy did not run to the end:\n{done.stdout}\n{done.stderr}"
    errors: dict[str, dict[int, list[str]]] = {TYPED: {}, WRONG: {}}
    for found in ERROR.finditer(done.stdout):
        path = Path(found["path"]).as_posix()
        assert path in errors, f"an error outside the modules checked:\n{done.stdout}"
        errors[path].setdefault(int(found["line"]), []).append(found["message"])
    return errors


def test_a_program_typed_as_temporalio_users_type_theirs_passes_mypy_strict(mypy_errors: dict[str, dict[int, list[str]]]) -> None:
    assert mypy_errors[TYPED] == {}


def test_wrong_argument_and_result_types_fail_on_their_lines_and_no_other(mypy_errors: dict[str, dict[int, list[str]]]) -> None:
    lines = (REPO / WRONG).read_text().splitlines()
    marked = {number for number, line in enumerate(lines, start=1) if MARK.search(line)}
    assert len(marked) >= 10  # the module's mistakes: a marker lost or the file misread would pass the check below
    found = mypy_errors[WRONG]
    failed_unmarked = {number: (lines[number - 1].strip(), found[number]) for number in sorted(found.keys() - marked)}
    passed_marked = [lines[number - 1].strip() for number in sorted(marked - found.keys())]
    assert (failed_unmarked, passed_marked) == ({}, [])
