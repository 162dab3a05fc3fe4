"""Policy simulation: what a proposed set of policies would change across the fleet.

Nothing is written and nothing is enqueued. For every inspected table of the catalog, the
recommendation under the stored policies is compared with the recommendation under the stored
policies overridden by the proposed ones (a proposed policy replaces a stored one with the same
type and target). Tables whose actions or parameters change are reported with the estimated
files and bytes the new plan would touch.

The report also says what maintenance budget the proposed policies would need
(``BudgetNeed``, for the catalog and per namespace), over every evaluated table whose proposed
recommendation has actions (changed or not):
* ``rewrite_bytes_per_hour`` = sum over those tables of ``bytes_to_rewrite / max(cadence_h, 1)``:
  the table's predicted bytes to rewrite recur once per its maintenance cadence (its resolved
  ``cadence_hours``; under an hour counts as one hour, the budget's window), so this is the hourly
  rewrite budget that keeps up in steady state;
* ``backlog_bytes`` = sum of ``bytes_to_rewrite``: what the first pass rewrites if every table is
  due at once (an hourly budget below it spreads the first pass over several hours);
* ``jobs_per_hour`` = sum of ``1 / max(cadence_h, 1)``;
* ``peak_concurrent_jobs`` = the number of those tables: one job per table runs at a time (table
  locks), so more running slots than that never help; it is reached when all are due at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import asyncpg
from pydantic import ValidationError

from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.errors import PolicyError
from icepack_core.inspection.status import TableStatus
from icepack_core.planning.planner import Planner
from icepack_core.planning.recommendation import Recommendation
from icepack_core.policy import PolicyAttachment, parse_config, resolve


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
class BudgetNeed:
    """The budget a set of policies needs (formulas in the module docstring)."""

    bytes_rate: float = 0.0  # bytes per hour, before rounding up
    backlog_bytes: int = 0
    jobs_per_hour: float = 0.0
    peak_concurrent_jobs: int = 0

    @property
    def rewrite_bytes_per_hour(self) -> int:
        return math.ceil(self.bytes_rate)

    def add(self, bytes_to_rewrite: int, cadence_hours: float) -> None:
        """Count one table with work: ``bytes_to_rewrite`` recurring every ``cadence_hours``."""
        hours = max(cadence_hours, 1.0)
        self.backlog_bytes += bytes_to_rewrite
        self.bytes_rate += bytes_to_rewrite / hours
        self.jobs_per_hour += 1 / hours
        self.peak_concurrent_jobs += 1

    def to_json(self) -> dict[str, int | float]:
        return {
            "rewrite_bytes_per_hour": self.rewrite_bytes_per_hour,
            "backlog_bytes": self.backlog_bytes,
            "jobs_per_hour": round(self.jobs_per_hour, 6),
            "peak_concurrent_jobs": self.peak_concurrent_jobs,
        }


@dataclass
class SimulationReport:
    tables_evaluated: int = 0
    changes: list[TableChange] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=dict)
    # Tables whose stored status could not be evaluated ({"table", "reason"}): one malformed
    # row is reported, never the end of the whole simulation.
    skipped: list[dict[str, str]] = field(default_factory=list)
    budget: BudgetNeed = field(default_factory=BudgetNeed)
    budget_by_namespace: dict[str, BudgetNeed] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "tables_evaluated": self.tables_evaluated,
            "tables_changed": len(self.changes),
            "totals": self.totals,
            "changes": [vars(c) for c in self.changes],
            "skipped": self.skipped,
            "budget_needed": {
                **self.budget.to_json(),
                "by_namespace": {
                    ns: need.to_json() for ns, need in sorted(self.budget_by_namespace.items())
                },
            },
        }


def _key(att: PolicyAttachment) -> tuple[str, str, str, str | None, str | None]:
    """A proposed policy replaces the stored one of the same source, type and target."""
    return (att.origin, att.policy_type, att.scope, att.namespace, att.table_name)


def _fields_of(exc: ValidationError) -> str:
    """Each bad field of a stored status and what is wrong with it (``inspected_at: Field
    required; ...``), so the report names what the stored row lacks."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())


def _signature(rec: Recommendation) -> list[tuple[str, str]]:
    return [(a.action, repr(a.intent.params)) for a in rec.actions]


def _cadence(planner: Planner, table: TableRow, attachments: list[PolicyAttachment]) -> float:
    """The table's maintenance cadence in hours under ``attachments`` (the default when its
    policy does not resolve; its recommendation then has no actions anyway)."""
    default = planner.settings.maintenance_cadence_hours
    try:
        policy = resolve(attachments, table.namespace, table.name, table.properties, default)
    except PolicyError:
        return default
    return policy.cadence_hours


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
    for row in await planner.pool.fetch(load_query("status_latest_per_table"), catalog):
        report.tables_evaluated += 1
        await _evaluate(planner, report, row, now, stored, candidate)
    return report


async def _evaluate(
    planner: Planner,
    report: SimulationReport,
    row: asyncpg.Record,
    now: datetime,
    stored: list[PolicyAttachment],
    candidate: list[PolicyAttachment],
) -> None:
    """Add one table's stored status (``row``) to ``report``: its budget need under
    ``candidate`` and, when its recommendation changes, the change; a status that cannot be
    read or evaluated is reported as skipped."""
    table = TableRow.from_record(row)
    try:
        status = TableStatus.model_validate(row["status"])
    except ValidationError as exc:  # a status row missing fields, or of the wrong type
        reason = f"status not readable: {_fields_of(exc)}"[:500]
        report.skipped.append({"table": table.label, "reason": reason})
        return
    try:
        current = await planner.recommend_for(table, status, now, stored)
        future = await planner.recommend_for(table, status, now, candidate)
    except (KeyError, TypeError, AttributeError) as exc:  # one bad row never ends the run
        reason = f"status not readable: {type(exc).__name__}: {exc}"[:500]
        report.skipped.append({"table": table.label, "reason": reason})
        return
    if future.actions:
        rewrite = sum(a.estimated_benefit.get("bytes_to_rewrite", 0) for a in future.actions)
        cadence = _cadence(planner, table, candidate)
        report.budget.add(rewrite, cadence)
        report.budget_by_namespace.setdefault(table.namespace, BudgetNeed()).add(rewrite, cadence)
    if _signature(current) == _signature(future):
        return
    estimated: dict[str, int] = {}
    for action in future.actions:
        for name, value in action.estimated_benefit.items():
            estimated[name] = estimated.get(name, 0) + value
    for name, value in estimated.items():
        report.totals[name] = report.totals.get(name, 0) + value
    report.changes.append(
        TableChange(
            table.catalog,
            table.namespace,
            table.name,
            [a.action for a in current.actions],
            [a.action for a in future.actions],
            estimated,
            {a.action: a.reason for a in future.actions},
        )
    )
