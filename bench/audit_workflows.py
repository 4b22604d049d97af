"""The workflow code of the histories bench.bench_recovery's HistoryWriter records: one activity, then done."""

from __future__ import annotations

from datetime import timedelta

from kadence import workflow


@workflow.defn(name="OrderWorkflow")
class OrderWorkflow:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity("charge", start_to_close_timeout=timedelta(seconds=10))
