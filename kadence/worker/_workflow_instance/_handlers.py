"""A run's signal, query and update handlers (as temporalio's _WorkflowInstanceImpl's): signals
are delivered to their handler (or kept until one is set), updates validated then accepted or
rejected, queries answered on the current state, each through the inbound interceptors, which end
in _WorkflowInboundImpl: the workflow's run method and handlers, called with the workflow object."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import traceback
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, cast

from kadence.common import MetricMeter, RawValue
from kadence.converter import DataConverter
from kadence.exceptions import ApplicationError, CancelledError, FailureError, ReadOnlyContextError
from kadence.protocol.records import (
    AcceptWorkflowUpdate,
    CompleteWorkflowUpdate,
    RejectWorkflowUpdate,
    WorkflowExecutionUpdateAdmitted,
)
from kadence.protocol.records import Payload as PayloadRecord
from kadence.worker._interceptor import (
    ExecuteWorkflowInput,
    HandleQueryInput,
    HandleSignalInput,
    HandleUpdateInput,
    WorkflowInboundInterceptor,
    WorkflowOutboundInterceptor,
)
from kadence.worker._workflow_instance._commands import UpdateResponseCommand
from kadence.worker._workflow_instance._loop import WorkflowTaskError
from kadence.worker._workflow_instance._run import RunningHandler, WorkflowRun, failure_record, payload_headers, payload_record
from kadence.workflow._definition import Handler, WorkflowDefinition
from kadence.workflow._runtime import UpdateInfo, WorkflowInfo, current_update

log = logging.getLogger("kadence.worker")

STACK_TRACE_QUERY = "__stack_trace"  # built in, as temporalio's: where the run's coroutines wait


class WorkflowHandlers(WorkflowRun):
    """A run with its handlers' dispatch: what reaches the workflow code from outside."""

    def __init__(
        self, definition: WorkflowDefinition, info: WorkflowInfo, converter: DataConverter, metric_meter: MetricMeter,
    ) -> None:
        super().__init__(definition, info, converter, metric_meter)
        # Signals with no handler yet: kept until one is set.
        self._unhandled_signals: list[tuple[str, list[PayloadRecord], Mapping[str, PayloadRecord]]] = []

    def deliver_signal(self, name: str, payloads: list[PayloadRecord], header: Mapping[str, PayloadRecord]) -> None:
        handler = lookup_handler(self.signals, name)
        if handler is None:
            self._unhandled_signals.append((name, payloads, header))  # as temporalio: kept until a handler is set
            return
        try:
            call, args = self._bind(handler, name, payloads)
        except Exception as exc:  # as temporalio: logged and dropped, the run goes on
            log.exception("event=signal_dropped workflow_id=%s run_id=%s signal_name=%s reason=undecodable_input error=%r",
                          self.info.workflow_id, self.info.run_id, name, str(exc))
            return
        running = RunningHandler("signal", name, "", handler.unfinished_policy)
        self.running_handlers.append(running)
        signal = HandleSignalInput(signal=name, args=args, headers=payload_headers(header))
        self.create_task(self._run_signal(running, signal), name=f"signal:{name}")

    def _bind(self, handler: Handler, name: str, payloads: list[PayloadRecord]) -> tuple[Callable[..., Any], list[Any]]:
        """The handler to call for `name` and its arguments: a dynamic one gets the name and the
        payloads unconverted (as temporalio)."""
        call = self.callable(handler)
        if handler.dynamic and handler.takes_varargs():  # temporalio's deprecated form: (name, *args), converted
            return call, [name, *self.converter.payload_converter.from_payloads(payloads, [handler.arg_types()[-1]] * len(payloads))]
        if handler.dynamic:
            # RawValue's payload is temporalio's dict; a decoded Payload record is one.
            return call, [name, [RawValue(cast(dict[str, Any], payload)) for payload in payloads]]
        return call, self.converter.payload_converter.from_payloads(payloads, handler.arg_types())

    def callable(self, handler: Handler) -> Callable[..., Any]:
        """What to call for a handler: a method with the workflow object, else the callable as it is."""
        return functools.partial(handler.fn, self.workflow_object) if handler.is_method else handler.fn

    def set_signal_handler(self, name: str | None, fn: Callable[..., Any] | None) -> None:
        """Set (or with None remove) a signal handler; the signals kept for want of one reach it now."""
        self.assert_not_read_only("set signal handler")
        if fn is None:
            self.signals.pop(name, None)
            return
        self.signals[name] = Handler(fn, is_method=False, dynamic=name is None)
        kept, self._unhandled_signals = self._unhandled_signals, []
        for signal_name, payloads, header in kept:
            if name is None or signal_name == name:
                self.deliver_signal(signal_name, payloads, header)
            else:
                self._unhandled_signals.append((signal_name, payloads, header))

    def set_query_handler(self, name: str | None, fn: Callable[..., Any] | None) -> None:
        self.assert_not_read_only("set query handler")
        if fn is None:
            self.queries.pop(name, None)
        else:
            self.queries[name] = Handler(fn, is_method=False, dynamic=name is None)

    def set_update_handler(self, name: str | None, fn: Callable[..., Any] | None, validator: Callable[..., Any] | None) -> None:
        self.assert_not_read_only("set update handler")
        if fn is None:
            self.updates.pop(name, None)
        else:
            self.updates[name] = Handler(fn, is_method=False, validator=validator, dynamic=name is None)

    async def _run_signal(self, running: RunningHandler, signal: HandleSignalInput) -> None:
        """Run a signal handler (through the interceptors) as a task of the workflow (as temporalio):
        a FailureError it raises (or an exception of the definition's failure_exception_types) ends
        the workflow (failed, or canceled when it is a cancellation of a run asked to cancel: an
        asyncio.CancelledError counts as a CancelledError, as the run method's), any other
        exception fails the workflow task."""
        try:
            await self.inbound.handle_signal(signal)
        except (Exception, asyncio.CancelledError) as exc:
            if isinstance(exc, asyncio.CancelledError):
                exc = CancelledError(str(exc))
            if isinstance(exc, (FailureError, *self.definition.failure_exception_types)):
                if self._handler_failure is None:
                    self._handler_failure = exc
                return
            if self._task_error is None:
                self._task_error = WorkflowTaskError(f"signal handler {running.name!r} failed: {type(exc).__name__}: {exc}")
                self._task_error.__cause__ = exc
        finally:
            self.running_handlers.remove(running)

    def admit_update(self, attrs: WorkflowExecutionUpdateAdmitted) -> None:
        """Validate the update and accept or reject it; an accepted one runs as a task of the workflow."""
        update_id = attrs["update_id"]
        current_update.set(UpdateInfo(update_id, attrs["name"]))  # this callback's own context, which its task copies
        handler = lookup_handler(self.updates, attrs["name"])
        try:
            if handler is None:
                raise ApplicationError(
                    f"workflow {self.definition.name} has no update {attrs['name']!r} (known updates: {_names(self.updates)})",
                    type="UpdateNotRegistered", non_retryable=True,
                )
            _, args = self._bind(handler, attrs["name"], attrs["args"])
            update = HandleUpdateInput(id=update_id, update=attrs["name"], args=args, headers=payload_headers(attrs.get("header") or {}))
            if handler.validator is not None:
                self.read_only = True
                try:
                    self.inbound.handle_update_validator(update)
                finally:
                    self.read_only = False
        except Exception as exc:  # the validator said no: the caller hears why
            rejection: RejectWorkflowUpdate = {"update_id": update_id, "failure": failure_record(self.converter.to_failure(exc))}
            self.issue(UpdateResponseCommand(("RejectWorkflowUpdate", rejection)))
            return
        acceptance: AcceptWorkflowUpdate = {"update_id": update_id}
        self.issue(UpdateResponseCommand(("AcceptWorkflowUpdate", acceptance)))
        running = RunningHandler("update", attrs["name"], update_id, handler.unfinished_policy)
        self.running_handlers.append(running)
        self.create_task(self._run_update(running, update), name=f"update:{attrs['name']}")

    async def _run_update(self, running: RunningHandler, update: HandleUpdateInput) -> None:
        update_id = running.update_id
        try:
            result = await self.inbound.handle_update_handler(update)
            encoded = self.converter.payload_converter.to_payload(result)
        except Exception as exc:  # the update failed (its result too, when it cannot be encoded); the workflow goes on
            failure = failure_record(self.converter.to_failure(exc))
            failed: CompleteWorkflowUpdate = {"update_id": update_id, "result": None, "failure": failure}
            self.issue(UpdateResponseCommand(("CompleteWorkflowUpdate", failed)))
            return
        finally:
            self.running_handlers.remove(running)
        completion: CompleteWorkflowUpdate = {"update_id": update_id, "result": payload_record(encoded), "failure": None}
        self.issue(UpdateResponseCommand(("CompleteWorkflowUpdate", completion)))

    def query(
        self, name: str, payloads: list[PayloadRecord], header: Mapping[str, PayloadRecord] | None = None, query_id: str = "",
    ) -> PayloadRecord:
        """Run the query handler `name` (through the interceptors) on the current state; its result as a payload.
        The built-in `__stack_trace` (as temporalio's) comes before any handler, a dynamic one included."""
        if name == STACK_TRACE_QUERY:
            return payload_record(self.converter.payload_converter.to_payload(self.stack_trace()))
        handler = lookup_handler(self.queries, name)
        if handler is None:
            raise ApplicationError(
                f"workflow {self.definition.name} has no query {name!r} (known queries: {_names(self.queries)})",
                type="QueryNotRegistered", non_retryable=True,
            )
        _, args = self._bind(handler, name, payloads)
        query = HandleQueryInput(id=query_id, query=name, args=args, headers=payload_headers(header or {}))
        with self.running(read_only=True):
            result = _run_to_end(self.inbound.handle_query(query), f"query {name!r}")
        return payload_record(self.converter.payload_converter.to_payload(result))

    def stack_trace(self) -> str:
        """Where each of the run's coroutines waits (its main one, signal and update handlers, the
        tasks it created), one stack per task, as temporalio's `__stack_trace` query answers."""
        stacks: list[str] = []
        for task in sorted(asyncio.all_tasks(self), key=lambda t: t.get_name()):
            # Down the chain of awaits (Task.print_stack shows the task's own coroutine only, so
            # an interceptor's execute_workflow, not the run method it awaits).
            frames: list[traceback.FrameSummary] = []
            coro: Any = task.get_coro()  # then what it awaits: a coroutine, generator or future
            while coro is not None:
                frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
                if frame is not None:  # named as the coroutine (`ApprovalWorkflow.run()`), as a task's repr names it
                    frames.append(traceback.FrameSummary(frame.f_code.co_filename, frame.f_lineno, f"{frame.f_code.co_qualname}()"))
                coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
            lines = "".join(traceback.StackSummary.from_list(frames).format())
            stacks.append(f"Stack for {task!r} (most recent call last):\n{lines}".rstrip())
        return "\n\n".join(stacks)


