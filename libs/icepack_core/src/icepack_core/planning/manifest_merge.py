"""Manifests first: a compaction beside writers waits for a manifest rewrite when each of its
commits would merge the table's manifests.

Each commit of a compaction (Iceberg's ``RewriteFiles``, one per partial-progress batch)
filters every manifest that holds a file it replaces and, with ``commit.manifest-merge.enabled``
(Iceberg's default), merges the table's manifests once ``commit.manifest.min-count-to-merge``
(100) of them share one bin of ``commit.manifest.target-size-bytes`` (8 MiB). The merge is
cached per bin, and each writer commit adds a manifest to the newest bin, so every retry after
a writer won the race merges them all again: an attempt takes seconds while the writer commits
every second, and the commit runs out of retries. A streaming writer's fast appends add one
small manifest per commit (PyIceberg does not merge), so a table being written crosses the
count within minutes.

Measured on a ``bucket(16, id)`` table of 120 PyIceberg appends with a writer committing every
second (Iceberg 1.10, local Spark): the compaction's first commit took 5 attempts and 17.5 s
and the compaction 69 s; after ``rewrite_manifests`` (120 manifests to 1) its first commit took
one attempt and 0.2 s, the compaction 41 s.

So when the pressure plans a compaction (the table is being written) and its manifests would
merge by the time it commits (the count now, plus about one a writer commit over the
projection's lead: a job queued below the count and run above it lost every commit in
``bench.stream``), the planner runs ``rewrite_manifests`` in its place; the job's
``job.finished`` plans the compaction again at once. Never twice in a row: once a manifest
rewrite ran after the table's last compaction, the compaction goes ahead whatever the count (a
writer fast enough to refill the bin before the compaction starts cannot starve it).

A plan can be minutes old when its job runs, and a job a writer beat is run again with the same
actions, so the executor applies the rule once more when the job starts
(``manifests_first_at_run``): when a writer committed after the job was planned and the
manifests would merge now, the job's manifest rewrite runs before its compaction (added when
the job has none). ``bench.stream`` showed both: a compaction planned at first sight with a few
manifests ran two minutes later with about 130 and lost every commit to the writer, three times,
until it was deferred.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from icepack_core.inspection.status import TableStatus, parse_ts
from icepack_core.intents import Intent, RewriteManifests, RewriteManifestsParams
from icepack_core.planning.history import History
from icepack_core.planning.pressure import Pressure
from icepack_core.planning.recommendation import (
    Proposed,
    Recommendation,
    Skip,
    held_back,
    rewrite_manifests_proposal,
)
from icepack_core.policy import EffectivePolicy
from icepack_core.types import Action

MERGE_ENABLED_PROPERTY = "commit.manifest-merge.enabled"
MIN_COUNT_PROPERTY = "commit.manifest.min-count-to-merge"
TARGET_SIZE_PROPERTY = "commit.manifest.target-size-bytes"


@dataclass(frozen=True)
class ManifestMerge:
    """How a table's commits merge its manifests (its ``commit.manifest*`` properties; a
    value Iceberg could not read either is taken as Iceberg's default)."""

    enabled: bool = True
    min_count: int = 100
    target_bytes: int = 8 * 1024 * 1024

    @classmethod
    def of(cls, properties: Mapping[str, str]) -> ManifestMerge:
        default = cls()
        enabled = properties.get(MERGE_ENABLED_PROPERTY, "true").strip().lower() != "false"
        return cls(
            enabled=enabled,
            min_count=_positive(properties.get(MIN_COUNT_PROPERTY), default.min_count),
            target_bytes=_positive(properties.get(TARGET_SIZE_PROPERTY), default.target_bytes),
        )

    def merges(self, status: TableStatus, added: float = 0.0) -> bool:
        """Whether a commit would merge the table's manifests once ``added`` more have come:
        at least ``min_count`` of them, small enough that ``min_count`` fit in one bin (from
        their average size: the status counts them, it does not list their sizes)."""
        count = status.manifest_count
        expected = count + max(0.0, added)
        if not self.enabled or count == 0 or expected < max(self.min_count, 2):
            return False
        return status.manifest_bytes * self.min_count <= self.target_bytes * count

    def reason(self, status: TableStatus, added: float = 0.0) -> str:
        average = math.ceil(status.manifest_bytes / max(status.manifest_count, 1))
        coming = f", about {added:.0f} more before it commits" if added >= 1 else ""
        return (
            f"manifests first: {status.manifest_count} manifests (about {average} B each)"
            f"{coming} >= {MIN_COUNT_PROPERTY} {self.min_count}, so each commit of the "
            "compaction would merge them all again after every writer commit it loses; "
            "rewrite_manifests runs now and the compaction is planned when it ends"
        )


def _positive(raw: str | None, default: int) -> int:
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        return default
    return value if value > 0 else default


