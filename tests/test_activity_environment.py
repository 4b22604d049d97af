"""kadence.testing.ActivityEnvironment used as temporalio's users test activities: the activity run
in the test with kadence.activity's functions answering, its heartbeats, cancellation and worker
shutdown driven by the test. No broker: the fast tier."""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kadence import activity
from kadence.common import MetricAttributes, MetricKind, MetricMeter
from kadence.converter import DefaultPayloadConverter
from kadence.exceptions import CancelledError
from kadence.testing import ActivityEnvironment

STEP_S = 0.01  # how long a sync activity sleeps between looks at its cancellation
WAIT_S = 5.0  # at most how long a test waits for the activity it drives


@activity.defn
def compose(greeting: str, name: str, *, punctuation: str = "!") -> str:
    return f"{greeting}, {name}{punctuation}"


@activity.defn
async def compose_async(greeting: str, name: str) -> str:
    await asyncio.sleep(0)
    return f"{greeting}, {name}!"


@activity.defn
def current_info() -> activity.Info:
    return activity.info()


def test_a_sync_activity_returns_its_result_in_an_activity_context() -> None:
    assert not activity.in_activity()
    assert ActivityEnvironment().run(compose, "Hello", "Ada", punctuation=".") == "Hello, Ada."
    assert ActivityEnvironment().run(activity.in_activity)  # any function runs in the context, as in temporalio


async def test_an_async_activity_gives_an_awaitable_of_its_result() -> None:
    running = ActivityEnvironment().run(compose_async, "Hello", "Ada")
    assert asyncio.iscoroutine(running)
    assert await running == "Hello, Ada!"


async def test_an_activity_s_error_comes_out_as_raised() -> None:
    async def fails(message: str) -> None:
        raise ValueError(message)

    with pytest.raises(ValueError, match="^no good$"):
        await ActivityEnvironment().run(fails, "no good")


def test_the_default_info_and_one_replaced() -> None:
    env = ActivityEnvironment()
    assert env.run(current_info) == ActivityEnvironment.default_info()
    assert env.run(current_info).activity_type == "unknown"
    env.info = dataclasses.replace(ActivityEnvironment.default_info(), activity_type="compose", attempt=3, heartbeat_details=("page 7",))
    info = env.run(current_info)
    assert (info.activity_type, info.attempt, info.heartbeat_details) == ("compose", 3, ("page 7",))


def test_the_activity_logger_carries_the_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kadence.activity")
    env = ActivityEnvironment()
    env.info = dataclasses.replace(ActivityEnvironment.default_info(), activity_type="compose")
    env.run(lambda: activity.logger.info("composing"))
    (record,) = [r for r in caplog.records if r.name == "kadence.activity"]
    assert record.temporal_activity["activity_type"] == "compose"  # type: ignore[attr-defined]
    assert record.getMessage().startswith("composing (")


def test_heartbeats_reach_on_heartbeat_from_the_activity_and_its_threads() -> None:
    def uploads(parts: int) -> None:
        for part in range(parts):
            activity.heartbeat(part)
        # A thread of the activity's, given its context, heartbeats too.
        thread = threading.Thread(target=contextvars.copy_context().run, args=[activity.heartbeat, "from a thread", 1])
        thread.start()
        thread.join()

    env = ActivityEnvironment()
    heartbeats: list[tuple[Any, ...]] = []
    env.on_heartbeat = lambda *details: heartbeats.append(details)
    env.run(uploads, 2)
    assert heartbeats == [(0,), (1,), ("from a thread", 1)]


async def test_an_async_activity_s_heartbeats_from_its_tasks_too() -> None:
    async def uploads() -> None:
        activity.heartbeat("first")
        await asyncio.create_task(asyncio.to_thread(activity.heartbeat, "from a task's thread"))

    env = ActivityEnvironment()
    heartbeats: list[Any] = []
    env.on_heartbeat = lambda *details: heartbeats.append(details[0])
    await env.run(uploads)
    assert heartbeats == ["first", "from a task's thread"]


async def test_cancelling_an_async_activity_cancels_its_task_and_wakes_its_waiters() -> None:
    started = asyncio.Event()

    async def waits_for_cancel() -> tuple[bool, activity.ActivityCancellationDetails | None, bool]:
        # Another task of the activity's: the environment cancels only the activity's own.
        watcher = asyncio.create_task(activity.wait_for_cancelled())
        assert not activity.is_cancelled() and activity.cancellation_details() is None
        started.set()
        try:
            await activity.wait_for_cancelled()
        except asyncio.CancelledError:
            await watcher
            return activity.is_cancelled(), activity.cancellation_details(), watcher.done()
        raise AssertionError("the activity's task was not cancelled")

    env = ActivityEnvironment()
    running = asyncio.create_task(env.run(waits_for_cancel))
    await asyncio.wait_for(started.wait(), WAIT_S)
    env.cancel()
    assert await asyncio.wait_for(running, WAIT_S) == (True, activity.ActivityCancellationDetails(cancel_requested=True), True)


async def test_an_async_activity_run_after_cancel_starts_cancelled() -> None:
    env = ActivityEnvironment()
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await env.run(compose_async, "Hello", "Ada")


def run_in_thread(env: ActivityEnvironment, fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """`fn` run by `env` in a thread of its own (as a worker runs a sync activity), and where its result goes."""
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(env.run(fn)), daemon=True)  # one left looping fails its test, not the session
    thread.start()
    return thread, outcome


