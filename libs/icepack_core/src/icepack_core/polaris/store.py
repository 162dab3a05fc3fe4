"""A catalog's policy attachments: Icepack's own (``icepack.policies``) and the Polaris policies
kept for it (``icepack.polaris_policies``); ``policy.resolve`` applies the precedence."""

from __future__ import annotations

import asyncpg

from icepack_core.db.queries import load_query
from icepack_core.policy import PolicyAttachment


async def polaris_attachments(pool: asyncpg.Pool, catalog: str) -> list[PolicyAttachment]:
    """Every Polaris policy kept for ``catalog`` (``origin="polaris"``), each marked ``stale``
    with the failure when the catalog's last refresh failed after its last success."""
    rows = await pool.fetch(load_query("polaris_policy_list_catalog"), catalog)
    return [
        PolicyAttachment(
            r["policy_type"],
            r["scope"],
            r["catalog"],
            r["namespace"] or None,
            r["table_name"] or None,
            r["enabled"],
            r["config"],
            origin="polaris",
            name=r["name"],
            version=r["version"],
            unknown=r["unknown"],
            invalid=r["invalid"],
            fetched_at=r["fetched_at"],
            stale=r["stale"],
        )
        for r in rows
    ]


async def attachments_of(pool: asyncpg.Pool, catalog: str) -> list[PolicyAttachment]:
    """The policies attached anywhere in ``catalog``: Icepack's own, then those read from
    Polaris. The one reader for every resolution (planner, admission, inspection, CLI)."""
    rows = await pool.fetch(load_query("policy_list_catalog"), catalog)
    own = [
        PolicyAttachment(
            r["policy_type"],
            r["scope"],
            r["catalog"],
            r["namespace"],
            r["table_name"],
            r["enabled"],
            r["config"],
        )
        for r in rows
    ]
    return own + await polaris_attachments(pool, catalog)
