"""temporalio's workflow sandbox names, so code that configures the sandbox imports and runs.

Kadence runs workflow code unsandboxed (docs/temporal-differences.md, "Workflow and activity
code"): a `SandboxedWorkflowRunner` is taken by `Worker(workflow_runner=...)` and runs its workflows
as `UnsandboxedWorkflowRunner` does, and `SandboxRestrictions` are kept, not enforced. What the
sandbox would have caught (a non-deterministic call, a module's state shared between runs) shows up
instead as a `NondeterminismError` when a replay takes another path.
"""

from kadence.worker.workflow_sandbox._restrictions import (
    RestrictedWorkflowAccessError,
    SandboxMatcher,
    SandboxRestrictions,
    UnintentionalPassthroughError,
)
from kadence.worker.workflow_sandbox._runner import SandboxedWorkflowRunner

__all__ = [
    "RestrictedWorkflowAccessError", "SandboxMatcher", "SandboxRestrictions", "SandboxedWorkflowRunner", "UnintentionalPassthroughError",
]
