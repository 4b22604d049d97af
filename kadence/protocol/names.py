"""The names the records of schemas/*.avsc use for their union branches and enums: event types,
commands, a workflow task's commands, effects and timer kinds. Each is a StrEnum, so a member is
the very string the codec reads and writes (`EventType.TimerFired == "TimerFired"`), and
tests/test_names.py checks each holds exactly its schema's names, in the schema's order."""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    """The branches of HistoryEvent.attributes: Temporal's event type names."""

    WorkflowExecutionStarted = "WorkflowExecutionStarted"
    WorkflowExecutionSignaled = "WorkflowExecutionSignaled"
    WorkflowExecutionCancelRequested = "WorkflowExecutionCancelRequested"
    WorkflowTaskScheduled = "WorkflowTaskScheduled"
    WorkflowTaskStarted = "WorkflowTaskStarted"
    WorkflowTaskCompleted = "WorkflowTaskCompleted"
    WorkflowTaskFailed = "WorkflowTaskFailed"
    WorkflowTaskTimedOut = "WorkflowTaskTimedOut"
    ActivityTaskScheduled = "ActivityTaskScheduled"
    ActivityTaskStarted = "ActivityTaskStarted"
    ActivityTaskCompleted = "ActivityTaskCompleted"
    ActivityTaskFailed = "ActivityTaskFailed"
    ActivityTaskTimedOut = "ActivityTaskTimedOut"
    ActivityTaskCancelRequested = "ActivityTaskCancelRequested"
    ActivityTaskCanceled = "ActivityTaskCanceled"
    WorkflowExecutionCompleted = "WorkflowExecutionCompleted"
    WorkflowExecutionFailed = "WorkflowExecutionFailed"
    UpsertWorkflowSearchAttributes = "UpsertWorkflowSearchAttributes"
    TimerStarted = "TimerStarted"
    TimerFired = "TimerFired"
    TimerCanceled = "TimerCanceled"
    WorkflowExecutionCanceled = "WorkflowExecutionCanceled"
    WorkflowExecutionTerminated = "WorkflowExecutionTerminated"
    WorkflowExecutionTimedOut = "WorkflowExecutionTimedOut"
    WorkflowExecutionContinuedAsNew = "WorkflowExecutionContinuedAsNew"
    MarkerRecorded = "MarkerRecorded"
    StartChildWorkflowExecutionInitiated = "StartChildWorkflowExecutionInitiated"
    StartChildWorkflowExecutionFailed = "StartChildWorkflowExecutionFailed"
    ChildWorkflowExecutionStarted = "ChildWorkflowExecutionStarted"
    ChildWorkflowExecutionCompleted = "ChildWorkflowExecutionCompleted"
    ChildWorkflowExecutionFailed = "ChildWorkflowExecutionFailed"
    ChildWorkflowExecutionCanceled = "ChildWorkflowExecutionCanceled"
    ChildWorkflowExecutionTimedOut = "ChildWorkflowExecutionTimedOut"
    ChildWorkflowExecutionTerminated = "ChildWorkflowExecutionTerminated"
    SignalExternalWorkflowExecutionInitiated = "SignalExternalWorkflowExecutionInitiated"
    SignalExternalWorkflowExecutionFailed = "SignalExternalWorkflowExecutionFailed"
    ExternalWorkflowExecutionSignaled = "ExternalWorkflowExecutionSignaled"
    RequestCancelExternalWorkflowExecutionInitiated = "RequestCancelExternalWorkflowExecutionInitiated"
    RequestCancelExternalWorkflowExecutionFailed = "RequestCancelExternalWorkflowExecutionFailed"
    ExternalWorkflowExecutionCancelRequested = "ExternalWorkflowExecutionCancelRequested"
    WorkflowExecutionUpdateAdmitted = "WorkflowExecutionUpdateAdmitted"
    WorkflowExecutionUpdateAccepted = "WorkflowExecutionUpdateAccepted"
    WorkflowExecutionUpdateRejected = "WorkflowExecutionUpdateRejected"
    WorkflowExecutionUpdateCompleted = "WorkflowExecutionUpdateCompleted"
    WorkflowPropertiesModified = "WorkflowPropertiesModified"
    ScheduleCreated = "ScheduleCreated"
    ScheduleUpdated = "ScheduleUpdated"
    SchedulePatched = "SchedulePatched"
    ScheduleActionsTaken = "ScheduleActionsTaken"
    ScheduledRunStarted = "ScheduledRunStarted"
    ScheduledRunClosed = "ScheduledRunClosed"
    ScheduleDeleted = "ScheduleDeleted"
    WorkflowExecutionTimeSkippingUpdated = "WorkflowExecutionTimeSkippingUpdated"
    WorkflowExecutionTimeSkipped = "WorkflowExecutionTimeSkipped"
    ScheduleTimeSkipped = "ScheduleTimeSkipped"
    NexusOperationScheduled = "NexusOperationScheduled"
    NexusOperationStarted = "NexusOperationStarted"
    NexusOperationCompleted = "NexusOperationCompleted"
    NexusOperationFailed = "NexusOperationFailed"
    NexusOperationCanceled = "NexusOperationCanceled"
    NexusOperationTimedOut = "NexusOperationTimedOut"
    NexusOperationCancelRequested = "NexusOperationCancelRequested"
    NexusOperationAttemptFailed = "NexusOperationAttemptFailed"


