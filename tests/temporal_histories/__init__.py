"""Histories in Temporal's JSON format (the proto3 JSON of temporal.api.history.v1.History, as
`temporal workflow show --output json` writes it) of the workflows in workflows.py, which
tests/test_temporal_replay.py reads with `WorkflowHistory.from_json(workflow_id, history)` and
replays. They were written for these tests, event by event as a Temporal server records such runs
(the full enum names in some files, the CLI's shorthand in others), not recorded on a server: a
history a real server wrote for Kadence's workflows would replay the same way.
"""
