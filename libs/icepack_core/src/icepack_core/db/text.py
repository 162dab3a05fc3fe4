"""What Postgres can store in ``text`` and ``jsonb``: anything but a NUL byte or a lone surrogate.

A catalog, a metadata file or a writer can hand Icepack either (Iceberg and Spark store them
happily). Checked before a write, such a value becomes a reason naming it instead of an
exception that would retry the same write for ever.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def unstorable(label: str, text: object) -> str | None:
    """Why ``text`` (called ``label`` in the reason) cannot be stored, or None when it can (or
    is not a string)."""
    if not isinstance(text, str):
        return None
    if "\x00" in text:
        return f"NUL byte in {label}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"{label} is not valid Unicode (lone surrogate)"
    return None


def storable(text: str) -> str:
    """``text`` as Postgres can store it, for messages Icepack writes about something else (an
    error, a reason): a NUL byte becomes the four characters ``\\x00`` and a lone surrogate
    its ``\\udXXX`` escape; any other text comes back unchanged."""
    if unstorable("text", text) is None:
        return text
    escaped = text.replace("\x00", "\\x00")
    return escaped.encode("utf-8", "backslashreplace").decode("utf-8")


def unstorable_properties(properties: Mapping[str, Any]) -> str | None:
    """The first reason a table property (its name or value) cannot be stored, or None. Names
    are shown escaped."""
    for key, value in properties.items():
        reason = unstorable(f"property name {key!a}", key) or unstorable(f"property {key!a}", value)
        if reason is not None:
            return reason
    return None
