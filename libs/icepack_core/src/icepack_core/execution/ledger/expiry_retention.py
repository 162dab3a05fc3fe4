"""Which snapshots ``expire_snapshots`` removes: Iceberg's retention rules, computed here first.

This is a model of ``org.apache.iceberg.RemoveSnapshots`` (iceberg-core 1.10), so that Icepack
knows *before* the procedure runs exactly which snapshots go (and so which files become
unreachable), and can then ask the procedure to remove exactly those (``snapshot_ids``):

* refs: ``main`` is always kept; any other ref is kept while ``now - its snapshot's timestamp
  <= max-ref-age-ms`` (the ref's own, else the table's ``history.expire.max-ref-age-ms``, else
  forever); a ref naming a missing snapshot is dropped;
* a kept branch keeps its head and ancestors while fewer than ``min-snapshots-to-keep`` (the
  ref's own, else ``retain_last``) are kept or the ancestor is not older than the cutoff (``now -
  the ref's max-snapshot-age-ms``, else ``older_than``); a kept tag keeps its snapshot;
* a snapshot that no kept ref reaches is kept while it is not older than ``older_than``;
* everything else expires.

``forced_by_refs`` is what the procedure expires by itself when called with an ancient
``older_than``: only branch ancestors past a ref's own ``max-snapshot-age-ms``. Icepack passes
the epoch as ``older_than`` and the computed ids as ``snapshot_ids``; ``expiring_ids`` refuses
when the forced set could grow past the computed one while the job runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from icepack_core.errors import PermanentError
from icepack_core.safety.admission import gc_enabled

MAX_REF_AGE_PROPERTY = "history.expire.max-ref-age-ms"
MAIN_BRANCH = "main"
# How far ahead the forced set is checked: longer than any expiry should take to be called.
DRIFT_MARGIN_MS = 15 * 60 * 1000
_FOREVER = 2**63 - 1
# ``older_than`` passed with ``snapshot_ids``: no snapshot is older, so the age rule adds none.
ANCIENT_MS = 0


@dataclass(frozen=True, slots=True)
class SnapshotNode:
    """One snapshot of the table: its id, parent and commit time (epoch ms)."""

    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class RefInfo:
    """One branch or tag with its own retention settings (None: the table's default)."""

    name: str
    snapshot_id: int
    is_branch: bool
    min_snapshots_to_keep: int | None = None
    max_snapshot_age_ms: int | None = None
    max_ref_age_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Retention:
    """The inputs of one expiry: the table's snapshots and refs, and the call's rules."""

    snapshots: tuple[SnapshotNode, ...]
    refs: tuple[RefInfo, ...]
    default_max_ref_age_ms: int = _FOREVER

    @classmethod
    def of(
        cls,
        snapshots: Iterable[SnapshotNode],
        refs: Iterable[RefInfo],
        properties: Mapping[str, str],
        current_snapshot_id: int | None = None,
    ) -> Retention:
        """From a table's parts; a current snapshot with no ``main`` ref gets an implicit one
        (as Iceberg's metadata parser does).

        Raises:
            PermanentError: ``history.expire.max-ref-age-ms`` is not an integer, or GC is
                disabled (``gc.enabled=false``: Iceberg refuses to expire, and so do we).
        """
        if not gc_enabled(properties):
            raise PermanentError(
                "expire_snapshots refused: the table has gc.enabled=false (its files may be "
                "shared with other tables)"
            )
        raw = properties.get(MAX_REF_AGE_PROPERTY)
        try:
            max_ref_age = int(raw) if raw is not None else _FOREVER
        except ValueError as exc:
            raise PermanentError(
                f"table property {MAX_REF_AGE_PROPERTY}={raw!r} is not an integer"
            ) from exc
        ref_list = list(refs)
        if current_snapshot_id is not None and all(r.name != MAIN_BRANCH for r in ref_list):
            ref_list.append(RefInfo(MAIN_BRANCH, current_snapshot_id, True))
        return cls(tuple(snapshots), tuple(ref_list), max_ref_age)

    def _by_id(self) -> dict[int, SnapshotNode]:
        return {s.snapshot_id: s for s in self.snapshots}

    def kept_refs(self, now_ms: int) -> list[RefInfo]:
        """The refs the procedure keeps at ``now_ms``."""
        by_id = self._by_id()
        kept = []
        for ref in self.refs:
            if ref.name == MAIN_BRANCH:
                kept.append(ref)
                continue
            snap = by_id.get(ref.snapshot_id)
            limit = (
                ref.max_ref_age_ms
                if ref.max_ref_age_ms is not None
                else self.default_max_ref_age_ms
            )
            if snap is not None and now_ms - snap.timestamp_ms <= limit:
                kept.append(ref)
        return kept

    def ancestors(self, snapshot_id: int) -> Iterator[SnapshotNode]:
        """``snapshot_id`` and its parents, newest first, until a parent is missing."""
        by_id = self._by_id()
        seen: set[int] = set()
        current = by_id.get(snapshot_id)
        while current is not None and current.snapshot_id not in seen:
            seen.add(current.snapshot_id)
            yield current
            current = by_id.get(current.parent_id) if current.parent_id is not None else None

    def retained(self, *, older_than_ms: int, retain_last: int, now_ms: int) -> set[int]:
        """The snapshot ids the procedure keeps with these arguments at ``now_ms``."""
        if retain_last < 1:
            raise PermanentError(f"retain_last must be at least 1, got {retain_last}")
        refs = self.kept_refs(now_ms)
        keep = {r.snapshot_id for r in refs}
        reachable: set[int] = set()
        for ref in refs:
            if not ref.is_branch:
                reachable.add(ref.snapshot_id)
                continue
            cutoff = now_ms - ref.max_snapshot_age_ms if ref.max_snapshot_age_ms else older_than_ms
            minimum = ref.min_snapshots_to_keep or retain_last
            kept_here = 0
            walking = True
            for ancestor in self.ancestors(ref.snapshot_id):
                reachable.add(ancestor.snapshot_id)
                if walking and (kept_here < minimum or ancestor.timestamp_ms >= cutoff):
                    keep.add(ancestor.snapshot_id)
                    kept_here += 1
                else:
                    walking = False
        for snap in self.snapshots:
            if snap.snapshot_id not in reachable and snap.timestamp_ms >= older_than_ms:
                keep.add(snap.snapshot_id)
        return keep

    def expired(self, *, older_than_ms: int, retain_last: int, now_ms: int) -> frozenset[int]:
        """The snapshot ids the procedure removes with these arguments at ``now_ms``."""
        keep = self.retained(older_than_ms=older_than_ms, retain_last=retain_last, now_ms=now_ms)
        return frozenset(s.snapshot_id for s in self.snapshots) - keep

    def forced_by_refs(self, *, retain_last: int, now_ms: int) -> frozenset[int]:
        """What the procedure removes by itself with an ancient ``older_than`` (the epoch)."""
        return self.expired(older_than_ms=ANCIENT_MS, retain_last=retain_last, now_ms=now_ms)

    def ref_heads(self) -> dict[int, list[str]]:
        """Snapshot id -> the names of the refs pointing at it."""
        heads: dict[int, list[str]] = {}
        for ref in self.refs:
            heads.setdefault(ref.snapshot_id, []).append(ref.name)
        return heads


def expiring_ids(
    retention: Retention,
    *,
    older_than_ms: int,
    retain_last: int,
    now_ms: int,
    margin_ms: int = DRIFT_MARGIN_MS,
) -> frozenset[int]:
    """The snapshots to expire (E): what the rules expire at ``now_ms``, less the snapshot of
    every ref, kept or not (a ref that ages out is dropped by the procedure, but its snapshot
    waits for the next run: conservative).

    Raises:
        PermanentError: a branch's own ``max-snapshot-age-ms`` would make the procedure expire
            more than E if it ran up to ``margin_ms`` later (E would no longer be exact).
    """
    expired = retention.expired(older_than_ms=older_than_ms, retain_last=retain_last, now_ms=now_ms)
    expiring = expired - set(retention.ref_heads())
    later = retention.forced_by_refs(retain_last=retain_last, now_ms=now_ms + margin_ms)
    drift = sorted(later - expiring)
    if drift:
        raise PermanentError(
            f"expire_snapshots refused: a branch's max-snapshot-age-ms expires snapshot(s) "
            f"{drift[:20]} within {margin_ms // 60000} minutes, so the list recorded now may "
            "not be exactly what the procedure removes; run again later"
        )
    return expiring