class CommandType(StrEnum):
    """The branches of Command.command: what the history service is asked to do."""

    StartWorkflowExecution = "StartWorkflowExecution"
    SignalWorkflowExecution = "SignalWorkflowExecution"
    SignalWithStartWorkflowExecution = "SignalWithStartWorkflowExecution"
    RequestCancelWorkflowExecution = "RequestCancelWorkflowExecution"
    TerminateWorkflowExecution = "TerminateWorkflowExecution"
    RecordWorkflowTaskStarted = "RecordWorkflowTaskStarted"
    RespondWorkflowTaskCompleted = "RespondWorkflowTaskCompleted"
    RespondWorkflowTaskFailed = "RespondWorkflowTaskFailed"
    RecordActivityTaskStarted = "RecordActivityTaskStarted"
    RecordActivityTaskHeartbeat = "RecordActivityTaskHeartbeat"
    RespondActivityTaskCompleted = "RespondActivityTaskCompleted"
    RespondActivityTaskFailed = "RespondActivityTaskFailed"
    RespondActivityTaskCanceled = "RespondActivityTaskCanceled"
    TimeoutFired = "TimeoutFired"
    RecordChildExecutionStarted = "RecordChildExecutionStarted"
    RecordChildExecutionClosed = "RecordChildExecutionClosed"
    RecordExternalRequestOutcome = "RecordExternalRequestOutcome"
    QueryWorkflow = "QueryWorkflow"
    UpdateWorkflowExecution = "UpdateWorkflowExecution"
    UpdateWithStartWorkflowExecution = "UpdateWithStartWorkflowExecution"
    CreateSchedule = "CreateSchedule"
    UpdateSchedule = "UpdateSchedule"
    PatchSchedule = "PatchSchedule"
    DeleteSchedule = "DeleteSchedule"
    RecordScheduledRunStarted = "RecordScheduledRunStarted"
    RecordScheduledRunClosed = "RecordScheduledRunClosed"
    ResetWorkflowExecution = "ResetWorkflowExecution"
    UpdateWorkflowTimeSkipping = "UpdateWorkflowTimeSkipping"
    RespondNexusTaskCompleted = "RespondNexusTaskCompleted"
    RespondNexusTaskFailed = "RespondNexusTaskFailed"
    RecordNexusOperationClosed = "RecordNexusOperationClosed"


