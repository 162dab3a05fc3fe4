"""Keeping an open partition under its small-file bound: the growth projection.

A partition a writer keeps adding to (open, ``execution.scoping.metadata_scope``) is compacted only
once it holds more than the policy's ``open_partition_max_small_files`` (the *bound*, default
100): compacting it every few minutes is undone by the next commits. But a bound that is only
checked every minimum interval is not kept: a ``bucket(16, id)`` table committed every second
gains a small file per partition per commit, 300 in five minutes. So the planner projects how
fast the fullest partition grows and plans a compaction before the bound would be crossed.

The facts are two statuses of the table, both inspected after its last compaction finished
(so no compaction in between lowered the counts): the fullest partition's small files then
and now (``TableStatus.max_files_in_partition``, capped by ``small_file_count``; a partition
of a streaming table holds small files only), at least
``ICEPACK_MAINTENANCE_GROWTH_SPAN_SECONDS`` (30) apart. Their difference over the time between
them is the *rate*. The *lead* is how long a run planned now takes to commit: the last
compaction's run time, plus the planning and claim delay, plus its wait in the queue (the
expected remaining time of the other tables' running and due jobs, shared by the executors
that claimed jobs lately: ``QueueAhead``; one executor busy with another table's rewrite is
as much a delay as the rewrite itself). The rule:

- ``level = clamp(floor(HEADROOM · bound - rate · lead), min_files, bound)``: a partition at
  the level, planned now, reaches at most ``HEADROOM · bound`` by the time the run commits;
- the table is **threatened** when its fullest partition is at the level: the compaction is
  due whatever its benefit, and the minimum interval shrinks to the pressure floor (still a
  floor, so a hot table cannot take the executors in a loop; the budgets and the claim order
  share them across tables);
- the run compacts open partitions holding at least ``level`` small files
  (``open_max_small_files`` = level - 1), so a run planned for the pressure does work, and
  open partitions far below it are left alone; closed partitions are compacted from 2 small
  files (what a writer left in a partition when it closed, and the compacted file);
- not yet threatened, ``threat_at`` is when the fullest partition reaches the level at this
  rate: the planner plans the table again then, even without an event.

Without growth (no second status, no new small files, a compaction or a close in between) there
is no projection: the bound is checked as before, at the policy's own interval.

Pure: the planner reads the two statuses and the last run and passes them in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from icepack_core.inspection.status import TableStatus
from icepack_core.policy import EffectivePolicy

# The share of the bound a run planned by the projection aims to stay under when it commits:
# the rate is measured, not known, and the lead varies with the machine's load.
HEADROOM = 0.75
# The lead when no compaction ran on the table yet (a Spark rewrite of a few partitions).
DEFAULT_LEAD = timedelta(seconds=60)
# The planning, inspection and claim delays a run's own duration does not include.
PLANNING_DELAY = timedelta(seconds=15)
MAX_LEAD = timedelta(minutes=30)
MAX_WAIT = timedelta(days=30)
# How far back the executors that share the queue are counted (jobs they claimed).
EXECUTOR_WINDOW = timedelta(minutes=15)


@dataclass(frozen=True)
class QueueAhead:
    """What stands before a job planned now (``job_wait_ahead``): the expected remaining
    seconds of the other tables' running and due queued jobs, and how many executors claimed a
    job within ``EXECUTOR_WINDOW`` (0: none lately; the wait is then counted as for one, the
    one KEDA starts)."""

    seconds: float
    executors: int

    def wait(self) -> timedelta:
        """The expected wait before an executor is free for the job, at most ``MAX_LEAD``.
        Every job ahead is counted, though the claim order may put the new one before some:
        a lead too long compacts a partition earlier, one too short lets it pass the bound."""
        seconds = self.seconds
        if not math.isfinite(seconds) or seconds <= 0:
            return timedelta(0)
        shared = min(seconds / max(1, self.executors), MAX_LEAD.total_seconds())
        return timedelta(seconds=shared)


@dataclass(frozen=True)
class Growth:
    """The fullest partition's small files at an earlier inspection and at the newest one
    (with the table's, for when the fullest is not the partition growing); or, right after a
    compaction (``carried``), the newest count with the rate measured before that compaction
    (``carried_rate``)."""

    small_before: int
    at_before: datetime
    small_now: int
    at_now: datetime
    # Small files a second measured between two statuses before the last compaction: used
    # until two statuses after it are far enough apart to measure the rate again.
    carried_rate: float | None = None
    # The table's small files at the same two inspections (None: not known). When the fullest
    # partition is not the one growing (an ``hour(ts)`` table whose closed hour, not yet quiet
    # long enough to compact, holds more files than the open one), its count stands still while
    # the open partition grows; the table's gain then bounds the growing partitions' rate.
    table_small_before: int | None = None
    table_small_now: int | None = None

    @classmethod
    def carried(cls, before: Growth | None, small_now: int, at_now: datetime) -> Growth | None:
        """The growth right after a compaction: ``before``'s rate (measured before it, None:
        not measured or no growth) with the newest status's count. A compaction lowers the
        count, not the writer's pace, so forgetting the rate would leave the table without a
        projection (and at the policy's own interval) until the next measurement."""
        rate = None if before is None else before.rate_per_second()
        if rate is None:
            return None
        return cls(small_now, at_now, small_now, at_now, carried_rate=rate)

    def rate_per_second(self) -> float | None:
        """Small files gained per second, None without growth over a positive span."""
        if self.carried_rate is not None:
            rate = self.carried_rate
            return rate if rate > 0 and math.isfinite(rate) else None
        span = (self.at_now - self.at_before).total_seconds()
        gained = self.small_now - self.small_before
        if gained <= 0 and self.table_small_before is not None and self.table_small_now is not None:
            gained = self.table_small_now - self.table_small_before
        if span <= 0 or gained <= 0:
            return None
        return gained / span


@dataclass(frozen=True)
class OpenBound:
    """The policy's bound on an open partition's small files, its ``min_input_files``, and
    the lead (time from planning to the run's commit; ``queued`` of it in the queue)."""

    bound: int
    min_files: int
    lead: timedelta = DEFAULT_LEAD
    queued: timedelta = timedelta(0)


@dataclass(frozen=True)
class Pressure:
    """The projection for one table at ``at`` (see the module doc)."""

    rate_per_second: float
    small_now: int
    level: int
    bound: int
    lead: timedelta
    threat_at: datetime | None  # None: threatened now
    # The share of the lead spent waiting for the jobs ahead in the queue.
    queued: timedelta = timedelta(0)

    @property
    def threatened(self) -> bool:
        return self.threat_at is None

    def reason(self) -> str:
        """The words in the recommendation: the rate, the level and the bound."""
        waits = ""
        if self.queued > timedelta(0):
            waits = f" ({self.queued.total_seconds():.0f} s of it behind other tables' jobs)"
        head = (
            f"the fullest open partition holds {self.small_now} small files, gaining "
            f"{self.rate_per_second * 60:.1f}/min; a run takes about "
            f"{self.lead.total_seconds():.0f} s{waits}, so it is compacted from {self.level} "
            f"to stay under the bound of {self.bound}"
        )
        if self.threat_at is None:
            return head
        return f"{head}; it reaches {self.level} at {self.threat_at:%Y-%m-%d %H:%M:%S}"


def lead_of(last_run_seconds: float | None, waited: timedelta = timedelta(0)) -> timedelta:
    """How long a run planned now takes to commit: the last run's time plus the planning
    delay (``DEFAULT_LEAD`` without a run), plus ``waited`` in the queue
    (``QueueAhead.wait``), at most ``MAX_LEAD``."""
    if last_run_seconds is None or last_run_seconds < 0 or math.isnan(last_run_seconds):
        return min(MAX_LEAD, DEFAULT_LEAD + waited)
    seconds = min(MAX_LEAD.total_seconds(), last_run_seconds)  # any float, no overflow
    return min(MAX_LEAD, timedelta(seconds=seconds) + PLANNING_DELAY + waited)


def project(growth: Growth | None, bound: OpenBound) -> Pressure | None:
    """The pressure on the table's open partitions, None without growth."""
    if growth is None:
        return None
    rate = growth.rate_per_second()
    if rate is None:
        return None
    lead = min(bound.lead, MAX_LEAD)
    aim = math.floor(HEADROOM * bound.bound - rate * lead.total_seconds())
    level = max(bound.min_files, min(bound.bound, aim))
    queued = min(bound.queued, lead)
    if growth.small_now >= level:
        return Pressure(rate, growth.small_now, level, bound.bound, lead, None, queued)
    # At most MAX_WAIT out: a slow rate over a long span must not overflow a datetime.
    wait = timedelta(seconds=min((level - growth.small_now) / rate, MAX_WAIT.total_seconds()))
    at = growth.at_now + wait
    return Pressure(rate, growth.small_now, level, bound.bound, lead, at, queued)


def fullest_small(max_files_in_partition: int, small_file_count: int) -> int:
    """The fullest partition's small files as the status gives them: its data files, at most
    every small file of the table."""
    return max(0, min(max_files_in_partition, small_file_count))


def table_pressure(
    status: TableStatus,
    policy: EffectivePolicy,
    growth: Growth | None,
    compaction_seconds: float | None,
    ahead: QueueAhead | None = None,
) -> Pressure | None:
    """The projection for a table's compaction (open partitions on, compaction enabled),
    None otherwise or without growth. An unpartitioned table (or one with a single partition
    so far, an ``hour(ts)`` table in its first hour) is its one open partition: its small
    files are that partition's (``fullest_small``), and its compaction is due by the same
    projection, though it rewrites the whole table. ``ahead``: the jobs a run planned now
    waits behind (None: not known, no wait counted)."""
    cfg = policy.data_compaction
    if cfg is None or cfg.open_partition_quiet_minutes <= 0:
        return None
    waited = timedelta(0) if ahead is None else ahead.wait()
    bound = OpenBound(
        cfg.open_partition_max_small_files,
        cfg.min_input_files,
        lead_of(compaction_seconds, waited),
        waited,
    )
    return project(growth, bound)
