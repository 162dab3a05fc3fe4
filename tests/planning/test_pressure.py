"""The open-partition projection (``planning.pressure``) and how the due rule and the
recommendation use it, as pure functions with hypothesis properties. The planner reading real
statuses of a table a real writer process grows, with Spark, is in
``tests/execution/test_open_pressure.py``."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from hypothesis import given
from hypothesis import strategies as st

from icepack_core.inspection.status import TableStatus
from icepack_core.planning.due import DueRule, LastRun, Need, TableState, judge
from icepack_core.planning.pressure import (
    DEFAULT_LEAD,
    HEADROOM,
    MAX_LEAD,
    MAX_WAIT,
    PLANNING_DELAY,
    Growth,
    OpenBound,
    QueueAhead,
    fullest_small,
    lead_of,
    project,
    table_pressure,
)
from icepack_core.planning.recommendation import CLOSED_MIN_FILES, recommend
from icepack_core.policy import resolve
from tests.planning.test_recommendation import MIB, NOW, status

if TYPE_CHECKING:  # type-only
    from icepack_core.planning.recommendation import Proposed, Recommendation

REWRITE = "rewrite_data_files"
BOUND = OpenBound(bound=100, min_files=5, lead=timedelta(seconds=60))


def growth(before: int, now: int, seconds: float = 60.0) -> Growth:
    return Growth(before, NOW - timedelta(seconds=seconds), now, NOW)


def test_no_growth_means_no_projection() -> None:
    assert project(None, BOUND) is None
    assert project(growth(40, 40), BOUND) is None  # nothing added
    assert project(growth(40, 3), BOUND) is None  # a compaction or a close in between
    assert project(Growth(1, NOW, 9, NOW), BOUND) is None  # no span


def test_a_bucket_partition_gaining_one_file_a_second_is_compacted_from_fifteen() -> None:
    """The measured bench case: 60 files a minute per bucket, a run that takes a minute. The
    level leaves room for the run's own minute: 0.75 * 100 - 60 = 15."""
    p = project(growth(0, 30, seconds=30), BOUND)
    assert p is not None and p.threatened
    assert p.level == 15 and p.rate_per_second == 1.0
    assert "compacted from 15 to stay under the bound of 100" in p.reason()


def test_a_slow_partition_is_not_threatened_and_says_when_it_will_be() -> None:
    p = project(growth(10, 16, seconds=60), BOUND)  # 6 files a minute
    assert p is not None and not p.threatened
    assert p.level == 69  # floor(75 - 0.1 * 60)
    assert p.threat_at == NOW + timedelta(seconds=(69 - 16) / 0.1)


@given(
    before=st.integers(0, 10_000),
    gained=st.integers(1, 10_000),
    seconds=st.floats(1, 86_400 * 365),
    bound=st.integers(2, 100_000),
    min_files=st.integers(2, 1_000),
    lead=st.floats(0, 7200),
)
def test_projection_properties(
    before: int, gained: int, seconds: float, bound: int, min_files: int, lead: float
) -> None:
    rule = OpenBound(bound, min_files, timedelta(seconds=lead))
    p = project(growth(before, before + gained, seconds), rule)
    assert p is not None
    assert min_files <= p.level or p.level == bound  # never below min_files unless the bound is
    assert p.level <= max(bound, min_files)
    # The rule reads the lead as a timedelta (microseconds), so the check does too.
    effective_lead = min(timedelta(seconds=lead), MAX_LEAD).total_seconds()
    if p.level > min_files and p.level < bound:
        # a partition at the level, planned now, commits under the headroom
        assert p.level + p.rate_per_second * effective_lead <= HEADROOM * bound + 1e-6
    if p.threatened:
        assert before + gained >= p.level
    else:
        assert before + gained < p.level and p.threat_at is not None and p.threat_at > NOW
        waited = (p.threat_at - NOW).total_seconds()
        reached = (before + gained) + p.rate_per_second * waited
        assert waited == MAX_WAIT.total_seconds() or abs(reached - p.level) < 1e-3 * p.level


@given(st.one_of(st.none(), st.floats(allow_nan=True)))
def test_the_lead_is_bounded(seconds: float | None) -> None:
    lead = lead_of(seconds)
    assert timedelta(0) < lead <= MAX_LEAD
    if seconds is None or seconds != seconds or seconds < 0:
        assert lead == DEFAULT_LEAD


