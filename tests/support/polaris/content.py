"""Polaris 1.4.1's validation of a ``system.*`` policy's ``content``, as its content schemas
(Apache-2.0, Apache Polaris 1.4.1, ``polaris-core/src/main/resources/schemas/policies/system/``,
copied beside this file with attribution) define it: a JSON object with ``enable`` (required
boolean), ``version`` (optional, the constant ``"2025-02-03"``), ``config`` (a map of string,
number or boolean) and, for orphan-file-removal, ``max_orphan_file_age_in_days`` (a number) and
``locations`` (strings); no other top-level key.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCHEMAS = Path(__file__).parent / "schemas"
SYSTEM_TYPES = (
    "system.data-compaction",
    "system.metadata-compaction",
    "system.snapshot-expiry",
    "system.orphan-file-removal",
)


def schema(policy_type: str) -> dict[str, Any]:
    name = policy_type.removeprefix("system.")
    loaded: dict[str, Any] = json.loads((SCHEMAS / f"{name}-2025-02-03.json").read_text())
    return loaded


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type_ok(value: Any, kinds: str | list[str]) -> bool:
    checks: dict[str, Callable[[Any], bool]] = {
        "string": lambda v: isinstance(v, str),
        "number": _is_number,
        "boolean": lambda v: isinstance(v, bool),
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }
    return any(checks[k](value) for k in ([kinds] if isinstance(kinds, str) else kinds))


def valid_content(policy_type: str, content: str) -> bool:
    """Whether ``content`` passes ``policy_type``'s schema (the subset of JSON Schema those four
    schemas use: type, const, required, additionalProperties, items)."""
    try:
        body = json.loads(content)
    except ValueError:
        return False
    spec = schema(policy_type)
    if not isinstance(body, dict):
        return False
    props: dict[str, Any] = spec["properties"]
    if any(key not in body for key in spec.get("required", [])):
        return False
    for key, value in body.items():
        if key not in props:
            return False  # additionalProperties: false
        rule = props[key]
        if not _type_ok(value, rule["type"]):
            return False
        if "const" in rule and value != rule["const"]:
            return False
        if rule["type"] == "array" and not all(_type_ok(v, rule["items"]["type"]) for v in value):
            return False
        extra = rule.get("additionalProperties")
        if isinstance(extra, dict) and not all(_type_ok(v, extra["type"]) for v in value.values()):
            return False
    return True
