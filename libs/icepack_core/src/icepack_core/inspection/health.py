"""Policy-independent table health: a ``TableStatus`` in, a level, a 0-100 score and issues out.

Every issue names the metric it measured (``value``) and the threshold that value reached
(``value >= threshold`` always holds), so an operator can see why without reading this file.
Health is the worst issue's severity (``healthy`` with none); a failed inspection is ``unknown``.

Score: 100 minus weighted penalties, after Amoro's table-health score (40 small files,
40 equality deletes, 20 position deletes), each scaled down for tiny tables so that three small
files in a brand-new table do not look like a disaster, plus a fixed penalty per hygiene issue
(snapshots, manifests, metadata log, skew). Every penalty grows with its metric, so more small
files (or deletes, snapshots...) never improve the score.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from icepack_core.inspection.status import TableStatus, parse_ts
from icepack_core.types import Health

Severity = Literal["warning", "critical"]


class Thresholds(BaseModel):
    """When a metric becomes an issue. Defaults follow the field reference points of
    docs/architecture.md, "Health"; every one can be overridden (tests scale them down to
    tiny tables)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # SMALL_FILES. Iceberg's binpack only rewrites a group of >= 5 input files, so fewer small
    # files are not worth an issue; and a table where under a fifth of the files are small is
    # healthy enough (the tail of every write is small). Glue compacts a partition once it holds
    # > 100 undersized files: on average above that per partition is critical.
    small_files_min: int = Field(default=5, ge=1)
    small_files_share: float = Field(default=0.2, gt=0, le=1)
    small_files_critical_per_partition: int = Field(default=100, ge=1)
    # TOO_MANY_SNAPSHOTS. Expiry keeps 5 days; a table committing every 5 minutes holds ~1,440
    # snapshots in that window, so 1,000 already means expiry is not keeping up; 10,000 slows
    # every commit (the metadata JSON grows with each snapshot).
    snapshots_warning: int = Field(default=1000, ge=1)
    snapshots_critical: int = Field(default=10_000, ge=1)
    # OLD_SNAPSHOTS. Iceberg's expire_snapshots default max age is 5 days (retain-last 1): a table
    # with more than one snapshot whose oldest is older than that has not been expired.
    # Critical at 6x (30 days): storage for every rewritten file is still paid for.
    snapshot_max_age_hours: float = Field(default=120.0, gt=0)
    snapshot_critical_age_hours: float = Field(default=720.0, gt=0)
    # TOO_MANY_MANIFESTS. Planning opens every manifest; rewrite_manifests pays off long before
    # a few hundred. 100 is warning, 1,000 critical.
    manifests_warning: int = Field(default=100, ge=1)
    manifests_critical: int = Field(default=1000, ge=1)
    # DELETE_FILE_BUILDUP. Merge-on-read deletes are applied on every read: an issue once delete
    # records reach 10 % of the data records (or 100 delete files, whatever the ratio), critical
    # at 50 % (half the read is thrown away) or 1,000 delete files.
    delete_ratio_warning: float = Field(default=0.10, gt=0)
    delete_ratio_critical: float = Field(default=0.50, gt=0)
    delete_files_warning: int = Field(default=100, ge=1)
    delete_files_critical: int = Field(default=1000, ge=1)
    # PARTITION_SKEW. The fullest partition holds >= 4x the average and >= 100 files (skew in a
    # handful of files is noise; compaction is scoped per partition).
    skew_ratio: float = Field(default=4.0, gt=1)
    skew_min_files: int = Field(default=100, ge=1)
    # METADATA_LOG_GROWTH. Iceberg caps the log at write.metadata.previous-versions-max (100 by
    # default), so every table older than 100 commits sits at exactly 100: only a log beyond that
    # cap (the cap was raised, and old metadata.json files pile up) is worth a warning. At 100 it
    # would fire forever on healthy tables, since no maintenance action shortens the log.
    metadata_log_warning: int = Field(default=101, ge=1)
    # Tables with fewer data files than this get proportionally smaller score penalties
    # (Amoro scales its health score down for tiny tables the same way).
    score_full_weight_files: int = Field(default=100, ge=1)


