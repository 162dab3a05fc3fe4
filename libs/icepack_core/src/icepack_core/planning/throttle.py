"""Throttling an action whose measured benefit keeps falling far short of its prediction.

Rule: when the newest ``THROTTLE_RUNS`` (2) measured runs of an action on a table (succeeded
jobs whose outcome has a measured/predicted benefit ratio; see ``planning.prediction``) each
measured under ``THROTTLE_RATIO`` (10 %) of the predicted benefit, the planner skips the action
on that table. The throttle ends, whichever comes first:

* ``ICEPACK_THROTTLE_HOURS`` after the newest weak run finished (then the action runs once
  more; if it is weak again the two newest runs are weak again and it rests another period);
* when the action's predicted benefit is now at least twice what the newest weak run predicted
  (the table changed enough that the prediction means something else).

Pure: the planner reads the runs with the named query ``job_outcome_history``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

THROTTLE_RATIO = 0.10
THROTTLE_RUNS = 2
REARM_FACTOR = 2


@dataclass(frozen=True)
class MeasuredRun:
    """One succeeded run of an action: when it finished, its predicted benefit and the ratio
    measured/predicted benefit."""

    finished_at: datetime
    predicted_benefit: float
    ratio: float


@dataclass(frozen=True)
class Throttle:
    """An action throttled on a table. ``ratios`` oldest first."""

    ratios: tuple[float, ...]
    until: datetime
    rearm_benefit: float

    def active(self, now: datetime, predicted_benefit: float) -> bool:
        """Still throttled at ``now`` for an action now predicted to gain ``predicted_benefit``."""
        return now < self.until and predicted_benefit < self.rearm_benefit

    def reason(self, predicted_benefit: float) -> str:
        """The skip reason an operator sees."""
        measured = " and ".join(f"{r * 100:.0f} %" for r in self.ratios)
        return (
            f"throttled: last {len(self.ratios)} runs measured {measured} of the predicted "
            f"benefit (< {THROTTLE_RATIO * 100:.0f} %); proposed again after "
            f"{self.until.strftime('%Y-%m-%d %H:%M:%S')} or once the predicted benefit reaches "
            f"{self.rearm_benefit:g} (now {predicted_benefit:g})"
        )


def throttle_of(runs: Sequence[MeasuredRun], period: timedelta) -> Throttle | None:
    """The throttle ``runs`` (newest first) put on their action, or None.

    Only runs with a ratio count (a run whose prediction was 0 has none, see
    ``prediction.ratio``); the caller passes those only.
    """
    newest = list(runs[:THROTTLE_RUNS])
    if len(newest) < THROTTLE_RUNS or any(
        not math.isfinite(r.ratio) or r.ratio >= THROTTLE_RATIO for r in newest
    ):
        return None
    return Throttle(
        ratios=tuple(r.ratio for r in reversed(newest)),
        until=newest[0].finished_at + period,
        rearm_benefit=REARM_FACTOR * newest[0].predicted_benefit,
    )
