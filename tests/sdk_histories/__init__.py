"""Recorded SDK histories: one run's history per scenario, exported as `kadence workflow show
--output json` exports it, which tests/test_sdk_replay.py replays against today's workflow code.
`python -m tests.sdk_histories.record` records them again on a local stack: run it when a
scenario is added or a change to the workflows is meant to change what they decide, and review the diff.
"""