@given(
    run=st.one_of(st.none(), st.floats(allow_nan=True)),
    ahead=st.floats(allow_nan=True, allow_infinity=True),
    executors=st.integers(-3, 64),
)
def test_the_wait_in_the_queue_lengthens_the_lead_within_its_bound(
    run: float | None, ahead: float, executors: int
) -> None:
    queue = QueueAhead(ahead, executors)
    wait = queue.wait()
    assert timedelta(0) <= wait <= MAX_LEAD
    if ahead == ahead and 0 < ahead < 1e9:  # finite, positive: shared by the executors
        shared = ahead / max(1, executors)
        assert abs(wait.total_seconds() - min(shared, MAX_LEAD.total_seconds())) < 1e-5
    lead = lead_of(run, wait)
    assert lead_of(run) <= lead <= MAX_LEAD
    assert lead == min(MAX_LEAD, lead_of(run) + wait)


def test_a_partition_whose_run_waits_behind_another_table_s_job_is_compacted_earlier() -> None:
    """The bench case that passed the bound: a ``bucket(16, id)`` partition gaining a file a
    second, its last run 20 s, planned while one executor rewrites another table for 30 s
    more. Counting only its own run, it was compacted from 40 and committed about 65 files
    later than planned, at up to 105; counting the wait, from 10."""
    policy = resolve([], "db", "t")
    table = streaming_status(30, 400, partitions=16)
    alone = table_pressure(table, policy, growth(0, 30, seconds=30), 20.0)
    assert alone is not None and alone.level == 40 and not alone.threatened
    assert alone.lead == timedelta(seconds=20) + PLANNING_DELAY
    behind = table_pressure(table, policy, growth(0, 30, seconds=30), 20.0, QueueAhead(30.0, 1))
    assert behind is not None and behind.threatened
    assert behind.level == 10 and behind.lead == timedelta(seconds=65)
    assert "a run takes about 65 s (30 s of it behind other tables' jobs)" in behind.reason()
    # Two executors share what is ahead: half the wait.
    shared = table_pressure(table, policy, growth(0, 30, seconds=30), 20.0, QueueAhead(30.0, 2))
    assert shared is not None and shared.level == 25 and shared.threatened
    # The recommendation plans it now, with the wait in its reason.
    rec = recommend(
        table,
        policy,
        {},
        NOW,
        growth=growth(0, 30, seconds=30),
        compaction_seconds=20.0,
        queue_ahead=QueueAhead(30.0, 1),
    )
    action = rewrite(rec)
    assert action is not None and "behind other tables' jobs" in action.reason
    assert action.to_json()["params"]["open_max_small_files"] == 9


@given(st.integers(-5, 10_000), st.integers(-5, 10_000))
def test_the_fullest_partition_never_holds_more_small_files_than_the_table(
    most: int, small: int
) -> None:
    assert 0 <= fullest_small(most, small) <= max(0, small)


def test_pressure_makes_a_compaction_due_whatever_its_benefit_at_the_pressure_interval() -> None:
    threatened = project(growth(0, 30, seconds=30), BOUND)
    finished = NOW - timedelta(seconds=90)
    last = LastRun(finished, "7")
    table = TableState("8", NOW, finished)
    rule = DueRule()
    # Benefit 5 is far below the threshold of 50: without pressure it is not due.
    assert not judge(Need(REWRITE, 5, 0), last, table, NOW, rule).due
    verdict = judge(Need(REWRITE, 5, 0), last, table, NOW, rule, threatened)
    assert verdict.due and verdict.reason.startswith("due: open-partition pressure: ")
    # Within the pressure interval (1 min) it waits, then until that interval ends, not 5 min.
    soon = TableState("8", NOW, NOW - timedelta(seconds=20))
    held = judge(Need(REWRITE, 5, 0), last, soon, NOW, rule, threatened)
    assert not held.due and held.replan_at == NOW + timedelta(seconds=40)
    assert held.reason.startswith("min interval 1 min")
    # The inspection after the last run still comes first.
    stale = TableState("8", finished - timedelta(seconds=1), finished)
    assert not judge(Need(REWRITE, 5, 0), last, stale, NOW, rule, threatened).due


