"""WorkflowEnvironment, as temporalio.testing's: a client to run workflows against in tests, on a
local stack started for the test session (`start_local`, `start_time_skipping`,
`start_time_skipping_v2`) or on a stack already running (`from_client`). Workflows run under it
turn a failed `assert` into a non-retryable failure of the workflow, as temporalio's do.

Time skipping is the services' own (docs/decisions/0006-time-skipping.md): each run has a clock
that the history service moves to the run's next timer while nothing is in flight. V1 emulates
temporalio's test server (skipping while a result is awaited, `sleep` moves every open run this
environment started); V2 is Temporal's per-workflow skipping (`TimeSkipper`).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kadence.client import Client, Interceptor, OutboundInterceptor, StartWorkflowInput, WorkflowFailureError, WorkflowHandle
from kadence.client._inputs import StartWorkflowUpdateWithStartInput
from kadence.client._types import TimeSkippingConfig
from kadence.converter import DataConverter
from kadence.exceptions import ApplicationError
from kadence.protocol.settings import TIME_SKIPPING
from kadence.runtime import Runtime
from kadence.testing._timeskipping import TimeSkipper, clock_offset_ms, set_time_skipping
from kadence.worker import ExecuteWorkflowInput, HandleSignalInput, WorkflowInboundInterceptor, WorkflowInterceptorClassInput
from kadence.worker import Interceptor as WorkerInterceptor

if TYPE_CHECKING:  # the dev extra's: imported when a stack starts
    from kadence.dev.local_stack import LocalStack

log = logging.getLogger("kadence.testing")



class WorkflowEnvironment:
    """A client to test workflows with, and the clock they run on. `async with` shuts it down."""

    def __init__(self, client: Client) -> None:
        self._client = client

    @classmethod
    def from_client(cls, client: Client) -> WorkflowEnvironment:
        """An environment on a stack already running (`kadence dev`, a CI service): no time skipping,
        `sleep` sleeps, `get_current_time` is this host's clock."""
        return cls(client.with_interceptors(_AssertionErrorInterceptor()))

    @classmethod
    async def start_local(
        cls, *, namespace: str = "default", data_converter: DataConverter | None = None, interceptors: Sequence[Interceptor] = (),
        plugins: Sequence[Any] = (), default_workflow_query_reject_condition: Any = None, retry_config: Any = None,
        rpc_metadata: Mapping[str, str | bytes] | None = None, identity: str | None = None, tls: bool | Any = False,
        ip: str = "127.0.0.1", port: int | None = None, download_dest_dir: str | None = None, ui: bool = False,
        runtime: Runtime | None = None, search_attributes: Sequence[Any] = (), dev_server_existing_path: str | None = None,
        dev_server_database_filename: str | None = None, dev_server_log_format: str = "pretty",
        dev_server_log_level: str | None = "warn", dev_server_download_version: str = "default",
        dev_server_extra_args: Sequence[str] = (), dev_server_download_ttl: timedelta | None = None, ui_port: int | None = None,
    ) -> WorkflowEnvironment:
        """Start the local stack (a broker, Postgres and the services in one process, as `kadence
        dev` does) for this environment, and connect a client to it. `port` is the broker's (a free
        one by default); `dev_server_database_filename` a data dir to keep the stack's log and
        database in (a temporary one by default, removed at shutdown). Options of Temporal's dev
        server that mean nothing here are refused; `search_attributes` need no registering."""
        _refuse_unsupported(plugins=plugins, default_workflow_query_reject_condition=default_workflow_query_reject_condition,
                            retry_config=retry_config, rpc_metadata=rpc_metadata, tls=tls, ip=ip, ui=ui, ui_port=ui_port,
                            download_dest_dir=download_dest_dir, dev_server_existing_path=dev_server_existing_path,
                            dev_server_download_version=dev_server_download_version, dev_server_extra_args=dev_server_extra_args,
                            dev_server_download_ttl=dev_server_download_ttl)
        stack = await _start_stack(port, dev_server_database_filename, time_skipping=False)
        client = await _connect(stack, namespace, data_converter, [*interceptors, _AssertionErrorInterceptor()], identity, runtime)
        return _StackEnvironment(client, stack)

    @classmethod
    async def start_time_skipping(
        cls, *, data_converter: DataConverter | None = None, interceptors: Sequence[Interceptor] = (), plugins: Sequence[Any] = (),
        default_workflow_query_reject_condition: Any = None, retry_config: Any = None,
        rpc_metadata: Mapping[str, str | bytes] | None = None, identity: str | None = None, port: int | None = None,
        download_dest_dir: str | None = None, runtime: Runtime | None = None, test_server_existing_path: str | None = None,
        test_server_download_version: str = "default", test_server_extra_args: Sequence[str] = (),
        test_server_download_ttl: timedelta | None = None,
    ) -> WorkflowEnvironment:
        """Start a local stack whose runs skip time as temporalio's test server does: a run started
        through this environment's client skips to its next timer while its result is awaited and
        nothing is in flight, and `sleep` moves the open runs it started forward. Use it for one
        test at a time, as temporalio's."""
        _refuse_unsupported(plugins=plugins, default_workflow_query_reject_condition=default_workflow_query_reject_condition,
                            retry_config=retry_config, rpc_metadata=rpc_metadata, download_dest_dir=download_dest_dir,
                            test_server_existing_path=test_server_existing_path,
                            test_server_download_version=test_server_download_version, test_server_extra_args=test_server_extra_args,
                            test_server_download_ttl=test_server_download_ttl)
        stack = await _start_stack(port, None, time_skipping=True)
        skipping = _V1Interceptor()
        client = await _connect(
            stack, "default", data_converter, [*interceptors, _AssertionErrorInterceptor(), skipping], identity, runtime,
        )
        skipping.env = _V1Environment(client, stack)
        return skipping.env

    @classmethod
    async def start_time_skipping_v2(
        cls, *, data_converter: DataConverter | None = None, interceptors: Sequence[Interceptor] = (),
        identity: str | None = None, port: int | None = None, runtime: Runtime | None = None,
        time_skipping_config: TimeSkippingConfig | None = None,
    ) -> WorkflowEnvironment:
        """Start a local stack with time skipping per workflow (Temporal's V2): every run started
        through this environment's client carries `time_skipping_config` (enabled by default: it
        skips whenever nothing is in flight, until it closes); `fast_forward` moves one run's clock
        and waits; `with_time_skipping_disabled` starts runs that do not skip."""
        stack = await _start_stack(port, None, time_skipping=True)
        client = await _connect(stack, "default", data_converter, [*interceptors, _AssertionErrorInterceptor()], identity, runtime)
        return _V2Environment(client, stack, time_skipping_config or TimeSkippingConfig())

    async def __aenter__(self) -> WorkflowEnvironment:
        return self

    async def __aexit__(self, *args: Any) -> None:
        await self.shutdown()

    @property
    def client(self) -> Client:
        return self._client

    async def shutdown(self) -> None:
        """Nothing for an environment on a client's stack (the client stays the caller's); a stack
        it started stops, its client closed first."""

    async def sleep(self, duration: timedelta | float) -> None:
        """Sleep (a time-skipping environment moves its clock instead)."""
        await asyncio.sleep(_seconds(duration))

    async def get_current_time(self, handle: WorkflowHandle | None = None) -> datetime:
        """The environment's time: this host's clock unless it skips time (a V2 environment's: the
        run's clock, whose handle it needs)."""
        return datetime.now(UTC)

    @property
    def supports_time_skipping(self) -> bool:
        return False

    @property
    def supports_time_skipping_v2(self) -> bool:
        return False

    def auto_time_skipping_disabled(self) -> AbstractContextManager[None]:
        """Results awaited inside do not skip time (nothing skips here anyway)."""
        return nullcontext()

    async def fast_forward(self, handle: WorkflowHandle, duration: timedelta) -> None:
        """Move one run's clock ahead: a V2 environment's (start_time_skipping_v2)."""
        raise NotImplementedError("fast_forward needs a V2 environment (WorkflowEnvironment.start_time_skipping_v2)")

    def with_time_skipping_disabled(self) -> AbstractContextManager[None]:
        """Start runs that do not skip time: a V2 environment's (start_time_skipping_v2)."""
        raise NotImplementedError("with_time_skipping_disabled needs a V2 environment (WorkflowEnvironment.start_time_skipping_v2)")


