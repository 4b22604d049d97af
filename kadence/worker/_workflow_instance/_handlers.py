"""Where a run's inbound interceptor chain ends (as temporalio's): the workflow's run method and
its signal, query and update handlers, called with the workflow object. WorkflowRun looks the
handler up and decodes its arguments before the chain is entered."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from kadence.worker._interceptor import (
    ExecuteWorkflowInput,
    HandleQueryInput,
    HandleSignalInput,
    HandleUpdateInput,
    WorkflowInboundInterceptor,
    WorkflowOutboundInterceptor,
)
from kadence.worker._workflow_instance._run import WorkflowRun, _lookup
from kadence.workflow._definition import Handler


class _WorkflowInboundImpl(WorkflowInboundInterceptor):
    """The innermost inbound interceptor: calls the workflow's run method and handlers."""

    def __init__(self, run: WorkflowRun) -> None:  # no next: this is the end of the chain
        self._run = run

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        self._run.outbound = outbound

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        return await input.run_fn(self._run.workflow_object, *input.args)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        result = self._handler(self._run.signals, input.signal)(*input.args)
        if inspect.isawaitable(result):
            await result

    async def handle_query(self, input: HandleQueryInput) -> Any:
        return self._handler(self._run.queries, input.query)(*input.args)

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        handler = _lookup(self._run.updates, input.update)
        if handler is not None and handler.validator is not None:
            validator = functools.partial(handler.validator, self._run.workflow_object) if handler.is_method else handler.validator
            validator(*input.args)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        result = self._handler(self._run.updates, input.update)(*input.args)
        return await result if inspect.isawaitable(result) else result

    def _handler(self, handlers: dict[str | None, Handler], name: str) -> Callable[..., Any]:
        handler = _lookup(handlers, name)
        assert handler is not None, f"no handler for {name!r}"  # looked up before the interceptors were called
        return self._run.callable(handler)
