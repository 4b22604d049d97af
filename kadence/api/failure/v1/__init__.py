"""`Failure` and its info messages, with the attributes of temporalio.api.failure.v1's protobuf
messages, so code that reads `FailureError.failure` (`.stack_trace`,
`.application_failure_info.type`, `.cause` ...) runs after an import swap.

Kadence records a failure as the Avro record of schemas/Failure.avsc; the failure converter
(kadence.converter) builds these read-only views of it. Where they differ from protobuf messages:
an info or cause that is not set is None (protobuf gives an empty message); `HasField` and
`WhichOneof("failure_info")` answer as protobuf's; a duration is a `timedelta`; an enum field holds
the value of kadence.exceptions' enum of its name (`TimeoutType` and `RetryState`: the name, as
"START_TO_CLOSE"; `ApplicationErrorCategory`: the number), so it compares equal to the member.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from kadence.api.common.v1 import ActivityType, Payload, Payloads, WorkflowExecution, WorkflowType


@dataclass(frozen=True)
class ApplicationFailureInfo:
    type: str = ""
    non_retryable: bool = False
    details: Payloads = field(default_factory=Payloads)
    next_retry_delay: timedelta | None = None
    category: int = 0  # kadence.exceptions.ApplicationErrorCategory


@dataclass(frozen=True)
class TimeoutFailureInfo:
    timeout_type: str = ""  # kadence.exceptions.TimeoutType
    last_heartbeat_details: Payloads = field(default_factory=Payloads)


@dataclass(frozen=True)
class CanceledFailureInfo:
    details: Payloads = field(default_factory=Payloads)
    identity: str = ""


@dataclass(frozen=True)
class TerminatedFailureInfo:
    identity: str = ""


@dataclass(frozen=True)
class ServerFailureInfo:
    """Temporal's server reports its own errors so (a ServerError); Kadence's services record none."""

    non_retryable: bool = False


@dataclass(frozen=True)
class ResetWorkflowFailureInfo:
    """Temporal's for a failure a reset caused; Kadence's reset records none (a record's is read)."""

    last_heartbeat_details: Payloads = field(default_factory=Payloads)


@dataclass(frozen=True)
class ActivityFailureInfo:
    scheduled_event_id: int = 0
    started_event_id: int = 0
    identity: str = ""
    activity_type: ActivityType = field(default_factory=ActivityType)
    activity_id: str = ""
    retry_state: str = ""  # kadence.exceptions.RetryState


@dataclass(frozen=True)
class ChildWorkflowExecutionFailureInfo:
    namespace: str = ""
    workflow_execution: WorkflowExecution = field(default_factory=WorkflowExecution)
    workflow_type: WorkflowType = field(default_factory=WorkflowType)
    initiated_event_id: int = 0
    started_event_id: int = 0
    retry_state: str = ""  # kadence.exceptions.RetryState


@dataclass(frozen=True)
class NexusOperationFailureInfo:
    """A Nexus operation's (the NexusOperationError a caller sees)."""

    scheduled_event_id: int = 0
    endpoint: str = ""
    service: str = ""
    operation: str = ""
    operation_id: str = ""
    operation_token: str = ""


@dataclass(frozen=True)
class NexusHandlerFailureInfo:
    """Temporal's for a Nexus handler's error; Kadence has no Nexus (none is ever set)."""

    type: str = ""
    retry_behavior: int = 0


_FAILURE_INFO = (
    "application_failure_info", "timeout_failure_info", "canceled_failure_info", "terminated_failure_info",
    "server_failure_info", "reset_workflow_failure_info", "activity_failure_info", "child_workflow_execution_failure_info",
    "nexus_operation_execution_failure_info", "nexus_handler_failure_info",
)


@dataclass(frozen=True)
class Failure:
    """A failure and its cause chain; at most one `..._failure_info` is set (protobuf's oneof
    `failure_info`). `encoded_attributes` is always None: Kadence does not move the message and
    stack trace into an encoded payload (temporalio's `encode_common_attributes`)."""

    message: str = ""
    source: str = ""
    stack_trace: str = ""
    encoded_attributes: Payload | None = None
    cause: Failure | None = None
    application_failure_info: ApplicationFailureInfo | None = None
    timeout_failure_info: TimeoutFailureInfo | None = None
    canceled_failure_info: CanceledFailureInfo | None = None
    terminated_failure_info: TerminatedFailureInfo | None = None
    server_failure_info: ServerFailureInfo | None = None
    reset_workflow_failure_info: ResetWorkflowFailureInfo | None = None
    activity_failure_info: ActivityFailureInfo | None = None
    child_workflow_execution_failure_info: ChildWorkflowExecutionFailureInfo | None = None
    nexus_operation_execution_failure_info: NexusOperationFailureInfo | None = None
    nexus_handler_failure_info: NexusHandlerFailureInfo | None = None

    def __post_init__(self) -> None:
        infos = [name for name in _FAILURE_INFO if getattr(self, name) is not None]
        if len(infos) > 1:
            raise ValueError(f"a Failure holds at most one failure info (protobuf's oneof failure_info), not {', '.join(infos)}")

    def HasField(self, field_name: str) -> bool:  # noqa: N802 (protobuf's name)
        """Whether the message field (`cause`, `encoded_attributes` or a failure info) is set."""
        if field_name not in ("cause", "encoded_attributes", *_FAILURE_INFO):
            raise ValueError(f"Failure has no message field {field_name!r} (HasField asks of cause, encoded_attributes and the infos)")
        return getattr(self, field_name) is not None

    def WhichOneof(self, oneof_group: Literal["failure_info"]) -> str | None:  # noqa: N802 (protobuf's name)
        """The failure info that is set, by its field name, or None."""
        if oneof_group != "failure_info":
            raise ValueError(f"Failure has no oneof {oneof_group!r}; its one oneof is 'failure_info'")
        return next((name for name in _FAILURE_INFO if getattr(self, name) is not None), None)
