"""SandboxedWorkflowRunner as temporalio names it: in Kadence, a runner that runs workflows as
`runner_class` does (unsandboxed), keeping the restrictions it was given."""

from __future__ import annotations

from kadence.worker._runner import UnsandboxedWorkflowRunner, WorkflowRunner
from kadence.worker.workflow_sandbox._restrictions import SandboxRestrictions


class SandboxedWorkflowRunner(WorkflowRunner):
    """temporalio's sandboxed runner; Kadence runs its workflows unsandboxed (see the package's docstring)."""

    def __init__(
        self, *, restrictions: SandboxRestrictions = SandboxRestrictions.default,
        runner_class: type[WorkflowRunner] = UnsandboxedWorkflowRunner,
    ) -> None:
        self.restrictions = restrictions
        self.runner_class = runner_class
