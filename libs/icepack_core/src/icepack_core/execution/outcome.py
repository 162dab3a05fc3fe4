"""A job's measured outcome, beside what the planner predicted.

Per action the executor measures the table's shape (``planning.prediction.Shape``: data files,
data bytes, manifests, delete files, snapshots) before and after it, the measured benefit (the
same definition as the prediction's: objects a full scan no longer opens) and the ratio
measured/predicted benefit (None when nothing was predicted). A **read probe** times PyIceberg's
``table.scan().plan_files()`` on the current snapshot before the first action and after the
last (a full scan, same shape both times) and counts what it planned. The probe never fails a
job: any error is recorded as the probe's ``error``.

Stored in ``jobs.outcome`` (fenced) at the end of a successful job::

    {"actions": [{"action", "before": Shape|null, "after": Shape|null, "benefit": int|null,
                  "predicted_benefit": number|null, "ratio": number|null}, ...],
     "benefit": int|null, "predicted_benefit": number|null, "ratio": number|null,
     "read_probe": {"before": Probe, "after": Probe}}

with ``Probe`` either ``{"snapshot_id", "files_planned", "delete_files_planned", "plan_ms"}``
or ``{"error": "..."}``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from icepack_core.inspection.inspector import Inspector
from icepack_core.inspection.status import TableStatus
from icepack_core.planning.prediction import Shape, benefit, ratio
from icepack_core.telemetry.logs import redact_text
from icepack_core.types import TableRef

# Planning a full scan reads every manifest of the current snapshot; far longer means stuck.
PROBE_TIMEOUT_SECONDS = 300.0


async def read_probe(inspector: Inspector, ref: TableRef) -> dict[str, Any]:
    """Time ``table.scan().plan_files()`` on ``ref``'s current snapshot. Never raises (except
    cancellation): an error is returned as ``{"error": ...}``."""
    try:
        loaded = await inspector.load(ref)
        table = loaded.table
        if table is None:
            return {"error": "PyIceberg's model rejected the table metadata: no scan to plan"}

        def plan() -> dict[str, Any]:
            snapshot = table.current_snapshot()
            started = time.perf_counter()
            tasks = list(table.scan().plan_files())
            elapsed = time.perf_counter() - started
            deletes = {d.file_path for t in tasks for d in t.delete_files}
            return {
                "snapshot_id": None if snapshot is None else snapshot.snapshot_id,
                "files_planned": len(tasks),
                "delete_files_planned": len(deletes),
                "plan_ms": round(elapsed * 1000, 3),
            }

        return await asyncio.wait_for(asyncio.to_thread(plan), PROBE_TIMEOUT_SECONDS)
    except Exception as exc:  # the probe is evidence, never a reason to fail the job
        return {"error": redact_text(f"{type(exc).__name__}: {exc}")[:500]}


def predicted_benefits(
    predicted: Mapping[str, Any] | None, actions: Sequence[str]
) -> list[float | None]:
    """Per action of the job, the predicted benefit stored with it (``jobs.predicted``), or
    None when the job carries no prediction for that position (operator jobs; a mismatch)."""
    entries = predicted.get("actions") if isinstance(predicted, Mapping) else None
    found: list[float | None] = []
    for i, name in enumerate(actions):
        entry = entries[i] if isinstance(entries, list) and i < len(entries) else None
        value = entry.get("benefit") if isinstance(entry, Mapping) else None
        same = isinstance(entry, Mapping) and entry.get("action") == name
        found.append(float(value) if same and isinstance(value, int | float) else None)
    return found


def measured_action(
    action: str,
    before: TableStatus | None,
    after: TableStatus | None,
    predicted_benefit: float | None,
) -> dict[str, Any]:
    """One action's measured effect (the module doc's ``actions[]`` entry)."""
    if before is None or after is None:  # an inspection failed: nothing measured
        return {
            "action": action,
            "before": None,
            "after": None,
            "benefit": None,
            "predicted_benefit": predicted_benefit,
            "ratio": None,
        }
    b, a = Shape.of(before.model_dump()), Shape.of(after.model_dump())
    measured = benefit(b, a)
    return {
        "action": action,
        "before": b.to_json(),
        "after": a.to_json(),
        "benefit": measured,
        "predicted_benefit": predicted_benefit,
        "ratio": None if predicted_benefit is None else ratio(measured, predicted_benefit),
    }


def job_outcome(
    actions: Sequence[dict[str, Any]], probe_before: dict[str, Any], probe_after: dict[str, Any]
) -> dict[str, Any]:
    """The job's outcome from its measured actions and the two read probes."""
    measured = [a["benefit"] for a in actions if a["benefit"] is not None]
    predicted = [a["predicted_benefit"] for a in actions if a["predicted_benefit"] is not None]
    total = sum(measured) if len(measured) == len(actions) else None
    expected = sum(predicted) if predicted else None
    return {
        "actions": list(actions),
        "benefit": total,
        "predicted_benefit": expected,
        "ratio": None if total is None or expected is None else ratio(total, expected),
        "read_probe": {"before": probe_before, "after": probe_after},
    }