class _StackEnvironment(WorkflowEnvironment):
    """An environment with a local stack of its own, stopped at shutdown."""

    def __init__(self, client: Client, stack: LocalStack) -> None:
        super().__init__(client)
        self._stack = stack

    async def shutdown(self) -> None:
        await self._client.close()  # and every client made from it: they share its connections
        await asyncio.get_running_loop().run_in_executor(None, _stop_stack, self._stack)


class _V1Environment(_StackEnvironment):
    """temporalio's time-skipping environment on clocks per run: its runs start at the environment's
    time with skipping off (V1's lock); awaiting a result turns it on for that run until the result
    comes (V1's unlock); `sleep` fast-forwards every open run it started to the environment's new time."""

    def __init__(self, client: Client, stack: LocalStack) -> None:
        self.clock_offset_ms = 0  # the environment's time is this host's clock plus this
        self.auto_time_skipping = True
        self.open_runs: dict[str, int] = {}  # workflow id -> the clock offset its run was last brought to
        self._skipped: list[WorkflowHandle] = []  # runs that skipped since the environment's time was last caught up
        super().__init__(client, stack)

    @property
    def supports_time_skipping(self) -> bool:
        return True

    async def sleep(self, duration: timedelta | float) -> None:
        await self.caught_up()
        ahead_ms = int(_seconds(duration) * 1000)
        target_ms = self.clock_offset_ms + ahead_ms
        moves = [(workflow_id, target_ms - offset) for workflow_id, offset in self.open_runs.items() if target_ms > offset]
        await asyncio.gather(*(self._fast_forward(workflow_id, move_ms) for workflow_id, move_ms in moves))
        self.clock_offset_ms = target_ms

    async def _fast_forward(self, workflow_id: str, move_ms: int) -> None:
        handle = self._client.get_workflow_handle(workflow_id)
        still_open = await set_time_skipping(self._client, handle, TimeSkippingConfig(enabled=True), fast_forward_ms=move_ms)
        if still_open:
            self.open_runs[workflow_id] += move_ms
        else:
            self.open_runs.pop(workflow_id, None)

    async def get_current_time(self, handle: WorkflowHandle | None = None) -> datetime:
        await self.caught_up()
        return datetime.fromtimestamp((time.time() * 1000 + self.clock_offset_ms) / 1000, UTC)

    def auto_time_skipping_disabled(self) -> AbstractContextManager[None]:
        return self._auto_skipping_off()

    @contextmanager
    def _auto_skipping_off(self) -> Iterator[None]:
        already = not self.auto_time_skipping
        self.auto_time_skipping = False
        try:
            yield None
        finally:
            if not already:
                self.auto_time_skipping = True

    async def result_skipping_time(self, handle: WorkflowHandle, follow_runs: bool) -> Any:
        """A run's result, its clock skipping while it is awaited (V1's unlock); locked again if
        the wait ends before the run does. The environment's time follows the run's."""
        if not self.auto_time_skipping:
            return await WorkflowHandle.result(handle, follow_runs=follow_runs)
        closed = not await set_time_skipping(self._client, handle, TimeSkippingConfig(enabled=True))
        try:
            result = await WorkflowHandle.result(handle, follow_runs=follow_runs)
            closed = True
            return result
        except WorkflowFailureError:
            closed = True
            raise
        finally:
            if not closed:  # the wait was cancelled or timed out
                await set_time_skipping(self._client, handle, TimeSkippingConfig(enabled=False))
            self._skipped.append(handle)

    async def caught_up(self) -> None:
        """The environment's time moved to the furthest any run it skipped got to (read from their
        histories when the time is next needed: a result returns without waiting for the read)."""
        skipped, self._skipped = self._skipped, []
        for handle in skipped:
            reached = await clock_offset_ms(handle)
            self.clock_offset_ms = max(self.clock_offset_ms, reached)
            if handle.id in self.open_runs:
                self.open_runs[handle.id] = reached