def test_a_held_compaction_is_planned_again_when_the_projection_reaches_the_level() -> None:
    slow = project(growth(10, 16, seconds=60), BOUND)
    assert slow is not None and slow.threat_at is not None
    finished = NOW - timedelta(seconds=90)
    verdict = judge(
        Need(REWRITE, 5, 0),
        LastRun(finished, "7"),
        TableState("8", NOW, finished),
        NOW,
        DueRule(),
        slow,
    )
    assert not verdict.due and verdict.replan_at == slow.threat_at


def streaming_status(fullest: int, small: int, partitions: int = 3) -> TableStatus:
    return status(
        data_file_count=small,
        data_file_bytes=small * MIB,
        small_file_count=small,
        small_file_bytes=small * MIB,
        partition_count=partitions,
        max_files_in_partition=fullest,
        inspected_at="2026-11-21T12:00:00.000Z",
    )


def rewrite(rec: Recommendation) -> Proposed | None:
    return next((a for a in rec.actions if a.action == REWRITE), None)


def test_a_growing_table_compacts_open_partitions_from_the_level_and_closed_ones_from_two() -> None:
    policy = resolve([], "db", "t")
    rec = recommend(streaming_status(30, 40), policy, {}, NOW, growth=growth(0, 30, seconds=30))
    action = rewrite(rec)
    assert action is not None
    assert action.to_json()["params"]["open_max_small_files"] == 14  # compacted above 14: from 15
    assert action.to_json()["params"]["options"]["min-input-files"] == str(CLOSED_MIN_FILES)
    # Its file groups are rewritten (and so committed) one at a time: they race the writer
    # only, not each other.
    assert action.to_json()["params"]["options"]["max-concurrent-file-group-rewrites"] == "1"
    assert "due: open-partition pressure" in action.reason


def test_a_batch_table_keeps_its_bound_and_min_input_files() -> None:
    """No growth between two inspections (a batch landed once): today's parameters."""
    policy = resolve([], "db", "t")
    rec = recommend(streaming_status(30, 40), policy, {}, NOW, growth=None)
    action = rewrite(rec)
    assert action is not None
    assert action.to_json()["params"]["open_max_small_files"] == 100
    assert action.to_json()["params"]["options"]["min-input-files"] == "5"
    assert "max-concurrent-file-group-rewrites" not in action.to_json()["params"]["options"]


def test_a_run_that_would_only_find_the_open_partition_below_its_level_is_not_planned() -> None:
    """Every small file but three is in the fullest open partition, below the level: a run
    would skip it and do nothing, so none is planned; the planner comes back at threat_at."""
    policy = resolve([], "db", "t")
    slow = growth(10, 16, seconds=60)
    rec = recommend(streaming_status(16, 19), policy, {}, NOW, growth=slow)
    assert rewrite(rec) is None
    skip = next(s for s in rec.skipped if s.action == REWRITE)
    assert skip.reason.startswith("not due: 3 small files outside the fullest open partition")
    expected = project(slow, OpenBound(100, 5))
    assert expected is not None and rec.replan_at == expected.threat_at
    # The same table with closed partitions holding small files is compacted.
    rec = recommend(streaming_status(16, 60), policy, {}, NOW, growth=slow)
    assert rewrite(rec) is not None


def test_a_run_that_found_only_open_partitions_is_not_repeated_until_they_close() -> None:
    """Its candidates were all open below their bound (it selected none): the writer adding
    more to them does not make the next run find more, their closing does (or the pressure)."""
    finished = NOW - timedelta(minutes=6)
    closes = finished + timedelta(minutes=10)
    last = LastRun(finished, "7", reopens_at=closes, found_only_open=True)
    changed = TableState("9", NOW, finished)  # the writer committed since
    rule = DueRule()
    held = judge(Need(REWRITE, 299, 0), last, changed, NOW, rule)
    assert not held.due and held.replan_at == closes
    assert "found only open partitions below their bound (none selected)" in held.reason
    # A run that did select partitions does not hold the next one back.
    assert judge(Need(REWRITE, 299, 0), LastRun(finished, "7", closes), changed, NOW, rule).due
    assert judge(Need(REWRITE, 299, 0), last, changed, closes, rule).due
    threatened = project(growth(0, 30, seconds=30), BOUND)
    assert judge(Need(REWRITE, 299, 0), last, changed, NOW, rule, threatened).due


