"""Policy bodies at the HTTP boundary. The policy types and each type's ``config`` shape belong
to the policy engine (``icepack_core.policy``); the gateway imports it lazily, so the read APIs
keep working in an installation without it (policy writes then answer 501 NOT_AVAILABLE).
"""

from __future__ import annotations

import importlib
from enum import StrEnum
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from icepack_gateway.errors import InvalidParameter, NotAvailable


class PolicyType(StrEnum):
    DATA_COMPACTION = "system.data-compaction"
    METADATA_COMPACTION = "system.metadata-compaction"
    SNAPSHOT_EXPIRY = "system.snapshot-expiry"
    ORPHAN_FILE_REMOVAL = "system.orphan-file-removal"


class PolicyIn(BaseModel):
    """``PUT /policies/...`` body; ``config`` is checked against the type's model."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    config: dict[str, Any] = Field(default_factory=dict)


def policy_engine() -> ModuleType:
    """``icepack_core.policy``, or NotAvailable when this installation has none."""
    try:
        return importlib.import_module("icepack_core.policy")
    except ImportError:
        raise NotAvailable("policies need the policy engine (icepack_core.policy), which this "
                           "installation does not have") from None


def validated_body(policy_type: PolicyType, body: Any) -> tuple[bool, dict[str, Any]]:
    """``(enabled, config)``, config holding only the keys the body set.

    Raises:
        pydantic.ValidationError: the body is not ``{enabled, config}``.
        InvalidParameter: the config does not fit the policy type (the message names the key).
    """
    parsed = PolicyIn.model_validate(body)
    engine = policy_engine()
    try:
        config = engine.parse_config(policy_type.value, parsed.config)
    except engine.PolicyError as exc:
        raise InvalidParameter("config", str(exc)) from None
    dumped: dict[str, Any] = config.model_dump(mode="json", exclude_unset=True)
    return parsed.enabled, dumped


def config_schemas() -> dict[str, Any]:
    """JSON Schema of each type's config, for the OpenAPI document (empty without an engine)."""
    try:
        engine = policy_engine()
    except NotAvailable:
        return {}
    return {t: model.model_json_schema() for t, model in engine.CONFIG_TYPES.items()}
