"""The workflow-side API a ported temporalio program meets first, used as temporalio's docs show it."""

from __future__ import annotations

import asyncio
import logging
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

import pytest

from kadence import activity, workflow
from kadence.client import Client, WorkflowUpdateStage
from kadence.common import Priority, RawValue, RetryPolicy
from kadence.exceptions import WorkflowQueryFailedError
from kadence.worker import Worker
from tests.workflows import GreetingActivities

with workflow.unsafe.imports_passed_through():
    from tests.workflows import echo


@activity.defn
async def say_hello(name: str) -> str:
    activity.logger.info("greeting %s", name)
    return f"Hello, {name}!"


@workflow.defn
class LoggingWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        workflow.logger.info("starting for %s", name)
        greeting = await workflow.execute_activity(say_hello, name, start_to_close_timeout=timedelta(seconds=10))
        await workflow.sleep(0.01)
        workflow.logger.info("done: %s", greeting)
        return greeting


async def test_workflow_and_activity_loggers_add_details_and_stay_quiet_on_replay(
    client: Client, task_queue: str, caplog: pytest.LogCaptureFixture,
) -> None:
    workflow_id = f"logging-{uuid.uuid4()}"
    caplog.set_level(logging.INFO, logger="kadence.workflow")
    caplog.set_level(logging.INFO, logger="kadence.activity")
    # No cache: every workflow task replays the run from its history, the first log line included.
    async with Worker(client, task_queue=task_queue, workflows=[LoggingWorkflow], activities=[say_hello], max_cached_workflows=0):
        handle = await client.start_workflow(LoggingWorkflow.run, "Ada", id=workflow_id, task_queue=task_queue)
        assert await handle.result() == "Hello, Ada!"

    workflow_records = [r for r in caplog.records if r.name == "kadence.workflow"]
    assert [r.getMessage().split(" (")[0] for r in workflow_records] == ["starting for Ada", "done: Hello, Ada!"]
    for record in workflow_records:
        details = record.temporal_workflow  # type: ignore[attr-defined]
        assert details == {
            "attempt": 1, "namespace": "default", "run_id": handle.result_run_id, "task_queue": task_queue,
            "workflow_id": workflow_id, "workflow_type": "LoggingWorkflow",
        }
        assert record.getMessage().endswith(f"({details})")

    (activity_record,) = [r for r in caplog.records if r.name == "kadence.activity"]
    details = activity_record.temporal_activity  # type: ignore[attr-defined]
    assert details == {
        "activity_id": "1", "activity_type": "say_hello", "attempt": 1, "namespace": "default", "task_queue": task_queue,
        "workflow_id": workflow_id, "workflow_run_id": handle.result_run_id, "workflow_type": "LoggingWorkflow",
    }
    assert activity_record.getMessage() == f"greeting Ada ({details})"


@workflow.defn
class LoggedUpdateWorkflow:
    def __init__(self) -> None:
        self.finished = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.finished)

    @workflow.update
    async def finish(self) -> str:
        workflow.logger.info("finishing")
        self.finished = True
        update = workflow.current_update_info()
        assert update is not None
        return f"{update.name}/{update.id}"


async def test_workflow_logger_in_an_update_handler_names_the_update(
    client: Client, task_queue: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="kadence.workflow")
    async with Worker(client, task_queue=task_queue, workflows=[LoggedUpdateWorkflow]):
        handle = await client.start_workflow(LoggedUpdateWorkflow.run, id=f"logged-update-{uuid.uuid4()}", task_queue=task_queue)
        assert await handle.execute_update(LoggedUpdateWorkflow.finish, id="finish-1") == "finish/finish-1"
        await handle.result()
    (record,) = [r for r in caplog.records if r.name == "kadence.workflow"]
    details = record.temporal_workflow  # type: ignore[attr-defined]
    assert (details["update_id"], details["update_name"]) == ("finish-1", "finish")
    assert record.getMessage() == f"finishing ({details})"


