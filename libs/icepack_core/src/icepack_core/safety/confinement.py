"""One confinement rule for every action that deletes or moves a file.

Snapshot expiry, orphan quarantine, purge and restore all ask ``Confinement.check`` about every
path before they touch it. A path may be deleted or moved only if

- it lies under one of the table's *own roots*: its location, the directory of its current
  metadata file, its declared write paths (``write.data.path``, ``write.metadata.path``,
  ``write.object-storage.path``, ``write.folder-storage.path``) and the extra roots an
  operator-attached policy grants (``system.snapshot-expiry``'s ``delete_outside_location``;
  never a table property, which whoever writes the table can set); and
- it lies under no root of any other known table (every live table of every catalog, from
  ``icepack.tables``, and every table a catalog lists that Icepack does not maintain, from
  ``icepack.unmaintained_tables``, named ``catalog.ns.name (not maintained: excluded)``), and
- it spells no ``.``/``..`` segment (file IOs disagree on what it names).

Paths are compared as ``safety.locations`` reads them (as the file system does). A path that
breaks the rule is *foreign*: the action stops before its Spark ``CALL`` or first move, the
caller holds the table (``DeletionOutsideTable``), and the evidence lists the foreign paths with
the table each belongs to, where known.

The rule trusts ``icepack.tables`` only while it is complete: ``load_confinement`` refuses
(``ActionRefused`` ``CATALOGS_NOT_LISTED``, naming the catalogs) while any catalog discovery
lists has not finished a listing since discovery started, or its last listing failed; and
(``LOCATION_UNKNOWN``) while another table's root cannot even be derived.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

import asyncpg

from icepack_core.db.queries import load_query
from icepack_core.errors import ActionRefused, DeletionOutsideTable
from icepack_core.inspection.inspector import LoadedTable
from icepack_core.safety.locations import (
    Location,
    LocationError,
    has_dot_segments,
    parse_location,
)

# Table properties that put a table's files outside its location (Iceberg's
# ``TableProperties``: data, metadata and object-storage paths, and the older folder-storage one).
WRITE_PATH_PROPERTIES = (
    "write.data.path",
    "write.metadata.path",
    "write.object-storage.path",
    "write.folder-storage.path",
)
# Foreign paths an evidence record lists (the count is always complete).
EVIDENCE_PATHS = 200


@dataclass(frozen=True)
class Root:
    """Where a table's files can be: ``what`` (location, a write-path property, ...) at
    ``path`` (as spelled), of ``table`` (``catalog.namespace.name``)."""

    table: str
    what: str
    path: str


class ForeignJSON(TypedDict):
    """A ``ForeignPath`` as hold evidence stores it (``table``, ``root``: when known)."""

    path: str
    reason: str
    table: NotRequired[str]
    root: NotRequired[str | None]


class RootJSON(TypedDict):
    what: str
    path: str


class ConfinementEvidence(TypedDict):
    """What a hold records for paths outside the table (``Confinement.evidence``)."""

    status: str
    action: str
    foreign: list[ForeignJSON]
    foreign_count: int
    tables: list[str]
    own_roots: list[RootJSON]


@dataclass(frozen=True)
class ForeignPath:
    """A path the rule refuses, with why and (when known) the table it belongs to."""

    path: str
    reason: str
    owner: str | None = None
    owner_root: str | None = None

    def to_json(self) -> ForeignJSON:
        found: ForeignJSON = {"path": self.path, "reason": self.reason}
        if self.owner is not None:
            found["table"] = self.owner
            found["root"] = self.owner_root
        return found


def location_from_metadata(metadata_location: str) -> str | None:
    """The table root implied by ``<root>/metadata/<file>`` (Iceberg's default layout)."""
    head, sep, _file = metadata_location.rpartition("/metadata/")
    return head if sep and head else None


def table_roots(
    table: str,
    location: str | None,
    metadata_location: str | None,
    properties: Mapping[str, str] | None,
) -> list[Root]:
    """A table's roots: its location (or the root its metadata location implies), the
    directory of its current metadata file, and every write path its properties set."""
    roots: list[Root] = []
    meta = metadata_location or ""
    root = location or location_from_metadata(meta)
    if root:
        roots.append(Root(table, "location", root))
    if "/" in meta:
        roots.append(Root(table, "metadata file", meta.rsplit("/", 1)[0]))
    props = properties or {}
    roots += [Root(table, key, props[key]) for key in WRITE_PATH_PROPERTIES if props.get(key)]
    return roots


class _Index:
    """Roots by (scheme, authority) and path, so a path is checked in O(depth)."""

    def __init__(self, roots: Iterable[Root]) -> None:
        self.by_store: dict[tuple[str, str], dict[str, Root]] = {}
        for root in roots:
            loc = parse_location(root.path)  # callers parse first: refuse what names nothing
            self.by_store.setdefault((loc.scheme, loc.authority), {}).setdefault(loc.path, root)

    def covering(self, loc: Location, *, any_authority: bool) -> Root | None:
        """A root equal to or above ``loc``; with ``any_authority`` an empty authority on
        either side matches any (``hdfs:///x`` is on the default file system)."""
        stores = [(loc.scheme, loc.authority)]
        if any_authority and loc.scheme != "file":
            stores.append((loc.scheme, ""))
            if loc.authority == "":
                stores += [k for k in self.by_store if k[0] == loc.scheme]
        parts = loc.path.split("/")[1:] if loc.path != "/" else []
        ancestors = ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        for store in stores:
            paths = self.by_store.get(store)
            if not paths:
                continue
            for ancestor in ancestors:
                if ancestor in paths:
                    return paths[ancestor]
        return None


@dataclass
class Confinement:
    """The rule for one table: its own roots and every other known table's."""

    table: str
    own: list[Root]
    others: list[Root] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._own = _Index(self.own)
        self._others = _Index(self.others)

    def foreign(self, path: str) -> ForeignPath | None:
        """Why ``path`` may not be deleted or moved, or None when it may (module doc)."""
        try:
            loc = parse_location(path)
        except LocationError as exc:
            return ForeignPath(path, str(exc))
        if loc.escapes_root or has_dot_segments(path):
            return ForeignPath(path, "the path spells '.' or '..' segments")
        other = self._others.covering(loc, any_authority=True)
        if other is not None:
            return ForeignPath(path, f"under {other.table}'s {other.what}", other.table, other.path)
        if self._own.covering(loc, any_authority=False) is None:
            return ForeignPath(path, f"outside every root of {self.table}")
        return None

    def check(self, paths: Iterable[str]) -> list[ForeignPath]:
        """Every foreign path of ``paths``, in order."""
        return [f for f in (self.foreign(p) for p in paths) if f is not None]

    def evidence(self, foreign: Sequence[ForeignPath], action: str) -> ConfinementEvidence:
        """What a hold records: the foreign paths (the first ``EVIDENCE_PATHS``), their
        count, the other tables they belong to, and the table's own roots."""
        return {
            "status": "outside_table",
            "action": action,
            "foreign": [f.to_json() for f in foreign[:EVIDENCE_PATHS]],
            "foreign_count": len(foreign),
            "tables": sorted({f.owner for f in foreign if f.owner}),
            "own_roots": [{"what": r.what, "path": r.path} for r in self.own],
        }


def known_label(row: asyncpg.Record | Mapping[str, Any]) -> str:
    """A ``table_locations_known`` row's table as evidence names it: ``catalog.ns.name``,
    with ``(not maintained: <why>)`` for a table Icepack only knows of."""
    label = f"{row['catalog']}.{row['namespace']}.{row['name']}"
    return (
        label if row["unmaintained"] is None else f"{label} (not maintained: {row['unmaintained']})"
    )


async def refuse_unlisted_catalogs(pool: asyncpg.Pool, table: str) -> None:
    """Refuse while some catalog's tables may not all be known (module doc).

    Raises:
        ActionRefused: ``CATALOGS_NOT_LISTED``, naming each catalog and why.
    """
    gaps = await pool.fetch(load_query("catalog_listing_gaps"))
    if not gaps:
        return
    failed, unlisted = "its last listing failed", "not listed since discovery started"
    why = "; ".join(f"{g['catalog']} ({failed if g['last_error_at'] else unlisted})" for g in gaps)
    raise ActionRefused(
        "CATALOGS_NOT_LISTED",
        f"{table}: Icepack may not know every table's location yet, so it cannot rule out "
        f"deleting another table's files: {why}",
    )


def _checked(roots: list[Root], whose: str) -> list[Root]:
    for root in roots:
        try:
            parse_location(root.path)
        except LocationError as exc:
            raise ActionRefused(
                "LOCATION_UNKNOWN", f"{whose}: its {root.what} names no location ({exc})"
            ) from None
    return roots


async def load_confinement(
    pool: asyncpg.Pool, table_id: int, table: str, own: list[Root]
) -> Confinement:
    """The rule for table ``table_id`` (labelled ``table``) with its ``own`` roots (from its
    freshly loaded metadata, plus any operator-granted roots), against every other known table
    (live maintained ones and the unmaintained ones discovery recorded).

    Raises:
        ActionRefused: ``CATALOGS_NOT_LISTED`` (``refuse_unlisted_catalogs``), or
            ``LOCATION_UNKNOWN``: an own or another table's root cannot be derived or parsed.
    """
    await refuse_unlisted_catalogs(pool, table)
    if not any(r.what == "location" for r in own):
        raise ActionRefused("LOCATION_UNKNOWN", f"{table}: its location is not known")
    others: list[Root] = []
    for row in await pool.fetch(load_query("table_locations_known")):
        if row["id"] == table_id:
            continue
        label = known_label(row)
        roots = table_roots(label, row["location"], row["metadata_location"], row["properties"])
        if not any(r.what == "location" for r in roots):
            raise ActionRefused(
                "LOCATION_UNKNOWN",
                f"{table}: the location of {label} is not known, so deleting its files "
                "cannot be ruled out",
            )
        others += _checked(roots, label)
    return Confinement(table, _checked(own, table), others)


async def confinement_of(
    pool: asyncpg.Pool,
    table_id: int,
    table: str,
    *,
    location: str,
    metadata_location: str,
    properties: Mapping[str, str],
    granted: Sequence[str] = (),
) -> Confinement:
    """``load_confinement`` with the own roots of a freshly loaded table: its location, its
    metadata directory, its write paths, and the roots an operator policy ``granted``.

    Raises:
        ActionRefused: as ``load_confinement``.
    """
    own = table_roots(table, location, metadata_location, properties)
    own += [Root(table, "root granted by an operator policy", path) for path in granted]
    return await load_confinement(pool, table_id, table, own)


def loaded_confinement(
    pool: asyncpg.Pool, table_id: int, table: str, granted: Sequence[str] = ()
) -> Callable[[LoadedTable], Awaitable[Confinement]]:
    """``confinement_of`` for a table as it will be loaded (the expiry plans from that load)."""

    async def confine(loaded: LoadedTable) -> Confinement:
        return await confinement_of(
            pool,
            table_id,
            table,
            location=loaded.location(),
            metadata_location=loaded.metadata_location,
            properties=loaded.properties,
            granted=granted,
        )

    return confine


def refuse_foreign(confinement: Confinement, paths: Iterable[str], action: str) -> None:
    """Raise when any of ``paths`` is foreign (module doc); nothing has been touched yet.

    Raises:
        DeletionOutsideTable: with ``Confinement.evidence`` (the caller holds the table).
    """
    foreign = confinement.check(paths)
    if not foreign:
        return
    first = foreign[0]
    owners = sorted({f.owner for f in foreign if f.owner})
    whose = f"; they belong to {', '.join(owners)}" if owners else ""
    raise DeletionOutsideTable(
        f"{action} on {confinement.table} stopped before touching any file: {len(foreign)} "
        f"file(s) are not the table's, e.g. {first.path} ({first.reason}){whose}",
        dict(confinement.evidence(foreign, action)),
    )