class _V2Environment(_StackEnvironment):
    """Temporal's per-workflow time skipping (start_time_skipping_v2): a TimeSkipper's client."""

    def __init__(self, client: Client, stack: LocalStack, config: TimeSkippingConfig) -> None:
        self._skipper = TimeSkipper(client, config)
        super().__init__(self._skipper.client, stack)

    @property
    def supports_time_skipping_v2(self) -> bool:
        return True

    async def fast_forward(self, handle: WorkflowHandle, duration: timedelta) -> None:
        """Move the run's clock `duration` ahead (through its timers, in order) and wait until it got there."""
        await self._skipper.fast_forward(handle, duration)

    async def get_current_time(self, handle: WorkflowHandle | None = None) -> datetime:
        """A run's time: its clock, which V2 keeps per run (a handle is needed)."""
        if handle is None:
            raise TypeError("get_current_time(handle): a V2 environment keeps a clock per workflow; pass the workflow's handle")
        return await self._skipper.get_current_time(handle)

    def with_time_skipping_disabled(self) -> AbstractContextManager[None]:
        """Runs started inside do not skip time."""
        return self._skipper.with_time_skipping_disabled()

    async def sleep(self, duration: timedelta | float) -> None:
        raise NotImplementedError("sleep is not supported by a V2 environment (each run has its own clock): "
                                  "use fast_forward(handle, duration) instead")

    def auto_time_skipping_disabled(self) -> AbstractContextManager[None]:
        raise NotImplementedError("auto_time_skipping_disabled is not supported by a V2 environment: "
                                  "use with_time_skipping_disabled() instead")