@workflow.defn
class ReplayAwareWorkflow:
    def __init__(self) -> None:
        self.seen: list[bool] = []

    @workflow.run
    async def run(self) -> list[bool]:
        with workflow.unsafe.sandbox_unrestricted():
            assert workflow.unsafe.is_sandbox_unrestricted() and not workflow.unsafe.in_sandbox()
        self.seen.append(workflow.unsafe.is_replaying())
        await workflow.execute_activity(echo, "step", start_to_close_timeout=timedelta(seconds=10))
        self.seen.append(workflow.unsafe.is_replaying())
        return self.seen

    @workflow.query
    def modes(self) -> dict[str, bool]:
        return {
            "in_workflow": workflow.in_workflow(), "replaying": workflow.unsafe.is_replaying(),
            "replaying_history_events": workflow.unsafe.is_replaying_history_events(), "read_only": workflow.unsafe.is_read_only(),
        }


@pytest.mark.parametrize("cache", [1000, 0], ids=["cached", "replayed-every-task"])
async def test_unsafe_reports_replay_and_read_only_without_a_sandbox(client: Client, task_queue: str, cache: int) -> None:
    assert not workflow.in_workflow() and not workflow.unsafe.is_imports_passed_through()
    with workflow.unsafe.imports_passed_through():
        assert workflow.unsafe.is_imports_passed_through()
    async with Worker(client, task_queue=task_queue, workflows=[ReplayAwareWorkflow], activities=[echo], max_cached_workflows=cache):
        handle = await client.start_workflow(ReplayAwareWorkflow.run, id=f"replay-aware-{uuid.uuid4()}", task_queue=task_queue)
        # The second task replays the first when the run is not cached: its first step then says so.
        assert await handle.result() == [cache == 0, False]
        # The closed run is rebuilt from history to answer: a replay, and a query is read-only.
        assert await handle.query(ReplayAwareWorkflow.modes) == {
            "in_workflow": True, "replaying": True, "replaying_history_events": False, "read_only": True,
        }


@workflow.defn
class NamedChildWorkflow:
    def __init__(self) -> None:
        self.released = False

    @workflow.run
    async def run(self, wait_for_release: bool) -> str:
        await workflow.wait_condition(lambda: self.released or not wait_for_release)
        return workflow.info().workflow_id

    @workflow.signal
    def release(self) -> None:
        self.released = True


@workflow.defn
class ComposingWorkflow:
    @workflow.run
    async def run(self) -> dict[str, object]:
        options = {"start_to_close_timeout": timedelta(seconds=10), "retry_policy": RetryPolicy(maximum_attempts=1)}
        greeted = await workflow.execute_activity_method(GreetingActivities.greet, "Ada", **options)
        shouted = await workflow.execute_local_activity_method(GreetingActivities.shout_greeting, "Ada", **options)
        started = workflow.start_activity_method(GreetingActivities.greet, args=["Grace"], **options)
        # Children without ids: each gets workflow.uuid4(), the same on every replay.
        slow = await workflow.start_child_workflow(NamedChildWorkflow.run, True)
        fast = asyncio.create_task(workflow.execute_child_workflow(NamedChildWorkflow.run, False))
        done, pending = await workflow.wait([slow, fast], return_when=asyncio.FIRST_COMPLETED)
        first = [task is fast for task in done] + [task is slow for task in pending]
        await slow.signal(NamedChildWorkflow.release)
        order = [await next_done for next_done in workflow.as_completed([slow, fast])]
        never = asyncio.create_task(workflow.wait_condition(lambda: False))
        timed_out, still_pending = await workflow.wait([never], timeout=0.05)
        never.cancel()
        return {
            "greeted": greeted, "shouted": shouted, "started": await started, "fast_first": first,
            "children": order, "timed_out": (len(timed_out), len(still_pending)),
        }


