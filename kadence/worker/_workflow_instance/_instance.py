"""A workflow run as the worker drives it: the run wired to its interceptors, activated for each
workflow task over the history it has not seen yet, and `replay` to rebuild one from its history."""

from __future__ import annotations

from collections.abc import Sequence

from kadence.common import MetricMeter
from kadence.converter import DataConverter
from kadence.protocol.records import HistoryEvent
from kadence.worker._interceptor import WorkflowInboundInterceptor
from kadence.worker._workflow_instance._commands import Command
from kadence.worker._workflow_instance._handlers import WorkflowHandlers, _WorkflowInboundImpl
from kadence.worker._workflow_instance._history import apply_event
from kadence.worker._workflow_instance._outbound import _WorkflowOutboundImpl
from kadence.workflow._definition import WorkflowDefinition
from kadence.workflow._runtime import WorkflowInfo


class WorkflowInstance(WorkflowHandlers):
    """One run in a worker. Being an asyncio loop with typeshed's abstract methods left out, it is
    made with a type: ignore[abstract] (see WorkflowLoop)."""

    def __init__(
        self, definition: WorkflowDefinition, info: WorkflowInfo, converter: DataConverter,
        interceptor_classes: Sequence[type[WorkflowInboundInterceptor]] = (), metric_meter: MetricMeter = MetricMeter.noop,
    ) -> None:
        super().__init__(definition, info, converter, metric_meter)
        # As temporalio: the first interceptor is the outermost; init hands each the outbound chain.
        inbound: WorkflowInboundInterceptor = _WorkflowInboundImpl(self)
        for cls in reversed(interceptor_classes):
            inbound = cls(inbound)
        self.inbound = inbound
        self.outbound = _WorkflowOutboundImpl(self)
        inbound.init(self.outbound)

    def activate(self, history: list[HistoryEvent], scheduled_event_id: int, started_time_ms: int) -> list[Command]:
        """Apply the events not seen yet, run the activation for task `scheduled_event_id`
        started at `started_time_ms` (its WorkflowTaskStarted time, not in `history` yet),
        and return the commands to send with its completion."""
        self.task_started_ms = started_time_ms
        try:
            for index, event in enumerate(history):
                if event["event_id"] > self.processed_event_id:
                    self.upcoming = history[index + 1:]
                    apply_event(self, event)
                    self.processed_event_id = event["event_id"]
            self.upcoming = []
            self.history_length = scheduled_event_id + 1  # its WorkflowTaskStarted is recorded, not sent
            self.time_ms = started_time_ms
            commands = self.run_activation()
        except BaseException:
            self.close_unstarted_tasks()
            raise
        self.last_activated_task = scheduled_event_id
        return commands


def replay(
    definition: WorkflowDefinition, info: WorkflowInfo, converter: DataConverter, history: list[HistoryEvent],
    interceptor_classes: Sequence[type[WorkflowInboundInterceptor]] = (),
) -> WorkflowInstance:
    """The run rebuilt from its recorded history (its payloads decoded); raises NondeterminismError
    where the workflow code issues other commands than the history recorded. The commands of a
    workflow task not recorded yet are dropped."""
    instance = WorkflowInstance(definition, info, converter, interceptor_classes)  # type: ignore[abstract]  # see WorkflowInstance
    instance.replay_only = True
    last = history[-1]
    instance.activate(history, last["event_id"], last["event_time_ms"])
    return instance
