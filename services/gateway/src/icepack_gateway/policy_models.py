"""Policy bodies at the HTTP boundary. The policy types and each type's ``config`` shape belong
to the policy engine (``icepack_core.policy``, no Spark in it): the body is ``{enabled,
config}`` and the config is checked against the model of the type named in the path.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from icepack_core.errors import PolicyError
from icepack_core.polaris.mapping import PolarisPolicy, map_policy
from icepack_core.policy import PolicyAttachment, parse_config
from icepack_core.types import PolicyType
from icepack_gateway.errors import InvalidParameter

Str256 = Annotated[str, Field(min_length=1, max_length=256)]


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


class PolarisTarget(BaseModel):
    """Where a Polaris policy is attached (Polaris' ``PolicyAttachmentTarget``)."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["catalog", "namespace", "table-like"]
    path: list[Str256] = Field(default_factory=list, max_length=17)


class ProposedPolarisPolicy(BaseModel):
    """A Polaris policy to try out in a simulation, as Polaris' create request and attach
    target spell it (``content`` the JSON string Polaris stores), as if it were attached there
    (it replaces the Polaris policy of its type at that target)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9\-_]+$", max_length=256)
    type: PolicyType
    content: str = Field(max_length=100_000)
    target: PolarisTarget

    def attachment(self, catalog: str) -> PolicyAttachment:
        """The policy mapped as discovery maps Polaris' own (``polaris.mapping``).

        Raises:
            InvalidParameter: a target without its path, or content Icepack cannot use (the
                message names the Polaris key).
        """
        path = tuple(self.target.path)
        kind = self.target.type
        if (kind == "namespace" and not path) or (kind == "table-like" and len(path) < 2):
            raise InvalidParameter(
                "polaris_policies",
                f"a {kind} target needs its path (namespace levels"
                f"{', then the table' if kind == 'table-like' else ''})",
            )
        scope = {"catalog": "catalog", "namespace": "namespace", "table-like": "table"}[kind]
        namespace = path[:-1] if kind == "table-like" else path
        wire = PolarisPolicy.model_validate(
            {"policy-type": self.type.value, "name": self.name, "content": self.content}
        )
        att = map_policy(
            wire,
            catalog,
            scope,  # type: ignore[arg-type]
            namespace if kind != "catalog" else (),
            path[-1] if kind == "table-like" else None,
        )
        if att.invalid is not None:
            raise InvalidParameter("polaris_policies", f"{self.name}: {att.invalid}")
        return att
