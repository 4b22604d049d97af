"""`kadence dev` supervises its services as the kubelet does a pod's containers: a service that
dies comes back by itself, after a backoff that grows while it keeps dying and resets once it ran
a while, and each restart is logged. A service whose HTTP port another process took while it
started is started again on another."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kadence.dev.local_stack import LocalStack, RestartBackoff
from tests.conftest import local_stack

REPO = Path(__file__).resolve().parents[1]
# reset_after_s is far longer than a kill right after a restart takes to be noticed (a few tenths of
# a second; seconds when the machine is loaded), so only the wait the test makes for it resets.
BACKOFF = RestartBackoff(first_s=0.2, max_s=0.8, reset_after_s=6.0)
COMES_BACK_WITHIN_S = 30.0  # the backoff (at most 0.8 s) and the supervisor's next look, on a loaded machine


def key_values(message: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in message.split() if "=" in part)


def restarts(caplog: pytest.LogCaptureFixture) -> list[dict[str, str]]:
    return [key_values(r.getMessage()) for r in caplog.records if r.getMessage().startswith("event=service_restarted ")]


def crash_and_wait_for_restart(stack: LocalStack, caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    """kill -9 the visibility service, as a crash would; the restart the supervisor logs for it."""
    before, dead = len(restarts(caplog)), stack.services["visibility"]
    os.kill(dead.pid, signal.SIGKILL)
    deadline = time.monotonic() + COMES_BACK_WITHIN_S
    while len(restarts(caplog)) == before:
        assert time.monotonic() < deadline, f"visibility was not restarted within {COMES_BACK_WITHIN_S:.0f} s of its kill -9"
        time.sleep(0.05)
    [restart] = restarts(caplog)[before:]
    assert stack.services["visibility"] is not dead and int(restart["pid"]) == stack.services["visibility"].pid
    return restart


def test_a_killed_service_comes_back_with_a_backoff_that_grows_and_resets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kadence.dev")
    with local_stack(services=("visibility",), restart_backoff=BACKOFF) as stack:
        first = crash_and_wait_for_restart(stack, caplog)
        assert first == first | {"service": "visibility", "instance": "visibility", "exit_code": "137", "signal": "SIGKILL",
                                 "backoff_s": "0.2", "restarts": "1"}

        # Dying again soon after each restart (killed as soon as it is back, not once ready, which
        # can take longer than reset_after_s on a loaded machine): the wait doubles, up to max_s.
        again = [crash_and_wait_for_restart(stack, caplog) for _ in range(3)]
        restarted_by = time.monotonic()  # the last restart was logged, so its process started, by now
        assert [(r["backoff_s"], float(r["ran_s"]) < BACKOFF.reset_after_s) for r in again] == [
            ("0.4", True), ("0.8", True), ("0.8", True)], again

        # It does come back: ready again on the same port. Once it has run reset_after_s, a death is a first one again.
        # (The wait counts from its start, as ran_s does, so the time it took to get ready is part of it.)
        stack.wait_until_ready()
        time.sleep(max(0.0, restarted_by + BACKOFF.reset_after_s - time.monotonic()))
        reset = crash_and_wait_for_restart(stack, caplog)
        assert (reset["backoff_s"], reset["restarts"]) == ("0.2", "5") and float(reset["ran_s"]) >= BACKOFF.reset_after_s, reset

        # A service the stack itself stops (as the tests do) stays stopped.
        stack.kill_service("visibility")
        time.sleep(BACKOFF.first_s + 1.0)
        assert "visibility" not in stack.services and len(restarts(caplog)) == 5


# Run by `kadence dev --run` (so $PPID is `kadence dev`): kill -9 its one service process
# (`kadence server`, the default layout), then wait for another to appear in its place. The
# pattern does not match this script's own command line.
KILL_AND_WAIT = """
old=$(pgrep -P $PPID -f "services[.]server") && kill -9 $old || exit 2
for i in $(seq 300); do
  new=$(pgrep -P $PPID -f "services[.]server")
  if [ -n "$new" ] && [ "$new" != "$old" ]; then exit 0; fi
  sleep 0.1
done
exit 1
"""


def test_kadence_dev_restarts_a_service_killed_under_it() -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="kadence-test-dev-"))  # not under pytest's 0700 temp root: Postgres must reach it
    try:
        ran = subprocess.run(
            [sys.executable, "-m", "kadence.ops.cli", "dev", "--port", "0", "--broker", "tansu", "--data-dir", str(data_dir),
             "--run", KILL_AND_WAIT],
            env={key: value for key, value in os.environ.items() if not key.startswith("KADENCE_")},
            cwd=REPO, capture_output=True, text=True, timeout=180,
        )
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    assert ran.returncode == 0, ran.stderr[-3000:]
    [restart] = [key_values(line.split("logger=kadence.dev ", 1)[1]) for line in ran.stderr.splitlines()
                 if "event=service_restarted " in line]
    assert restart == restart | {"service": "server", "exit_code": "137", "signal": "SIGKILL", "backoff_s": "1.0", "restarts": "1"}


def test_a_service_whose_http_port_another_process_took_starts_again_on_another(stack: LocalStack) -> None:
    """Ports are picked free and bound by the service a moment later: another process (a test on the
    other worker) may bind one meanwhile. The stack then starts the service again on another port."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        stack.http_ports["timer-taken"] = taken.getsockname()[1]
        stack.start_service("timer", instance="timer-taken")
        try:
            stack.wait_until_ready()
            assert stack.http_ports["timer-taken"] != taken.getsockname()[1]
        finally:
            stack.kill_service("timer-taken")


def test_the_readmes_first_command_logs_no_error() -> None:
    """`kadence dev --run "python examples/order.py"` on a fresh data dir, as the README's first
    command runs it: the order completes, and no service logged ERROR (ERROR means someone must act;
    a broker still starting, or matching's assignor topic not in metadata yet, is no one's to fix)."""
    data_dir = Path(tempfile.mkdtemp(prefix="kadence-test-dev-"))  # not under pytest's 0700 temp root: Postgres must reach it
    try:
        ran = subprocess.run(
            [sys.executable, "-m", "kadence.ops.cli", "dev", "--port", "0", "--data-dir", str(data_dir), "--run",
             f"{sys.executable} examples/order.py"],
            env={key: value for key, value in os.environ.items() if not key.startswith("KADENCE_")},
            cwd=REPO, capture_output=True, text=True, timeout=240,
        )
        logged = {path.name: path.read_text() for path in (data_dir / "logs").glob("*.log")}
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    assert ran.returncode == 0 and "result: shipped_order-" in ran.stdout, ran.stderr[-3000:]
    assert logged, "the services wrote no log"
    errors = [f"{name}: {line}" for name, text in logged.items() for line in text.splitlines() if " level=ERROR " in line]
    assert errors == [], "\n".join(errors[:20])
