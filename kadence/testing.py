"""Testing workflow code against recorded histories (as temporalio.worker.Replayer)."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import cast

from kadence import workflow as workflow_module
from kadence.converter import DataConverter
from kadence.exceptions import NondeterminismError
from kadence.protocol.names import EventType
from kadence.protocol.records import HistoryEvent
from kadence.visibility import WorkflowHistory
from kadence.worker._interceptor import Interceptor, WorkflowInterceptorClassInput
from kadence.worker._workflow_instance import WorkflowTaskError, replay
from kadence.workflow._definition import WorkflowDefinition
from kadence.workflow._runtime import WorkflowInfo

__all__ = ["Replayer", "WorkflowReplayResult", "workflows_in"]


@dataclass(frozen=True)
class WorkflowReplayResult:
    history: WorkflowHistory
    replay_failure: Exception | None  # NondeterminismError, or the workflow code's own error


class Replayer:
    """Replays histories (from `kadence workflow show --output json`, or `handle.fetch_history()`)
    against the workflow code, to catch a change that would break running workflows."""

    def __init__(
        self, *, workflows: Sequence[type], data_converter: DataConverter | None = None, interceptors: Sequence[Interceptor] = (),
    ) -> None:
        found = [workflow_module.definition(w) for w in workflows]
        self.workflows: dict[str, WorkflowDefinition] = {d.name: d for d in found if isinstance(d, WorkflowDefinition)}
        self.data_converter = data_converter or DataConverter()
        class_input = WorkflowInterceptorClassInput(unsafe_extern_functions={})
        self.interceptor_classes = [cls for cls in (i.workflow_interceptor_class(class_input) for i in interceptors) if cls is not None]

    async def replay_workflow(self, history: WorkflowHistory, *, raise_on_replay_failure: bool = True) -> WorkflowReplayResult:
        try:
            await self._replay(history)
        except (NondeterminismError, WorkflowTaskError) as failure:
            if raise_on_replay_failure:
                raise
            return WorkflowReplayResult(history, failure)
        return WorkflowReplayResult(history, None)

    async def replay_workflows(
        self, histories: Sequence[WorkflowHistory], *, raise_on_replay_failure: bool = True,
    ) -> list[WorkflowReplayResult]:
        return [await self.replay_workflow(h, raise_on_replay_failure=raise_on_replay_failure) for h in histories]

    async def _replay(self, history: WorkflowHistory) -> None:
        if not history.events or history.events[0]["attributes"][0] != EventType.WorkflowExecutionStarted:
            raise ValueError(f"history of {history.workflow_id} does not start with WorkflowExecutionStarted")
        started = history.events[0]["attributes"][1]
        definition = self.workflows.get(started["workflow_type"])
        if definition is None:
            raise ValueError(f"workflow type {started['workflow_type']!r} is not among the replayer's workflows {sorted(self.workflows)}")
        events = copy.deepcopy(history.events)  # decoded in place: the caller's history stays as it was
        await self.data_converter.decode_payloads(events)
        info = WorkflowInfo(history.workflow_id, history.run_id, definition.name, started["task_queue"])
        replay(definition, info, self.data_converter, cast(list[HistoryEvent], events), self.interceptor_classes)  # read from JSON


def workflows_in(module: ModuleType) -> list[type]:
    """The @workflow.defn classes a module defines or imports."""
    return [obj for obj in vars(module).values() if inspect.isclass(obj) and _is_workflow(obj)]


def _is_workflow(cls: type) -> bool:
    try:
        return isinstance(workflow_module.definition(cls), WorkflowDefinition)
    except TypeError:
        return False
