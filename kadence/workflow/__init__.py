"""Workflow definitions and the API workflow code calls (as temporalio.workflow).

Workflow code runs on a deterministic loop replayed from history: it must not read clocks,
randomness, the network or files except through this package. The worker runs it: its
WorkflowInstance implements the runtime (_runtime._Runtime) this API calls.
"""

from kadence.common import ActivityCancellationType, ChildWorkflowCancellationType, ParentClosePolicy, RawValue
from kadence.exceptions import NondeterminismError, ReadOnlyContextError
from kadence.workflow._api import (
    ActivityHandle,
    ContinueAsNewError,
    ExternalWorkflowHandle,
    LoggerAdapter,
    SandboxImportNotificationPolicy,
    all_handlers_finished,
    as_completed,
    continue_as_new,
    current_update_info,
    deprecate_patch,
    execute_activity,
    execute_activity_method,
    execute_child_workflow,
    execute_local_activity,
    execute_local_activity_method,
    get_current_history_length,
    get_current_history_size,
    get_dynamic_query_handler,
    get_dynamic_signal_handler,
    get_dynamic_update_handler,
    get_external_workflow_handle,
    get_external_workflow_handle_for,
    get_query_handler,
    get_signal_handler,
    get_update_handler,
    in_workflow,
    info,
    is_continue_as_new_suggested,
    logger,
    memo,
    memo_value,
    metric_meter,
    now,
    patched,
    payload_converter,
    random,
    set_dynamic_query_handler,
    set_dynamic_signal_handler,
    set_dynamic_update_handler,
    set_query_handler,
    set_signal_handler,
    set_update_handler,
    sleep,
    start_activity,
    start_activity_method,
    start_child_workflow,
    start_local_activity,
    start_local_activity_method,
    unsafe,
    upsert_memo,
    upsert_search_attributes,
    uuid4,
    wait,
    wait_condition,
)
from kadence.workflow._definition import (
    HandlerUnfinishedPolicy,
    UnfinishedSignalHandlersWarning,
    UnfinishedUpdateHandlersWarning,
    UpdateMethodMultiParam,
    defn,
    init,
    query,
    run,
    signal,
    update,
)

# For the client and the worker, not workflow code (outside __all__):
from kadence.workflow._definition import definition as definition
from kadence.workflow._definition import query_name as query_name
from kadence.workflow._definition import signal_name as signal_name
from kadence.workflow._definition import update_name as update_name
from kadence.workflow._nexus import NexusClient, create_nexus_client
from kadence.workflow._runtime import (
    ChildWorkflowHandle,
    Info,
    NexusOperationCancellationType,
    NexusOperationHandle,
    ParentInfo,
    RootInfo,
    UpdateInfo,
)

__all__ = [
    "defn", "run", "signal", "query", "update", "continue_as_new", "ContinueAsNewError", "execute_activity", "start_activity", "sleep",
    "execute_local_activity", "start_local_activity",
    "wait_condition", "upsert_search_attributes", "memo", "memo_value", "upsert_memo",
    "info", "now", "patched", "deprecate_patch", "random", "uuid4",
    "get_current_history_length", "get_current_history_size", "is_continue_as_new_suggested",
    "start_child_workflow", "execute_child_workflow", "ChildWorkflowHandle", "ParentClosePolicy",
    "get_external_workflow_handle", "get_external_workflow_handle_for", "ExternalWorkflowHandle", "NondeterminismError",
    "ReadOnlyContextError", "Info",
    "logger", "LoggerAdapter", "unsafe", "in_workflow", "SandboxImportNotificationPolicy",
    "start_activity_method", "execute_activity_method", "start_local_activity_method", "execute_local_activity_method",
    "wait", "as_completed",
    "ParentInfo", "RootInfo", "UpdateInfo", "current_update_info", "HandlerUnfinishedPolicy",
    "UnfinishedUpdateHandlersWarning", "UnfinishedSignalHandlersWarning", "init", "all_handlers_finished", "payload_converter", "RawValue",
    "metric_meter",
    "get_signal_handler", "set_signal_handler", "get_dynamic_signal_handler", "set_dynamic_signal_handler",
    "get_query_handler", "set_query_handler", "get_dynamic_query_handler", "set_dynamic_query_handler",
    "get_update_handler", "set_update_handler", "get_dynamic_update_handler", "set_dynamic_update_handler",
    "ActivityHandle", "ActivityCancellationType", "ChildWorkflowCancellationType", "UpdateMethodMultiParam",
    "create_nexus_client", "NexusClient", "NexusOperationHandle", "NexusOperationCancellationType",
]