def test_cancelling_a_sync_activity_raises_cancelled_error_in_its_thread() -> None:
    started = threading.Event()

    @activity.defn
    def works_until_cancelled() -> tuple[str, bool, activity.ActivityCancellationDetails | None]:
        started.set()
        try:
            while True:
                time.sleep(STEP_S)
        except CancelledError:
            return "cancelled", activity.is_cancelled(), activity.cancellation_details()

    env = ActivityEnvironment()
    thread, outcome = run_in_thread(env, works_until_cancelled)
    assert started.wait(WAIT_S)
    env.cancel(activity.ActivityCancellationDetails(timed_out=True))
    thread.join(WAIT_S)
    assert outcome == [("cancelled", True, activity.ActivityCancellationDetails(timed_out=True))]


def test_a_shielded_block_of_a_sync_activity_ends_before_the_cancellation_raises() -> None:
    started = threading.Event()
    steps: list[str] = []

    def finishes_its_block() -> None:
        with activity.shield_thread_cancel_exception():
            started.set()
            while not activity.is_cancelled():
                time.sleep(STEP_S)
            time.sleep(STEP_S)  # the cancellation raised in the thread waits for the block's end
            steps.append("block finished")
        steps.append("after the block")

    env = ActivityEnvironment()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            env.run(finishes_its_block)
        except CancelledError as exc:
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(WAIT_S)
    env.cancel()
    thread.join(WAIT_S)
    assert steps == ["block finished"]
    assert len(raised) == 1


def test_a_sync_activity_that_opted_out_sees_is_cancelled_between_heartbeats() -> None:
    @activity.defn(no_thread_cancel_exception=True)
    def heartbeats_until_cancelled() -> int:
        beats = 0
        while not activity.is_cancelled():
            beats += 1
            activity.heartbeat(beats)
            time.sleep(STEP_S)
        return beats

    env = ActivityEnvironment()
    heartbeats: list[Any] = []
    first = threading.Event()

    def on_heartbeat(*details: Any) -> None:
        heartbeats.append(details[0])
        first.set()

    env.on_heartbeat = on_heartbeat
    thread, outcome = run_in_thread(env, heartbeats_until_cancelled)
    assert first.wait(WAIT_S)
    env.cancel()
    thread.join(WAIT_S)
    assert outcome == [len(heartbeats)]
    assert heartbeats == list(range(1, len(heartbeats) + 1))


def test_wait_for_cancelled_sync_returns_once_cancelled_or_at_its_timeout() -> None:
    @activity.defn(no_thread_cancel_exception=True)
    def waits() -> bool:
        activity.wait_for_cancelled_sync(timeout=STEP_S)  # not cancelled yet: returns at its timeout
        assert not activity.is_cancelled()
        activity.heartbeat("waiting")
        activity.wait_for_cancelled_sync()
        return activity.is_cancelled()

    env = ActivityEnvironment()
    waiting = threading.Event()
    env.on_heartbeat = lambda *details: waiting.set()
    thread, outcome = run_in_thread(env, waits)
    assert waiting.wait(WAIT_S)
    env.cancel()
    thread.join(WAIT_S)
    assert outcome == [True]


def test_only_the_first_cancel_counts() -> None:
    env = ActivityEnvironment()
    env.cancel(activity.ActivityCancellationDetails(paused=True))
    env.cancel(activity.ActivityCancellationDetails(reset=True))
    assert env.run(activity.cancellation_details) == activity.ActivityCancellationDetails(paused=True)


async def test_worker_shutdown_is_seen_and_awaited() -> None:
    async def waits_for_shutdown() -> list[bool]:
        seen = [activity.is_worker_shutdown()]
        activity.heartbeat()
        await activity.wait_for_worker_shutdown()
        activity.wait_for_worker_shutdown_sync()  # set: returns at once
        return [*seen, activity.is_worker_shutdown(), activity.is_cancelled()]

    env = ActivityEnvironment()
    waiting = asyncio.Event()
    env.on_heartbeat = lambda *details: waiting.set()
    running = asyncio.create_task(env.run(waits_for_shutdown))
    await asyncio.wait_for(waiting.wait(), WAIT_S)
    env.worker_shutdown()
    assert await asyncio.wait_for(running, WAIT_S) == [False, True, False]  # a shutdown is no cancellation


class RecordingSink:
    """A metric sink that keeps what it is given."""

    def __init__(self) -> None:
        self.records: list[tuple[MetricKind, str, float, MetricAttributes]] = []

    def record(
        self, kind: MetricKind, name: str, description: str | None, unit: str | None, value: float, attributes: MetricAttributes,
    ) -> None:
        self.records.append((kind, name, value, attributes))


def test_the_payload_converter_and_metric_meter_are_the_environment_s() -> None:
    def counts_a_page() -> None:
        activity.metric_meter().create_counter("pages").add(1, {"format": "pdf"})

    env = ActivityEnvironment()
    env.run(counts_a_page)  # the default meter records nowhere
    converter = DefaultPayloadConverter()
    sink = RecordingSink()
    env.payload_converter = converter
    env.metric_meter = MetricMeter(sink, {"service": "billing"})
    assert env.run(activity.payload_converter) is converter
    env.run(counts_a_page)
    # With the attributes a worker's meter adds for an attempt.
    assert sink.records == [(MetricKind.COUNTER, "pages", 1, {
        "service": "billing", "namespace": "default", "task_queue": "test", "activity_type": "unknown", "format": "pdf",
    })]


async def test_activity_client_without_one_says_why() -> None:
    async def asks_async() -> None:
        activity.client()

    with pytest.raises(RuntimeError, match="No client available"):
        await ActivityEnvironment().run(asks_async)
    with pytest.raises(RuntimeError, match="No client available"):
        ActivityEnvironment().run(activity.client)  # a sync activity never has one
    with pytest.raises(RuntimeError, match="outside an activity"):
        activity.client()
