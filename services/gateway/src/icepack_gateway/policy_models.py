"""Policy bodies at the HTTP boundary. The policy types and each type's ``config`` shape belong
to the policy engine (``icepack_core.policy``, no Spark in it): the body is ``{enabled,
config}`` and the config is checked against the model of the type named in the path.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from icepack_core.errors import PolicyError
from icepack_core.policy import parse_config
from icepack_core.types import PolicyType
from icepack_gateway.errors import InvalidParameter


class PolicyIn(BaseModel):
    """``PUT /policies/...`` body; ``config`` is checked against the type's model."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="keys of the config model of the policy type in the path "
        "(DataCompactionConfig, MetadataCompactionConfig, SnapshotExpiryConfig, "
        "OrphanFileRemovalConfig); "
        "unknown keys are refused, only the keys given are stored",
    )


def validated_config(policy_type: PolicyType, body: PolicyIn) -> dict[str, Any]:
    """The config holding only the keys the body set.

    Raises:
        InvalidParameter: the config does not fit the policy type (the message names the key).
    """
    try:
        config = parse_config(policy_type.value, body.config)
    except PolicyError as exc:
        raise InvalidParameter("config", str(exc)) from None
    dumped: dict[str, Any] = config.model_dump(mode="json", exclude_unset=True)
    return dumped
