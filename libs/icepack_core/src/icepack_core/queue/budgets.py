"""Maintenance budgets: per catalog, optionally per namespace, a rewrite budget in bytes per
sliding hour and a cap on running jobs. ``JobQueue.claim`` enforces them (migration 0015); this
module sets, lists and clears them and reads their use.

"Charged": every claim of a job with ``rewrite_bytes > 0`` on a known table records one
``budget_charges`` row (bytes = the job's ``rewrite_bytes``, at the claim's time), so a retry is
charged again. A budget's use is the sum of the charges in scope over the last hour and the
running jobs in scope. A queued job whose ``rewrite_bytes`` alone exceed the hourly budget of a
scope covering it can never be claimed; ``BudgetUse.oversized_jobs`` lists those.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from icepack_core.db.queries import load_query
from icepack_core.errors import BudgetInvalid, BudgetNotFound

# bigint / integer column ranges: larger values are refused by name, not by a database error.
MAX_BYTES_PER_HOUR = 2**63 - 1
MAX_RUNNING = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BudgetUse:
    """One budget, its limits (None = unlimited) and its use now."""

    catalog: str
    namespace: str | None
    rewrite_bytes_per_hour: int | None
    max_running: int | None
    running: int
    charged_bytes: int
    oversized_jobs: list[int]
    updated_at: datetime

    @classmethod
    def from_record(cls, row: asyncpg.Record) -> BudgetUse:
        return cls(
            catalog=row["catalog"],
            namespace=row["namespace"],
            rewrite_bytes_per_hour=row["rewrite_bytes_per_hour"],
            max_running=row["max_running"],
            running=row["running"],
            charged_bytes=row["charged_bytes"],
            oversized_jobs=list(row["oversized_jobs"]),
            updated_at=row["updated_at"],
        )

    def to_json(self) -> dict[str, object]:
        return {
            "catalog": self.catalog,
            "namespace": self.namespace,
            "rewrite_bytes_per_hour": self.rewrite_bytes_per_hour,
            "max_running": self.max_running,
            "running": self.running,
            "charged_bytes_last_hour": self.charged_bytes,
            "oversized_jobs": self.oversized_jobs,
            "updated_at": self.updated_at.isoformat(),
        }


def check_budget(
    catalog: str,
    namespace: str | None,
    rewrite_bytes_per_hour: int | None,
    max_running: int | None,
) -> None:
    """Raise ``BudgetInvalid`` naming the first bad value: an empty scope name, a limit that is
    not a positive integer in range, or no limit at all."""
    if not catalog.strip():
        raise BudgetInvalid("catalog", f"{catalog!r} is empty")
    if namespace is not None and not namespace.strip():
        raise BudgetInvalid("namespace", f"{namespace!r} is empty (omit it for the catalog)")
    for field, value, top in (
        ("rewrite_bytes_per_hour", rewrite_bytes_per_hour, MAX_BYTES_PER_HOUR),
        ("max_running", max_running, MAX_RUNNING),
    ):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise BudgetInvalid(field, f"{value!r} is not an integer")
        if not 0 < value <= top:
            raise BudgetInvalid(field, f"{value} is not between 1 and {top}")
    if rewrite_bytes_per_hour is None and max_running is None:
        raise BudgetInvalid(
            "rewrite_bytes_per_hour", "give it, max_running or both (to remove a budget, clear it)"
        )


async def set_budget(
    pool: asyncpg.Pool,
    catalog: str,
    namespace: str | None,
    *,
    rewrite_bytes_per_hour: int | None,
    max_running: int | None,
) -> BudgetUse:
    """Create or replace the budget of (catalog, namespace); a limit given as None is unset.

    Raises:
        BudgetInvalid: a bad scope or limit (nothing is written).
    """
    check_budget(catalog, namespace, rewrite_bytes_per_hour, max_running)
    await pool.execute(
        load_query("budget_set"), catalog, namespace, rewrite_bytes_per_hour, max_running
    )
    (use,) = [
        b for b in await list_budgets(pool) if (b.catalog, b.namespace) == (catalog, namespace)
    ]
    return use


async def clear_budget(pool: asyncpg.Pool, catalog: str, namespace: str | None) -> None:
    """Remove the budget of (catalog, namespace).

    Raises:
        BudgetNotFound: none is set for that scope.
    """
    if await pool.fetchval(load_query("budget_clear"), catalog, namespace) is None:
        raise BudgetNotFound(catalog, namespace)


async def list_budgets(pool: asyncpg.Pool) -> list[BudgetUse]:
    """Every budget with its use now, catalog-wide ones before their namespaces'."""
    return [BudgetUse.from_record(r) for r in await pool.fetch(load_query("budget_use_all"))]
