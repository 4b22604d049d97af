"""A small HTML template helper: every value is escaped unless it is already `Html` (the output of
another template). A workflow id or a search attribute holding markup shows as text."""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any


class Html(str):
    """Markup that is safe to put in a page as it is: built by `render`, `join` or `raw` only."""


def escape(value: Any) -> Html:
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def render(template: str, **values: Any) -> Html:
    """`template` with each {name} replaced by its value, escaped (attributes too: quotes are escaped)."""
    return Html(template.format(**{name: escape(value) for name, value in values.items()}))


def join(parts: Iterable[Any], separator: str = "") -> Html:
    return Html(separator.join(escape(part) for part in parts))


def raw(markup: str) -> Html:
    """Markup written in this package's code (never from data)."""
    return Html(markup)

