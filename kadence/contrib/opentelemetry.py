"""OpenTelemetry tracing for clients and workers, as temporalio.contrib.opentelemetry:
`Client.connect(..., interceptors=[TracingInterceptor()])` (a worker takes it from its client).

The caller's span context travels in the `_tracer-data` header (a W3C trace context carrier, as
temporalio writes it, so a Kadence worker continues a temporalio-shaped trace). Client calls and
activity attempts get spans as long as the call; a workflow gets spans that start and end at
once at the workflow's time (RunWorkflow, StartActivity, StartChildWorkflow, HandleSignal, ...),
since a run outlives any one worker and replays, and they are not emitted again on replay.

Needs `pip install kadence[opentelemetry]` and a tracer provider the application configures.
Differences from temporalio's are in docs/temporal-differences.md, "Interceptors"."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC
from typing import Any, NoReturn, Protocol

try:
    import opentelemetry.baggage.propagation
    import opentelemetry.context
    import opentelemetry.propagators.composite
    import opentelemetry.propagators.textmap
    import opentelemetry.trace
    import opentelemetry.trace.propagation.tracecontext
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ModuleNotFoundError as err:
    raise ModuleNotFoundError("kadence.contrib.opentelemetry needs the opentelemetry extra: pip install 'kadence[opentelemetry]'") from err

import kadence.activity
import kadence.client
import kadence.converter
import kadence.worker
import kadence.workflow
from kadence.api.common.v1 import Payload
from kadence.exceptions import ApplicationError, ApplicationErrorCategory, FailureError

__all__ = ["TracingInterceptor", "TracingWorkflowInboundInterceptor", "default_text_map_propagator"]

default_text_map_propagator = opentelemetry.propagators.composite.CompositePropagator([
    opentelemetry.trace.propagation.tracecontext.TraceContextTextMapPropagator(),
    opentelemetry.baggage.propagation.W3CBaggagePropagator(),
])
HEADER_KEY = "_tracer-data"  # temporalio's

Carrier = dict[str, str]


class _InputWithHeaders(Protocol):
    headers: Mapping[str, Payload]


class TracingInterceptor(kadence.client.Interceptor, kadence.worker.Interceptor):
    """Spans for client calls, workflows and activities, linked across processes by headers.

    `always_create_workflow_spans`: by default a workflow makes spans only when its caller sent a
    trace context (so a workflow started by an untraced client adds nothing); True makes them anyway."""

    def __init__(self, tracer: opentelemetry.trace.Tracer | None = None, *, always_create_workflow_spans: bool = False) -> None:
        self.tracer = tracer or opentelemetry.trace.get_tracer(__name__)
        self.header_key = HEADER_KEY
        self.text_map_propagator: opentelemetry.propagators.textmap.TextMapPropagator = default_text_map_propagator
        self.payload_converter = kadence.converter.default().payload_converter
        self.always_create_workflow_spans = always_create_workflow_spans

    def intercept_client(self, next: kadence.client.OutboundInterceptor) -> kadence.client.OutboundInterceptor:
        return _TracingClientOutbound(next, self)

    def intercept_activity(self, next: kadence.worker.ActivityInboundInterceptor) -> kadence.worker.ActivityInboundInterceptor:
        return _TracingActivityInbound(next, self)

    def workflow_interceptor_class(
        self, input: kadence.worker.WorkflowInterceptorClassInput,
    ) -> type[TracingWorkflowInboundInterceptor]:
        root = self

        class _Bound(TracingWorkflowInboundInterceptor):
            def __init__(self, next: kadence.worker.WorkflowInboundInterceptor) -> None:
                super().__init__(next, root)

        return _Bound

    def context_to_headers(self, headers: Mapping[str, Payload]) -> Mapping[str, Payload]:
        """The headers plus the current span context (unchanged when there is none)."""
        carrier: Carrier = {}
        self.text_map_propagator.inject(carrier)
        return self.carrier_to_headers(carrier, headers)

    def carrier_to_headers(self, carrier: Carrier, headers: Mapping[str, Payload]) -> Mapping[str, Payload]:
        return {**headers, self.header_key: self.payload_converter.to_payload(carrier)} if carrier else headers

    def carrier_from_headers(self, headers: Mapping[str, Payload]) -> Carrier | None:
        payload = headers.get(self.header_key)
        return self.payload_converter.from_payload(payload, dict) if payload else None

    @contextmanager
    def start_as_current_span(
        self, name: str, *, attributes: dict[str, Any], kind: SpanKind, input: _InputWithHeaders | None = None,
        context: opentelemetry.context.Context | None = None,
    ) -> Iterator[None]:
        """A span as long as the block, whose context goes into `input`'s headers; an error that
        is not benign marks it failed."""
        with self.tracer.start_as_current_span(
            name, attributes=attributes, kind=kind, context=context, set_status_on_exception=False,
        ) as span:
            if input is not None:
                input.headers = self.context_to_headers(input.headers)
            try:
                yield
            except Exception as exc:
                if not isinstance(exc, ApplicationError) or exc.category != ApplicationErrorCategory.BENIGN:
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise


class _TracingClientOutbound(kadence.client.OutboundInterceptor):
    def __init__(self, next: kadence.client.OutboundInterceptor, root: TracingInterceptor) -> None:
        super().__init__(next)
        self.root = root

    async def start_workflow(self, input: kadence.client.StartWorkflowInput) -> kadence.client.WorkflowHandle:
        prefix = "SignalWithStartWorkflow" if input.start_signal else "StartWorkflow"
        with self.root.start_as_current_span(
            f"{prefix}:{input.workflow}", attributes={"temporalWorkflowID": input.id}, kind=SpanKind.CLIENT, input=input,
        ):
            return await super().start_workflow(input)

    async def query_workflow(self, input: kadence.client.QueryWorkflowInput) -> Any:
        with self.root.start_as_current_span(
            f"QueryWorkflow:{input.query}", attributes={"temporalWorkflowID": input.id}, kind=SpanKind.CLIENT, input=input,
        ):
            return await super().query_workflow(input)

    async def signal_workflow(self, input: kadence.client.SignalWorkflowInput) -> None:
        with self.root.start_as_current_span(
            f"SignalWorkflow:{input.signal}", attributes={"temporalWorkflowID": input.id}, kind=SpanKind.CLIENT, input=input,
        ):
            await super().signal_workflow(input)

    async def start_workflow_update(self, input: kadence.client.StartWorkflowUpdateInput) -> kadence.client.WorkflowUpdateHandle:
        with self.root.start_as_current_span(
            f"StartWorkflowUpdate:{input.update}", attributes={"temporalWorkflowID": input.id}, kind=SpanKind.CLIENT, input=input,
        ):
            return await super().start_workflow_update(input)

    async def start_update_with_start_workflow(
        self, input: kadence.client.StartWorkflowUpdateWithStartInput,
    ) -> kadence.client.WorkflowUpdateHandle:
        start, update = input.start_workflow_input, input.update_workflow_input
        attributes = {"temporalWorkflowID": start.id, **({"temporalUpdateID": update.update_id} if update.update_id else {})}
        with self.root.start_as_current_span(
            f"StartUpdateWithStartWorkflow:{start.workflow}", attributes=attributes, kind=SpanKind.CLIENT, input=start,
        ):
            update.headers = self.root.context_to_headers(update.headers)  # the update's admission joins the same span
            return await super().start_update_with_start_workflow(input)


class _TracingActivityInbound(kadence.worker.ActivityInboundInterceptor):
    def __init__(self, next: kadence.worker.ActivityInboundInterceptor, root: TracingInterceptor) -> None:
        super().__init__(next)
        self.root = root

    async def execute_activity(self, input: kadence.worker.ExecuteActivityInput) -> Any:
        carrier = self.root.carrier_from_headers(input.headers)
        info = kadence.activity.info()
        with self.root.start_as_current_span(
            f"RunActivity:{info.activity_type}",
            attributes={"temporalWorkflowID": info.workflow_id, "temporalRunID": info.workflow_run_id,
                        "temporalActivityID": info.activity_id},
            kind=SpanKind.SERVER, context=self.root.text_map_propagator.extract(carrier) if carrier else None,
        ):
            return await super().execute_activity(input)


class TracingWorkflowInboundInterceptor(kadence.worker.WorkflowInboundInterceptor):
    """Workflow spans: each starts and ends at once, at the workflow's time, and is made only when
    running live (not on replay), so a run's spans are emitted once however often it is replayed.
    The run's trace context is the one its start carried (WorkflowInfo.headers)."""

    def __init__(self, next: kadence.worker.WorkflowInboundInterceptor, root: TracingInterceptor) -> None:
        super().__init__(next)
        self.root = root
        self._run_carrier: Carrier | None = None

    def init(self, outbound: kadence.worker.WorkflowOutboundInterceptor) -> None:
        super().init(_TracingWorkflowOutbound(outbound, self))

    async def execute_workflow(self, input: kadence.worker.ExecuteWorkflowInput) -> Any:
        with self._run_context(complete_on_success=True):
            self.completed_span(f"RunWorkflow:{kadence.workflow.info().workflow_type}", kind=SpanKind.SERVER)
            return await super().execute_workflow(input)

    async def handle_signal(self, input: kadence.worker.HandleSignalInput) -> None:
        with self._run_context(complete_on_success=False):
            self.completed_span(f"HandleSignal:{input.signal}", link=self.root.carrier_from_headers(input.headers), kind=SpanKind.SERVER)
            await super().handle_signal(input)

    async def handle_query(self, input: kadence.worker.HandleQueryInput) -> Any:
        # A query's span is the caller's child (on replay too: a query is answered live); the run's
        # span is a link. Without a caller's context there is no span.
        carrier = self.root.carrier_from_headers(input.headers)
        context = self.root.text_map_propagator.extract(carrier) if carrier else opentelemetry.context.Context()
        token = opentelemetry.context.attach(context)
        try:
            if carrier:
                self.completed_span(f"HandleQuery:{input.query}", link=self._carrier(), even_on_replay=True, kind=SpanKind.SERVER)
            return await super().handle_query(input)
        finally:
            opentelemetry.context.detach(token)

    def handle_update_validator(self, input: kadence.worker.HandleUpdateInput) -> None:
        with self._run_context(complete_on_success=False):
            self.completed_span(f"ValidateUpdate:{input.update}", link=self.root.carrier_from_headers(input.headers), kind=SpanKind.SERVER)
            super().handle_update_validator(input)

    async def handle_update_handler(self, input: kadence.worker.HandleUpdateInput) -> Any:
        with self._run_context(complete_on_success=False):
            self.completed_span(f"HandleUpdate:{input.update}", link=self.root.carrier_from_headers(input.headers), kind=SpanKind.SERVER)
            return await super().handle_update_handler(input)

    def _carrier(self) -> Carrier | None:
        if self._run_carrier is None:
            self._run_carrier = self.root.carrier_from_headers(kadence.workflow.info().headers)
        return self._run_carrier

    @contextmanager
    def _run_context(self, *, complete_on_success: bool) -> Iterator[None]:
        """Run the block in the run's trace context; a run that ends (completes, or fails with a
        FailureError) gets a CompleteWorkflow span."""
        carrier = self._carrier()
        context = self.root.text_map_propagator.extract(carrier) if carrier else opentelemetry.context.Context()
        token = opentelemetry.context.attach(context)
        failure: FailureError | None = None
        succeeded = False
        try:
            yield
            succeeded = True
        except FailureError as exc:
            failure = exc
            raise
        finally:
            if failure is not None or (succeeded and complete_on_success):
                self.completed_span(f"CompleteWorkflow:{kadence.workflow.info().workflow_type}", error=failure, kind=SpanKind.INTERNAL)
            opentelemetry.context.detach(token)

    def completed_span(
        self, name: str, *, kind: SpanKind, link: Carrier | None = None, add_to: _InputWithHeaders | None = None,
        even_on_replay: bool = False, error: Exception | None = None,
    ) -> None:
        """A span of no duration at the workflow's time, a child of the current context, whose
        context goes into `add_to`'s headers. None on replay, and none without a parent unless
        the interceptor always creates workflow spans."""
        if kadence.workflow.unsafe.is_replaying() and not even_on_replay:
            return
        parent = opentelemetry.trace.get_current_span()
        if parent is opentelemetry.trace.INVALID_SPAN and not self.root.always_create_workflow_spans:
            return
        info = kadence.workflow.info()
        links = []
        if link:
            linked = opentelemetry.trace.get_current_span(self.root.text_map_propagator.extract(link))
            if linked is not opentelemetry.trace.INVALID_SPAN:
                links = [opentelemetry.trace.Link(linked.get_span_context())]
        at_ns = int(kadence.workflow.now().astimezone(UTC).timestamp() * 1_000_000_000)
        span = self.root.tracer.start_span(
            name, attributes={"temporalWorkflowID": info.workflow_id, "temporalRunID": info.run_id}, links=links,
            start_time=at_ns, kind=kind,
        )
        if error is not None:
            span.record_exception(error)
        span.end(end_time=at_ns)
        if add_to is not None:
            carrier: Carrier = {}
            self.root.text_map_propagator.inject(carrier, opentelemetry.trace.set_span_in_context(span))
            add_to.headers = self.root.carrier_to_headers(carrier, add_to.headers)


