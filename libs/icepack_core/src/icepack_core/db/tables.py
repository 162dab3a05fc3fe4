"""``TableRow``: one ``icepack.tables`` row, built once where it is read.

Every reader of a table row (``table_get``, ``table_plan_inputs``, ``status_latest_per_table``,
the gateway's and the executor's queries) turns the ``asyncpg.Record`` into a ``TableRow`` with
``TableRow.from_record`` at the read, so the planner, admission and the executor pass one typed
value instead of picking keys from a record. A query that does not select a column leaves its
field at None (the ``id``, ``catalog``, ``namespace`` and ``name`` are always required).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg

from icepack_core.types import TableRef


@dataclass(frozen=True, slots=True)
class TableRow:
    """A table Icepack knows (``icepack.tables``; db/schema.sql describes each column).

    ``id`` is None only for a table not recorded yet (``icepack maintain --dry-run`` on a table
    discovery never saw): nothing about it is stored, so its history reads empty.
    ``maintenance_hold`` is the hold as stored (``safety.holds.place_hold``: reason, action,
    evidence, time), an open JSON object; None when the table is not held.
    """

    id: int | None
    catalog: str
    namespace: str
    name: str
    metadata_location: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    location: str | None = None
    maintenance_hold: Mapping[str, Any] | None = None
    dropped_at: datetime | None = None
    first_seen_at: datetime | None = None
    last_seen_at: datetime | None = None
    catalog_etag: str | None = None

    @classmethod
    def from_record(cls, row: asyncpg.Record | Mapping[str, Any]) -> TableRow:
        """The row of a query that selects the table's ``id, catalog, namespace, name`` and any
        of its other columns (an ``asyncpg.Record`` or a mapping of the same keys).

        Raises:
            KeyError: one of the four required columns is missing.
        """
        get = row.get
        return cls(
            id=row["id"],
            catalog=row["catalog"],
            namespace=row["namespace"],
            name=row["name"],
            metadata_location=get("metadata_location"),
            properties=dict(get("properties") or {}),
            location=get("location"),
            maintenance_hold=get("maintenance_hold"),
            dropped_at=get("dropped_at"),
            first_seen_at=get("first_seen_at"),
            last_seen_at=get("last_seen_at"),
            catalog_etag=get("catalog_etag"),
        )

    @property
    def ref(self) -> TableRef:
        return TableRef(self.catalog, self.namespace, self.name)

    @property
    def label(self) -> str:
        """``catalog.namespace.name``, as messages name the table."""
        return f"{self.catalog}.{self.namespace}.{self.name}"

    @property
    def dropped(self) -> bool:
        return self.dropped_at is not None