def manifests_first(
    rec: Recommendation,
    status: TableStatus,
    policy: EffectivePolicy,
    merge: ManifestMerge,
    history: History,
    deferred: Collection[str],
    now: datetime,
) -> Recommendation:
    """``rec`` with its compaction replaced by a manifest rewrite (module doc), or ``rec``
    itself when the compaction is not planned by the pressure, the manifests would not merge,
    a manifest rewrite already ran since the last compaction, or the manifest rewrite may not
    run now (disabled by the policy, failing, throttled, cancelled, or among the table's
    ``deferred`` actions)."""
    compaction = _planned(rec, Action.REWRITE_DATA_FILES)
    if compaction is None or compaction.pressure is None:
        return rec
    added = writer_manifests_before_commit(compaction.pressure)
    if not merge.merges(status, added):
        return rec
    since = history.last_runs.get(Action.REWRITE_MANIFESTS)
    last_compaction = history.last_runs.get(Action.REWRITE_DATA_FILES)
    if since is not None and (last_compaction is None or since >= last_compaction):
        return rec
    if Action.REWRITE_MANIFESTS in deferred:
        return rec
    why = merge.reason(status, added)
    manifests = _planned(rec, Action.REWRITE_MANIFESTS)
    if manifests is None:
        proposed = rewrite_manifests_proposal(status, policy, why)
        if isinstance(proposed, Skip):
            return rec
        resting = held_back(
            proposed, policy, now, history.failures, history.throttles, history.cancelled
        )
        if resting is not None:
            return rec
        manifests = proposed
    actions = [a for a in rec.actions if a.action not in _REPLACED] + [manifests]
    actions.sort(key=lambda a: a.action.rank)
    skipped = [s for s in rec.skipped if s.action != Action.REWRITE_MANIFESTS]
    skipped.append(Skip(Action.REWRITE_DATA_FILES, f"{why} (would be: {compaction.reason})"))
    return Recommendation(
        actions=actions,
        skipped=skipped,
        replan_at=rec.replan_at,
        sources=rec.sources,
    )


_REPLACED = frozenset({Action.REWRITE_DATA_FILES, Action.REWRITE_MANIFESTS})


def writer_manifests_before_commit(pressure: Pressure) -> float:
    """The manifests a writer adds between the plan and the compaction's commit: about one a
    commit (a fast append writes one), over the projection's lead (the queue ahead and the
    run). The commits are counted by the fullest partition's small files a second: a sink
    writes a file to each partition it touches per commit, so that partition gains about
    one a commit (more files per commit overcount, which only runs the rewrite earlier)."""
    return pressure.rate_per_second * pressure.lead.total_seconds()


def _planned(rec: Recommendation, action: Action) -> Proposed | None:
    return next((a for a in rec.actions if a.action is action), None)


def manifests_first_at_run(
    intents: Sequence[Intent],
    status: TableStatus,
    merge: ManifestMerge,
    policy: EffectivePolicy,
    planned_at: datetime,
) -> list[Intent]:
    """A job's ``intents`` in the order to run them now (module doc): with a manifest rewrite
    before the compaction when the table's newest commit is later than ``planned_at`` (a
    writer is committing), its manifests would merge on the compaction's commit, and the
    policy enables manifest rewrites; otherwise ``intents`` as they are. A manifest rewrite the
    job has already is moved, keeping its parameters."""
    kinds = [i.kind for i in intents]
    if Action.REWRITE_DATA_FILES not in kinds or policy.metadata_compaction is None:
        return list(intents)
    compaction = kinds.index(Action.REWRITE_DATA_FILES)
    if Action.REWRITE_MANIFESTS in kinds[:compaction]:
        return list(intents)
    committed = parse_ts(status.current_snapshot_at or None)
    if committed is not None and committed.tzinfo is None:  # Iceberg's times are UTC
        committed = committed.replace(tzinfo=UTC)
    if committed is None or committed <= planned_at or not merge.merges(status):
        return list(intents)
    average = math.ceil(status.manifest_bytes / max(status.manifest_count, 1))
    why = (
        f"manifests first (at run time): {status.manifest_count} manifests (about {average} B "
        f"each) >= {MIN_COUNT_PROPERTY} {merge.min_count}, and a writer committed after the "
        f"plan ({planned_at.isoformat(timespec='seconds')}): the manifest rewrite runs before "
        "the compaction, whose commits would otherwise merge them all again after every "
        "writer commit they lose"
    )
    own = [i for i in intents if i.kind is Action.REWRITE_MANIFESTS]
    params = own[0].params if own and isinstance(own[0], RewriteManifests) else None
    manifests = RewriteManifests(params=params or RewriteManifestsParams(), reason=why)
    rest = [i for i in intents if i.kind is not Action.REWRITE_MANIFESTS]
    return [*rest[:compaction], manifests, *rest[compaction:]]
