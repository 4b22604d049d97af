"""The filter of workflow ids with a run stored (services/history/stored_ids.py): it never
says no for an id added, says yes for few others, grows past its first block, and survives its
bytes."""

from __future__ import annotations

import pytest

from services.history.stored_ids import FALSE_POSITIVES, FIRST_CAPACITY, FORMAT, StoredIds


def test_every_id_added_is_held_and_few_others_seem_so() -> None:
    stored_ids = StoredIds()
    added = [f"order-{i}" for i in range(FIRST_CAPACITY * 5)]  # three blocks
    for workflow_id in added:
        stored_ids.add(workflow_id)
    assert all(stored_ids.may_hold(workflow_id) for workflow_id in added)
    others = [f"new-{i}" for i in range(20_000)]
    false_positives = sum(stored_ids.may_hold(workflow_id) for workflow_id in others) / len(others)
    assert false_positives < FALSE_POSITIVES * 1.5
    assert len(stored_ids) <= len(added)  # an id that seemed held already is not added again


def test_the_bytes_restore_the_same_filter() -> None:
    stored_ids = StoredIds()
    assert not StoredIds.from_bytes(stored_ids.to_bytes()).may_hold("order-1")
    for i in range(FIRST_CAPACITY + 10):
        stored_ids.add(f"order-{i}")
    restored = StoredIds.from_bytes(stored_ids.to_bytes())
    assert restored.to_bytes() == stored_ids.to_bytes()
    assert all(restored.may_hold(f"order-{i}") for i in range(FIRST_CAPACITY + 10))
    with pytest.raises(ValueError, match="ends inside a block"):
        StoredIds.from_bytes(stored_ids.to_bytes()[:-1])
    with pytest.raises(ValueError, match="not a closed-ids filter"):
        StoredIds.from_bytes(stored_ids.to_bytes()[len(FORMAT):])
    assert not restored.changed and stored_ids.changed
