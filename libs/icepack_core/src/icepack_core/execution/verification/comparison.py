"""A comparison of two snapshots and its evidence: the fingerprints compared and how the
comparison was scoped (``safety.verification.ScopeNote``), and the ``SnapshotCheck`` it becomes
(``verifier``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from icepack_core.execution.verification.fingerprint import Fingerprint
from icepack_core.execution.verification.scope import FileDiff
from icepack_core.safety.verification import ScopeNote, SnapshotCheck


@dataclass(frozen=True)
class Comparison:
    """Two snapshots compared: the fingerprints of what was scanned and how it was scoped."""

    before: Fingerprint
    after: Fingerprint
    scope: ScopeNote = field(default_factory=ScopeNote)

    @property
    def ok(self) -> bool:
        return self.before == self.after


def unchanged(scope: ScopeNote) -> Comparison:
    """No live file changed: proven from metadata alone, nothing scanned (``scope: none``)."""
    nothing = Fingerprint(0, 0)
    note = scope.merged(ScopeNote(scope="none", partitions_fingerprinted=0))
    return Comparison(nothing, nothing, note)


def whole_table(scope: ScopeNote, reason: str) -> ScopeNote:
    """``scope`` widened to the whole table, for ``reason``."""
    return scope.merged(ScopeNote(scope="table", scope_reason=reason))


def snapshot_record(
    snapshot_id: int, parent_id: int, comparison: Comparison, checked: Literal["chain", "parent"]
) -> SnapshotCheck:
    """One checked ``replace`` snapshot as evidence (``checked``: ``chain`` or ``parent``)."""
    before, after = comparison.before, comparison.after
    return SnapshotCheck(
        snapshot_id=snapshot_id,
        parent_id=parent_id,
        rows_before=before.rows,
        rows_after=after.rows,
        checksum_before=str(before.checksum),
        checksum_after=str(after.checksum),
        checked=checked,
        ok=comparison.ok,
        **comparison.scope.known(),
    )


def counts(diff: FileDiff | None) -> ScopeNote:
    """The partition counts of a file diff (none before one was computed)."""
    if diff is None:
        return ScopeNote()
    return ScopeNote(partitions_total=diff.partitions, partitions_proven=diff.proven)