# What a client sends, or anyone producing to kadence.commands: answered under its request id, and
# when it has none and is refused, dead-lettered with the reason (docs/architecture.md, "Bad input").
CLIENT_COMMANDS = frozenset({
    CommandType.StartWorkflowExecution, CommandType.SignalWithStartWorkflowExecution, CommandType.SignalWorkflowExecution,
    CommandType.RequestCancelWorkflowExecution, CommandType.TerminateWorkflowExecution, CommandType.UpdateWorkflowExecution,
    CommandType.UpdateWithStartWorkflowExecution, CommandType.CreateSchedule, CommandType.UpdateSchedule, CommandType.PatchSchedule,
    CommandType.DeleteSchedule, CommandType.ResetWorkflowExecution, CommandType.UpdateWorkflowTimeSkipping,
})
# A schedule is keyed on kadence.commands and kadence.history by this prefix and its id; workflow
# ids with it are refused (docs/decisions/0004-schedules-in-the-history-service.md).
SCHEDULE_KEY_PREFIX = "kadence-schedule:"
# A standalone activity (one a client starts, outside any workflow) is a run keyed by this prefix and
# its activity id; workflow ids with it are refused (docs/decisions/0007-standalone-activities.md).
ACTIVITY_KEY_PREFIX = "kadence-activity:"
# A standalone Nexus operation (one a client starts through an endpoint, outside any workflow) is a
# run keyed by this prefix and its operation id, as a standalone activity is (decision 0008).
NEXUS_KEY_PREFIX = "kadence-nexus:"
# The commands for a schedule (a TimeoutFired goes to either kind).
SCHEDULE_COMMANDS = frozenset({
    CommandType.CreateSchedule, CommandType.UpdateSchedule, CommandType.PatchSchedule, CommandType.DeleteSchedule,
    CommandType.RecordScheduledRunStarted, CommandType.RecordScheduledRunClosed,
})
# The client commands that carry a start with another request (a signal, an update): the start's
# request id names the whole command.
WITH_START = frozenset({CommandType.SignalWithStartWorkflowExecution, CommandType.UpdateWithStartWorkflowExecution})


class TaskCommandType(StrEnum):
    """The branches of RespondWorkflowTaskCompleted.commands: what a workflow task decided."""

    ScheduleActivityTask = "ScheduleActivityTask"
    RequestCancelActivityTask = "RequestCancelActivityTask"
    StartTimer = "StartTimer"
    CancelTimer = "CancelTimer"
    CompleteWorkflowExecution = "CompleteWorkflowExecution"
    FailWorkflowExecution = "FailWorkflowExecution"
    CancelWorkflowExecution = "CancelWorkflowExecution"
    ContinueAsNewWorkflowExecution = "ContinueAsNewWorkflowExecution"
    UpsertWorkflowSearchAttributes = "UpsertWorkflowSearchAttributes"
    RecordMarker = "RecordMarker"
    StartChildWorkflowExecution = "StartChildWorkflowExecution"
    SignalExternalWorkflowExecution = "SignalExternalWorkflowExecution"
    RequestCancelExternalWorkflowExecution = "RequestCancelExternalWorkflowExecution"
    AcceptWorkflowUpdate = "AcceptWorkflowUpdate"
    RejectWorkflowUpdate = "RejectWorkflowUpdate"
    CompleteWorkflowUpdate = "CompleteWorkflowUpdate"
    ModifyWorkflowProperties = "ModifyWorkflowProperties"
    ScheduleNexusOperation = "ScheduleNexusOperation"
    RequestCancelNexusOperation = "RequestCancelNexusOperation"


class EffectType(StrEnum):
    """The branches of HistoryBatch.effects: what the rest of the system does about a batch."""

    WorkflowTask = "WorkflowTask"
    ActivityTask = "ActivityTask"
    Timer = "Timer"
    DropTimer = "DropTimer"
    ActivityCancellation = "ActivityCancellation"
    OutboundCommand = "OutboundCommand"
    QueryTask = "QueryTask"
    NexusTask = "NexusTask"


class TimerKind(StrEnum):
    """schemas/TimerKind.avsc: what a timer does when it fires."""

    ACTIVITY_START_TO_CLOSE = "ACTIVITY_START_TO_CLOSE"
    ACTIVITY_RETRY = "ACTIVITY_RETRY"
    WORKFLOW_TASK_RETRY = "WORKFLOW_TASK_RETRY"
    WORKFLOW_TASK_START_TO_CLOSE = "WORKFLOW_TASK_START_TO_CLOSE"
    USER_TIMER = "USER_TIMER"
    WORKFLOW_RUN_TIMEOUT = "WORKFLOW_RUN_TIMEOUT"
    ACTIVITY_SCHEDULE_TO_CLOSE = "ACTIVITY_SCHEDULE_TO_CLOSE"
    ACTIVITY_HEARTBEAT = "ACTIVITY_HEARTBEAT"
    ACTIVITY_SCHEDULE_TO_START = "ACTIVITY_SCHEDULE_TO_START"
    SCHEDULE_ACTION = "SCHEDULE_ACTION"
    TIME_SKIP = "TIME_SKIP"
    NEXUS_RETRY = "NEXUS_RETRY"
    NEXUS_ATTEMPT = "NEXUS_ATTEMPT"
    NEXUS_SCHEDULE_TO_CLOSE = "NEXUS_SCHEDULE_TO_CLOSE"