def test_the_recommendation_reads_a_run_that_selected_nothing_from_its_counts() -> None:
    policy = resolve([], "db", "t")
    finished = NOW - timedelta(minutes=6)
    busy = streaming_status(30, 90)
    runs = {REWRITE: finished}
    kwargs: dict[str, object] = {"snapshots_after": {REWRITE: "1"}, "open_skipped": {REWRITE: 3}}
    held = recommend(busy, policy, runs, NOW, selected={REWRITE: 0}, **kwargs)  # type: ignore[arg-type]
    assert rewrite(held) is None
    assert held.replan_at == finished + timedelta(minutes=10)
    did_work = recommend(busy, policy, runs, NOW, selected={REWRITE: 2}, **kwargs)  # type: ignore[arg-type]
    assert rewrite(did_work) is not None


@given(
    partitions=st.integers(0, 1),
    small=st.integers(5, 5_000),
    per_minute=st.integers(1, 600),
    eq_deletes=st.integers(0, 500),
    ran_seconds_ago=st.integers(60, 299),
)
def test_an_unpartitioned_streaming_table_is_its_one_open_partition(
    partitions: int, small: int, per_minute: int, eq_deletes: int, ran_seconds_ago: int
) -> None:
    """An unpartitioned table (an upsert sink's) or one with a single partition so far gets the
    projection too: its small files are its open partition's. Threatened, its compaction is due
    at the pressure interval (1 min), not after the 5-minute interval (it used to get none:
    300 small files between two runs at one commit a second)."""
    policy = resolve([], "db", "t")
    table = streaming_status(small, small, partitions)
    table = table.model_copy(update={"equality_delete_file_count": eq_deletes})
    finished = NOW - timedelta(seconds=ran_seconds_ago)
    grown = Growth(max(0, small - per_minute), NOW - timedelta(seconds=60), small, NOW)
    expected = project(grown, OpenBound(100, 5, lead_of(None)))
    assert expected is not None
    rec = recommend(
        table,
        policy,
        {REWRITE: finished},
        NOW,
        snapshots_after={REWRITE: "1"},
        growth=grown,
    )
    action = rewrite(rec)
    if expected.threatened:
        assert action is not None, rec.skipped
        assert "due: open-partition pressure" in action.reason
        assert "scope" not in action.to_json()["params"]  # the whole table, as before
    elif action is None:
        assert rec.replan_at is not None and rec.replan_at <= expected.threat_at  # type: ignore[operator]


@given(
    before=st.integers(0, 10_000),
    gained=st.integers(-50, 10_000),
    seconds=st.floats(1, 86_400),
    small_now=st.integers(0, 10_000),
    bound=st.integers(2, 10_000),
)
def test_the_rate_measured_before_a_compaction_is_carried_across_it(
    before: int, gained: int, seconds: float, small_now: int, bound: int
) -> None:
    """Right after a run the newest count is low but the writer's pace is the same: the rate
    of the two statuses before the run, with the newest count, projects exactly as a measured
    growth at that rate would (no rate measured before: no projection, as before)."""
    pre = growth(before, before + gained, seconds)
    carried = Growth.carried(pre, small_now, NOW)
    rate = pre.rate_per_second()
    if rate is None:
        assert carried is None
        return
    assert carried is not None and carried.rate_per_second() == rate
    rule = OpenBound(bound, 2, timedelta(seconds=75))
    got = project(carried, rule)
    # The same rate measured over the same span, ending at small_now.
    same = project(growth(small_now - gained, small_now, seconds), rule)
    assert got is not None and same is not None
    assert (got.level, got.threatened) == (same.level, same.threatened)
    assert got.small_now == small_now


def test_a_table_just_compacted_keeps_its_pressure_interval() -> None:
    """The planner's case: one status after the run (its fullest partition at 40 again, the
    writer still adding a file a second). With the rate carried, the compaction is held only
    by the 1-minute pressure interval; forgetting it fell back to the 5-minute interval."""
    policy = resolve([], "db", "t")
    finished = NOW - timedelta(seconds=30)
    pre = Growth(20, finished - timedelta(seconds=60), 80, finished - timedelta(seconds=10))
    rec = recommend(
        streaming_status(40, 600, partitions=16),
        policy,
        {REWRITE: finished},
        NOW,
        snapshots_after={REWRITE: "1"},
        growth=Growth.carried(pre, 40, NOW),
    )
    assert rewrite(rec) is None
    skip = next(s for s in rec.skipped if s.action == REWRITE)
    assert skip.reason.startswith("min interval 1 min"), skip.reason
    assert rec.replan_at == finished + timedelta(minutes=1)


