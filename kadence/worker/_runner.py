"""Workflow runners as temporalio names them (`Worker(workflow_runner=...)`): Kadence runs every
workflow on its deterministic loop unsandboxed (kadence/worker/_workflow_instance/), so a runner only
says how the code asked for it to run."""

from __future__ import annotations


class WorkflowRunner:
    """What runs a worker's workflows (temporalio.worker.WorkflowRunner)."""


class UnsandboxedWorkflowRunner(WorkflowRunner):
    """Workflows run as they are, with no sandbox: Kadence's only way."""
