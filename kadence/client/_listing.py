"""What `Client.list_workflows` returns (as temporalio.client.WorkflowExecutionAsyncIterator): the
matching executions, and `map_histories()`, their histories one by one, which is what the
Replayer takes to check a change against the runs recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from kadence.visibility import WorkflowExecution, WorkflowHistory

# A run's history by workflow id and run id (the client's handle reads it).
HistoryReader = Callable[[str, str], Awaitable[WorkflowHistory]]


class WorkflowExecutionAsyncIterator(AsyncIterator[WorkflowExecution]):
    """The executions a list filter matches, read from the read model page by page as iterated."""

    def __init__(self, executions: AsyncIterator[WorkflowExecution], history: HistoryReader) -> None:
        self._executions = executions
        self._history = history

    def __aiter__(self) -> WorkflowExecutionAsyncIterator:
        return self

    async def __anext__(self) -> WorkflowExecution:
        return await self._executions.__anext__()

    async def map_histories(self) -> AsyncIterator[WorkflowHistory]:
        """Each remaining execution's history, in the listing's order (`Replayer.replay_workflows` takes them)."""
        async for execution in self:
            yield await self._history(execution.id, execution.run_id)
