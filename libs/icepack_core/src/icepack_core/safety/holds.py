"""Maintenance holds: placing them (the executor's side), reading and releasing them (the
operator's side).

An executor holds a table (``tables.maintenance_hold``) with ``place_hold``, which publishes
``table.held`` in the same transaction, when a rewrite could not be verified or changed the
table's contents; the planner, ``POST /jobs`` and ``icepack maintain`` then refuse it.
``release_hold`` is the one way an operator clears it, used by ``icepack hold release`` and
``POST /tables/{catalog}/{namespace}/{table}/hold/release``: in one transaction it locks the
table row, clears the hold and publishes ``table.hold_released`` with the previous hold, who
released it and why, so the audit trail exists iff the release does. A log line says the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

import asyncpg
import structlog

from icepack_core.db.queries import load_query
from icepack_core.errors import TableNotHeld, UnknownTableId
from icepack_core.queue import events
from icepack_core.telemetry.logs import redact, redact_text
from icepack_core.types import JSONObject, Topic

MAX_REASON = 500  # characters: a sentence for the audit trail, not a document
MAX_RELEASED_BY = 200
log = structlog.get_logger("icepack.holds")


class StoredHold(TypedDict):
    """``tables.maintenance_hold`` as ``place_hold`` writes it (secrets masked)."""

    reason: str
    action: str
    evidence: JSONObject  # what the holder found: verification, confinement or ledger evidence
    at: str  # ISO 8601


@dataclass(frozen=True, slots=True)
class Release:
    """What ``release_hold`` did: the hold as it was, and who released it, when and why."""

    table_id: int
    table: str  # catalog.namespace.name
    previous_hold: Any  # the jsonb as stored: normally {reason, action, evidence, at}
    released_by: str
    reason: str | None
    released_at: datetime
    event_id: int

    def to_json(self) -> JSONObject:
        return {
            "table_id": self.table_id,
            "table": self.table,
            "previous_hold": self.previous_hold,
            "released_by": self.released_by,
            "reason": self.reason,
            "released_at": self.released_at.isoformat(),
            "event_id": self.event_id,
        }


def clean_reason(reason: str | None) -> str | None:
    """The release reason as stored: stripped, None when empty.

    Raises:
        ValueError: it has a NUL character (jsonb cannot store one) or is over ``MAX_REASON``
            characters; the message names the problem.
    """
    if reason is None:
        return None
    if "\x00" in reason:
        raise ValueError("reason must not contain NUL characters")
    text = reason.strip()
    if len(text) > MAX_REASON:
        raise ValueError(f"reason is {len(text)} characters long; at most {MAX_REASON}")
    return text or None


def hold_reason(hold: Mapping[str, object]) -> str:
    """The human sentence of a stored hold (``StoredHold``, as ``place_hold`` writes it)."""
    return str(hold.get("reason") or "(no reason recorded)")


async def place_hold(
    pool: asyncpg.Pool, table_id: int, *, action: str, reason: str, evidence: Mapping[str, object]
) -> StoredHold:
    """Stop automatic maintenance of table ``table_id`` (the executor's side) and announce it:
    in one transaction the hold (reason, action, evidence, time; secrets masked) is stored and
    ``table.held`` published with the reason, action and time (the evidence stays on the
    table row), so a notification exists iff the hold does. Returns the hold as stored."""
    hold: StoredHold = {
        "reason": redact_text(reason),
        "action": action,
        "evidence": redact(evidence),
        "at": datetime.now(UTC).isoformat(),
    }
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(load_query("table_hold_set"), table_id, hold)
        await events.publish(
            conn,
            Topic.TABLE_HELD,
            table_id=table_id,
            payload={"reason": hold["reason"], "action": action, "at": hold["at"]},
        )
    return hold


async def release_hold(
    pool: asyncpg.Pool, table_id: int, *, released_by: str, reason: str | None = None
) -> Release:
    """Clear table ``table_id``'s maintenance hold and record the release.

    ``released_by`` names the operator (``token:NAME`` from the gateway, ``cli:USER@HOST`` from
    the CLI); ``reason`` is free text (``clean_reason`` rules). Secrets in either are masked
    before they reach the event or the log.

    Raises:
        ValueError: ``reason`` breaks ``clean_reason``'s rules (nothing written).
        UnknownTableId: no table has that id.
        TableNotHeld: the table is not on hold (nothing written).
    """
    text = clean_reason(reason)
    released_by = redact_text(released_by.strip()[:MAX_RELEASED_BY]) or "unknown"
    text = redact_text(text) if text is not None else None
    async with pool.acquire() as conn, conn.transaction():
        row = await conn.fetchrow(load_query("table_hold_lock"), table_id)
        if row is None:
            raise UnknownTableId(table_id)
        label = f"{row['catalog']}.{row['namespace']}.{row['name']}"
        previous = row["maintenance_hold"]
        if (
            previous is None
            or await conn.fetchval(load_query("table_hold_release"), table_id) is None
        ):
            raise TableNotHeld(label)
        released_at = datetime.now(UTC)
        event_id = await events.publish(
            conn,
            Topic.TABLE_HOLD_RELEASED,
            table_id=table_id,
            payload={
                "previous_hold": previous,
                "released_by": released_by,
                "reason": text,
                "released_at": released_at.isoformat(),
            },
        )
    log.warning(
        "maintenance.hold_released",
        table_id=table_id,
        table=label,
        released_by=released_by,
        reason=text,
        previous_reason=redact_text(hold_reason(previous)),
        event_id=event_id,
    )
    return Release(table_id, label, redact(previous), released_by, text, released_at, event_id)
