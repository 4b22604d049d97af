"""Avro encoding of Kadence records, with parsed schemas cached and a fingerprint header.

Records are plain dicts shaped like their `.avsc` schema. A union of records is written and
read as a `(record_name, fields)` tuple, so the branch is always explicit.

Kafka records carry the fingerprint of the schema they were written with, and every version of
those schemas that a release ever wrote is kept in `schemas/versions/`, as
`<record>.<fingerprint>.avsc` (the fingerprint of its parsing canonical form). So a record from
any earlier release still decodes, by Avro schema resolution into this build's schema. During a rolling upgrade that changes a schema,
KADENCE_SCHEMA_PIN makes the new build write the old version until no old reader is left
(docs/operations.md, "Upgrading").
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import fastavro
import fastavro.schema

from kadence.protocol.settings import SettingError

# A record of any schema here, as the codec reads and writes it.
Record = dict[str, Any]

SCHEMA_HEADER = "kadence-schema"
# The records that travel in Kafka with SCHEMA_HEADER, whose every released version is archived.
KAFKA_RECORDS = ("Command", "HistoryBatch", "PollerHeartbeat", "QueryAnswer", "Reply", "Task")

# A record's headers as confluent-kafka types them: a consumed record's are (name, bytes or None)
# pairs; a producer takes a list of pairs with str values too, or a dict.
HeaderList = list[tuple[str, str | bytes | None]]
Headers = Sequence[tuple[str, str | bytes | None]] | dict[str, str | bytes | None]


def header_pairs(headers: Headers | None) -> Sequence[tuple[str, str | bytes | None]]:
    """The (name, value) pairs of headers in either of confluent-kafka's forms."""
    if headers is None:
        return ()
    return list(headers.items()) if isinstance(headers, dict) else headers


