"""Where a compaction job's time goes beside the direct ``CALL``: the prefetch A/B.

``--prefetch-ab N`` runs, N times each in one shuffled order (seeded), on the same table state
(rolled back after every run):

* the direct ``CALL`` (the job's exact SQL) after ``REFRESH TABLE``, as the job's own runs;
* Icepack's job as it ships: the replaced files' fingerprints taken at the inspection, before
  the job (``first_sight``), so its verification reads only what the rewrite wrote;
* the job without them (the table's stored fingerprints removed before the run, taken again
  after it, untimed): the replaced files are read beside its ``CALL`` (``replaced_files.Prefetch``);
* that job with the prefetch switched off too: its verification reads them after the ``CALL``.

It prints each side's median and best, the job's ``CALL`` against the direct one (what running
beside Spark costs it) and the job's total against the direct median (the goal). Medians of many
shuffled runs, because one run's ``CALL`` moves by a tenth of a second or more on this machine.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from icepack_core.execution.maintenance import TableMaintenance

GOAL = 1.2  # job time at most this multiple of the direct CALL (#27)
SEED = 27
SIDES = ("direct", "job", "job without first sight", "job without prefetch")


@dataclass
class Side:
    """One side's wall times: the whole run, and its ``CALL`` alone (the direct run: equal)."""

    totals: list[float] = field(default_factory=list)
    calls: list[float] = field(default_factory=list)

    def median(self, of_calls: bool = False) -> float:
        return statistics.median(self.calls if of_calls else self.totals)

    def best(self, of_calls: bool = False) -> float:
        return min(self.calls if of_calls else self.totals)


Timed = tuple[float, float]  # (whole run, its CALL) in seconds


async def prefetch_ab(
    runs: int,
    direct: Callable[[], Awaitable[Timed]],
    job: Callable[[bool], Awaitable[Timed]],
) -> dict[str, Side]:
    """``runs`` of each side in one shuffled order; ``direct`` and ``job`` run one and roll it
    back (``job(False)``: without the stored fingerprints). The job without the prefetch is
    ``job(False)`` with ``TableMaintenance._prefetch`` giving nothing, so its verification reads
    every replaced file after the ``CALL``."""
    sides = {name: Side() for name in SIDES}
    order = [name for name in SIDES for _ in range(max(runs, 1))]
    random.Random(SEED).shuffle(order)
    for name in order:
        if name == "direct":
            total, call = await direct()
        elif name == "job":
            total, call = await job(True)
        elif name == "job without first sight":
            total, call = await job(False)
        else:
            with mock.patch.object(TableMaintenance, "_prefetch", return_value=None):
                total, call = await job(False)
        sides[name].totals.append(total)
        sides[name].calls.append(call)
        print(f"  {name}: {total:.2f} s (CALL {call:.2f} s)", flush=True)
    return sides


def report_prefetch_ab(sides: dict[str, Side]) -> None:
    """Each side's median and best; the job's CALL beside the direct one; the goal."""
    direct = sides["direct"].median()
    runs = len(sides["direct"].totals)
    print(f"\nprefetch A/B ({runs} runs each, one shuffled order, medians; best in brackets):")
    for name in SIDES:
        side = sides[name]
        print(
            f"  {name:22s}: {side.median():5.2f} s ({side.best():.2f})  = "
            f"{side.median() / direct:.2f}x the direct median"
            + (
                f"; its CALL {side.median(True):.2f} s ({side.best(True):.2f}), "
                f"{side.median(True) - direct:+.2f} s against the direct CALL"
                if name != "direct"
                else ""
            )
        )
    shipped = sides["job"].median() / direct
    verdict = "ok" if shipped <= GOAL else "MISS"
    print(f"  goal: job <= {GOAL}x the direct CALL: {shipped:.2f}x {verdict}")
    unseen = sides["job without first sight"]
    saved = sides["job without prefetch"].median() - unseen.median()
    slowed = unseen.median(True) - sides["job without prefetch"].median(True)
    print(
        f"  the prefetch takes {saved:.2f} s off the job's median; its CALL ran {slowed:.2f} s "
        "longer beside it (on shared cores the CALL pays for what the prefetch reads)"
    )
    sighted = unseen.median() - sides["job"].median()
    print(f"  fingerprints taken at first sight take {sighted:.2f} s more off it")


def call_seconds(log: list[tuple[str, float]]) -> float:
    """The ``CALL``'s own time from an engine's statement log (the longest ``CALL``)."""
    return max((seconds for statement, seconds in log if statement.startswith("CALL")), default=0.0)


def refreshed(spark: Any, table: str) -> None:
    """``REFRESH TABLE``, as the job runs before its ``CALL``."""
    spark.sql(f"REFRESH TABLE {table}").collect()