class _WorkflowInboundImpl(WorkflowInboundInterceptor):
    """The innermost inbound interceptor: calls the workflow's run method and handlers."""

    def __init__(self, run: WorkflowHandlers) -> None:  # no next: this is the end of the chain
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
        handler = lookup_handler(self._run.updates, input.update)
        if handler is not None and handler.validator is not None:
            validator = functools.partial(handler.validator, self._run.workflow_object) if handler.is_method else handler.validator
            validator(*input.args)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        result = self._handler(self._run.updates, input.update)(*input.args)
        return await result if inspect.isawaitable(result) else result

    def _handler(self, handlers: dict[str | None, Handler], name: str) -> Callable[..., Any]:
        handler = lookup_handler(handlers, name)
        assert handler is not None, f"no handler for {name!r}"  # looked up before the interceptors were called
        return self._run.callable(handler)


def lookup_handler(handlers: dict[str | None, Handler], name: str) -> Handler | None:
    """The handler of `name`, else the dynamic one."""
    return handlers.get(name) or handlers.get(None)


def _names(handlers: dict[str | None, Handler]) -> list[str]:
    return sorted(name for name in handlers if name is not None)


def _run_to_end(coro: Coroutine[Any, Any, Any], what: str) -> Any:
    """Run a coroutine that must not wait (a query through the interceptors) to its result."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise ReadOnlyContextError(f"{what} waited on something: a query handler, and its interceptors, must not wait")
