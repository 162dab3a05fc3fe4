"""JSON out: the base of every answer model, answering one (``reply``), and one response class
that renders datetimes as RFC 3339 and never echoes bytes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict
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


class ReplyModel(BaseModel):
    """Base of every answer model (``models``, ``errors.ErrorBody``): extra keys forbidden. The
    names of its subclasses tell a failed answer from a refused request (``Endpoint.route``)."""

    model_config = ConfigDict(extra="forbid")
    names: ClassVar[set[str]] = set()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        ReplyModel.names.add(cls.__name__)


def reply(
    model: ReplyModel, *, status_code: int = 200, headers: Mapping[str, str] | None = None
) -> ApiResponse:
    """``model`` as the answer: its fields by alias, only those it was given (a default never
    adds a key a stored value did not have), timestamps as the model serialises them."""
    content = model.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return ApiResponse(content, status_code=status_code, headers=headers)
