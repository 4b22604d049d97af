"""Where a run's outbound interceptor chain ends (as temporalio's): what the workflow code sends
(activities, local activities, children, signals, continue-as-new) becomes the run's commands."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any, NoReturn

from kadence.common import ChildWorkflowCancellationType, ParentClosePolicy, WorkflowIDReusePolicy, to_ms
from kadence.worker._interceptor import (
    ContinueAsNewInput,
    SignalChildWorkflowInput,
    SignalExternalWorkflowInput,
    StartActivityInput,
    StartChildWorkflowInput,
    StartLocalActivityInput,
    StartNexusOperationInput,
    WorkflowOutboundInterceptor,
)
from kadence.worker._workflow_instance._commands import ScheduleNexusCommand, StartChildWorkflowCommand
from kadence.worker._workflow_instance._run import WorkflowRun, header_record, payload_record, payload_records
from kadence.workflow import ChildWorkflowHandle, ContinueAsNewError
from kadence.workflow._runtime import NexusOperationCancellationType, NexusOperationHandle, WorkflowInfo


class _WorkflowOutboundImpl(WorkflowOutboundInterceptor):
    """The innermost outbound interceptor: what the workflow API does past the interceptors."""

    def __init__(self, run: WorkflowRun) -> None:  # no next: this is the end of the chain
        self._run = run

    def continue_as_new(self, input: ContinueAsNewInput) -> NoReturn:
        payloads = self._run.converter.payload_converter
        raise ContinueAsNewError({
            "workflow_type": input.workflow or "", "task_queue": input.task_queue or "",
            "input": payload_records(payloads.to_payloads(list(input.args))),
            "workflow_task_timeout_ms": to_ms(input.task_timeout), "run_timeout_ms": to_ms(input.run_timeout),
            "header": header_record(input.headers),
            # None keeps the run's memo (history carries it, as upserted).
            "memo": None if input.memo is None else {key: payload_record(payloads.to_payload(value)) for key, value in input.memo.items()},
        })

    def info(self) -> WorkflowInfo:
        return self._run.info

    async def signal_child_workflow(self, input: SignalChildWorkflowInput) -> None:
        payloads = payload_records(self._run.converter.payload_converter.to_payloads(list(input.args)))
        await self._run.signal_external(input.child_workflow_id, "", input.signal, payloads, True, header_record(input.headers))

    async def signal_external_workflow(self, input: SignalExternalWorkflowInput) -> None:
        payloads = payload_records(self._run.converter.payload_converter.to_payloads(list(input.args)))
        await self._run.signal_external(input.workflow_id, input.workflow_run_id or "", input.signal, payloads, False,
                                             header_record(input.headers))

    def start_activity(self, input: StartActivityInput) -> asyncio.Task[Any]:
        run = self._run
        pending = run.schedule_activity({
            "activity_id": input.activity_id or "",
            "activity_type": input.activity,
            "task_queue": input.task_queue or "",
            "input": payload_records(run.converter.payload_converter.to_payloads(list(input.args))),
            "schedule_to_close_timeout_ms": to_ms(input.schedule_to_close_timeout),
            "schedule_to_start_timeout_ms": to_ms(input.schedule_to_start_timeout),
            "start_to_close_timeout_ms": to_ms(input.start_to_close_timeout),
            "heartbeat_timeout_ms": to_ms(input.heartbeat_timeout),
            "retry_policy": input.retry_policy.to_record() if input.retry_policy else None,
            "header": header_record(input.headers),
        }, disable_eager_execution=input.disable_eager_execution)
        return _activity_task(
            run, f"activity:{input.activity}", pending.future, lambda: run.cancel_activity(pending, input.cancellation_type),
            input.ret_type,
        )

    async def start_child_workflow(self, input: StartChildWorkflowInput) -> ChildWorkflowHandle:
        return await _start_child(self._run, input)

    async def start_nexus_operation(self, input: StartNexusOperationInput) -> NexusOperationHandle[Any]:
        return await _start_nexus_operation(self._run, input)

    def start_local_activity(self, input: StartLocalActivityInput) -> asyncio.Task[Any]:
        run = self._run
        local = run.schedule_local_activity({
            "activity_type": input.activity,
            "input": run.converter.payload_converter.to_payloads(list(input.args)),
            "schedule_to_close_timeout_ms": to_ms(input.schedule_to_close_timeout),
            "start_to_close_timeout_ms": to_ms(input.start_to_close_timeout),
            "retry_policy": input.retry_policy.to_record() if input.retry_policy else None,
            "header": dict(input.headers),
        })
        return _activity_task(
            run, f"local-activity:{input.activity}", local.future, lambda: run.cancel_local_activity(local, input.cancellation_type),
            input.ret_type,
        )


def _activity_task(
    run: WorkflowRun, name: str, future: asyncio.Future[Any], cancel: Callable[[], None], result_type: type | None,
) -> asyncio.Task[Any]:
    """The task workflow code awaits for an activity's result (`future`, its payload). Cancelling
    the task calls `cancel`, which cancels the activity as its cancellation type says and resolves
    `future` now, or leaves it to history (WAIT_CANCELLATION_COMPLETED: the task waits for how the
    activity ends), and the task goes on to raise what `future` holds: the ActivityError caused by
    CancelledError of a cancelled activity, or its result or failure if it ended otherwise, as
    temporalio's. An activity that had already ended when its task was cancelled, and a task
    cancelled before it ran, raise asyncio.CancelledError (temporalio's too)."""

    async def result() -> Any:
        cancelling = False
        while True:
            try:
                return run.converter.payload_converter.from_payload(await asyncio.shield(future), result_type)
            except asyncio.CancelledError:
                if future.done():
                    raise
                if not cancelling:
                    cancel()
                    cancelling = True
                current = asyncio.current_task()
                if current is not None:
                    current.uncancel()  # the cancellation is the activity's now: the next await waits for its outcome

    def cancelled_before_it_ran(task: asyncio.Task[Any]) -> None:
        if task.cancelled() and not future.done():
            cancel()
            # Nothing awaits the outcome: take it, so asyncio does not report an exception never retrieved.
            future.add_done_callback(lambda done: None if done.cancelled() else done.exception())

    task = run.create_task(result(), name=name)
    task.add_done_callback(cancelled_before_it_ran)
    return task


async def _start_child(run: WorkflowRun, input: StartChildWorkflowInput) -> ChildWorkflowHandle:
    """What start_child_workflow does past the interceptors: issue the start and wait until the child started."""
    payloads = run.converter.payload_converter
    pending = run.issue_child_workflow_start({
        "workflow_id": input.id, "workflow_type": input.workflow, "task_queue": input.task_queue or "",
        "input": payload_records(payloads.to_payloads(list(input.args))),
        "execution_timeout_ms": to_ms(input.execution_timeout), "run_timeout_ms": to_ms(input.run_timeout),
        "workflow_task_timeout_ms": to_ms(input.task_timeout), "id_reuse_policy": WorkflowIDReusePolicy(input.id_reuse_policy).value,
        "parent_close_policy": ParentClosePolicy(input.parent_close_policy).value,
        "search_attributes": {name: payload_record(payloads.to_payload(value)) for name, value in (input.search_attributes or {}).items()},
        "header": header_record(input.headers),
        "memo": {key: payload_record(payloads.to_payload(value)) for key, value in (input.memo or {}).items()},
    })
    id = input.id
    result_type = input.ret_type
    try:
        run_id = await asyncio.shield(pending.started)
    except asyncio.CancelledError:
        if not pending.started.done():
            run.cancel_child_workflow(pending)
        raise
    cancellation_type = ChildWorkflowCancellationType(
        ChildWorkflowCancellationType.WAIT_CANCELLATION_COMPLETED if input.cancellation_type is None else input.cancellation_type,
    )
    handle = ChildWorkflowHandle(_child_result(run, pending, result_type, cancellation_type), loop=run, name=f"child:{id}")
    handle.id = id
    handle.first_execution_run_id = run_id
    return handle


async def _child_result(
    run: WorkflowRun, pending: StartChildWorkflowCommand, result_type: type | None, cancellation_type: ChildWorkflowCancellationType,
) -> Any:
    """The child's result; a cancellation of the waiting task cancels the child as its cancellation
    type says, and waits for the outcome that makes (WAIT_CANCELLATION_COMPLETED: how the child ends)."""
    cancel_requested = False
    while True:
        try:
            payload = await asyncio.shield(pending.future)
            return run.converter.payload_converter.from_payload(payload, result_type)
        except asyncio.CancelledError:
            if pending.future.done():
                raise
            if not cancel_requested:
                run.cancel_child_workflow(pending, cancellation_type)
                cancel_requested = True


async def _start_nexus_operation(run: WorkflowRun, input: StartNexusOperationInput) -> NexusOperationHandle[Any]:
    """What start_nexus_operation does past the interceptors: schedule the operation and wait until
    it started (a sync one: until it ended)."""
    pending = run.schedule_nexus_operation({
        "endpoint": input.endpoint, "service": input.service, "operation": input.operation,
        "input": payload_record(run.converter.payload_converter.to_payload(input.input)),
        "schedule_to_close_timeout_ms": to_ms(input.schedule_to_close_timeout), "nexus_header": dict(input.headers or {}),
        "task_queue": "",
    })
    cancellation_type = NexusOperationCancellationType(input.cancellation_type)
    try:
        await asyncio.shield(pending.started)
    except asyncio.CancelledError:
        if not pending.started.done():
            run.cancel_nexus_operation(pending, cancellation_type)
        raise
    return _NexusOperationHandle(run, pending, cancellation_type, input.output_type)


class _NexusOperationHandle(NexusOperationHandle[Any]):
    def __init__(
        self, run: WorkflowRun, pending: ScheduleNexusCommand, cancellation_type: NexusOperationCancellationType, output_type: type | None,
    ) -> None:
        self._run = run
        self._pending = pending
        self._cancellation_type = cancellation_type
        self._result = run.create_task(self._outcome(output_type), name=f"nexus:{pending.command[1]['operation']}")

    @property
    def operation_token(self) -> str | None:
        return self._pending.operation_token or None

    def cancel(self) -> bool:
        if self._pending.future.done():
            return False
        self._run.cancel_nexus_operation(self._pending, self._cancellation_type)
        return True

    def __await__(self) -> Generator[Any, Any, Any]:
        return self._result.__await__()

    async def _outcome(self, output_type: type | None) -> Any:
        """The result; a cancellation of the task awaiting it cancels the operation as its
        cancellation type says, and the task goes on waiting for the outcome that makes."""
        cancelling = False
        while True:
            try:
                payload = await asyncio.shield(self._pending.future)
                return None if payload is None else self._run.converter.payload_converter.from_payload(payload, output_type)
            except asyncio.CancelledError:
                if self._pending.future.done():
                    raise
                if not cancelling:
                    self.cancel()
                    cancelling = True
