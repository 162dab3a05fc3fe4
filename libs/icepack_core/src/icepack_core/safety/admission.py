"""The safety choke point: may these intents run on this table, now?

Every path that starts maintenance passes here: the gateway at enqueue, ``icepack maintain``,
and the executor again before any Spark call (whatever the job's source: planner, operator,
CLI, retry). ``admit`` refuses, with a reason that names the table and the rule:

- a table on hold (failed verification) or opted out (``icepack.maintenance.enabled=false``),
  except for ``restore_quarantine`` alone: putting an operator's quarantined files back is a
  repair, allowed on a held table (a purge on a held table is refused like any action);
- a table whose policy or ``icepack.*`` properties are invalid;
- expiry newer than the age floor (``ICEPACK_EXPIRY_MIN_AGE_HOURS``, default 1 h);
- expiry and orphan removal on a table whose ``gc.enabled`` is not ``true`` (Iceberg's own
  reading of it: its files may be shared with other tables);
- orphan removal unless an operator-attached policy enables it (a table property can disable it,
  never enable it), newer than the policy's age (never below 72 h unless that policy says
  ``allow_unsafe_older_than``), or when any known table of any catalog has a location, a
  metadata directory or a write path (``write.data.path``, ``write.metadata.path``,
  ``write.object-storage.path``, ``write.folder-storage.path``) equal to, under or over the
  target's location (its files would look like orphans; tables a catalog lists but
  include/exclude leave out count too, from ``unmaintained_tables``), or while a catalog has
  not finished a listing since discovery started or is failing (``CATALOGS_NOT_LISTED``: a
  table Icepack does not know yet could lie there), or when the policy's ``locations`` (a
  Polaris orphan-removal policy's) name a place outside the table's own location
  (``ORPHAN_LOCATION_OUTSIDE_TABLE``: refused, never obeyed). Every later deletion or move is
  also confined to the table's own roots (``safety.confinement``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from icepack_core.db.queries import load_query
from icepack_core.db.tables import TableRow
from icepack_core.errors import ActionRefused, PolicyError
from icepack_core.intents import ExpireSnapshots, Intent, RemoveOrphanFiles, RestoreQuarantine
from icepack_core.polaris.store import attachments_of
from icepack_core.policy import (
    ORPHAN_SAFE_HOURS,
    EffectivePolicy,
    OrphanFileRemovalConfig,
    PolicyAttachment,
    resolve,
)
from icepack_core.safety.confinement import (
    known_label,
    location_from_metadata,
    refuse_unlisted_catalogs,
    table_roots,
)
from icepack_core.safety.locations import LocationError, locations_overlap, parse_location


@dataclass(frozen=True)
class Admission:
    """What ``admit`` established: the effective policy, and for orphan removal the table's
    location the procedure must be confined to."""

    policy: EffectivePolicy
    location: str | None = None


def _orphan_floor_hours(config: OrphanFileRemovalConfig) -> float:
    if config.allow_unsafe_older_than:
        return config.older_than_hours
    return max(ORPHAN_SAFE_HOURS, config.older_than_hours)


GC_ENABLED_PROPERTY = "gc.enabled"


def gc_enabled(properties: Mapping[str, str]) -> bool:
    """Whether a table allows deleting its files, read as Iceberg reads ``gc.enabled``
    (``PropertyUtil.propertyAsBoolean``: only a case-insensitive ``true`` is true; absent is
    true)."""
    value = properties.get(GC_ENABLED_PROPERTY)
    return value is None or value.lower() == "true"


async def _target_location(pool: asyncpg.Pool, table: TableRow) -> str:
    label = table.label
    await refuse_unlisted_catalogs(pool, label)
    rows = await pool.fetch(load_query("table_locations_known"))
    mine = next((r for r in rows if r["id"] == table.id), None)
    own = (mine["location"] if mine else None) or location_from_metadata(
        (mine["metadata_location"] if mine else None) or ""
    )
    if not own:
        raise ActionRefused(
            "LOCATION_UNKNOWN",
            f"{label}: its location is not known yet (not inspected); orphan removal needs it",
        )
    for other in rows:
        if other["id"] == table.id:
            continue
        theirs = known_label(other)
        roots = table_roots(
            theirs, other["location"], other["metadata_location"], other["properties"]
        )
        if not any(r.what == "location" for r in roots):
            raise ActionRefused(
                "LOCATION_UNKNOWN",
                f"{label}: the location of {theirs} is not known, so orphan "
                "removal cannot rule out deleting its files",
            )
        for root in roots:
            try:
                overlap = locations_overlap(own, root.path)
            except LocationError as exc:
                raise ActionRefused(
                    "LOCATION_UNKNOWN", f"{label}: {theirs}'s {root.what}: {exc}"
                ) from None
            if overlap:
                where = "" if root.what == "location" else f" ({root.what})"
                raise ActionRefused(
                    "LOCATION_OVERLAP",
                    f"{label}: its location {own} overlaps {theirs} at "
                    f"{root.path}{where}; orphan removal would delete that table's files",
                )
    return own


async def admit(
    pool: asyncpg.Pool,
    table: TableRow,
    intents: Sequence[Intent],
    *,
    now: datetime,
    expiry_min_age_hours: float,
    default_cadence_hours: float = 24.0,
    attachments: list[PolicyAttachment] | None = None,
) -> Admission:
    """Check ``intents`` against the table's state and the safety floors (module doc): the
    hold, the table's policy (resolved here from ``attachments``, by default the catalog's
    stored ones), then ``admit_resolved``.

    ``table`` is the table's row (``table_get``). Runs no Spark and writes nothing.

    Raises:
        ActionRefused: the first rule broken, naming the table and the parameter.
    """
    refuse_held(table, intents)
    try:
        if attachments is None:
            attachments = await attachments_of(pool, table.catalog)
        policy = resolve(
            attachments, table.namespace, table.name, table.properties, default_cadence_hours
        )
    except PolicyError as exc:
        raise ActionRefused("POLICY_INVALID", f"{table.label}: invalid policy: {exc}") from None
    return await admit_resolved(
        pool, table, intents, policy, now=now, expiry_min_age_hours=expiry_min_age_hours
    )


def _repair_only(intents: Sequence[Intent]) -> bool:
    return bool(intents) and all(isinstance(i, RestoreQuarantine) for i in intents)


def refuse_held(table: TableRow, intents: Sequence[Intent]) -> None:
    """Refuse a held table (``TABLE_HELD``), unless ``intents`` only restore quarantined files.

    Raises:
        ActionRefused: the table is on hold, naming the hold's reason.
    """
    hold = table.maintenance_hold
    if hold and not _repair_only(intents):
        raise ActionRefused("TABLE_HELD", f"{table.label} is on hold: {hold.get('reason')}")


async def admit_resolved(
    pool: asyncpg.Pool,
    table: TableRow,
    intents: Sequence[Intent],
    policy: EffectivePolicy,
    *,
    now: datetime,
    expiry_min_age_hours: float,
) -> Admission:
    """The checks of ``admit`` after the hold and the policy resolution, for a caller that
    already did both on this table row (the planner: ``Planner.recommend_for`` refuses a held
    table and resolves its policy once per plan): the opt-out, then each intent's rules.

    Raises:
        ActionRefused: the first rule broken, naming the table and the parameter.
    """
    if not policy.maintenance_enabled and not _repair_only(intents):
        raise ActionRefused(
            "TABLE_OPTED_OUT",
            f"{table.label} opted out of maintenance (icepack.maintenance.enabled=false)",
        )
    location = None
    for index, intent in enumerate(intents):
        field = f"actions[{index}].params.older_than"
        _refuse_gc_disabled(table, intent)
        if isinstance(intent, ExpireSnapshots):
            _refuse_young_expiry(intent, now, expiry_min_age_hours, field)
        elif isinstance(intent, RemoveOrphanFiles):
            config = _orphan_config(table, policy, intent, now, field)
            location = await _target_location(pool, table)
            _refuse_outside_locations(table.label, config, location, policy.sources, field)
    return Admission(policy, location)


def _refuse_gc_disabled(table: TableRow, intent: Intent) -> None:
    """Expiry and orphan removal delete files: refused unless ``gc.enabled`` reads true."""
    if isinstance(intent, ExpireSnapshots | RemoveOrphanFiles) and not gc_enabled(table.properties):
        value = table.properties[GC_ENABLED_PROPERTY]
        raise ActionRefused(
            "GC_DISABLED",
            f"{table.label}: {intent.kind.value} deletes files, and the table has "
            f"{GC_ENABLED_PROPERTY}={value!r} (its files may be shared with other tables; "
            "Iceberg refuses it too)",
        )


def _refuse_young_expiry(
    intent: ExpireSnapshots, now: datetime, floor_hours: float, field: str
) -> None:
    newest = now - timedelta(hours=floor_hours)
    if intent.params.older_than > newest:
        raise ActionRefused(
            "SAFETY_FLOOR",
            f"{field}: expire_snapshots older_than {intent.params.older_than.isoformat()}"
            f" is newer than the {floor_hours:g} h floor ({newest.isoformat()})",
            field,
        )


def _orphan_config(
    table: TableRow,
    policy: EffectivePolicy,
    intent: RemoveOrphanFiles,
    now: datetime,
    field: str,
) -> OrphanFileRemovalConfig:
    """The operator policy that enables orphan removal, once ``intent`` keeps its age floor."""
    config = policy.orphan_file_removal
    if config is None:
        raise ActionRefused(
            "ORPHAN_REMOVAL_NOT_ENABLED",
            f"{table.label}: orphan removal needs an operator policy "
            "(system.orphan-file-removal) that enables it "
            f"({policy.sources.get('system.orphan-file-removal', 'default')})",
            field,
        )
    hours = _orphan_floor_hours(config)
    newest = now - timedelta(hours=hours)
    if intent.params.older_than > newest:
        raise ActionRefused(
            "SAFETY_FLOOR",
            f"{field}: remove_orphan_files older_than "
            f"{intent.params.older_than.isoformat()} is newer than the {hours:g} h "
            f"floor ({newest.isoformat()})",
            field,
        )
    return config


def _refuse_outside_locations(
    label: str,
    config: OrphanFileRemovalConfig,
    own: str,
    sources: Mapping[str, str],
    field: str,
) -> None:
    """Refuse orphan removal when the policy's ``locations`` (Polaris') reach outside the
    table's own location: another table's files there would look like orphans."""
    try:
        root = parse_location(own)
    except LocationError as exc:
        raise ActionRefused("LOCATION_UNKNOWN", f"{label}: its location: {exc}") from None
    for index, entry in enumerate(config.locations):
        try:
            inside = root.contains(parse_location(entry))
        except LocationError:
            inside = False
        if not inside:
            raise ActionRefused(
                "ORPHAN_LOCATION_OUTSIDE_TABLE",
                f"{label}: locations[{index}]={entry!r} of the orphan-removal policy "
                f"({sources.get('system.orphan-file-removal', 'default')}) is outside the "
                f"table's location {own}; refused, never obeyed",
                field,
            )
