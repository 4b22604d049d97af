"""What the client's standalone runs share (standalone activities, decision 0007; standalone Nexus
operations, decision 0008): each is a run of the history service under a reserved key whose only
work is the activity or the operation, so its handle is a workflow handle on that key whose
failures read as the activity's or the operation's, and its listing reads the read model's rows of
that key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar, Generic, TypeVar

from kadence.client._handles import HandleClient, WorkflowHandle
from kadence.client._inputs import CancelWorkflowInput
from kadence.exceptions import ActivityFailureError, NexusOperationFailureError, WorkflowFailureError
from kadence.types import ReturnType

ExecutionT = TypeVar("ExecutionT")


class StandaloneHandle(Generic[ReturnType]):
    """A standalone run, by its key: `result()` waits for it, and raises `failure_error` with the
    cause when its work did not complete; `cancel()` asks the work to cancel; `terminate()` ends it."""

    failure_error: ClassVar[type[ActivityFailureError] | type[NexusOperationFailureError]]

    def __init__(self, client: HandleClient, key: str, *, run_id: str | None, result_type: type | None) -> None:
        self._run_id = run_id
        self._run: WorkflowHandle[Any, ReturnType] = WorkflowHandle(
            client, key, run_id=run_id, result_run_id=run_id, first_execution_run_id=run_id, result_type=result_type,
        )

    @property
    def run_id(self) -> str | None:
        return self._run_id

    async def result(self) -> ReturnType:
        try:
            return await self._run.result(follow_runs=False)
        except WorkflowFailureError as failure:
            raise self.failure_error(cause=failure.cause) from failure.cause

    async def cancel(self, *, reason: str | None = None) -> None:
        """Ask the work to cancel: one not started is canceled at once; a started activity hears it
        at its next heartbeat (or where it awaits), a started Nexus operation's handler workflow is
        asked to cancel; `result()` then raises with a CancelledError."""
        await self._run.client._impl.cancel_workflow(CancelWorkflowInput(
            id=self._run.id, run_id=self._run_id, first_execution_run_id=None, reason=reason or "", rpc_metadata={}, rpc_timeout=None,
        ))

    async def terminate(self, *, reason: str | None = None) -> None:
        await self._run.terminate(reason=reason)


class ExecutionAsyncIterator(AsyncIterator[ExecutionT]):
    """The standalone runs a list filter matches, page by page as iterated."""

    def __init__(self, executions: AsyncIterator[ExecutionT]) -> None:
        self._executions = executions

    def __aiter__(self) -> ExecutionAsyncIterator[ExecutionT]:
        return self

    async def __anext__(self) -> ExecutionT:
        return await self._executions.__anext__()
