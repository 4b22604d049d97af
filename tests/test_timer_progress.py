"""Timeouts wait for history's backlog (services/timer/progress.py): while history's batches are
read more than a second after their commands, and were lately, a timeout or re-dispatch timer due
past what history has decided waits; it fires once history decided the commands before it, or went
quiet. A user's timer fires at its time whatever the backlog, and a history that decided its last
command at once is not behind however long it has been idle since."""

from __future__ import annotations

from kadence.protocol.names import TimerKind
from services.timer.progress import BEHIND_MS, BUSY_S, HistoryProgress

NOW_MS = 1_800_000_000_000
READ_AT = 100.0  # monotonic seconds


def _behind_by(lag_ms: int) -> HistoryProgress:
    """A history whose last batch was read at NOW_MS (READ_AT), `lag_ms` after its command."""
    progress = HistoryProgress()
    progress.observed({0: NOW_MS - lag_ms}, NOW_MS, now_s=READ_AT)
    return progress


def test_a_timeout_due_past_what_a_busy_history_decided_waits_until_it_decides_that_far() -> None:
    progress = _behind_by(30_000)
    due_at = NOW_MS - 10_000  # due 10 s ago; history decides commands of 30 s ago
    assert progress.waits(0, TimerKind.WORKFLOW_TASK_RETRY, due_at, READ_AT + 0.5)
    progress.wait(0, due_at, "t1")
    progress.wait(0, NOW_MS - 5_000, "t2")
    assert progress.released(READ_AT + 0.5) == [] and progress.waiting == 2
    progress.observed({0: NOW_MS - 8_000}, NOW_MS + 1000, now_s=READ_AT + 1)  # history decided past t1's time, not t2's
    assert progress.released(READ_AT + 1) == [(due_at, "t1")]
    assert progress.waiting == 1


def test_a_history_gone_quiet_or_caught_up_holds_nothing() -> None:
    progress = _behind_by(30_000)
    progress.wait(0, NOW_MS - 10_000, "t1")
    assert progress.released(READ_AT + BUSY_S + 0.1) == [(NOW_MS - 10_000, "t1")], "quiet: caught up, or away"
    caught_up = _behind_by(BEHIND_MS // 2)
    assert not caught_up.waits(0, TimerKind.ACTIVITY_START_TO_CLOSE, NOW_MS - 10, READ_AT + 0.1)
    assert not HistoryProgress().waits(0, TimerKind.ACTIVITY_START_TO_CLOSE, NOW_MS - 10, READ_AT + 0.1), "nothing read yet"


def test_a_history_that_decided_at_once_and_then_had_nothing_to_do_is_not_behind() -> None:
    """A workflow task started at once, whose start-to-close timeout comes due a second later with
    nothing decided on the partition since: it fires at its time."""
    progress = _behind_by(5)
    assert not progress.waits(0, TimerKind.WORKFLOW_TASK_START_TO_CLOSE, NOW_MS + 1000, READ_AT + 1.2)


def test_a_users_timer_and_a_run_timeout_fire_at_their_time() -> None:
    progress = _behind_by(30_000)
    for kind in (TimerKind.USER_TIMER, TimerKind.WORKFLOW_RUN_TIMEOUT):
        assert not progress.waits(0, kind, NOW_MS - 10_000, READ_AT + 0.5)


def test_a_revoked_partition_forgets_its_waiting_timers() -> None:
    progress = _behind_by(30_000)
    progress.wait(0, NOW_MS - 10_000, "t1")
    progress.forget({0})
    assert progress.waiting == 0 and progress.released(READ_AT + 0.5) == []