@pytest.mark.parametrize("cache", [1000, 0], ids=["cached", "replayed-every-task"])
async def test_activity_methods_children_without_ids_and_deterministic_wait(client: Client, task_queue: str, cache: int) -> None:
    activities = GreetingActivities("Hello")
    workflow_id = f"composing-{uuid.uuid4()}"
    async with Worker(
        client, task_queue=task_queue, workflows=[ComposingWorkflow, NamedChildWorkflow],
        activities=[activities.greet, activities.shout_greeting], max_cached_workflows=cache,
    ):
        handle = await client.start_workflow(ComposingWorkflow.run, id=workflow_id, task_queue=task_queue)
        result = await handle.result()
    fast_id, slow_id = result.pop("children")  # as they completed
    assert result == {
        "greeted": "Hello, Ada", "shouted": "HELLO, ADA!", "started": "Hello, Grace", "fast_first": [True, True], "timed_out": [0, 1],
    }
    assert uuid.UUID(fast_id).version == 4 and uuid.UUID(slow_id).version == 4 and fast_id != slow_id
    for child_id in (fast_id, slow_id):  # the ids the children ran under
        assert (await client.get_workflow_handle(child_id).describe()).workflow_type == "NamedChildWorkflow"


@workflow.defn
class HandlersWorkflow:
    @workflow.init
    def __init__(self, owner: str) -> None:
        self.owner = owner  # handlers may run before the run method starts: the state is ready here
        self.events: list[str] = []
        self.finished = False

    @workflow.run
    async def run(self, owner: str) -> list[str]:
        await workflow.wait_condition(lambda: self.finished)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.events

    @workflow.update
    def open(self) -> None:
        workflow.set_signal_handler("late", self.on_late)
        workflow.set_query_handler("owner", lambda: self.owner)
        workflow.set_update_handler("rename", self.rename, validator=self.validate_rename)
        workflow.set_dynamic_signal_handler(self.on_any_signal)

    def on_late(self, value: str) -> None:
        self.events.append(f"late:{value}")

    def on_any_signal(self, name: str, args: Sequence[RawValue]) -> None:
        self.events.append(f"{name}:{workflow.payload_converter().from_payload(args[0].payload, str)}")

    def rename(self, owner: str) -> str:
        self.owner = owner
        return owner

    def validate_rename(self, owner: str) -> None:
        if not owner:
            raise ValueError("an owner needs a name")

    @workflow.update
    async def slow(self) -> None:
        await workflow.sleep(0.3)
        self.events.append("slow done")

    @workflow.signal
    def finish(self) -> None:
        self.finished = True

    @workflow.query
    def sneaky(self) -> None:
        workflow.upsert_search_attributes({"Changed": "by a query"})

    @workflow.query(dynamic=True)
    def any_query(self, name: str, args: Sequence[RawValue]) -> str:
        return f"{name} of {self.owner} with {len(args)} args"

    @workflow.update(dynamic=True)
    def any_update(self, name: str, args: Sequence[RawValue]) -> str:
        return f"{name}({workflow.payload_converter().from_payload(args[0].payload, int)})"


@pytest.mark.parametrize("cache", [1000, 0], ids=["cached", "replayed-every-task"])
async def test_init_handlers_set_at_run_time_dynamic_handlers_and_buffered_signals(
    client: Client, task_queue: str, cache: int,
) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[HandlersWorkflow], max_cached_workflows=cache):
        handle = await client.start_workflow(HandlersWorkflow.run, "ada", id=f"handlers-{uuid.uuid4()}", task_queue=task_queue)
        await handle.signal("late", "early bird")  # no handler for either yet: kept for one
        await handle.signal("other", "kept")
        await handle.execute_update(HandlersWorkflow.open)
        assert await handle.query("owner") == "ada"  # @workflow.init gave the constructor the run's argument
        assert await handle.execute_update("rename", "grace") == "grace"
        assert await handle.query("anything", args=[1, 2]) == "anything of grace with 2 args"
        with pytest.raises(WorkflowQueryFailedError, match="read-only function, action attempted: UpsertWorkflowSearchAttributes"):
            await handle.query(HandlersWorkflow.sneaky)  # and the run goes on unharmed
        assert await handle.execute_update("resize", 3) == "resize(3)"
        slow = await handle.start_update(HandlersWorkflow.slow, wait_for_stage=WorkflowUpdateStage.ACCEPTED)
        await handle.signal(HandlersWorkflow.finish)
        # The run waited for the slow update's handler before returning.
        assert await handle.result() == ["late:early bird", "other:kept", "slow done"]
        await slow.result()