# ---- the assertion interceptor


class _AssertionErrorInterceptor(Interceptor, WorkerInterceptor):
    """A workflow's failed `assert` fails the workflow (non-retryable, type AssertionError) rather than
    its workflow task, which would be retried for ever: what temporalio's test environments do."""

    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor] | None:
        return _AssertionErrorWorkflowInbound


class _AssertionErrorWorkflowInbound(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        with _assertion_fails_the_workflow():
            return await super().execute_workflow(input)

    async def handle_signal(self, input: HandleSignalInput) -> None:
        with _assertion_fails_the_workflow():
            return await super().handle_signal(input)


@contextmanager
def _assertion_fails_the_workflow() -> Iterator[None]:
    try:
        yield None
    except AssertionError as err:
        failure = ApplicationError(str(err), type="AssertionError", non_retryable=True)
        failure.__traceback__ = err.__traceback__
        raise failure from None


# ---- V1's client


class _V1Interceptor(Interceptor):
    env: _V1Environment  # set once the environment is made with the client this intercepts

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _V1Outbound(next, self)


class _V1Outbound(OutboundInterceptor):
    """Runs start at the environment's time, not skipping (V1's lock); their handles skip time while
    their result is awaited."""

    def __init__(self, next: OutboundInterceptor, interceptor: _V1Interceptor) -> None:
        super().__init__(next)
        self.interceptor = interceptor

    @property
    def env(self) -> _V1Environment:
        return self.interceptor.env

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle:
        await self.env.caught_up()
        input.time_skipping = input.time_skipping or TimeSkippingConfig(enabled=False)
        input.clock_offset_ms = input.clock_offset_ms or self.env.clock_offset_ms
        handle = await super().start_workflow(input)
        self.env.open_runs[input.id] = input.clock_offset_ms
        return _V1Handle.of(handle, self.env)

    async def start_update_with_start_workflow(self, input: StartWorkflowUpdateWithStartInput) -> Any:
        await self.env.caught_up()
        start = input.start_workflow_input
        start.time_skipping = start.time_skipping or TimeSkippingConfig(enabled=False)
        start.clock_offset_ms = start.clock_offset_ms or self.env.clock_offset_ms
        self.env.open_runs[start.id] = start.clock_offset_ms
        return await super().start_update_with_start_workflow(input)


class _V1Handle(WorkflowHandle):
    env: _V1Environment

    @classmethod
    def of(cls, handle: WorkflowHandle, env: _V1Environment) -> WorkflowHandle:
        handle.__class__ = cls  # as temporalio's: the handle the client made, its result() skipping time
        assert isinstance(handle, _V1Handle)
        handle.env = env
        return handle

    async def result(self, *, follow_runs: bool = True) -> Any:
        return await self.env.result_skipping_time(self, follow_runs)


# ---- the stack


async def _start_stack(port: int | None, data_dir: str | None, *, time_skipping: bool) -> LocalStack:
    try:
        from kadence.dev.local_stack import PROCESS_LAYOUTS, LocalStack
    except ImportError as exc:
        raise RuntimeError(f"WorkflowEnvironment starts a local stack, which needs Kadence's dev extra: "
                           f"pip install 'kadence[dev]' ({exc})") from None
    owned = data_dir is None
    directory = Path(tempfile.mkdtemp(prefix="kadence-test-env-")) if owned else Path(data_dir or "").resolve()
    stack = LocalStack(directory, kafka_port=port or 0, service_env={TIME_SKIPPING: "1"} if time_skipping else {})
    stack.owned_by_environment = owned  # type: ignore[attr-defined]  # its data dir goes with it
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, stack.start, PROCESS_LAYOUTS["one"])
    except BaseException:
        await loop.run_in_executor(None, _stop_stack, stack)
        raise
    return stack


