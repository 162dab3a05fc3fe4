"""``icepack job ID``'s predicted-versus-measured view of a job (``jobs.predicted`` beside
``jobs.outcome``, shapes in ``planning.prediction``), tolerant of either being absent."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.table import Table

from icepack_core.planning.prediction import SHAPE_FIELDS


def _entries(doc: Any) -> list[Mapping[str, Any]]:
    actions = doc.get("actions") if isinstance(doc, Mapping) else None
    return [a for a in actions if isinstance(a, Mapping)] if isinstance(actions, list) else []


def _changes(entry: Mapping[str, Any] | None, fields: list[str]) -> list[str]:
    """``field before -> after`` for ``fields`` of one predicted or measured entry."""
    if entry is None:
        return ["-"]
    before, after = entry.get("before"), entry.get("after")
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return ["no table shape"]
    return [f"{k.replace('_', ' ')} {before.get(k)} -> {after.get(k)}" for k in fields]


def _changed_fields(*entries: Mapping[str, Any] | None) -> list[str]:
    """The shape fields that change in any of ``entries`` (all of them when none changes)."""
    changed = [
        k
        for k in SHAPE_FIELDS
        if any(
            isinstance(e, Mapping)
            and isinstance(e.get("before"), Mapping)
            and isinstance(e.get("after"), Mapping)
            and e["before"].get(k) != e["after"].get(k)
            for e in entries
        )
    ]
    return changed or list(SHAPE_FIELDS)


def prediction_text(predicted: Any) -> str:
    """One line for ``icepack recommend``: the changed shape fields, bytes rewritten, benefit."""
    if not isinstance(predicted, Mapping):
        return "no table shape predicted"
    fields = [k for k in _changed_fields(predicted) if k != "data_bytes"]
    changes = ", ".join(_changes(predicted, fields))
    return (
        f"{changes}; rewrites {predicted.get('rewrite_bytes')} bytes; "
        f"benefit {predicted.get('benefit')} (objects a full scan no longer opens)"
    )


def _ratio(value: Any) -> str:
    return f"{value * 100:.0f} %" if isinstance(value, int | float) else "-"


def outcome_table(predicted: Any, outcome: Any) -> Table | None:
    """Per action: predicted and measured shape changes, benefits and their ratio; None when
    the job has neither a prediction nor an outcome."""
    planned, measured = _entries(predicted), _entries(outcome)
    if not planned and not measured:
        return None
    table = Table("action", "predicted", "measured", "measured/predicted")
    for i in range(max(len(planned), len(measured))):
        p = planned[i] if i < len(planned) else None
        m = measured[i] if i < len(measured) else None
        fields = _changed_fields(p, m)
        p_lines = _changes(p, fields)
        if p is not None:
            p_lines += [f"rewrite bytes {p.get('rewrite_bytes')}", f"benefit {p.get('benefit')}"]
        m_lines = _changes(m, fields)
        if m is not None:
            m_lines.append(f"benefit {m.get('benefit')}")
        name = (p or m or {}).get("action", "?")
        table.add_row(
            str(name), "\n".join(p_lines), "\n".join(m_lines), _ratio((m or {}).get("ratio"))
        )
    return table


def _probe_text(probe: Any) -> str:
    if not isinstance(probe, Mapping):
        return "-"
    if probe.get("error"):
        return f"failed ({probe['error']})"
    return f"{probe.get('files_planned')} files planned in {probe.get('plan_ms')} ms"


def probe_line(outcome: Any) -> str | None:
    """``read probe: <before> -> <after>`` (None without an outcome)."""
    probes = outcome.get("read_probe") if isinstance(outcome, Mapping) else None
    if not isinstance(probes, Mapping):
        return None
    before, after = _probe_text(probes.get("before")), _probe_text(probes.get("after"))
    return f"read probe (full scan planning): {before} -> {after}"
