"""The audit's code replay: every run the log holds, re-executed against today's workflow code with
the Replayer's non-determinism check, so an auditor proves from the log alone that each recorded
execution is what the code would do (docs/operations.md, "Upgrading": run it before deploying new
workflow code).

The audit hands each run over once it closes (or, still open, when the read ends); its events are
kept only meanwhile, so memory follows the open runs, not the log.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kadence.converter import DataConverter
from kadence.protocol.codec import Record
from kadence.visibility import WorkflowHistory
from kadence.worker import Replayer

T = TypeVar("T")


@dataclass(frozen=True)
class Divergence:
    workflow_id: str
    run_id: str
    workflow_type: str
    reason: str  # the first event that differs, and what the code issued instead

    def __str__(self) -> str:
        return f"workflow_id={self.workflow_id} run_id={self.run_id} workflow_type={self.workflow_type}: {self.reason}"


@dataclass
class CodeReplayReport:
    replayed: Counter[str] = field(default_factory=Counter)  # by workflow type
    diverged: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)  # not in the modules, or begun before the read
    divergences: list[Divergence] = field(default_factory=list)

    def add(self, other: CodeReplayReport) -> None:
        """Count in what another process replayed."""
        self.replayed.update(other.replayed)
        self.diverged.update(other.diverged)
        self.skipped.update(other.skipped)
        self.divergences += other.divergences

    def by_type(self) -> dict[str, dict[str, int]]:
        types = sorted(set(self.replayed) | set(self.diverged) | set(self.skipped))
        return {t: {"replayed": self.replayed[t], "diverged": self.diverged[t], "skipped": self.skipped[t]} for t in types}


class WorkflowCodeAudit:
    """Replays runs against `workflows` (optionally only the types in `workflow_types`)."""

    def __init__(self, workflows: Sequence[type], *, data_converter: DataConverter | None = None,
                 workflow_types: Sequence[str] = ()) -> None:
        self.replayer = Replayer(workflows=workflows, data_converter=data_converter)
        self.workflow_types = set(workflow_types)
        self.report = CodeReplayReport()
        self._loop: asyncio.AbstractEventLoop | None = None

    def wants(self, workflow_type: str) -> bool:
        """Whether runs of this type are replayed (their events kept until they close)."""
        chosen = not self.workflow_types or workflow_type in self.workflow_types
        return chosen and workflow_type in self.replayer.workflows

    def skip(self, workflow_type: str) -> None:
        """A run not replayed: its type is not in the modules, or the read began after its start."""
        if not self.workflow_types or workflow_type in self.workflow_types:
            self.report.skipped[workflow_type] += 1

    def replay(self, workflow_id: str, run_id: str, events: list[Record]) -> None:
        """Replay one run's events, from its WorkflowExecutionStarted."""
        workflow_type = events[0]["attributes"][1]["workflow_type"]
        result = self._run(self.replayer.replay_workflow(WorkflowHistory(workflow_id, run_id, events), raise_on_replay_failure=False))
        if result.replay_failure is None:
            self.report.replayed[workflow_type] += 1
            return
        self.report.diverged[workflow_type] += 1
        failure = result.replay_failure
        self.report.divergences.append(Divergence(workflow_id, run_id, workflow_type, f"{type(failure).__name__}: {failure}"))

    def close(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """The audit reads the log synchronously, maybe inside a caller's event loop: replays (async,
        for the payload codec) run on a loop of their own, in its thread."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="code-replay", daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()