@workflow.defn
class InfoChildWorkflow:
    @workflow.run
    async def run(self) -> dict[str, object]:
        info = workflow.info()
        assert info.parent is not None
        return {
            "parent": [info.parent.namespace, info.parent.workflow_id, info.parent.run_id],
            "timeouts": [t.total_seconds() if t else None for t in (info.execution_timeout, info.run_timeout, info.task_timeout)],
            "first_execution_run_id": info.first_execution_run_id == info.run_id,
            "search_attributes": info.search_attributes, "root": info.root,
        }


@workflow.defn
class InfoWorkflow:
    @workflow.run
    async def run(self, runs_left: int) -> dict[str, object]:
        if runs_left:
            workflow.continue_as_new(runs_left - 1)
        workflow.upsert_search_attributes({"Stage": "checked"})
        info = workflow.info()
        child = await workflow.execute_child_workflow(
            InfoChildWorkflow.run, id=f"{info.workflow_id}-child", execution_timeout=timedelta(minutes=9),
            run_timeout=timedelta(minutes=5), task_timeout=timedelta(seconds=7), search_attributes={"Customer": "c-42"},
        )
        return {
            "ids": [info.workflow_id, info.workflow_type, info.task_queue, info.namespace, info.attempt],
            "continued_run_id": info.continued_run_id, "cron_schedule": info.cron_schedule, "headers": dict(info.headers),
            "first_execution_run_id": info.first_execution_run_id, "parent": info.parent, "root": info.root,
            "retry_policy": info.retry_policy,
            "task_timeout": info.task_timeout.total_seconds(),
            "search_attributes": info.search_attributes,
            "times_in_order": info.workflow_start_time <= info.start_time <= workflow.now(),
            "history": [info.get_current_history_length() > 3, info.get_current_history_size() > 0, info.is_continue_as_new_suggested()],
            "original_execution_run_id": info.original_execution_run_id == info.run_id, "priority": info.priority == Priority.default,
            "versioning": [info.get_current_build_id(), info.get_current_deployment_version(),
                           info.is_target_worker_deployment_version_changed()],
            "child": child,
        }


@pytest.mark.parametrize("cache", [1000, 0], ids=["cached", "replayed-every-task"])
async def test_workflow_info_has_temporalios_fields(client: Client, task_queue: str, cache: int) -> None:
    workflow_id = f"info-{uuid.uuid4()}"
    async with Worker(client, task_queue=task_queue, workflows=[InfoWorkflow, InfoChildWorkflow], max_cached_workflows=cache):
        handle = await client.start_workflow(
            InfoWorkflow.run, 1, id=workflow_id, task_queue=task_queue, task_timeout=timedelta(seconds=20),
        )
        result = await handle.result()
        current = await client.get_workflow_handle(workflow_id).describe()
    child = result.pop("child")
    root = {"run_id": handle.result_run_id, "workflow_id": workflow_id}  # the chain's first run, which had no parent
    assert result == {
        "ids": [workflow_id, "InfoWorkflow", task_queue, "default", 1],
        "continued_run_id": handle.result_run_id, "cron_schedule": None, "headers": {},
        "first_execution_run_id": handle.result_run_id, "parent": None, "root": root,
        "retry_policy": None, "task_timeout": 20.0, "search_attributes": {"Stage": ["checked"]}, "times_in_order": True,
        "history": [True, True, False],
        "original_execution_run_id": True, "priority": True, "versioning": ["", None, False],
    }
    assert child == {
        "parent": ["default", workflow_id, current.run_id], "timeouts": [540.0, 300.0, 7.0], "first_execution_run_id": True,
        "search_attributes": {"Customer": ["c-42"]}, "root": root,
    }


