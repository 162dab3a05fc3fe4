"""Map a Polaris policy (its wire form) onto an Icepack ``PolicyAttachment``.

Polaris 1.4.1 stores a policy's ``content`` as a JSON string, validated against the content
schema of its type: ``enable`` (required boolean), ``version`` (optional, ``"2025-02-03"``),
``config`` (a free map of string/number/boolean), and for ``system.orphan-file-removal`` also
``max_orphan_file_age_in_days`` and ``locations``. ``map_policy`` is pure:

* the keys Icepack knows become its config fields (``POLARIS_KEYS``: Polaris' spelling, e.g.
  ``min_snapshot_to_keep`` -> ``retain_last``, days -> hours), and Icepack's own field names
  are accepted as they are;
* every other key is kept in ``unknown`` and shown, never fatal (the schema says
  interoperability is not guaranteed);
* a value Icepack cannot accept (wrong type, out of range, an unknown compaction strategy, an
  orphan age below the 72 h floor without ``allow_unsafe_older_than``) makes the attachment
  ``invalid`` with a reason naming the Polaris key; ``policy.resolve`` then passes over it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from icepack_core.errors import PolicyError
from icepack_core.policy import CONFIG_TYPES, PolicyAttachment, parse_config
from icepack_core.types import PolicyType, join_namespace

SCHEMA_VERSION = "2025-02-03"
Scope = Literal["catalog", "namespace", "table"]


class PolarisPolicy(BaseModel):
    """One entry of ``GET .../applicable-policies`` (Polaris' ``ApplicablePolicy``)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    policy_type: str = Field(alias="policy-type", max_length=200)
    inheritable: bool = True
    name: str = Field(max_length=256)
    description: str | None = None
    content: str | None = Field(None, max_length=1_000_000)
    version: int = 0
    inherited: bool = False
    # Where the policy is defined (not where it is attached).
    namespace: list[str] = Field(default_factory=list)


class MappingError(ValueError):
    """A Polaris value Icepack cannot accept; the message names the Polaris key."""


def _days_to_hours(key: str) -> Callable[[Any], tuple[str, Any]]:
    field_name = {
        "max_snapshot_age_days": "max_snapshot_age_hours",
        "max_orphan_file_age_in_days": "older_than_hours",
    }[key]

    def convert(value: Any) -> tuple[str, Any]:
        return field_name, _number(key, value) * 24

    return convert


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise MappingError(f"{key}={value!r} must be a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise MappingError(f"{key}={value!r} must be a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise MappingError(f"{key}={value!r} must be a finite number")
    return number


def _integer(key: str, field_name: str) -> Callable[[Any], tuple[str, Any]]:
    def convert(value: Any) -> tuple[str, Any]:
        number = _number(key, value)
        if not number.is_integer():
            raise MappingError(f"{key}={value!r} must be a whole number")
        return field_name, int(number)

    return convert


# compaction_strategy values (Polaris' example says "bin-pack") -> Icepack's strategy.
STRATEGIES = {"bin-pack": "binpack", "binpack": "binpack", "bin_pack": "binpack", "sort": "sort"}
_ZORDER = re.compile(r"^z-?order\s*(?:\((?P<columns>[^()]*)\))?$", re.IGNORECASE)


def strategy_fields(key: str, value: Any) -> dict[str, object]:
    """``compaction_strategy`` -> ``strategy`` (+ ``zorder_columns`` for ``zorder(a, b)``)."""
    if not isinstance(value, str):
        raise MappingError(f"{key}={value!r} must be a string")
    text = value.strip()
    if text.lower() in STRATEGIES:
        return {"strategy": STRATEGIES[text.lower()]}
    match = _ZORDER.match(text)
    if match is None:
        raise MappingError(
            f"{key}={value!r} is not a strategy Icepack knows (bin-pack, sort, zorder(col, ...))"
        )
    fields: dict[str, object] = {"strategy": "zorder"}
    if match.group("columns") is not None:
        fields["zorder_columns"] = _columns(key, match.group("columns"))
    return fields


def _columns(key: str, text: str) -> list[str]:
    columns = [c.strip() for c in text.split(",")]
    if not columns or any(not c for c in columns):
        raise MappingError(f"{key}: {text!r} must name columns separated by commas")
    return columns


# Polaris' config keys Icepack knows, per type: key -> (Icepack field, converted value).
POLARIS_KEYS: dict[str, dict[str, Callable[[Any], tuple[str, Any]]]] = {
    PolicyType.DATA_COMPACTION: {
        "target_file_size_bytes": _integer("target_file_size_bytes", "target_file_size_bytes"),
        "zorder_columns": lambda v: ("zorder_columns", _columns("zorder_columns", str(v))),
    },
    PolicyType.METADATA_COMPACTION: {},
    PolicyType.SNAPSHOT_EXPIRY: {
        "min_snapshot_to_keep": _integer("min_snapshot_to_keep", "retain_last"),
        "max_snapshot_age_days": _days_to_hours("max_snapshot_age_days"),
    },
    PolicyType.ORPHAN_FILE_REMOVAL: {
        "max_orphan_file_age_in_days": _days_to_hours("max_orphan_file_age_in_days"),
    },
}
# Keys Polaris defines that Icepack reads but does not apply, and why (shown with the policy).
NOT_APPLIED = {
    "max_ref_age_days": "Icepack's expiry never removes branches or tags",
}


@dataclass(frozen=True)
class Mapped:
    """A policy's content as Icepack reads it."""

    enabled: bool
    config: dict[str, object]
    unknown: dict[str, object]


def map_content(policy_type: str, content: str | None) -> Mapped:
    """Read a policy's ``content`` (see the module).

    Raises:
        MappingError: content Icepack cannot accept (the message names the key).
    """
    try:
        body = json.loads(content or "")
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python parses
        raise MappingError("content is not JSON") from None
    if not isinstance(body, dict):
        raise MappingError("content is not a JSON object")
    if "version" in body and body["version"] != SCHEMA_VERSION:
        raise MappingError(f"version={body['version']!r} is not {SCHEMA_VERSION!r}")
    enable = body.get("enable")
    if not isinstance(enable, bool):
        raise MappingError(f"enable={enable!r} must be true or false")
    config = body.get("config", {})
    if not isinstance(config, dict):
        raise MappingError(f"config={config!r} must be an object")
    pairs = dict(config)
    top_level = {"version", "enable", "config"}
    if policy_type == PolicyType.ORPHAN_FILE_REMOVAL:
        top_level |= {"max_orphan_file_age_in_days", "locations"}
        pairs |= {k: body[k] for k in ("max_orphan_file_age_in_days", "locations") if k in body}
    unknown = {k: v for k, v in body.items() if k not in top_level}
    fields, more_unknown = _config_fields(policy_type, pairs)
    return Mapped(enable, fields, unknown | more_unknown)


def _config_fields(
    policy_type: str, pairs: dict[str, object]
) -> tuple[dict[str, object], dict[str, object]]:
    known = POLARIS_KEYS.get(policy_type, {})
    own = set(CONFIG_TYPES[policy_type].model_fields) if policy_type in CONFIG_TYPES else set()
    fields: dict[str, object] = {}
    unknown: dict[str, object] = {}
    for key, value in pairs.items():
        if key == "compaction_strategy" and policy_type == PolicyType.DATA_COMPACTION:
            fields |= strategy_fields(key, value)
        elif key == "locations" and policy_type == PolicyType.ORPHAN_FILE_REMOVAL:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise MappingError(f"locations={value!r} must be a list of strings")
            fields["locations"] = list(value)
        elif key in known:
            name, converted = known[key](value)
            fields[name] = converted
        elif key in own and key not in ("locations", "delete_outside_location"):
            fields[key] = value
        else:
            unknown[key] = value
    return fields, unknown


# Icepack field -> the Polaris key it came from, so a validation message names the latter.
POLARIS_NAMES = {
    "strategy": "compaction_strategy",
    "retain_last": "min_snapshot_to_keep",
    "max_snapshot_age_hours": "max_snapshot_age_days",
    "older_than_hours": "max_orphan_file_age_in_days",
}


def map_policy(
    policy: PolarisPolicy,
    catalog: str,
    scope: Scope,
    namespace: tuple[str, ...],
    table: str | None,
    fetched_at: datetime | None = None,
) -> PolicyAttachment:
    """``policy`` attached at ``scope`` (``namespace`` / ``table`` its target) as an Icepack
    attachment; ``invalid`` says why it cannot be used, naming the Polaris key."""
    invalid: str | None = None
    enabled, config, unknown = False, {}, {}
    if policy.policy_type not in CONFIG_TYPES:
        invalid = f"policy type {policy.policy_type!r} is not one Icepack maintains"
    else:
        try:
            mapped = map_content(policy.policy_type, policy.content)
            enabled, config, unknown = mapped.enabled, mapped.config, mapped.unknown
            parse_config(policy.policy_type, config)
        except MappingError as exc:
            invalid = str(exc)
        except PolicyError as exc:
            invalid = _rename_fields(policy.policy_type, str(exc), config)
    for key, why in NOT_APPLIED.items():
        if key in unknown:
            unknown[key] = f"{unknown[key]!r} ({why})"
    return PolicyAttachment(
        policy.policy_type,
        scope,
        catalog,
        join_namespace(namespace) if scope != "catalog" else None,
        table if scope == "table" else None,
        enabled,
        config,
        origin="polaris",
        name=policy.name,
        version=policy.version,
        unknown=unknown,
        invalid=invalid,
        fetched_at=fetched_at,
    )


def _rename_fields(policy_type: str, message: str, config: dict[str, object]) -> str:
    """``parse_config``'s message with each Icepack field named by its Polaris key."""
    text = message.removeprefix(f"{policy_type}: ")
    for field_name in config:
        key = POLARIS_NAMES.get(field_name, field_name)
        if key != field_name:
            text = re.sub(rf"\b{re.escape(field_name)}\b", f"{key} (as {field_name})", text)
    return text