class Issue(BaseModel):
    """One problem found in a status."""

    model_config = ConfigDict(frozen=True)

    code: str
    severity: Severity
    value: float | int | None
    threshold: float | int | None
    message: str


class Assessment(BaseModel):
    """The health of one status: level, score and issues."""

    health: Health
    score: int = Field(ge=0, le=100)
    issues: list[Issue]

    def issue_codes(self) -> set[str]:
        return {i.code for i in self.issues}


_HYGIENE_PENALTY: dict[Severity, int] = {"warning": 5, "critical": 15}


def _severity(value: float, warning: float, critical: float) -> Severity | None:
    if value >= critical:
        return "critical"
    if value >= warning:
        return "warning"
    return None


def _issues(status: TableStatus, t: Thresholds, now: datetime) -> list[Issue]:
    out: list[Issue] = []
    limit: float
    data = status.data_file_count
    partitions = max(status.partition_count, 1)

    # The share condition folded into one count threshold, so value >= threshold says it all.
    # Glue's trigger (> 100 undersized files in a partition, on average here) is critical
    # whatever the share.
    small_needed = max(t.small_files_min, math.ceil(t.small_files_share * data))
    critical_from = t.small_files_critical_per_partition * partitions + 1
    small = status.small_file_count
    if data and (small >= small_needed or small >= critical_from):
        critical = small >= critical_from
        out.append(Issue(
            code="SMALL_FILES", severity="critical" if critical else "warning",
            value=small, threshold=critical_from if critical else small_needed,
            message=(f"{small} of {data} data files are smaller than "
                     f"{status.small_file_threshold_bytes} bytes "
                     f"({status.small_file_bytes} bytes in small files)"),
        ))

    level = _severity(status.snapshot_count, t.snapshots_warning, t.snapshots_critical)
    if level:
        limit = t.snapshots_warning if level == "warning" else t.snapshots_critical
        out.append(Issue(code="TOO_MANY_SNAPSHOTS", severity=level, value=status.snapshot_count,
                         threshold=limit,
                         message=f"{status.snapshot_count} snapshots are kept in the metadata"))

    oldest = parse_ts(status.oldest_snapshot_at)
    if oldest is not None and status.snapshot_count > 1:
        age_h = round((now - oldest).total_seconds() / 3600, 1)
        level = _severity(age_h, t.snapshot_max_age_hours, t.snapshot_critical_age_hours)
        if level:
            limit = (t.snapshot_max_age_hours if level == "warning"
                     else t.snapshot_critical_age_hours)
            out.append(Issue(code="OLD_SNAPSHOTS", severity=level, value=age_h, threshold=limit,
                             message=f"the oldest of {status.snapshot_count} snapshots is "
                                     f"{age_h / 24:.1f} days old (expiry keeps "
                                     f"{t.snapshot_max_age_hours / 24:g} days)"))

    level = _severity(status.manifest_count, t.manifests_warning, t.manifests_critical)
    if level:
        limit = t.manifests_warning if level == "warning" else t.manifests_critical
        out.append(Issue(code="TOO_MANY_MANIFESTS", severity=level, value=status.manifest_count,
                         threshold=limit,
                         message=f"the current snapshot has {status.manifest_count} manifests "
                                 f"({status.manifest_bytes} bytes)"))

    deletes = status.delete_file_count
    if deletes:
        ratio = round(status.delete_record_count / max(status.record_count, 1), 4)
        by_ratio = _severity(ratio, t.delete_ratio_warning, t.delete_ratio_critical)
        by_files = _severity(deletes, t.delete_files_warning, t.delete_files_critical)
        if by_ratio or by_files:
            # Report the measure that crossed (the worse one when both did).
            use_ratio = by_ratio is not None and (by_files is None or by_ratio == "critical")
            level = by_ratio if use_ratio else by_files
            assert level is not None
            if use_ratio:
                value: float = ratio
                limit = t.delete_ratio_warning if level == "warning" else t.delete_ratio_critical
            else:
                value = deletes
                limit = t.delete_files_warning if level == "warning" else t.delete_files_critical
            out.append(Issue(
                code="DELETE_FILE_BUILDUP", severity=level, value=value, threshold=limit,
                message=(f"{deletes} delete files ({status.position_delete_file_count} position, "
                         f"{status.equality_delete_file_count} equality, "
                         f"{status.deletion_vector_count} deletion vectors) hold "
                         f"{status.delete_record_count} deletes for {status.record_count} records"),
            ))

    if status.partition_count >= 2 and status.max_files_in_partition >= t.skew_min_files:
        skew = round(status.max_files_in_partition * status.partition_count / max(data, 1), 2)
        if skew >= t.skew_ratio:
            out.append(Issue(code="PARTITION_SKEW", severity="warning", value=skew,
                             threshold=t.skew_ratio,
                             message=f"the fullest of {status.partition_count} partitions holds "
                                     f"{status.max_files_in_partition} of {data} data files "
                                     f"({skew:g}x the average)"))

    if status.metadata_log_count >= t.metadata_log_warning:
        out.append(Issue(code="METADATA_LOG_GROWTH", severity="warning",
                         value=status.metadata_log_count, threshold=t.metadata_log_warning,
                         message=f"{status.metadata_log_count} previous metadata files are "
                                 "listed in the metadata log"))
    return out


