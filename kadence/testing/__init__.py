"""Testing workflows and activities, as temporalio.testing: `WorkflowEnvironment` (a local stack,
with or without time skipping, or a client's), `ActivityEnvironment` (an activity run in a test's
own context), `Replayer` (kadence.worker's) and `workflows_in`, the workflows a module defines."""

from kadence.testing._replay import Replayer, WorkflowReplayResult, WorkflowReplayResults, workflows_in

__all__ = ["Replayer", "WorkflowReplayResult", "WorkflowReplayResults", "workflows_in"]
