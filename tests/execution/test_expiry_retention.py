"""Which snapshots an expiry removes: Iceberg's RemoveSnapshots rules, restated and checked.

Cases with hand-computed answers, then properties over random snapshot graphs: refs are never
expired, the rules are monotone, and the CALL Icepack sends (``snapshot_ids => E`` with an
ancient ``older_than``) removes exactly E.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icepack_core.errors import PermanentError
from icepack_core.execution.ledger.expiry_retention import (
    ANCIENT_MS,
    DRIFT_MARGIN_MS,
    RefInfo,
    Retention,
    SnapshotNode,
    expiring_ids,
)

HOUR = 3_600_000
NOW = 1_000 * HOUR


def chain(*ids: int, start: int = 0) -> list[SnapshotNode]:
    """Snapshots in a line, one hour apart from ``start`` hours."""
    out, parent = [], None
    for i, sid in enumerate(ids):
        out.append(SnapshotNode(sid, parent, (start + i) * HOUR))
        parent = sid
    return out


def expire(
    snaps: list[SnapshotNode],
    refs: list[RefInfo],
    *,
    older_than_h: int = 10_000,
    retain_last: int = 1,
    props: dict[str, str] | None = None,
    current: int | None = None,
) -> set[int]:
    retention = Retention.of(snaps, refs, props or {}, current)
    return set(
        expiring_ids(
            retention, older_than_ms=older_than_h * HOUR, retain_last=retain_last, now_ms=NOW
        )
    )


def test_retain_last_keeps_the_newest_ancestors_of_main() -> None:
    snaps = chain(1, 2, 3, 4, 5)
    assert expire(snaps, [RefInfo("main", 5, True)], retain_last=2) == {1, 2, 3}
    assert expire(snaps, [RefInfo("main", 5, True)], retain_last=9) == set()


def test_older_than_keeps_newer_ancestors_and_an_implicit_main() -> None:
    snaps = chain(1, 2, 3, 4, 5)  # timestamps 0..4 h
    assert expire(snaps, [], older_than_h=3, current=5) == {1, 2, 3}


def test_a_tag_pins_its_snapshot_and_a_branch_its_minimum() -> None:
    snaps = chain(1, 2, 3, 4, 5)
    refs = [
        RefInfo("main", 5, True),
        RefInfo("audit", 2, False),
        RefInfo("dev", 3, True, min_snapshots_to_keep=2),
    ]
    # dev keeps 3 and 2; the tag keeps 2; main keeps 5; 1 and 4 go
    assert expire(snaps, refs) == {1, 4}


def test_unreferenced_snapshots_expire_by_age_only() -> None:
    snaps = [*chain(1, 2, 3), SnapshotNode(9, 1, 50 * HOUR)]  # 9: a dropped branch's head
    refs = [RefInfo("main", 3, True)]
    assert expire(snaps, refs, older_than_h=40) == {1, 2}
    assert expire(snaps, refs, older_than_h=60) == {1, 2, 9}


def test_an_aged_out_ref_is_dropped_but_its_snapshot_waits() -> None:
    snaps = chain(1, 2, 3)
    refs = [RefInfo("main", 3, True), RefInfo("old", 1, False, max_ref_age_ms=HOUR)]
    assert expire(snaps, refs) == {2}
    # the table default applies to refs without their own
    props = {"history.expire.max-ref-age-ms": str(HOUR)}
    assert expire(snaps, [RefInfo("main", 3, True), RefInfo("t", 1, False)], props=props) == {2}


def test_gc_disabled_and_bad_properties_are_refused() -> None:
    with pytest.raises(PermanentError, match=r"gc\.enabled"):
        Retention.of(chain(1), [], {"gc.enabled": "false"}, 1)
    with pytest.raises(PermanentError, match="'soon'"):
        Retention.of(chain(1), [], {"history.expire.max-ref-age-ms": "soon"}, 1)


def test_a_branch_max_age_about_to_expire_more_is_refused() -> None:
    snaps = [*chain(1, 2, 3, start=999), SnapshotNode(4, None, NOW)]  # 999, 1000, 1001 h
    # dev's own max age: 1 h 5 min. Nothing is forced now, but 1 is within the drift margin.
    age = HOUR + DRIFT_MARGIN_MS // 3
    refs = [RefInfo("main", 4, True), RefInfo("dev", 3, True, max_snapshot_age_ms=age)]
    retention = Retention.of(snaps, refs, {}, 4)
    assert retention.forced_by_refs(retain_last=1, now_ms=NOW) == frozenset()
    with pytest.raises(PermanentError, match=r"\[1\]"):
        expire(snaps, refs, older_than_h=0, retain_last=1)


@st.composite
def graphs(draw: st.DrawFn) -> Retention:
    n = draw(st.integers(1, 12))
    snaps = []
    for sid in range(1, n + 1):
        parent = draw(st.one_of(st.none(), st.integers(1, sid - 1))) if sid > 1 else None
        snaps.append(SnapshotNode(sid, parent, sid * HOUR))
    ids = st.integers(1, n)
    refs = [RefInfo("main", draw(ids), True)]
    for k in range(draw(st.integers(0, 3))):
        branch = draw(st.booleans())
        refs.append(
            RefInfo(
                f"r{k}",
                draw(ids),
                branch,
                min_snapshots_to_keep=draw(st.one_of(st.none(), st.integers(1, 4)))
                if branch
                else None,
                max_ref_age_ms=draw(st.one_of(st.none(), st.integers(1, 20 * HOUR))),
            )
        )
    return Retention(tuple(snaps), tuple(refs))


@settings(max_examples=300, deadline=None)
@given(retention=graphs(), older_h=st.integers(0, 15), keep=st.integers(1, 5))
def test_refs_are_never_expired_and_the_call_removes_exactly_e(
    retention: Retention, older_h: int, keep: int
) -> None:
    now = 10 * HOUR
    e = expiring_ids(retention, older_than_ms=older_h * HOUR, retain_last=keep, now_ms=now)
    assert not e & {r.snapshot_id for r in retention.refs}
    # The CALL: explicit ids E, older_than the epoch. Iceberg removes E and what it does not
    # retain itself; without refs' own max ages it retains everything else.
    forced = retention.forced_by_refs(retain_last=keep, now_ms=now)
    assert forced == frozenset() and e | forced == e
    # main's head and its newest retain_last ancestors always stay
    main = next(r for r in retention.refs if r.name == "main")
    newest = [s.snapshot_id for s in retention.ancestors(main.snapshot_id)][:keep]
    assert not e & set(newest)


@settings(max_examples=300, deadline=None)
@given(retention=graphs(), a=st.integers(0, 15), b=st.integers(0, 15), keep=st.integers(1, 5))
def test_older_cutoffs_and_more_retained_expire_less(
    retention: Retention, a: int, b: int, keep: int
) -> None:
    now = 10 * HOUR
    low, high = sorted((a, b))

    def e(h: int, k: int) -> frozenset[int]:
        return expiring_ids(retention, older_than_ms=h * HOUR, retain_last=k, now_ms=now)

    assert e(low, keep) <= e(high, keep)
    assert e(high, keep + 1) <= e(high, keep)
    assert e(ANCIENT_MS, keep) == frozenset()
