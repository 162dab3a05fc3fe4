"""An orphan removal's dry run: the files it would delete, checked against the limits.

Orphans are never deleted by the procedure: the listing is recorded, and too long a list stops
the job before anything is deleted (``OrphanLimitExceeded``, the table is held); what passes is
handed to the deletion ledger (``ledger.quarantine``) by ``TableMaintenance``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from icepack_core.errors import OrphanLimitExceeded
from icepack_core.execution.ledger.quarantine import is_quarantined
from icepack_core.spark.engine import SparkEngine
from icepack_core.types import TableRef


@dataclass(frozen=True)
class OrphanLimits:
    """When an orphan dry run finds too much to delete, something is wrong (a wrong location,
    a writer's missing commit): stop and hold instead. The ratio applies from ``min_files`` on,
    so a small table's few stray files are still cleaned."""

    max_files: int = 10_000
    max_fraction: float = 0.10
    min_files: int = 100
    live_files: int | None = None

    def exceeded_by(self, found: int) -> str | None:
        if found > self.max_files:
            return f"{found} orphan candidates > max {self.max_files}"
        if (
            self.live_files is not None
            and found >= self.min_files
            and found > self.max_fraction * self.live_files
        ):
            return (
                f"{found} orphan candidates > {self.max_fraction:.0%} of "
                f"{self.live_files} live files"
            )
        return None


@dataclass(frozen=True)
class OrphanListing:
    """The dry run's candidates (quarantine paths left out) and what the job output records."""

    paths: list[str]
    # Merged into the action's stored output.
    output: dict[str, object] = field(default_factory=dict)


async def listed_orphans(
    engine: SparkEngine, ref: TableRef, dry_run: str, location: str, limits: OrphanLimits
) -> OrphanListing:
    """Run the orphan removal's ``dry_run`` call and check its listing against ``limits``.

    Raises:
        OrphanLimitExceeded: more candidates than the limits allow; nothing was deleted.
    """
    found = await engine.sql(dry_run)
    listed = [str(next(iter(r.values()))) for r in found]
    # Iceberg's listing skips hidden directories; a quarantine path is never a candidate.
    paths = [p for p in listed if not is_quarantined(location, p)]
    output: dict[str, object] = {"dry_run_orphans": len(paths), "dry_run_sample": paths[:20]}
    if len(paths) != len(listed):
        output["dry_run_quarantined_skipped"] = len(listed) - len(paths)
    too_many = limits.exceeded_by(len(paths))
    if too_many is not None:
        raise OrphanLimitExceeded(
            f"remove_orphan_files on {ref} stopped before deleting: {too_many}",
            {
                "dry_run_orphans": len(paths),
                "orphans": paths[:1000],
                "location": location,
                "limits": vars(limits),
            },
        )
    return OrphanListing(paths, output)