@workflow.defn
class AbandoningWorkflow:
    def __init__(self) -> None:
        self.finished = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.finished)  # not for its handlers

    @workflow.update
    async def watched(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.update(unfinished_policy=workflow.HandlerUnfinishedPolicy.ABANDON)
    async def abandoned(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal
    async def watched_signal(self) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.signal
    def finish(self) -> None:
        self.finished = True


async def test_a_run_that_ends_with_handlers_running_warns_of_those_not_abandoned(client: Client, task_queue: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with Worker(client, task_queue=task_queue, workflows=[AbandoningWorkflow]):
            handle = await client.start_workflow(AbandoningWorkflow.run, id=f"abandoning-{uuid.uuid4()}", task_queue=task_queue)
            await handle.start_update(AbandoningWorkflow.watched, id="watched-1", wait_for_stage=WorkflowUpdateStage.ACCEPTED)
            await handle.start_update(AbandoningWorkflow.abandoned, id="abandoned-1", wait_for_stage=WorkflowUpdateStage.ACCEPTED)
            await handle.signal(AbandoningWorkflow.watched_signal)
            await handle.signal(AbandoningWorkflow.finish)
            await handle.result()
    (update_warning,) = [w.message for w in caught if isinstance(w.message, workflow.UnfinishedUpdateHandlersWarning)]
    assert '[{"name": "watched", "id": "watched-1"}]' in str(update_warning)
    (signal_warning,) = [w.message for w in caught if isinstance(w.message, workflow.UnfinishedSignalHandlersWarning)]
    assert '[{"name": "watched_signal", "count": 1}]' in str(signal_warning)


with pytest.warns(DeprecationWarning, match="Dynamic signals with vararg third param is deprecated"):

    @workflow.defn
    class OldStyleDynamicWorkflow:
        """temporalio's deprecated dynamic handler form, (self, name, *args), still taken."""

        def __init__(self) -> None:
            self.received: list[str] = []

        @workflow.run
        async def run(self) -> list[str]:
            await workflow.wait_condition(lambda: len(self.received) == 2)
            return self.received

        @workflow.signal(dynamic=True)
        def any_signal(self, name: str, *args: int) -> None:
            self.received.append(f"{name}{list(args)}")


async def test_old_style_dynamic_handlers_get_the_name_and_the_arguments(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[OldStyleDynamicWorkflow]):
        handle = await client.start_workflow(OldStyleDynamicWorkflow.run, id=f"old-dynamic-{uuid.uuid4()}", task_queue=task_queue)
        await handle.signal("add", args=[1, 2])
        await handle.signal("clear")
        assert await handle.result() == ["add[1, 2]", "clear[]"]


@dataclass
class PoolRequest:
    pool: str
    slots: int


@workflow.defn
class PoolWorkflow:
    """As temporalio's resource-pool sample: the constructor and the run method name their one
    parameter differently (the run method does not use it)."""

    @workflow.init
    def __init__(self, request: PoolRequest) -> None:
        self.free = [f"{request.pool}-{n}" for n in range(request.slots)]

    @workflow.run
    async def run(self, _: PoolRequest) -> list[str]:
        return self.free


def _init_renamed(self, name: str, count: int = 1) -> None: ...
def _init_one_fewer(self, first: str) -> None: ...
def _init_other_default(self, first: str, second: int = 2) -> None: ...
def _init_other_annotation(self, first: bytes, second: int = 1) -> None: ...
def _init_keyword_only(self, first: str, *, second: int = 1) -> None: ...


def _workflow_with_init(init_fn: Callable[..., None]) -> type:
    init_fn.__name__ = "__init__"

    class Candidate:
        __init__ = workflow.init(init_fn)

        @workflow.run
        async def run(self, first: str, second: int = 1) -> None: ...

    return workflow.defn(Candidate)


def test_init_matches_run_by_position_kind_default_and_annotation_not_by_name() -> None:
    assert workflow.definition(PoolWorkflow).init_takes_args
    assert workflow.definition(_workflow_with_init(_init_renamed)).init_takes_args
    for init_fn in (_init_one_fewer, _init_other_default, _init_other_annotation, _init_keyword_only):
        with pytest.raises(ValueError, match=r"must take the parameters of the @workflow.run method run\(self, first: 'str'"):
            _workflow_with_init(init_fn)


async def test_a_workflow_whose_init_names_its_parameters_otherwise_runs(client: Client, task_queue: str) -> None:
    async with Worker(client, task_queue=task_queue, workflows=[PoolWorkflow]):
        result = await client.execute_workflow(
            PoolWorkflow.run, PoolRequest("gpu", 2), id=f"pool-{uuid.uuid4()}", task_queue=task_queue,
        )
    assert result == ["gpu-0", "gpu-1"]
