"""The Polaris policies kept for a catalog (``icepack.polaris_policies``), as attachments."""

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
