"""Policy-independent table health: a ``TableStatus`` in, a level, a 0-100 score and issues out.

Every issue names the metric it measured (``value``) and the threshold that value reached
(``value >= threshold`` always holds), so an operator can see why without reading this file.
Health is the worst issue's severity (``healthy`` with none); a failed inspection is ``unknown``.

Score: 100 minus weighted penalties, after Amoro's table-health score (40 small files,
40 equality deletes, 20 position deletes), each scaled down for tiny tables so that three small
files in a brand-new table do not look like a disaster, plus a fixed penalty per hygiene issue
(snapshots, manifests, metadata log, skew, statistics). Every penalty grows with its metric, so
more small files (or deletes, snapshots...) never improve the score.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from icepack_core.inspection.statistics import StalenessRule, staleness
from icepack_core.inspection.status import StatisticsFreshness, TableStatus, parse_ts
from icepack_core.policy import TableStatisticsConfig
from icepack_core.types import Health, IssueCode, Severity


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
    # STATISTICS_STALE. Statistics someone computed (they exist on the table's lineage) have
    # drifted: the table moved 100 snapshots past them, or rows amounting to 20 % of it were
    # added since (icepack.table-statistics' defaults; the inspector takes the table's policy
    # when that type is enabled). A cost-based optimizer plans joins on the old counts.
    statistics_stale_snapshots: int | None = Field(default=100, ge=1)
    statistics_stale_added_share: float = Field(default=0.2, gt=0)
    # STATISTICS_MISSING: only where the table's policy asks for them (most tables never
    # have statistics, and that is no fault of theirs).
    table_statistics_expected: bool = False
    partition_statistics_expected: bool = False
    # Tables with fewer data files than this get proportionally smaller score penalties
    # (Amoro scales its health score down for tiny tables the same way).
    score_full_weight_files: int = Field(default=100, ge=1)


class Issue(BaseModel):
    """One problem found in a status."""

    model_config = ConfigDict(frozen=True)

    code: IssueCode
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


_HYGIENE_PENALTY: dict[Severity, int] = {Severity.WARNING: 5, Severity.CRITICAL: 15}


def _severity(value: float, warning: float, critical: float) -> Severity | None:
    if value >= critical:
        return Severity.CRITICAL
    if value >= warning:
        return Severity.WARNING
    return None


def _leveled(
    code: IssueCode, value: float, warning: float, critical: float, message: str
) -> Issue | None:
    """The issue when ``value`` reaches ``warning`` (or ``critical``), with the crossed limit."""
    level = _severity(value, warning, critical)
    if level is None:
        return None
    limit = warning if level == Severity.WARNING else critical
    return Issue(code=code, severity=level, value=value, threshold=limit, message=message)


def small_files(status: TableStatus, t: Thresholds, now: datetime) -> Issue | None:
    """Enough undersized data files (a count and a share); critical at Glue's trigger of more
    than ``small_files_critical_per_partition`` per partition on average, whatever the share."""
    data = status.data_file_count
    # The share condition folded into one count threshold, so value >= threshold says it all.
    small_needed = max(t.small_files_min, math.ceil(t.small_files_share * data))
    critical_from = t.small_files_critical_per_partition * max(status.partition_count, 1) + 1
    small = status.small_file_count
    if not data or (small < small_needed and small < critical_from):
        return None
    critical = small >= critical_from
    return Issue(
        code=IssueCode.SMALL_FILES,
        severity=Severity.CRITICAL if critical else Severity.WARNING,
        value=small,
        threshold=critical_from if critical else small_needed,
        message=(
            f"{small} of {data} data files are smaller than "
            f"{status.small_file_threshold_bytes} bytes "
            f"({status.small_file_bytes} bytes in small files)"
        ),
    )


def too_many_snapshots(status: TableStatus, t: Thresholds, now: datetime) -> Issue | None:
    return _leveled(
        IssueCode.TOO_MANY_SNAPSHOTS,
        status.snapshot_count,
        t.snapshots_warning,
        t.snapshots_critical,
        f"{status.snapshot_count} snapshots are kept in the metadata",
    )


def old_snapshots(status: TableStatus, t: Thresholds, now: datetime) -> Issue | None:
    """The oldest snapshot is older than expiry keeps (only when there is more than one)."""
    oldest = parse_ts(status.oldest_snapshot_at)
    if oldest is None or status.snapshot_count <= 1:
        return None
    age_h = round((now - oldest).total_seconds() / 3600, 1)
    return _leveled(
        IssueCode.OLD_SNAPSHOTS,
        age_h,
        t.snapshot_max_age_hours,
        t.snapshot_critical_age_hours,
        f"the oldest of {status.snapshot_count} snapshots is {age_h / 24:.1f} days old "
        f"(expiry keeps {t.snapshot_max_age_hours / 24:g} days)",
    )


def too_many_manifests(status: TableStatus, t: Thresholds, now: datetime) -> Issue | None:
    return _leveled(
        IssueCode.TOO_MANY_MANIFESTS,
        status.manifest_count,
        t.manifests_warning,
        t.manifests_critical,
        f"the current snapshot has {status.manifest_count} manifests "
        f"({status.manifest_bytes} bytes)",
    )


def delete_file_buildup(status: TableStatus, t: Thresholds, now: datetime) -> Issue | None:
    """Deletes by share of records or by file count; reports the measure that crossed (the
    ratio when both did and it is the critical one)."""
    deletes = status.delete_file_count
    if not deletes:
        return None
    message = (
        f"{deletes} delete files ({status.position_delete_file_count} position, "
        f"{status.equality_delete_file_count} equality, "
        f"{status.deletion_vector_count} deletion vectors) hold "
        f"{status.delete_record_count} deletes for {status.record_count} records"
    )
    ratio = round(status.delete_record_count / max(status.record_count, 1), 4)
    by_ratio = _leveled(
        IssueCode.DELETE_FILE_BUILDUP,
        ratio,
        t.delete_ratio_warning,
        t.delete_ratio_critical,
        message,
    )
    by_files = _leveled(
        IssueCode.DELETE_FILE_BUILDUP,
        deletes,
        t.delete_files_warning,
        t.delete_files_critical,
        message,
    )
    if by_ratio is not None and (by_files is None or by_ratio.severity == Severity.CRITICAL):
        return by_ratio
    return by_files


def partition_skew(status: TableStatus, t: Thresholds, now: datetime) -> Issue | None:
    data = status.data_file_count
    if status.partition_count < 2 or status.max_files_in_partition < t.skew_min_files:
        return None
    skew = round(status.max_files_in_partition * status.partition_count / max(data, 1), 2)
    if skew < t.skew_ratio:
        return None
    return Issue(
        code=IssueCode.PARTITION_SKEW,
        severity=Severity.WARNING,
        value=skew,
        threshold=t.skew_ratio,
        message=f"the fullest of {status.partition_count} partitions holds "
        f"{status.max_files_in_partition} of {data} data files "
        f"({skew:g}x the average)",
    )


def metadata_log_growth(status: TableStatus, t: Thresholds, now: datetime) -> Issue | None:
    if status.metadata_log_count < t.metadata_log_warning:
        return None
    return Issue(
        code=IssueCode.METADATA_LOG_GROWTH,
        severity=Severity.WARNING,
        value=status.metadata_log_count,
        threshold=t.metadata_log_warning,
        message=f"{status.metadata_log_count} previous metadata files are listed in "
        "the metadata log",
    )


def _statistics(status: TableStatus) -> tuple[tuple[str, StatisticsFreshness | None], ...]:
    return (
        ("table statistics", status.table_statistics),
        ("partition statistics", status.partition_statistics),
    )


def missing_statistics(status: TableStatus, t: Thresholds, now: datetime) -> Issue | None:
    """Statistics the table's policy asks for describe neither the current snapshot nor an
    ancestor (a table without a snapshot has nothing to describe)."""
    expected = (t.table_statistics_expected, t.partition_statistics_expected)
    if status.current_snapshot_id is None:
        return None
    missing = [
        staleness(f, status.record_count, StalenessRule(), kind).reason
        for (kind, f), wanted in zip(_statistics(status), expected, strict=True)
        if wanted and f is not None and f.snapshot_id is None
    ]
    if not missing:
        return None
    return Issue(
        code=IssueCode.STATISTICS_MISSING,
        severity=Severity.WARNING,
        value=None,
        threshold=None,
        message="; ".join(missing),
    )


def stale_statistics(status: TableStatus, t: Thresholds, now: datetime) -> Issue | None:
    """Existing statistics the table has moved far past (``inspection.statistics``); reports
    the first kind that crossed, naming both when both did."""
    rule = StalenessRule(t.statistics_stale_snapshots, t.statistics_stale_added_share)
    stale = [
        verdict
        for kind, f in _statistics(status)
        if f is not None
        and (verdict := staleness(f, status.record_count, rule, kind)).state == "stale"
    ]
    if not stale:
        return None
    return Issue(
        code=IssueCode.STATISTICS_STALE,
        severity=Severity.WARNING,
        value=stale[0].value,
        threshold=stale[0].threshold,
        message="; ".join(v.reason for v in stale),
    )


def poor_clustering(status: TableStatus, t: Thresholds, now: datetime) -> Issue | None:
    """Some partition's files overlap on the key more than the compaction policy's
    ``max_overlap_ratio`` times what a rewrite reaches (measured only for a table whose policy
    clusters it: ``inspection.clustering``). Value: those partitions' mean depth; threshold:
    the ratio times the depth a rewrite leaves them (each partition crossed its own)."""
    found = status.clustering
    if found is None or found.overlap_depth is None or found.unclustered_partitions == 0:
        return None
    value = found.unclustered_depth
    bound = round(found.max_overlap_ratio * max(1.0, found.unclustered_depth_after), 4)
    return Issue(
        code=IssueCode.POOR_CLUSTERING,
        severity=Severity.WARNING,
        value=value,
        threshold=min(value, bound),
        message=(
            f"on {found.strategy}({', '.join(found.columns)}) the files of "
            f"{found.unclustered_partitions} of {found.partitions} partitions overlap "
            f"{value:g} files of their partition on average; a rewrite would leave "
            f"{found.unclustered_depth_after:g} (policy: at most {found.max_overlap_ratio:g} "
            "times that)"
        ),
    )


Rule = Callable[[TableStatus, Thresholds, datetime], Issue | None]
# Every health rule, in the order issues are reported.
RULES: tuple[Rule, ...] = (
    small_files,
    too_many_snapshots,
    old_snapshots,
    too_many_manifests,
    delete_file_buildup,
    partition_skew,
    metadata_log_growth,
    missing_statistics,
    stale_statistics,
    poor_clustering,
)


def with_statistics_policy(t: Thresholds, config: TableStatisticsConfig | None) -> Thresholds:
    """``t`` for a table whose ``icepack.table-statistics`` policy is ``config`` (None:
    disabled, ``t`` unchanged): its staleness rule, and the statistics it asks for expected."""
    if config is None:
        return t
    return t.model_copy(
        update={
            "statistics_stale_snapshots": config.stale_after_snapshots,
            "statistics_stale_added_share": config.stale_added_rows_share,
            "table_statistics_expected": config.table_stats,
            "partition_statistics_expected": config.partition_stats,
        }
    )


def _issues(status: TableStatus, t: Thresholds, now: datetime) -> list[Issue]:
    return [issue for rule in RULES if (issue := rule(status, t, now)) is not None]


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
    hygiene = sum(
        _HYGIENE_PENALTY[i.severity]
        for i in issues
        if i.code not in (IssueCode.SMALL_FILES, IssueCode.DELETE_FILE_BUILDUP)
    )
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
    if any(i.severity == Severity.CRITICAL for i in issues):
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
    issue = Issue(
        code=IssueCode.INSPECTION_FAILED,
        severity=Severity.CRITICAL,
        value=None,
        threshold=None,
        message=message,
    )
    return Assessment(health=Health.UNKNOWN, score=0, issues=[issue])
