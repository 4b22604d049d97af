"""The Replayer (as temporalio.worker.Replayer): recorded histories run again against the workflow
code, offline, to catch a change that would break the runs already recorded."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class WorkflowReplayResult:
    history: WorkflowHistory
    replay_failure: Exception | None  # NondeterminismError, or the workflow code's own error (a failed workflow task)


@dataclass(frozen=True)
class WorkflowReplayResults:
    replay_failures: Mapping[str, Exception] = field(default_factory=dict)  # by run id


class Replayer:
    """Replays histories (`kadence workflow show --output json`, `handle.fetch_history()`, or
    Temporal's JSON history read by `WorkflowHistory.from_json(workflow_id, history)`) against
    the workflow code, with no broker or Postgres."""

    def __init__(
        self, *, workflows: Sequence[type], data_converter: DataConverter | None = None, interceptors: Sequence[Interceptor] = (),
    ) -> None:
        found = [workflow_module.definition(w) for w in workflows]
        self.workflows: dict[str, WorkflowDefinition] = {d.name: d for d in found if isinstance(d, WorkflowDefinition)}
        self.data_converter = data_converter or DataConverter()
        class_input = WorkflowInterceptorClassInput(unsafe_extern_functions={})
        self.interceptor_classes = [cls for cls in (i.workflow_interceptor_class(class_input) for i in interceptors) if cls is not None]

    async def replay_workflow(self, history: WorkflowHistory, *, raise_on_replay_failure: bool = True) -> WorkflowReplayResult:
        result = WorkflowReplayResult(history, await self._replay_failure(history))
        if raise_on_replay_failure and result.replay_failure is not None:
            raise result.replay_failure
        return result

    async def replay_workflows(
        self, histories: Iterable[WorkflowHistory] | AsyncIterator[WorkflowHistory], *, raise_on_replay_failure: bool = True,
    ) -> WorkflowReplayResults:
        """Each history replayed in turn; the failures by run id (the first raised, by default)."""
        failures: dict[str, Exception] = {}
        async with self.workflow_replay_iterator(histories) as results:
            async for result in results:
                if result.replay_failure is not None:
                    if raise_on_replay_failure:
                        raise result.replay_failure
                    failures[result.history.run_id] = result.replay_failure
        return WorkflowReplayResults(failures)

    @contextlib.asynccontextmanager
    async def workflow_replay_iterator(
        self, histories: Iterable[WorkflowHistory] | AsyncIterator[WorkflowHistory],
    ) -> AsyncIterator[AsyncIterator[WorkflowReplayResult]]:
        """`async with` it, then `async for` the result of each history as it is replayed (a
        replay failure is in the result, never raised)."""
        yield self._results(histories)

    async def _results(self, histories: Iterable[WorkflowHistory] | AsyncIterator[WorkflowHistory]) -> AsyncIterator[WorkflowReplayResult]:
        if isinstance(histories, AsyncIterator):
            async for history in histories:
                yield await self.replay_workflow(history, raise_on_replay_failure=False)
        else:
            for history in histories:
                yield await self.replay_workflow(history, raise_on_replay_failure=False)

    async def _replay_failure(self, history: WorkflowHistory) -> Exception | None:
        """Why the workflow code does not replay `history`, or None. A history the Replayer cannot
        read at all (no start, a workflow type it was not given) raises ValueError."""
        if not history.events or history.events[0]["attributes"][0] != EventType.WorkflowExecutionStarted:
            raise ValueError(f"history of {history.workflow_id} does not start with WorkflowExecutionStarted")
        started = history.events[0]["attributes"][1]
        definition = self.workflows.get(started["workflow_type"])
        if definition is None:
            raise ValueError(f"workflow type {started['workflow_type']!r} is not among the replayer's workflows {sorted(self.workflows)}")
        events = copy.deepcopy(history.events)  # decoded in place: the caller's history stays as it was
        await self.data_converter.decode_payloads(events)
        info = WorkflowInfo(history.workflow_id, history.run_id, definition.name, started["task_queue"])
        try:
            replay(definition, info, self.data_converter, cast(list[HistoryEvent], events), self.interceptor_classes)  # read from JSON
        except (NondeterminismError, WorkflowTaskError) as failure:
            return failure
        return None
