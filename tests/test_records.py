"""kadence/protocol/records.py is what its generator writes from schemas/*.avsc today: a schema
changed without regenerating the module fails here."""

from __future__ import annotations

from kadence.protocol.generate_records import COMMAND, OUTPUT, generate, schema_texts


def test_the_records_module_is_generated_from_the_schemas() -> None:
    assert OUTPUT.read_text() == generate(schema_texts()), f"kadence/protocol/records.py is stale: run {COMMAND} and commit it"
