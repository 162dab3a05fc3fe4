"""Request parameters: each parsed once, named in the 422 when it is wrong.

Identifiers from a request only ever reach SQL as bind parameters; these checks exist so a bad
value is a clear 422 instead of a driver error (Postgres text cannot hold NUL, bigint has a top).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

from starlette.requests import Request

from icepack_core.types import join_namespace, split_namespace
from icepack_gateway.errors import InvalidCursor, InvalidParameter

MAX_IDENT = 512
MAX_BIGINT = 2**63 - 1
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# A cursor holds at most a score and three identifiers: 4 KiB is far above any real one.
MAX_CURSOR = 4096
# JSON bodies are shallow documents; deeper nesting is refused before anything walks it
# (recursive validators would otherwise hit Python's recursion limit: a 500).
MAX_JSON_DEPTH = 32
TOPIC = re.compile(r"^[a-z]+\.[a-z_]+$")
ISSUE_CODE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")

E = TypeVar("E", bound=Enum)


def ident(name: str, value: str) -> str:
    """A catalog/namespace/table name or other free text that is about to be a bind parameter."""
    if not value:
        raise InvalidParameter(name, "must not be empty")
    if len(value) > MAX_IDENT:
        raise InvalidParameter(name, f"is longer than {MAX_IDENT} characters")
    if "\x00" in value:
        raise InvalidParameter(name, "must not contain NUL characters")
    return value


def opt_ident(query: Mapping[str, str], name: str) -> str | None:
    value = query.get(name)
    return None if value is None else ident(name, value)


def opt_choice(query: Mapping[str, str], name: str, choices: type[E]) -> E | None:
    value = query.get(name)
    if value is None:
        return None
    try:
        return choices(value)
    except ValueError:
        allowed = ", ".join(str(c.value) for c in choices)
        raise InvalidParameter(name, f"must be one of {allowed}") from None


def opt_pattern(query: Mapping[str, str], name: str, pattern: re.Pattern[str],
                what: str) -> str | None:
    value = query.get(name)
    if value is None:
        return None
    if not pattern.match(value):
        raise InvalidParameter(name, f"must be {what}")
    return value


def positive_int(name: str, value: str, maximum: int = MAX_BIGINT) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > 19:
        raise InvalidParameter(name, "must be a positive integer")
    number = int(value)
    if not 1 <= number <= maximum:
        raise InvalidParameter(name, f"must be between 1 and {maximum}")
    return number


def opt_int(query: Mapping[str, str], name: str) -> int | None:
    value = query.get(name)
    return None if value is None else positive_int(name, value)


def limit(query: Mapping[str, str], default: int = DEFAULT_LIMIT) -> int:
    value = query.get("limit")
    return default if value is None else positive_int("limit", value, MAX_LIMIT)


def encode_cursor(kind: str, key: list[Any]) -> str:
    raw = json.dumps({"k": kind, "v": key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(query: Mapping[str, str], kind: str, shape: tuple[type, ...]) -> list[Any] | None:
    """The key of an opaque cursor made by ``encode_cursor(kind, ...)`` for the same listing.

    Anything else (not base64, not JSON, nested too deep, another listing's cursor, values out
    of range) is ``InvalidCursor``: a 400, never a 5xx.
    """
    value = query.get("cursor")
    if value is None:
        return None
    if len(value) > MAX_CURSOR:
        raise InvalidCursor("is longer than any cursor this API returns")
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):
        raise InvalidCursor("is not a cursor this API returned") from None
    key = data.get("v") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("k") != kind or not isinstance(key, list):
        raise InvalidCursor("belongs to another listing or sort order")
    if len(key) != len(shape) or not all(
        isinstance(v, t) and not isinstance(v, bool) for v, t in zip(key, shape, strict=True)
    ):
        raise InvalidCursor("is not a cursor this API returned")
    for v in key:
        if isinstance(v, str) and (len(v) > MAX_IDENT or "\x00" in v):
            raise InvalidCursor("is not a cursor this API returned")
        if isinstance(v, int) and abs(v) > MAX_BIGINT:
            raise InvalidCursor("is out of range")
    return key


def only(query: Mapping[str, str], allowed: set[str]) -> None:
    """Refuse unknown query parameters, so a typo (``?heatlh=``) is not silently ignored."""
    unknown = sorted(set(query) - allowed)
    if unknown:
        raise InvalidParameter(unknown[0], f"is not a parameter of this endpoint "
                                           f"(known: {', '.join(sorted(allowed)) or 'none'})")


def json_depth(value: Any) -> int:
    """How deeply lists and objects nest in a parsed JSON value (iteratively: no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in item)
    return deepest


async def json_body(request: Request) -> Any:
    """The parsed JSON body (``BodyLimit`` has already capped its size)."""
    body = await request.body()
    if not body:
        raise InvalidParameter("body", "a JSON body is required")
    try:
        data = json.loads(body)
    except RecursionError:
        raise InvalidParameter("body", f"nests deeper than {MAX_JSON_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidParameter("body", f"is not valid JSON ({exc})") from None
    if json_depth(data) > MAX_JSON_DEPTH:
        raise InvalidParameter("body", f"nests deeper than {MAX_JSON_DEPTH} levels")
    return data


def split_table(name: str, value: str) -> tuple[str, str, str]:
    """``catalog.namespace.table``: the namespace may have several levels; a dot inside a level
    is written ``\\.`` (as ``tables.namespace`` stores it)."""
    ident(name, value)
    parts = split_namespace(value)
    if len(parts) < 3 or not all(parts):
        raise InvalidParameter(name, "must be CATALOG.NAMESPACE.TABLE")
    return parts[0], join_namespace(parts[1:-1]), parts[-1]
