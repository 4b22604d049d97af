"""Avro encoding of Kadence records, with parsed schemas cached and a fingerprint header.

Records are plain dicts shaped like their `.avsc` schema. A union of records is written and
read as a `(record_name, fields)` tuple, so the branch is always explicit.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import fastavro
import fastavro.schema

SCHEMA_HEADER = "kadence-schema"


class UndecodableRecord(ValueError):
    """The bytes are not a record of the expected schema."""


@dataclass(frozen=True)
class RecordCodec:
    name: str
    schema: Any
    fingerprint: str

    def encode(self, record: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self.schema, record)
        return out.getvalue()

    def decode(self, data: bytes | None, headers: list[tuple[str, bytes]] | None = None) -> dict[str, Any]:
        """Decode `data`; raises UndecodableRecord with the reason if it is not this record."""
        if data is None:
            raise UndecodableRecord(f"{self.name}: record has no value")
        writer = self._writer_schema(headers)
        buf = io.BytesIO(data)
        try:
            record = fastavro.schemaless_reader(
                buf, writer, self.schema if writer is not self.schema else None,
                return_record_name=True, return_record_name_override=True,
            )
        except Exception as exc:  # fastavro raises many types on garbage input
            raise UndecodableRecord(f"{self.name}: {type(exc).__name__}: {exc}") from exc
        if buf.tell() != len(data):
            raise UndecodableRecord(f"{self.name}: {len(data) - buf.tell()} trailing bytes after the record")
        return record

    def headers(self) -> list[tuple[str, bytes]]:
        return [(SCHEMA_HEADER, self.fingerprint.encode())]

    def _writer_schema(self, headers: list[tuple[str, bytes]] | None) -> Any:
        for key, value in headers or ():
            if key == SCHEMA_HEADER and value is not None and value.decode(errors="replace") != self.fingerprint:
                raise UndecodableRecord(
                    f"{self.name}: unknown schema fingerprint {value!r} (this build knows {self.fingerprint}); "
                    "upgrade this service or produce with the schema in schemas/"
                )
        return self.schema


@cache
def codec(name: str) -> RecordCodec:
    """The codec for the top-level schema `schemas/<name>.avsc`, parsed once per process."""
    path = resources.files("kadence.schemas").joinpath(f"{name}.avsc")
    with resources.as_file(path) as schema_path:
        schema = fastavro.schema.load_schema(str(schema_path))
    fingerprint = fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(schema), "CRC-64-AVRO")
    return RecordCodec(name=name, schema=schema, fingerprint=fingerprint)


def command_codec() -> RecordCodec:
    return codec("Command")


def history_batch_codec() -> RecordCodec:
    return codec("HistoryBatch")


def task_codec() -> RecordCodec:
    return codec("Task")
