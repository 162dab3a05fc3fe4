"""Manifests first: a compaction beside writers runs after a manifest rewrite when each of
its commits would merge the table's manifests.

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

The rule is applied when the job starts, not when it is planned (``manifests_first_at_run``,
called by the executor): when a writer committed after the job was planned and the manifests
would merge now, the job's manifest rewrite runs before its compaction (added when the job has
none). A plan cannot see the manifests a writer adds before its job runs, and a job a writer
beat runs again with the same actions: ``bench.stream`` saw a compaction planned at a table's
first sight with a few manifests run two minutes later with about 130 and lose every commit,
three times, until it was deferred. Deciding at plan time (a manifest-rewrite job in the
compaction's place) was tried first and dropped: the manifest rewrite counted as the table's
last run, so the compaction waited out the table's minimum interval after it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from icepack_core.inspection.status import TableStatus, parse_ts
from icepack_core.intents import Intent, RewriteManifests, RewriteManifestsParams
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

    def merges(self, status: TableStatus) -> bool:
        """Whether a commit would merge the table's manifests: at least ``min_count`` of them,
        small enough that ``min_count`` fit in one bin (from their average size: the status
        counts them, it does not list their sizes)."""
        count = status.manifest_count
        if not self.enabled or count < max(self.min_count, 2):
            return False
        return status.manifest_bytes * self.min_count <= self.target_bytes * count


def _positive(raw: str | None, default: int) -> int:
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        return default
    return value if value > 0 else default


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
