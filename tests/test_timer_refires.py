"""The timer service killed (SIGKILL) and started again reads each partition again from its stored
position, pinned by the oldest timer it still held: timers set in that stretch of the log and
fired before the kill are read again. They must not fire again (history would reject them as
stale): each timer history accepts a firing of is dropped in the same record, and the restarted
service fires nothing of a partition until it has read the partition to its end, drops included."""

from __future__ import annotations

import asyncio
import re
import time
import uuid

from kadence.client import Client
from kadence.dev.local_stack import LocalStack
from kadence.worker import Worker
from tests.conftest import wait_for_event
from tests.workflows import ALL_ACTIVITIES, ALL_WORKFLOWS, FlakyWorkflow, SleepyWorkflow

# Long enough that the sleepers still pin every partition when the timer service is killed: their
# start, the flaky work and the kill take about 4 s here (the test checks it, below). It was 20 s;
# nothing else waits on it.
SLEEP_S = 12.0
STALE_FIRING = re.compile(r"event=command_rejected .*command=TimeoutFired .*reason='([^']*)'")


def stale_firings(stack: LocalStack, since: int) -> list[str]:
    """Why history rejected each firing since `since` (an offset in its log)."""
    text = (stack.data_dir / "logs" / "history.log").read_text()[since:]
    return STALE_FIRING.findall(text)


def log_size(stack: LocalStack) -> int:
    return len((stack.data_dir / "logs" / "history.log").read_text())


async def test_timers_fired_before_a_sigkill_do_not_fire_again_after_the_restart(
    stack: LocalStack, client: Client, task_queue: str,
) -> None:
    async with Worker(client, task_queue=task_queue, workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES):
        # Sleepers pin every partition's stored position at their timer for the whole test.
        pinned_from = time.monotonic()  # none of their timers is due before SLEEP_S from here (timers never fire early)
        sleepers = [await client.start_workflow(SleepyWorkflow.run, SLEEP_S, id=f"pin-{i}-{uuid.uuid4()}", task_queue=task_queue)
                    for i in range(3 * stack.partitions)]
        for handle in sleepers:
            await wait_for_event(stack, handle.id, "TimerStarted", timeout=30)
        # Then work whose timers fire: each flaky activity waits out two retry backoffs.
        flaky = await asyncio.gather(*(client.start_workflow(FlakyWorkflow.run, f"v{i}", id=f"flaky-{i}-{uuid.uuid4()}",
                                                             task_queue=task_queue) for i in range(100)))
        assert await asyncio.wait_for(asyncio.gather(*(h.result() for h in flaky)), 60) == [f"v{i} on attempt 3" for i in range(100)]

        mark = log_size(stack)
        stack.kill_service("timer")
        killed_after = time.monotonic() - pinned_from
        assert killed_after < SLEEP_S, f"the sleepers' timers may have fired before the kill ({killed_after:.1f} s): nothing was pinned"
        stack.start_service("timer")
        results = await asyncio.wait_for(asyncio.gather(*(h.result() for h in sleepers)), 60)
        assert all(r.startswith("slept") for r in results)
    # Without the drops, about 140 of the flaky activities' 200 retry timers fired again here.
    assert stale_firings(stack, mark) == []