def test_an_open_hour_beside_a_fuller_closed_hour_is_projected_from_the_table_gain() -> None:
    """An ``hour(ts)`` table just after its hour turned: the closed hour (not yet quiet long
    enough to compact) holds 198 small files and stands still, the open hour grows. The
    fullest partition gains nothing, so without the table's counts there was no projection
    and the open hour grew unwatched until the closed one was compacted."""
    standing = Growth(
        198, NOW - timedelta(seconds=60), 198, NOW, table_small_before=210, table_small_now=270
    )
    pressure = project(standing, BOUND)
    assert pressure is not None
    assert pressure.rate_per_second == 1.0  # the table's 60 files in 60 s
    assert pressure.threatened  # the fullest count is at least the level: run now
    assert project(Growth(198, NOW - timedelta(seconds=60), 198, NOW), BOUND) is None


@given(
    st.integers(0, 10_000),
    st.integers(-50, 500),
    st.integers(0, 10_000),
    st.integers(-50, 5_000),
    st.floats(1, 3_600),
)
def test_the_table_gain_counts_only_when_the_fullest_partition_stands_still(
    fullest: int, fullest_gain: int, table: int, table_gain: int, seconds: float
) -> None:
    measured = Growth(
        fullest,
        NOW - timedelta(seconds=seconds),
        fullest + fullest_gain,
        NOW,
        table_small_before=table,
        table_small_now=table + table_gain,
    )
    span = (NOW - measured.at_before).total_seconds()
    rate = measured.rate_per_second()
    if fullest_gain > 0:
        assert rate == fullest_gain / span
    elif table_gain > 0:
        assert rate == table_gain / span
    else:
        assert rate is None


@given(
    by_pressure=st.booleans(),
    found_nothing=st.booleans(),
    other_run_after=st.booleans(),
    ago=st.integers(1, 59),
)
def test_a_run_that_did_nothing_under_the_plain_bound_does_not_start_the_pressure_interval(
    by_pressure: bool, found_nothing: bool, other_run_after: bool, ago: int
) -> None:
    """``bench.stream``: a bucket table's first run (planned from one status, no rate: the
    plain bound of 100) skipped its 16 open partitions, and the pressure interval then held the
    next run a minute while they grew by 60 files each. Threatened, such a run does not hold
    the next; a run the pressure planned that found nothing does (a table cannot loop), and
    so does any later run of another action."""
    threatened = project(growth(0, 30, seconds=30), BOUND)
    assert threatened is not None and threatened.threatened
    finished = NOW - timedelta(seconds=ago)
    closes = finished + timedelta(minutes=10)
    last = LastRun(finished, "7", closes, found_nothing, by_pressure)
    newest = finished + timedelta(seconds=ago / 2) if other_run_after else finished
    verdict = judge(
        Need(REWRITE, 5, 0), last, TableState("9", NOW, newest), NOW, DueRule(), threatened
    )
    waived = found_nothing and not by_pressure and not other_run_after
    assert verdict.due == waived, verdict
    if not waived:
        assert verdict.reason.startswith("min interval 1 min"), verdict.reason
        assert verdict.replan_at == newest + timedelta(minutes=1)


def test_the_recommendation_tells_a_pressure_run_from_its_intent() -> None:
    """``open_max_small_files`` below the policy's bound (100) marks the run as planned by the
    pressure (``job_last_action_runs`` reads it from the job's intent)."""
    policy = resolve([], "db", "t")
    finished = NOW - timedelta(seconds=20)
    table = streaming_status(30, 480, partitions=16)

    def after_a_run_planned_with(bound: int) -> Recommendation:
        return recommend(
            table,
            policy,
            {REWRITE: finished},
            NOW,
            snapshots_after={REWRITE: "1"},
            open_skipped={REWRITE: 16},
            selected={REWRITE: 0},
            open_max_small_files={REWRITE: bound},
            growth=growth(0, 30, seconds=30),
        )

    plain = after_a_run_planned_with(100)
    assert rewrite(plain) is not None, plain.skipped
    pressed = after_a_run_planned_with(14)
    assert rewrite(pressed) is None
    (skip,) = [s for s in pressed.skipped if s.action == REWRITE]
    assert skip.reason.startswith("min interval 1 min"), skip.reason