def header_text(value: str | bytes | None) -> str:
    """A header's value as text (ours are UTF-8)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else value or ""


class UndecodableRecord(ValueError):
    """The bytes are not a record of the expected schema."""


class NewerSchemaVersion(UndecodableRecord):
    """The record names a schema version this build does not know: most likely written by a newer
    release. Not bad input, so a reader of kadence.history must stop rather than skip it (skipping
    would lose what it says); the fix is to upgrade the reader, or to pin writers to the old version."""


@dataclass(frozen=True)
class RecordCodec:
    name: str
    schema: Any  # this build's: what decoding yields
    current_fingerprint: str
    fingerprint: str  # what encode writes: this build's, or the version KADENCE_SCHEMA_PIN names
    writer_schema: Any
    versions: dict[str, Any]  # fingerprint -> every archived writer schema of this record

    def encode(self, record: Mapping[str, Any]) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self.writer_schema, record)
        return out.getvalue()

    def decode(self, data: bytes | None, headers: Headers | None = None) -> dict[str, Any]:
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
        assert isinstance(record, dict), f"{self.name} is an Avro record"
        return record

    def headers(self) -> HeaderList:
        return [(SCHEMA_HEADER, self.fingerprint.encode())]

    def wrote(self, headers: Headers | None) -> bool:
        """Whether the record's kadence-schema header names a version of this record: what tells
        apart the records of a topic that carries several."""
        for key, value in header_pairs(headers):
            if key == SCHEMA_HEADER and value is not None:
                fingerprint = header_text(value)
                return fingerprint == self.current_fingerprint or fingerprint in self.versions
        return False

    def _writer_schema(self, headers: Headers | None) -> Any:
        """The schema the record was written with: its header's version (none: this build's)."""
        for key, value in header_pairs(headers):
            if key != SCHEMA_HEADER or value is None:
                continue
            fingerprint = header_text(value)
            if fingerprint == self.current_fingerprint:
                return self.schema
            if fingerprint in self.versions:
                return self.versions[fingerprint]
            known = sorted({self.current_fingerprint, *self.versions})
            raise NewerSchemaVersion(
                f"{self.name}: unknown schema fingerprint {value!r} (this build knows {known}); "
                "upgrade this service or produce with the schema in schemas/"
            )
        return self.schema


def writes_field(record_codec: RecordCodec, record_name: str, field_name: str) -> bool:
    """Whether the schema `record_codec` writes (its pinned version, if any) has `field_name` in
    its record `record_name`: what a writer checks before using a field added later."""
    def found(schema: Any) -> bool:
        if isinstance(schema, dict):
            if schema.get("type") == "record" and schema.get("name", "").rsplit(".", 1)[-1] == record_name:
                return any(field["name"] == field_name for field in schema["fields"])
            return any(found(value) for value in schema.values())
        if isinstance(schema, list):
            return any(found(value) for value in schema)
        return False

    return found(record_codec.writer_schema)


def fingerprint_of(schema: Any) -> str:
    return fastavro.schema.fingerprint(fastavro.schema.to_parsing_canonical_form(schema), "CRC-64-AVRO")


def build_codec(name: str, schema: Any, versions: dict[str, Any], pinned: set[str]) -> RecordCodec:
    """A codec reading into `schema` from any of `versions`, writing the pinned version if one of
    `pinned` is among them."""
    current = fingerprint_of(schema)
    pin = [fingerprint for fingerprint in pinned if fingerprint in versions and fingerprint != current]
    if len(pin) > 1:
        raise SettingError(f"KADENCE_SCHEMA_PIN names {len(pin)} versions of {name} ({', '.join(sorted(pin))}); give one")
    writer = versions[pin[0]] if pin else schema
    return RecordCodec(name, schema, current, pin[0] if pin else current, writer, versions)


@cache
def codec(name: str) -> RecordCodec:
    """The codec for the top-level schema `schemas/<name>.avsc`, parsed once per process."""
    with resources.as_file(resources.files("kadence.schemas").joinpath(f"{name}.avsc")) as schema_path:
        schema = fastavro.schema.load_schema(str(schema_path))
    return build_codec(name, schema, archived_versions().get(name, {}), schema_pin())


@cache
def archived_versions() -> dict[str, dict[str, Any]]:
    """record name -> fingerprint -> parsed writer schema, from schemas/versions/."""
    found: dict[str, dict[str, Any]] = {}
    with resources.as_file(resources.files("kadence.schemas").joinpath("versions")) as directory:
        for path in sorted(Path(directory).glob("*.avsc")):
            name, fingerprint = path.stem.rsplit(".", 1)
            found.setdefault(name, {})[fingerprint] = fastavro.parse_schema(json.loads(path.read_text()))
    return found


@cache
def schema_pin() -> set[str]:
    """KADENCE_SCHEMA_PIN: the archived versions to write (comma-separated fingerprints)."""
    raw = os.environ.get("KADENCE_SCHEMA_PIN", "")
    pinned = {part.strip() for part in raw.split(",") if part.strip()}
    known = {fingerprint for versions in archived_versions().values() for fingerprint in versions}
    unknown = pinned - known
    if unknown:
        raise SettingError(
            f"KADENCE_SCHEMA_PIN names {sorted(unknown)}, which this build does not know; "
            "give fingerprints from `kadence schemas list` (the previous release's current versions), or unset it"
        )
    return pinned


def portable(schema: Any) -> Any:
    """A parsed schema as plain Avro JSON: self-contained (each named type defined at its first
    use), with the defaults a pinned writer needs, without docs or fastavro's own keys."""
    if isinstance(schema, dict):
        return {key: portable(value) for key, value in schema.items() if not key.startswith("__") and key != "doc"}
    if isinstance(schema, list):
        return [portable(value) for value in schema]
    return schema


def archive_current_versions(directory: Path) -> list[Path]:
    """Write this build's version of each Kafka record into `directory` (schemas/versions), unless
    it is already there: the step that keeps a changed schema's old records readable."""
    written = []
    for name in KAFKA_RECORDS:
        record_codec = codec(name)
        path = directory / f"{name}.{record_codec.current_fingerprint}.avsc"
        if not path.exists():
            path.write_text(json.dumps(portable(record_codec.schema), separators=(",", ":")) + "\n")
            written.append(path)
    return written


def command_codec() -> RecordCodec:
    return codec("Command")


def history_batch_codec() -> RecordCodec:
    return codec("HistoryBatch")


def task_codec() -> RecordCodec:
    return codec("Task")
