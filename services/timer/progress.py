"""How far the history service has decided each partition's commands, as the timer service reads
it from the log: every HistoryBatch record is stamped with the time its command was decided at.

While history works through a backlog, a timeout or re-dispatch timer that fires at its wall-clock
time joins the back of that backlog and is most often stale by the time history reaches it: the
worker's start or completion that makes it so was already waiting ahead of it. Those firings
doubled a backlog that was already too long (issue 32: 53,000 stale firings while 50,000 runs were
cancelled). So such a timer waits until history has decided the commands appended before it was
due; the drop of a timer made stale meanwhile is read from the log first, and it never fires.
A user's own timers, a run's timeout and a schedule's action fire at their time whatever history's
backlog: their time is what the workflow or the schedule asked for.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

from prometheus_client import Counter

from kadence.protocol.names import TimerKind

# History's own bookkeeping: made stale by a worker's start, completion or heartbeat.
WAITS_FOR_HISTORY = frozenset(set(TimerKind) - {TimerKind.USER_TIMER, TimerKind.WORKFLOW_RUN_TIMEOUT, TimerKind.SCHEDULE_ACTION})
BEHIND_MS = 1000  # a batch read this long after its command was appended: history is working through a backlog
BUSY_S = 2.0  # and is still at it if such a batch was read within this; a history that went quiet is caught up (or away)

WAITED = Counter("kadence_timer_waited_for_history_total",
                 "Timeouts due that waited for the history service to work through its backlog before they fired")


@dataclass
class HistoryProgress:
    """Per partition, the decision time of the last batch read, how long after it that batch was
    read, and when."""

    decided_ms: dict[int, int] = field(default_factory=dict)
    lag_ms: dict[int, int] = field(default_factory=dict)  # from the last batch's decision time to its reading
    read_at: dict[int, float] = field(default_factory=dict)  # monotonic
    # Per partition, the timers waiting for history: a heap of (fire_at_ms, timer_id).
    _waiting: dict[int, list[tuple[int, str]]] = field(default_factory=dict)

    def observed(self, decided_ms: dict[int, int], now_ms: int, now_s: float | None = None) -> None:
        """Batches read (and applied) at `now_ms`: the latest decision time of each partition."""
        read_at = time.monotonic() if now_s is None else now_s
        for partition, decided in decided_ms.items():
            self.decided_ms[partition] = max(self.decided_ms.get(partition, 0), decided)
            self.lag_ms[partition] = now_ms - self.decided_ms[partition]
            self.read_at[partition] = read_at

    def behind(self, partition: int, now_s: float) -> bool:
        """Whether history is working through a backlog on the partition: the last batch read came
        long after its command, and not long ago. (A history that decided a command at once and has
        had nothing to decide since is not behind, however long ago that was.)"""
        lag = self.lag_ms.get(partition)
        return lag is not None and lag > BEHIND_MS and now_s - self.read_at[partition] < BUSY_S

    def waits(self, partition: int, kind: str, fire_at_ms: int, now_s: float) -> bool:
        """Whether a timer due now waits for history to decide the commands appended before it."""
        return kind in WAITS_FOR_HISTORY and self.decided_ms.get(partition, 0) < fire_at_ms and self.behind(partition, now_s)

    def wait(self, partition: int, fire_at_ms: int, timer_id: str) -> None:
        heapq.heappush(self._waiting.setdefault(partition, []), (fire_at_ms, timer_id))
        WAITED.inc()

    def released(self, now_s: float) -> list[tuple[int, str]]:
        """The waiting timers history has caught up with, or whose partition it no longer works on."""
        released: list[tuple[int, str]] = []
        for partition, waiting in list(self._waiting.items()):
            if not self.behind(partition, now_s):
                released += waiting
                del self._waiting[partition]
                continue
            decided = self.decided_ms.get(partition, 0)
            while waiting and waiting[0][0] <= decided:
                released.append(heapq.heappop(waiting))
        return released

    def forget(self, partitions: set[int]) -> None:
        """Revoked: the timers' next owner holds them."""
        for partition in partitions:
            self._waiting.pop(partition, None)
            self.decided_ms.pop(partition, None)
            self.lag_ms.pop(partition, None)
            self.read_at.pop(partition, None)

    @property
    def waiting(self) -> int:
        return sum(len(waiting) for waiting in self._waiting.values())
