"""SandboxRestrictions and SandboxMatcher as temporalio names and builds them: kept with the runner,
enforced nowhere (Kadence has no sandbox: kadence/worker/workflow_sandbox/__init__.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from kadence.exceptions import NondeterminismError
from kadence.workflow import SandboxImportNotificationPolicy


class RestrictedWorkflowAccessError(NondeterminismError):
    """temporalio's error for a restricted access from workflow code; Kadence's worker never raises it."""

    def __init__(self, qualified_name: str, *, override_message: str | None = None) -> None:
        super().__init__(override_message or f"Cannot access {qualified_name} from inside a workflow")
        self.qualified_name = qualified_name


class UnintentionalPassthroughError(RestrictedWorkflowAccessError):
    """temporalio's error for a module imported without being passed through; Kadence's worker never raises it."""

    def __init__(self, qualified_name: str) -> None:
        super().__init__(qualified_name, override_message=f"Module {qualified_name} was not intentionally passed through")


@dataclasses.dataclass(frozen=True)
class SandboxMatcher:
    """Which names a restriction covers, as temporalio's: accessed, used (called), child matchers by
    name, or everything (`all_uses`)."""

    access: frozenset[str] = frozenset()
    use: frozenset[str] = frozenset()
    children: Mapping[str, SandboxMatcher] = dataclasses.field(default_factory=dict)
    only: frozenset[str] = frozenset()
    all: ClassVar[SandboxMatcher]
    all_uses: ClassVar[SandboxMatcher]
    none: ClassVar[SandboxMatcher]

    def child_matcher(self, *child_path: str) -> SandboxMatcher | None:
        """The matcher of the children at `child_path`, or None where none is."""
        found: SandboxMatcher | None = self
        for name in child_path:
            found = None if found is None else found.children.get(name)
        return found

    def with_child_unrestricted(self, *child_path: str) -> SandboxMatcher:
        """This matcher with nothing restricted at `child_path` (as temporalio's, say `"os"` for a
        workflow that reads its process id)."""
        if not child_path:
            return SandboxMatcher.none
        name, *rest = child_path
        child = self.children.get(name)
        if child is None:
            return self
        return dataclasses.replace(self, children={**self.children, name: child.with_child_unrestricted(*rest)})

    def __or__(self, other: SandboxMatcher) -> SandboxMatcher:
        children = {**self.children}
        for name, child in other.children.items():
            children[name] = children[name] | child if name in children else child
        return SandboxMatcher(self.access | other.access, self.use | other.use, children, self.only | other.only)


SandboxMatcher.all = SandboxMatcher(access=frozenset({"*"}))
SandboxMatcher.all_uses = SandboxMatcher(use=frozenset({"*"}))
SandboxMatcher.none = SandboxMatcher()


@dataclasses.dataclass(frozen=True)
class SandboxRestrictions:
    """What temporalio's sandbox would pass through to workflows and refuse them; Kadence keeps it
    with the runner and enforces none of it."""

    passthrough_modules: frozenset[str] = frozenset()
    invalid_modules: SandboxMatcher = SandboxMatcher.none
    invalid_module_members: SandboxMatcher = SandboxMatcher.none
    import_notification_policy: SandboxImportNotificationPolicy = SandboxImportNotificationPolicy.WARN_ON_DYNAMIC_IMPORT
    passthrough_all_modules: bool = False
    disable_lazy_sys_module_passthrough: bool = False
    passthrough_modules_minimum: ClassVar[frozenset[str]] = frozenset({"kadence", "grpc", "pydevd"})
    passthrough_modules_with_temporal: ClassVar[frozenset[str]] = passthrough_modules_minimum | frozenset({"google.protobuf"})
    passthrough_modules_maximum: ClassVar[frozenset[str]]
    passthrough_modules_default: ClassVar[frozenset[str]]
    invalid_module_members_default: ClassVar[SandboxMatcher]
    default: ClassVar[SandboxRestrictions]

    def with_passthrough_modules(self, *modules: str) -> SandboxRestrictions:
        return dataclasses.replace(self, passthrough_modules=self.passthrough_modules | frozenset(modules))

    def with_passthrough_all_modules(self) -> SandboxRestrictions:
        return dataclasses.replace(self, passthrough_all_modules=True)

    def with_import_notification_policy(self, policy: SandboxImportNotificationPolicy) -> SandboxRestrictions:
        return dataclasses.replace(self, import_notification_policy=policy)


SandboxRestrictions.passthrough_modules_maximum = SandboxRestrictions.passthrough_modules_with_temporal | frozenset({
    "asyncio", "abc", "collections", "dataclasses", "datetime", "enum", "functools", "json", "logging", "typing", "uuid",
})
SandboxRestrictions.passthrough_modules_default = SandboxRestrictions.passthrough_modules_maximum
# The modules whose calls temporalio's sandbox refuses by default (at a module's grain: its matchers
# name members): what reaches outside the workflow or differs between replays.
SandboxRestrictions.invalid_module_members_default = SandboxMatcher(children={
    module: SandboxMatcher.all_uses for module in (
        "asyncio", "concurrent", "datetime", "glob", "http", "multiprocessing", "os", "pathlib", "platform", "random",
        "secrets", "select", "selectors", "shutil", "signal", "socket", "subprocess", "tempfile", "threading", "time",
        "urllib", "uuid", "zoneinfo",
    )
})
SandboxRestrictions.default = SandboxRestrictions(
    passthrough_modules=SandboxRestrictions.passthrough_modules_default,
    invalid_module_members=SandboxRestrictions.invalid_module_members_default,
)