class _TracingWorkflowOutbound(kadence.worker.WorkflowOutboundInterceptor):
    def __init__(self, next: kadence.worker.WorkflowOutboundInterceptor, root: TracingWorkflowInboundInterceptor) -> None:
        super().__init__(next)
        self.root = root

    def continue_as_new(self, input: kadence.worker.ContinueAsNewInput) -> NoReturn:
        input.headers = self.root.root.context_to_headers(input.headers)
        super().continue_as_new(input)

    async def signal_child_workflow(self, input: kadence.worker.SignalChildWorkflowInput) -> None:
        self.root.completed_span(f"SignalChildWorkflow:{input.signal}", add_to=input, kind=SpanKind.SERVER)
        await super().signal_child_workflow(input)

    async def signal_external_workflow(self, input: kadence.worker.SignalExternalWorkflowInput) -> None:
        self.root.completed_span(f"SignalExternalWorkflow:{input.signal}", add_to=input, kind=SpanKind.CLIENT)
        await super().signal_external_workflow(input)

    def start_activity(self, input: kadence.worker.StartActivityInput) -> kadence.workflow.ActivityHandle[Any]:
        self.root.completed_span(f"StartActivity:{input.activity}", add_to=input, kind=SpanKind.CLIENT)
        return super().start_activity(input)

    async def start_child_workflow(self, input: kadence.worker.StartChildWorkflowInput) -> kadence.workflow.ChildWorkflowHandle:
        self.root.completed_span(f"StartChildWorkflow:{input.workflow}", add_to=input, kind=SpanKind.CLIENT)
        return await super().start_child_workflow(input)

    def start_local_activity(self, input: kadence.worker.StartLocalActivityInput) -> kadence.workflow.ActivityHandle[Any]:
        self.root.completed_span(f"StartActivity:{input.activity}", add_to=input, kind=SpanKind.CLIENT)
        return super().start_local_activity(input)

