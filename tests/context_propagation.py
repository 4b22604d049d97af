"""temporalio's context propagation sample (samples-python/context_propagation), ported by swapping
`temporalio` for `kadence` in the imports: a user id set in a context variable by the caller
reaches the workflow, its signal, query and update handlers, its activities and its child through
headers. Nothing else changed, so a failure here is a difference from temporalio's interceptors."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta
from typing import Any, Protocol

import kadence.activity
import kadence.api.common.v1
import kadence.client
import kadence.converter
import kadence.worker
import kadence.workflow

HEADER_KEY = "__my_user_id"

user_id: ContextVar[str | None] = ContextVar("user_id", default=None)


class _InputWithHeaders(Protocol):
    headers: Mapping[str, kadence.api.common.v1.Payload]


def set_header_from_context(input: _InputWithHeaders, payload_converter: kadence.converter.PayloadConverter) -> None:
    current = user_id.get()
    if current:
        input.headers = {**input.headers, HEADER_KEY: payload_converter.to_payload(current)}


@contextmanager
def context_from_header(input: _InputWithHeaders, payload_converter: kadence.converter.PayloadConverter) -> Iterator[None]:
    payload = input.headers.get(HEADER_KEY)
    token = user_id.set(payload_converter.from_payload(payload, str)) if payload else None
    try:
        yield
    finally:
        if token:
            user_id.reset(token)


class ContextPropagationInterceptor(kadence.client.Interceptor, kadence.worker.Interceptor):
    """Takes the user id from the caller's context into headers, and back into context where they arrive."""

    def __init__(
        self, payload_converter: kadence.converter.PayloadConverter = kadence.converter.default().payload_converter,  # noqa: B008 (the sample's)
    ) -> None:
        self._payload_converter = payload_converter

    def intercept_client(self, next: kadence.client.OutboundInterceptor) -> kadence.client.OutboundInterceptor:
        return _ClientOutbound(next, self._payload_converter)

    def intercept_activity(self, next: kadence.worker.ActivityInboundInterceptor) -> kadence.worker.ActivityInboundInterceptor:
        return _ActivityInbound(next)

    def workflow_interceptor_class(self, input: kadence.worker.WorkflowInterceptorClassInput) -> type[_WorkflowInbound]:
        return _WorkflowInbound


class _ClientOutbound(kadence.client.OutboundInterceptor):
    def __init__(self, next: kadence.client.OutboundInterceptor, payload_converter: kadence.converter.PayloadConverter) -> None:
        super().__init__(next)
        self._payload_converter = payload_converter

    async def start_workflow(self, input: kadence.client.StartWorkflowInput) -> kadence.client.WorkflowHandle:
        set_header_from_context(input, self._payload_converter)
        return await super().start_workflow(input)

    async def query_workflow(self, input: kadence.client.QueryWorkflowInput) -> Any:
        set_header_from_context(input, self._payload_converter)
        return await super().query_workflow(input)

    async def signal_workflow(self, input: kadence.client.SignalWorkflowInput) -> None:
        set_header_from_context(input, self._payload_converter)
        await super().signal_workflow(input)

    async def start_workflow_update(self, input: kadence.client.StartWorkflowUpdateInput) -> kadence.client.WorkflowUpdateHandle:
        set_header_from_context(input, self._payload_converter)
        return await self.next.start_workflow_update(input)


class _ActivityInbound(kadence.worker.ActivityInboundInterceptor):
    async def execute_activity(self, input: kadence.worker.ExecuteActivityInput) -> Any:
        with context_from_header(input, kadence.activity.payload_converter()):
            return await self.next.execute_activity(input)


