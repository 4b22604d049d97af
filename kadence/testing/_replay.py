"""Replaying recorded histories: `Replayer` (kadence.worker's, here too for the code written
against it before) and `workflows_in`, the workflows a module defines."""

from __future__ import annotations

import inspect
from types import ModuleType

from kadence import workflow as workflow_module
from kadence.worker import Replayer, WorkflowReplayResult, WorkflowReplayResults
from kadence.workflow._definition import WorkflowDefinition

__all__ = ["Replayer", "WorkflowReplayResult", "WorkflowReplayResults", "workflows_in"]


def workflows_in(module: ModuleType) -> list[type]:
    """The @workflow.defn classes a module defines or imports."""
    return [obj for obj in vars(module).values() if inspect.isclass(obj) and _is_workflow(obj)]


def _is_workflow(cls: type) -> bool:
    try:
        return isinstance(workflow_module.definition(cls), WorkflowDefinition)
    except TypeError:
        return False
