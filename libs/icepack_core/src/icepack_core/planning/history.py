"""What a table's job history says about each of its actions, as the planner reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from icepack_core.planning.recommendation import FailureStreak
from icepack_core.planning.throttle import Throttle


@dataclass(frozen=True)
class History:
    """Per action, what a table's job history says (``Planner.history``); empty for a table
    no job ever ran on."""

    last_runs: dict[str, datetime] = field(default_factory=dict)
    snapshots_after: dict[str, str | None] = field(default_factory=dict)
    open_skipped: dict[str, int] = field(default_factory=dict)
    selected: dict[str, int | None] = field(default_factory=dict)
    open_max_small_files: dict[str, int | None] = field(default_factory=dict)
    durations: dict[str, float | None] = field(default_factory=dict)
    cancelled: dict[str, datetime] = field(default_factory=dict)
    failures: dict[str, FailureStreak] = field(default_factory=dict)
    throttles: dict[str, Throttle] = field(default_factory=dict)
