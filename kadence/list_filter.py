"""Temporal's list filter (`WorkflowType = 'Order' AND StartTime > '2026-11-30T00:00:00Z'`),
parsed into a SQL condition over the read model with every value a bound parameter.

Grammar (keywords in any case):

    filter     := or_expr [ORDER BY field [ASC|DESC]]
    or_expr    := and_expr (OR and_expr)*
    and_expr   := primary (AND primary)*
    primary    := '(' or_expr ')' | field predicate
    predicate  := ('=' | '!=' | '<>' | '>' | '>=' | '<' | '<=') value
                | [NOT] BETWEEN value AND value
                | [NOT] IN '(' value (',' value)* ')'
                | STARTS_WITH value
                | IS [NOT] NULL
    field      := WorkflowId | WorkflowType | RunId | ExecutionStatus | TaskQueue | StartTime
                | CloseTime | HistoryLength | ActivityId | ActivityType (standalone activities only)
                | OperationId | Endpoint | Operation (standalone Nexus operations only)
                | any other name (a custom search attribute) | `quoted name`
    value      := 'text' | "text" | number | true | false
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from kadence.protocol.names import ACTIVITY_KEY_PREFIX, NEXUS_KEY_PREFIX

# Built-in search attributes: their column and how a value is bound to it.
_COLUMNS: dict[str, tuple[str, str]] = {
    "WorkflowId": ("workflow_id", "text"),
    "WorkflowType": ("workflow_type", "text"),
    "RunId": ("run_id", "text"),
    "ExecutionStatus": ("status", "text"),
    "TaskQueue": ("task_queue", "text"),
    "StartTime": ("start_time", "time"),
    "CloseTime": ("close_time", "time"),
    "HistoryLength": ("history_length", "number"),
    # A standalone activity's (decision 0007): its key without the prefix, and its type.
    "ActivityId": (f"substr(workflow_id, {len(ACTIVITY_KEY_PREFIX) + 1})", "text"),
    "ActivityType": ("workflow_type", "text"),
    # A standalone Nexus operation's (decision 0008): its key without the prefix, its endpoint (the
    # run's task queue), and its operation (the run's type).
    "OperationId": (f"substr(workflow_id, {len(NEXUS_KEY_PREFIX) + 1})", "text"),
    "Endpoint": ("task_queue", "text"),
    "Operation": ("workflow_type", "text"),
}


class Scope(Enum):
    """Which runs a filter reads, by their key's prefix: workflows' (no prefix of the others),
    standalone activities' or standalone Nexus operations'."""

    WORKFLOWS = ""
    ACTIVITIES = ACTIVITY_KEY_PREFIX
    NEXUS_OPERATIONS = NEXUS_KEY_PREFIX


# The fields only one scope's runs have, those runs, and the call that lists them.
_SCOPED_FIELDS = {
    Scope.ACTIVITIES: ({"ActivityId", "ActivityType"}, "standalone activities", "list_activities"),
    Scope.NEXUS_OPERATIONS: ({"OperationId", "Endpoint", "Operation"}, "standalone Nexus operations", "list_nexus_operations"),
}
# Orders as the operation or activity id does: the key (the prefix is the same on every row).
_KEY_ORDERS = {"ActivityId", "OperationId"}
MAX_NESTING = 64  # parentheses within parentheses: far past any hand-written filter, well within Python's stack
_OPERATORS = {"=": "=", "!=": "<>", "<>": "<>", ">": ">", ">=": ">=", "<": "<", "<=": "<="}
_TOKEN = re.compile(r"""
    \s*(?:
      (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.)*")
    | (?P<number>-?\d+(?:\.\d+)?)
    | (?P<op><>|!=|>=|<=|=|>|<)
    | (?P<punct>[(),])
    | (?P<quoted>`[^`]+`)
    | (?P<word>[A-Za-z_][A-Za-z0-9_.]*)
    )""", re.VERBOSE)


class ListFilterError(ValueError):
    """The filter does not parse; the message says where and what was expected."""


@dataclass
class Token:
    kind: str
    text: str
    position: int

    @property
    def keyword(self) -> str:
        return self.text.upper() if self.kind == "word" else ""


@dataclass
class SqlFilter:
    """A WHERE condition and its parameters, plus an ORDER BY clause (both safe to interpolate)."""

    where: str = "TRUE"
    params: list[Any] = field(default_factory=list)
    order_by: str = "start_time DESC"


def parse(text: str, *, scope: Scope = Scope.WORKFLOWS) -> SqlFilter:
    """The SQL for a list filter over the runs of `scope` (an empty filter matches every one). The
    fields of standalone activities and Nexus operations filter theirs only."""
    parser = _Parser(_tokens(text), text)
    result = SqlFilter()
    if parser.tokens and parser.peek_keyword() != "ORDER":
        result.where = parser.or_expr(result.params)
    if parser.tokens and parser.peek_keyword() == "ORDER":
        result.order_by = parser.order_by()
    if parser.index < len(parser.tokens):
        parser.fail("end of filter")
    if scope == Scope.NEXUS_OPERATIONS and "Service" in parser.names:
        raise ListFilterError("Service is not a filter of Kadence's Nexus operations (the read model keeps a standalone "
                              "operation's endpoint and operation, not its service): filter by Endpoint and Operation")
    for other, (fields, runs, call) in _SCOPED_FIELDS.items():
        if other != scope and parser.names & fields:
            raise ListFilterError(f"{', '.join(sorted(parser.names & fields))} filter {runs}: use {call}")
    # The scope first, its parameters with it.
    if scope == Scope.WORKFLOWS:
        result.where = f"NOT starts_with(workflow_id, %s) AND NOT starts_with(workflow_id, %s) AND ({result.where})"
        result.params[:0] = [Scope.ACTIVITIES.value, Scope.NEXUS_OPERATIONS.value]
    else:
        result.where = f"starts_with(workflow_id, %s) AND ({result.where})"
        result.params.insert(0, scope.value)
    return result


def _tokens(text: str) -> list[Token]:
    tokens, position = [], 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise ListFilterError(f"cannot read the filter at character {position}: {text[position:position + 20]!r}")
        kind = match.lastgroup or ""
        tokens.append(Token(kind, match.group(kind), match.start(kind)))
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[Token], text: str) -> None:
        self.tokens = tokens
        self.text = text
        self.index = 0
        self.depth = 0
        self.names: set[str] = set()  # the fields named

    def fail(self, expected: str) -> None:
        found = self.tokens[self.index] if self.index < len(self.tokens) else None
        where = f"{found.text!r} at character {found.position}" if found else "the end of the filter"
        raise ListFilterError(f"expected {expected}, found {where}")

    def peek_keyword(self) -> str:
        return self.tokens[self.index].keyword if self.index < len(self.tokens) else ""

    def take(self, kind: str | None = None, text: str | None = None) -> Token:
        if self.index >= len(self.tokens):
            self.fail(text or kind or "more")
        token = self.tokens[self.index]
        if (kind and token.kind != kind) or (text and token.keyword != text and token.text != text):
            self.fail(text or kind or "")
        self.index += 1
        return token

    def accept(self, keyword: str) -> bool:
        if self.peek_keyword() == keyword or (self.index < len(self.tokens) and self.tokens[self.index].text == keyword):
            self.index += 1
            return True
        return False

    def or_expr(self, params: list[Any]) -> str:
        parts = [self.and_expr(params)]
        while self.accept("OR"):
            parts.append(self.and_expr(params))
        return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"

    def and_expr(self, params: list[Any]) -> str:
        parts = [self.primary(params)]
        while self.accept("AND"):
            parts.append(self.primary(params))
        return parts[0] if len(parts) == 1 else "(" + " AND ".join(parts) + ")"

    def primary(self, params: list[Any]) -> str:
        if self.accept("("):
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise ListFilterError(f"the filter nests parentheses more than {MAX_NESTING} deep; write it flatter")
            inner = self.or_expr(params)
            self.take("punct", ")")
            self.depth -= 1
            return f"({inner})"
        name = self.field_name()
        return self.predicate(name, params)

    def field_name(self) -> str:
        token = self.take()
        if token.kind == "quoted":
            return token.text.strip("`")
        if token.kind != "word" or token.keyword in ("AND", "OR", "NOT", "ORDER"):
            self.index -= 1
            self.fail("a search attribute name")
        self.names.add(token.text)
        return token.text

    def predicate(self, name: str, params: list[Any]) -> str:
        if self.index < len(self.tokens) and self.tokens[self.index].kind == "op":
            operator = _OPERATORS[self.take("op").text]
            return _compare(name, operator, self.value(), params)
        negated = self.accept("NOT")
        if self.accept("BETWEEN"):
            low = self.value()
            self.take("word", "AND")
            high = self.value()
            condition = f"({_compare(name, '>=', low, params)} AND {_compare(name, '<=', high, params)})"
            return f"NOT {condition}" if negated else condition
        if self.accept("IN"):
            self.take("punct", "(")
            values = [self.value()]
            while self.accept(","):
                values.append(self.value())
            self.take("punct", ")")
            condition = "(" + " OR ".join(_compare(name, "=", v, params) for v in values) + ")"
            return f"NOT {condition}" if negated else condition
        if negated:
            self.fail("BETWEEN or IN after NOT")
        if self.accept("STARTS_WITH"):
            prefix = self.value()
            if not isinstance(prefix, str):
                raise ListFilterError(f"STARTS_WITH needs a text value for {name}")
            text = _text(name, params)
            params += [prefix]
            return f"starts_with({text}, %s)"
        if self.accept("IS"):
            negated = self.accept("NOT")
            self.take("word", "NULL")
            return f"{_column_or_attribute(name, params)} IS {'NOT ' if negated else ''}NULL"
        self.fail(f"a comparison after {name} (=, !=, >, >=, <, <=, BETWEEN, IN, STARTS_WITH, IS NULL)")
        raise AssertionError  # fail() raised

    def value(self) -> Any:
        if self.index >= len(self.tokens):
            self.fail("a value ('text', a number, true or false)")
        token = self.take()
        if token.kind == "string":
            quote = token.text[0]
            body = token.text[1:-1].replace(quote * 2, quote)
            return re.sub(r"\\(.)", r"\1", body)
        if token.kind == "number":
            return float(token.text) if "." in token.text else int(token.text)
        if token.keyword in ("TRUE", "FALSE"):
            return token.keyword == "TRUE"
        self.index -= 1
        self.fail("a value ('text', a number, true or false)")

    def order_by(self) -> str:
        self.take("word", "ORDER")
        self.take("word", "BY")
        name = self.field_name()
        if name not in _COLUMNS:
            raise ListFilterError(f"ORDER BY takes a built-in search attribute ({', '.join(_COLUMNS)}), not {name}")
        direction = "DESC" if self.accept("DESC") else ("ASC" if self.accept("ASC") else "ASC")
        column = "workflow_id" if name in _KEY_ORDERS else _COLUMNS[name][0]
        return f"{column} {direction}"


def _column_or_attribute(name: str, params: list[Any]) -> str:
    if name in _COLUMNS:
        return _COLUMNS[name][0]
    params += [name]
    return "search_attributes -> %s"


def _text(name: str, params: list[Any]) -> str:
    if name in _COLUMNS:
        return f"{_COLUMNS[name][0]}::text"
    params += [name]
    return "search_attributes ->> %s"


def _compare(name: str, operator: str, value: Any, params: list[Any]) -> str:
    if name in _COLUMNS:
        column, kind = _COLUMNS[name]
        if kind == "time":
            params += [_timestamp(name, value)]
        elif kind == "number" and not isinstance(value, (int, float)):
            raise ListFilterError(f"{name} compares with a number, not {value!r}")
        else:
            params += [value if kind == "number" else str(value)]
        return f"{column} {operator} %s"
    # A custom attribute: compared as JSON, so numbers compare as numbers and text as text.
    params += [name, json.dumps(value)]
    return f"search_attributes -> %s {operator} %s::jsonb"


def _timestamp(name: str, value: Any) -> datetime:
    if not isinstance(value, str):
        raise ListFilterError(f"{name} compares with a time in quotes ('2026-11-30T08:00:00Z'), not {value!r}")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ListFilterError(f"{name}: {value!r} is not an ISO 8601 time ('2026-11-30T08:00:00Z')") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)  # a time without a zone is UTC
