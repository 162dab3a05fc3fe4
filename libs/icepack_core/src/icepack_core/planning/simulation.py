"""Policy simulation: what a proposed set of policies would change across the fleet.

Nothing is written and nothing is enqueued. For every inspected table of the catalog, the
recommendation under the stored policies is compared with the recommendation under the stored
policies overridden by the proposed ones (a proposed policy replaces a stored one with the same
type and target). Tables whose actions or parameters change are reported with the estimated
files and bytes the new plan would touch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from icepack_core.db.queries import load_query
from icepack_core.planning.planner import Planner
from icepack_core.planning.recommendation import Recommendation
from icepack_core.policy import PolicyAttachment, parse_config


@dataclass
class TableChange:
    catalog: str
    namespace: str
    table: str
    current_actions: list[str]
    proposed_actions: list[str]
    estimated: dict[str, int]
    reasons: dict[str, str]


@dataclass
class SimulationReport:
    tables_evaluated: int = 0
    changes: list[TableChange] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)
    # Tables whose stored status could not be evaluated ({"table", "reason"}): one malformed
    # row is reported, never the end of the whole simulation.
    skipped: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "tables_evaluated": self.tables_evaluated,
            "tables_changed": len(self.changes),
            "totals": self.totals,
            "changes": [vars(c) for c in self.changes],
            "skipped": self.skipped,
        }


def _key(att: PolicyAttachment) -> tuple[str, str, str | None, str | None]:
    return (att.policy_type, att.scope, att.namespace, att.table_name)


def _signature(rec: Recommendation) -> list[tuple[str, str]]:
    return [(a.action, repr(sorted(a.params.items()))) for a in rec.actions]


async def simulate(
    planner: Planner,
    catalog: str,
    proposed: Sequence[PolicyAttachment],
    now: datetime | None = None,
) -> SimulationReport:
    """Compare current and proposed recommendations for every inspected table of ``catalog``.

    Raises:
        PolicyError: a proposed policy is invalid (the message names the key).
    """
    for att in proposed:
        parse_config(att.policy_type, att.config)  # reject bad proposals before any work
    now = now or datetime.now(UTC)
    stored = await planner.attachments(catalog)
    merged = {_key(a): a for a in stored}
    merged.update({_key(a): a for a in proposed if a.catalog == catalog})
    candidate = list(merged.values())
    report = SimulationReport()
    totals: dict[str, int] = {}
    for row in await planner.pool.fetch(load_query("status_latest_per_table"), catalog):
        report.tables_evaluated += 1
        try:
            current = await planner.recommend_for(row, row["status"], now, stored)
            future = await planner.recommend_for(row, row["status"], now, candidate)
        except (KeyError, TypeError, AttributeError) as exc:  # a status row missing fields
            table = f"{row['catalog']}.{row['namespace']}.{row['name']}"
            reason = f"status not readable: {type(exc).__name__}: {exc}"[:500]
            report.skipped.append({"table": table, "reason": reason})
            continue
        if _signature(current) == _signature(future):
            continue
        estimated: dict[str, int] = {}
        for action in future.actions:
            for name, value in action.estimated_benefit.items():
                estimated[name] = estimated.get(name, 0) + value
        for name, value in estimated.items():
            totals[name] = totals.get(name, 0) + value
        report.changes.append(
            TableChange(
                row["catalog"],
                row["namespace"],
                row["name"],
                [a.action for a in current.actions],
                [a.action for a in future.actions],
                estimated,
                {a.action: a.reason for a in future.actions},
            )
        )
    report.totals = totals
    return report
