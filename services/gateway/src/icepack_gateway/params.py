"""What the gateway parses by hand: opaque keyset cursors, JSON bodies (depth-capped) and
``CATALOG.NAMESPACE.TABLE`` filters. Everything else a request carries is a pydantic model
(``inputs``), parsed by the route table (``endpoint``).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from starlette.requests import Request

from icepack_core.types import join_namespace, split_namespace
from icepack_gateway.errors import InvalidCursor, InvalidParameter
from icepack_gateway.inputs import MAX_BIGINT, MAX_IDENT

# A cursor holds at most a score and three identifiers: 4 KiB is far above any real one.
MAX_CURSOR = 4096
# JSON bodies are shallow documents; deeper nesting is refused before anything walks it
# (recursive validators would otherwise hit Python's recursion limit: a 500).
MAX_JSON_DEPTH = 32


def encode_cursor(kind: str, key: list[Any]) -> str:
    raw = json.dumps({"k": kind, "v": key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(value: str | None, kind: str, shape: tuple[type, ...]) -> list[Any] | None:
    """The key of an opaque cursor made by ``encode_cursor(kind, ...)`` for the same listing.

    Anything else (not base64, not JSON, nested too deep, another listing's cursor, values out
    of range) is ``InvalidCursor``: a 400, never a 5xx.
    """
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
    parts = split_namespace(value)
    if len(parts) < 3 or not all(parts):
        raise InvalidParameter(name, "must be CATALOG.NAMESPACE.TABLE")
    return parts[0], join_namespace(parts[1:-1]), parts[-1]