def _score(status: TableStatus, issues: list[Issue], t: Thresholds) -> int:
    data = status.data_file_count
    if data == 0 and status.delete_file_count == 0:
        base = 0.0
    else:
        scale = min(1.0, max(data, 1) / t.score_full_weight_files)
        small_share = status.small_file_count / data if data else 0.0
        eq_ratio = min(1.0, status.equality_delete_file_count / max(data, 1))
        pos_ratio = min(
            1.0, (status.position_delete_file_count + status.deletion_vector_count) / max(data, 1)
        )
        base = (40 * small_share + 40 * eq_ratio + 20 * pos_ratio) * scale
    hygiene = sum(_HYGIENE_PENALTY[i.severity] for i in issues
                  if i.code not in ("SMALL_FILES", "DELETE_FILE_BUILDUP"))
    return max(0, min(100, math.floor(100 - base - hygiene + 1e-9)))


def assess(
    status: TableStatus, thresholds: Thresholds | None = None, now: datetime | None = None
) -> Assessment:
    """Assess one status.

    Args:
        status: the inspected metrics.
        thresholds: when metrics become issues (defaults: ``Thresholds()``).
        now: the clock for age-based issues (tests pin it).

    Returns:
        The level (worst issue severity; ``healthy`` without issues), score and issues.
    """
    t = thresholds or Thresholds()
    issues = _issues(status, t, now or datetime.now(UTC))
    if any(i.severity == "critical" for i in issues):
        health = Health.CRITICAL
    elif issues:
        health = Health.WARNING
    else:
        health = Health.HEALTHY
    return Assessment(health=health, score=_score(status, issues, t), issues=issues)


def inspection_failed(message: str) -> Assessment:
    """The assessment of a table whose inspection failed.

    Health is ``unknown``, not ``critical``: nothing is known about the table's files, and a
    planner must not schedule maintenance on a table it cannot read. The score is 0 so failing
    tables sort first in a worst-first listing; the issue is critical so alerts fire.
    """
    issue = Issue(code="INSPECTION_FAILED", severity="critical", value=None, threshold=None,
                  message=message)
    return Assessment(health=Health.UNKNOWN, score=0, issues=[issue])
