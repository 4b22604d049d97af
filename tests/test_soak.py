"""The soak (bench/soak.py) for five minutes, as every CI run takes it: two instances of each
service, two workers, workflows at 10 a second and a fault 30 s after the last one's undoing,
every kind of fault at least once (a service instance and a worker SIGKILLed, the broker
SIGKILLed, Postgres stopped). It passes
when every promise the soak checks is kept: every workflow completed once, the audit clean, no
activity attempt run twice, no local activity run again after its recording, each process's
memory flat."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.soak import FAULT_KINDS
from tests.conftest import one_heavy_test_at_a_time

MINUTES = 5

# The soak's own bounds (its drain after the load, 10 minutes) and the wait for the cluster tests'
# lock (conftest's one_heavy_test_at_a_time) are longer than the suite's default timeout.
pytestmark = [pytest.mark.kafka_only, pytest.mark.slow, pytest.mark.soak, pytest.mark.timeout(MINUTES * 60 + 1200)]

REPO = Path(__file__).resolve().parents[1]
FAULT_EVERY_S = 30
RATE = 10
# The load, the drain after it (the soak's own bound is 10 minutes) and the stack's start and stop.
TIMEOUT_S = MINUTES * 60 + 660
FAULT_TEXT = {  # how the soak's report names each kind of fault
    "service": r"SIGKILL (history|matching|timer|visibility)", "worker": r"SIGKILL worker-", "broker": r"SIGKILL the broker",
    "postgres": r"Postgres stopped",
}


def test_a_five_minute_soak_with_every_kind_of_fault_keeps_every_promise(tmp_path_factory: pytest.TempPathFactory) -> None:
    with one_heavy_test_at_a_time(tmp_path_factory):
        soak = subprocess.run(
            [sys.executable, "-m", "bench.soak", "--minutes", str(MINUTES), "--fault-every", str(FAULT_EVERY_S), "--rate", str(RATE)],
            cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S,
        )
    report = soak.stdout[soak.stdout.find("soak: "):]
    print(report)
    assert soak.returncode == 0 and report.rstrip().endswith("soak: every promise kept"), f"{report}\n{soak.stderr[-3000:]}"
    faults = re.findall(r"^\s+\+\s*\d+ s\s+(.+)$", report, re.MULTILINE)
    assert set(FAULT_TEXT) == set(FAULT_KINDS)
    for kind, text in FAULT_TEXT.items():  # seven faults or so (each waits for the last one's undoing), dealt four kinds a round
        assert any(re.match(text, fault) for fault in faults), f"no {kind} fault: {faults}"
