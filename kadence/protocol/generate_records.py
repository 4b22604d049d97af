"""Writes kadence/protocol/records.py, the TypedDicts of every record in schemas/*.avsc, typed as the
codec reads them: `.venv/bin/python -m kadence.protocol.generate_records`. tests/test_records.py
fails until the module is regenerated after a schema changes.

How Avro types map: string -> str, int and long -> int, float and double -> float, boolean -> bool,
bytes -> bytes, an enum -> str (the codec reads a symbol as its name), an array -> list, a map ->
dict[str, ...], a named record -> its TypedDict, a union with null -> `X | None`. A union of two or
more records reads as a (record name, fields) tuple, so it is typed as the union of those tuples,
each tagged with its Literal name. A field with a default is NotRequired: a writer may leave it out
(the codec writes the default), though a decoded record always has it.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).resolve().parent / "records.py"
COMMAND = "python -m kadence.protocol.generate_records"

_PRIMITIVES = {"null": "None", "boolean": "bool", "int": "int", "long": "int", "float": "float", "double": "float",
               "bytes": "bytes", "string": "str"}
_WIDTH = 120  # docs wrap within ruff's 140 characters, indent included


@dataclass
class _Record:
    name: str  # the schema's name
    schema_file: str  # the top-level record whose .avsc defines it
    fields: list[dict[str, Any]]
    doc: str
    type_name: str = ""  # the TypedDict's name: the schema's, qualified by its file where two files define the name


@dataclass
class _Schemas:
    """Every named type of schemas/*.avsc, in the order the files (sorted) define them."""

    records: list[_Record] = field(default_factory=list)
    enums: set[str] = field(default_factory=set)

    def collect(self, schema: Any, schema_file: str) -> None:
        if isinstance(schema, list):
            for branch in schema:
                self.collect(branch, schema_file)
        elif isinstance(schema, dict):
            kind = schema["type"]
            if kind == "record":
                self.records.append(_Record(schema["name"], schema_file, schema["fields"], schema.get("doc", "")))
                for record_field in schema["fields"]:
                    self.collect(record_field["type"], schema_file)
            elif kind == "enum":
                self.enums.add(schema["name"])
            elif kind == "array":
                self.collect(schema["items"], schema_file)
            elif kind == "map":
                self.collect(schema["values"], schema_file)


@dataclass
class _Module:
    """The module's text as it is built: a TypedDict per record, an alias per union of records."""

    schemas: _Schemas
    by_name: dict[tuple[str, str], _Record] = field(default_factory=dict)  # (schema file, name) -> record
    unique: dict[str, _Record] = field(default_factory=dict)  # name -> the record, when one file defines it
    aliases: dict[tuple[str, ...], str] = field(default_factory=dict)  # branch names -> alias name
    alias_lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        files_of: dict[str, set[str]] = {}
        for record in self.schemas.records:
            files_of.setdefault(record.name, set()).add(record.schema_file)
        for record in self.schemas.records:
            twice = len(files_of[record.name]) > 1
            record.type_name = f"{record.name}{record.schema_file}" if twice else record.name
            self.by_name[(record.schema_file, record.name)] = record
            if not twice:
                self.unique[record.name] = record

    def named(self, name: str, schema_file: str) -> _Record:
        """The record a name refers to: its own file's, or the one record of that name."""
        return self.by_name.get((schema_file, name)) or self.unique[name]

    def python_type(self, schema: Any, record: _Record, field_name: str) -> str:
        if isinstance(schema, list):
            return self._union(schema, record, field_name)
        if isinstance(schema, dict):
            kind = schema["type"]
            if kind == "record":
                return self.named(schema["name"], record.schema_file).type_name
            if kind == "enum":
                return "str"
            if kind == "array":
                return f"list[{self.python_type(schema['items'], record, field_name)}]"
            if kind == "map":
                return f"dict[str, {self.python_type(schema['values'], record, field_name)}]"
            return self.python_type(kind, record, field_name)
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in self.schemas.enums:
            return "str"
        return self.named(schema, record.schema_file).type_name

    def _union(self, branches: list[Any], record: _Record, field_name: str) -> str:
        named: list[_Record] = []
        others: list[str] = []
        for branch in branches:
            found = self._branch_record(branch, record)
            if found is None:
                others.append(self.python_type(branch, record, field_name))
            else:
                named.append(found)
        if len(named) > 1:
            parts = [self._alias(named, record, field_name)]
        else:
            parts = [branch.type_name for branch in named]
        parts += [part for part in others if part != "None"]
        return " | ".join(parts + (["None"] if "None" in others else []))

    def _branch_record(self, branch: Any, record: _Record) -> _Record | None:
        if isinstance(branch, dict) and branch["type"] == "record":
            return self.named(branch["name"], record.schema_file)
        if isinstance(branch, str) and branch not in _PRIMITIVES and branch not in self.schemas.enums:
            return self.named(branch, record.schema_file)
        return None

    def _alias(self, branches: list[_Record], record: _Record, field_name: str) -> str:
        """The tagged union of `branches` (one alias for each list of branches), and beside it the
        union of their records."""
        key = tuple(branch.type_name for branch in branches)
        if key in self.aliases:
            return self.aliases[key]
        alias = record.type_name + "".join(part.capitalize() for part in field_name.split("_"))
        self.aliases[key] = alias
        tagged = [f'tuple[Literal["{branch.name}"], {branch.type_name}]' for branch in branches]
        self.alias_lines += [
            "",
            "",
            f"# {record.name}.{field_name}: a (record name, fields) tuple, as the codec reads a union of records.",
            *_wrapped_assignment(alias, tagged),
            "",
            f"# The record of any branch of {alias}.",
            *_wrapped_assignment(f"{alias}Record", [branch.type_name for branch in branches]),
        ]
        return alias

    def typed_dict(self, record: _Record) -> list[str]:
        lines = ["", "", f"class {record.type_name}(TypedDict):"]
        if record.doc:
            lines += _docstring(record.doc)
        for record_field in record.fields:
            if record_field.get("doc"):
                lines += [f"    # {line}" for line in textwrap.wrap(record_field["doc"], _WIDTH - 6, break_on_hyphens=False)]
            annotation = self.python_type(record_field["type"], record, record_field["name"])
            if "default" in record_field:
                annotation = f"NotRequired[{annotation}]"
            lines.append(f"    {record_field['name']}: {annotation}")
        return lines


def _docstring(doc: str) -> list[str]:
    doc = doc.replace('"""', "'''").replace("\\", "\\\\")
    wrapped = textwrap.wrap(doc, _WIDTH - 10, break_on_hyphens=False)
    if len(wrapped) == 1:
        return [f'    """{wrapped[0]}"""', ""]
    return [f'    """{wrapped[0]}', *(f"    {line}" for line in wrapped[1:]), '    """', ""]


def _wrapped_assignment(name: str, parts: list[str]) -> list[str]:
    return [f"{name} = (", *(f"    {part}" if i == 0 else f"    | {part}" for i, part in enumerate(parts)), ")"]


def schema_texts() -> dict[str, str]:
    """Each top-level schema's name and text, from schemas/ as the package installs it."""
    directory = resources.files("kadence.schemas")
    names = sorted(entry.name for entry in directory.iterdir() if entry.name.endswith(".avsc"))
    return {name.removesuffix(".avsc"): directory.joinpath(name).read_text() for name in names}


def generate(texts: dict[str, str]) -> str:
    """The text of kadence/protocol/records.py for these schemas (name -> .avsc text)."""
    schemas = _Schemas()
    for name, text in texts.items():
        schemas.collect(json.loads(text), name)
    module = _Module(schemas)
    classes = [line for record in schemas.records for line in module.typed_dict(record)]
    header = [
        '"""The records of schemas/*.avsc as TypedDicts, typed as kadence.protocol.codec reads them.',
        "",
        f"Generated by `{COMMAND}` from schemas/*.avsc: do not edit, regenerate.",
        "See kadence/protocol/generate_records.py for how each Avro type maps.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Literal, NotRequired, TypedDict",
    ]
    return "\n".join(header + classes + module.alias_lines) + "\n"


def main() -> None:
    OUTPUT.write_text(generate(schema_texts()))
    print(f"wrote {OUTPUT}")


if __name__ == "__main__":
    main()
