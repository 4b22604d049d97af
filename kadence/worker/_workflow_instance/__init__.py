"""One workflow run inside a worker (as temporalio.worker's _workflow_instance): a deterministic
asyncio event loop driven by history, which implements the runtime kadence.workflow's API calls.

The loop runs callbacks only when an activation runs, and an activation runs only at a workflow
task boundary: for each past task that completed (replay) and for the task being worked on now.
Events resolve futures (activity results) in history order before the activation that saw them,
so replaying a history makes the same decisions it made live.

Modules, bottom up: _commands (a handle per command kind, matched to its event by key), _loop (the
event loop), _run (the run's state, its commands and the runtime the workflow API calls), _outbound
(where the outbound interceptor chain ends), _handlers (signal, query and update dispatch, and where
the inbound chain ends), _history (what each history event does), _instance (the run wired and driven).
"""

from kadence.worker._workflow_instance._commands import Command, LocalActivity
from kadence.worker._workflow_instance._history import CacheInvalid
from kadence.worker._workflow_instance._instance import WorkflowInstance, replay
from kadence.worker._workflow_instance._loop import WorkflowTaskError
from kadence.worker._workflow_instance._run import failure_record, payload_record, payload_records

__all__ = [
    "CacheInvalid", "Command", "LocalActivity", "WorkflowInstance", "WorkflowTaskError", "failure_record", "payload_record",
    "payload_records", "replay",
]