def _stop_stack(stack: LocalStack) -> None:
    stack.stop()
    if getattr(stack, "owned_by_environment", False):
        shutil.rmtree(stack.data_dir, ignore_errors=True)


async def _connect(
    stack: LocalStack, namespace: str, data_converter: DataConverter | None, interceptors: Sequence[Interceptor],
    identity: str | None, runtime: Runtime | None,
) -> Client:
    try:
        return await Client.connect(stack.bootstrap_servers, namespace=namespace, postgres_dsn=stack.postgres_dsn,
                                    data_converter=data_converter, interceptors=interceptors, identity=identity, runtime=runtime)
    except BaseException:
        await asyncio.get_running_loop().run_in_executor(None, _stop_stack, stack)
        raise


_DEFAULTS: dict[str, Any] = {
    "plugins": (), "default_workflow_query_reject_condition": None, "retry_config": None, "rpc_metadata": None, "tls": False,
    "ip": "127.0.0.1", "ui": False, "ui_port": None, "download_dest_dir": None, "dev_server_existing_path": None,
    "dev_server_download_version": "default", "dev_server_extra_args": (), "dev_server_download_ttl": None,
    "test_server_existing_path": None, "test_server_download_version": "default", "test_server_extra_args": (),
    "test_server_download_ttl": None,
}
_WHY = {
    "plugins": "Kadence has no client plugins",
    "default_workflow_query_reject_condition": "Kadence's queries take no reject condition",
    "retry_config": "the client retries its commands itself, until delivered",
    "rpc_metadata": "Kadence's client speaks Kafka, not gRPC",
    "tls": "the local stack listens on loopback without TLS",
    "ip": "the local stack listens on 127.0.0.1 only",
    "ui": "run `kadence ui` against the stack (its settings: `kadence env --data-dir ...`)",
    "ui_port": "run `kadence ui` against the stack",
}


def _refuse_unsupported(**given: Any) -> None:
    """Temporal's server options that mean nothing for a Kadence stack: refused when set, saying why."""
    for name, value in given.items():
        if value in (_DEFAULTS[name], [], {}) or (name == "rpc_metadata" and not value):
            continue
        why = _WHY.get(name, "the stack is Kadence's own (a broker, Postgres and the services), not a Temporal server binary")
        raise ValueError(f"{name}={value!r} is not supported by Kadence's test environment: {why}")


def _seconds(duration: timedelta | float) -> float:
    return duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
