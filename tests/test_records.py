"""The generated records (kadence/protocol/records.py): the module is what its generator writes from
schemas/*.avsc today (a schema changed without regenerating it fails here), and what the history
machine assumes of them holds."""

from __future__ import annotations

import pytest

from kadence.protocol import records
from kadence.protocol.events import EVENT_FOR_COMMAND
from kadence.protocol.generate_records import COMMAND, OUTPUT, generate, schema_texts
from kadence.protocol.names import TaskCommandType


def test_the_records_module_is_generated_from_the_schemas() -> None:
    assert OUTPUT.read_text() == generate(schema_texts()), f"kadence/protocol/records.py is stale: run {COMMAND} and commit it"


@pytest.mark.parametrize(("command", "command_record", "event_record"), [
    (TaskCommandType.RecordMarker, records.RecordMarker, records.MarkerRecorded),
    (TaskCommandType.UpsertWorkflowSearchAttributes, records.UpsertWorkflowSearchAttributesCommand,
     records.UpsertWorkflowSearchAttributesHistoryEvent),
    (TaskCommandType.SignalExternalWorkflowExecution, records.SignalExternalWorkflowExecution,
     records.SignalExternalWorkflowExecutionInitiated),
    (TaskCommandType.RequestCancelExternalWorkflowExecution, records.RequestCancelExternalWorkflowExecution,
     records.RequestCancelExternalWorkflowExecutionInitiated),
    (TaskCommandType.AcceptWorkflowUpdate, records.AcceptWorkflowUpdate, records.WorkflowExecutionUpdateAccepted),
    (TaskCommandType.RejectWorkflowUpdate, records.RejectWorkflowUpdate, records.WorkflowExecutionUpdateRejected),
    (TaskCommandType.CompleteWorkflowUpdate, records.CompleteWorkflowUpdate, records.WorkflowExecutionUpdateCompleted),
], ids=str)
def test_a_command_recorded_as_given_has_no_field_its_event_lacks(command: str, command_record: type, event_record: type) -> None:
    """History records these commands' attributes as their event's (services/history/machine/tables.py,
    `recorded_as_given`), a cast the schemas must keep true."""
    assert EVENT_FOR_COMMAND[command] == event_record.__name__.removesuffix("HistoryEvent")
    assert command_record.__annotations__.keys() <= event_record.__annotations__.keys()
