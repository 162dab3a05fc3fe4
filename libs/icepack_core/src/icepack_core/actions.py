"""Maintenance actions a job can hold, and the one entry point that runs them.

A job's ``actions`` is a list of ``{"action": NAME, ...parameters}``. ``run_action`` dispatches by
name; an unknown name is a permanent failure naming the action. Spark-backed actions register in
``ACTIONS`` (see ``icepack_core.spark``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from icepack_core.errors import IcepackError

if TYPE_CHECKING:
    from icepack_core.jobs import Job
    from icepack_core.settings import Settings

ActionFn = Callable[["Settings", "Job", dict[str, Any]], Awaitable[dict[str, Any]]]

# name -> implementation; filled by the modules that implement actions.
ACTIONS: dict[str, ActionFn] = {}


class ActionError(IcepackError):
    """An action failed; ``retryable`` tells the queue whether to try the job again."""

    code = "ACTION_FAILED"

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


async def noop(_settings: Settings, job: Job, action: dict[str, Any]) -> dict[str, Any]:
    """An action that changes nothing; used to exercise the queue end to end."""
    return {"output": {"noop": True, "job_id": job.id, "params": action.get("params", {})}}


ACTIONS["noop"] = noop


async def run_action(settings: Settings, job: Job, action: dict[str, Any]) -> dict[str, Any]:
    """Run one action of ``job``.

    Returns:
        ``{"procedure": ..., "sql": ..., "output": {...}, "impact": {...}}`` (keys optional).
    Raises:
        ActionError: the action is unknown (permanent) or failed.
    """
    name = action.get("action")
    implementation = ACTIONS.get(str(name))
    if implementation is None:
        known = ", ".join(sorted(ACTIONS))
        raise ActionError(f"unknown action {name!r} (known: {known})", retryable=False)
    return await implementation(settings, job, action)