class _WorkflowInbound(kadence.worker.WorkflowInboundInterceptor):
    def init(self, outbound: kadence.worker.WorkflowOutboundInterceptor) -> None:
        self.next.init(_WorkflowOutbound(outbound))

    async def execute_workflow(self, input: kadence.worker.ExecuteWorkflowInput) -> Any:
        with context_from_header(input, kadence.workflow.payload_converter()):
            return await self.next.execute_workflow(input)

    async def handle_signal(self, input: kadence.worker.HandleSignalInput) -> None:
        with context_from_header(input, kadence.workflow.payload_converter()):
            return await self.next.handle_signal(input)

    async def handle_query(self, input: kadence.worker.HandleQueryInput) -> Any:
        with context_from_header(input, kadence.workflow.payload_converter()):
            return await self.next.handle_query(input)

    def handle_update_validator(self, input: kadence.worker.HandleUpdateInput) -> None:
        with context_from_header(input, kadence.workflow.payload_converter()):
            self.next.handle_update_validator(input)

    async def handle_update_handler(self, input: kadence.worker.HandleUpdateInput) -> Any:
        with context_from_header(input, kadence.workflow.payload_converter()):
            return await self.next.handle_update_handler(input)


class _WorkflowOutbound(kadence.worker.WorkflowOutboundInterceptor):
    async def signal_child_workflow(self, input: kadence.worker.SignalChildWorkflowInput) -> None:
        set_header_from_context(input, kadence.workflow.payload_converter())
        return await self.next.signal_child_workflow(input)

    async def signal_external_workflow(self, input: kadence.worker.SignalExternalWorkflowInput) -> None:
        set_header_from_context(input, kadence.workflow.payload_converter())
        return await self.next.signal_external_workflow(input)

    def start_activity(self, input: kadence.worker.StartActivityInput) -> kadence.workflow.ActivityHandle:
        set_header_from_context(input, kadence.workflow.payload_converter())
        return self.next.start_activity(input)

    async def start_child_workflow(self, input: kadence.worker.StartChildWorkflowInput) -> kadence.workflow.ChildWorkflowHandle:
        set_header_from_context(input, kadence.workflow.payload_converter())
        return await self.next.start_child_workflow(input)

    def start_local_activity(self, input: kadence.worker.StartLocalActivityInput) -> kadence.workflow.ActivityHandle:
        set_header_from_context(input, kadence.workflow.payload_converter())
        return self.next.start_local_activity(input)


# ---- the workflows and activities the test runs with it


@kadence.activity.defn
async def whose_call() -> str:
    """The user id the activity runs for."""
    return user_id.get() or "nobody"


@kadence.activity.defn
def whose_call_sync() -> str:
    """The same from a sync activity, in the worker's thread pool."""
    return user_id.get() or "nobody"


@kadence.workflow.defn
class ChildOfUser:
    @kadence.workflow.run
    async def run(self) -> str:
        return user_id.get() or "nobody"


@kadence.workflow.defn
class SayHelloAsUser:
    """Records who started it, who signalled, and who its activities, local activity and child ran for."""

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}
        self.complete = False

    @kadence.workflow.run
    async def run(self) -> dict[str, str]:
        self.seen["run"] = user_id.get() or "nobody"
        await kadence.workflow.wait_condition(lambda: self.complete)
        self.seen["activity"] = await kadence.workflow.execute_activity(whose_call, start_to_close_timeout=timedelta(seconds=10))
        self.seen["sync_activity"] = await kadence.workflow.execute_activity(
            whose_call_sync, start_to_close_timeout=timedelta(seconds=10),
        )
        self.seen["local_activity"] = await kadence.workflow.execute_local_activity(
            whose_call, start_to_close_timeout=timedelta(seconds=10),
        )
        child_id = f"{kadence.workflow.info().workflow_id}-child"
        self.seen["child"] = await kadence.workflow.execute_child_workflow(ChildOfUser.run, id=child_id)
        return self.seen

    @kadence.workflow.signal
    async def signal_complete(self) -> None:
        self.seen["signal"] = user_id.get() or "nobody"
        self.complete = True

    @kadence.workflow.query
    def asked_by(self) -> str:
        return user_id.get() or "nobody"

    @kadence.workflow.update
    async def rename(self, name: str) -> str:
        return f"{name} by {user_id.get() or 'nobody'}"

    @rename.validator
    def check_rename(self, name: str) -> None:
        if user_id.get() is None:
            raise ValueError("an update needs a user")
