"""JSON out: one response class that renders datetimes as RFC 3339 and never echoes bytes."""

from __future__ import annotations

import json
from datetime import date, datetime
from typing import Any

from starlette.responses import JSONResponse


def _default(value: object) -> object:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return None  # never echo binary columns (token hashes)
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"cannot serialise {type(value).__name__}")


def dumps(content: Any) -> bytes:
    return json.dumps(
        content, default=_default, ensure_ascii=False, allow_nan=False, separators=(",", ":")
    ).encode("utf-8")


class ApiResponse(JSONResponse):
    """``JSONResponse`` that serialises datetimes as RFC 3339."""

    def render(self, content: Any) -> bytes:
        return dumps(content)
