"""Testing workflows and activities, as temporalio.testing: `WorkflowEnvironment` (a local stack,
with or without time skipping, or a client's), `TimeSkipper` (time skipping per workflow),
`ActivityEnvironment` (an activity run in a test's own context), `Replayer` (kadence.worker's) and
`workflows_in`, the workflows a module defines."""

from kadence.testing._activity import ActivityEnvironment
from kadence.testing._replay import Replayer, WorkflowReplayResult, WorkflowReplayResults, workflows_in
from kadence.testing._timeskipping import FastForwardConfig, TimeSkipper, TimeSkippingConfig
from kadence.testing._workflow import WorkflowEnvironment

__all__ = [
    "ActivityEnvironment", "FastForwardConfig", "Replayer", "TimeSkipper", "TimeSkippingConfig", "WorkflowEnvironment",
    "WorkflowReplayResult", "WorkflowReplayResults", "workflows_in",
]
