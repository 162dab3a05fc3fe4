"""Table intelligence: compute the ``TableStatus`` contract for tables in configured catalogs.

``Inspector`` is the one entry point the inspector service and the CLI use: it loads a table
from its catalog and inspects it with PyIceberg (incrementally, through a manifest cache) or with
go-inspector, as ``ICEPACK_METADATA_INSPECTOR`` says.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import structlog
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import ValidationError
from pyiceberg.io import FileIO
from pyiceberg.table import Table

from icepack_core.discovery.catalogs import CatalogSet, load_table, metadata_location_hint
from icepack_core.errors import InspectionFailed
from icepack_core.inspection import bounded_decompress
from icepack_core.inspection.go_inspector import inspect_with_go
from icepack_core.inspection.metadata import MetadataView
from icepack_core.inspection.pyiceberg_inspector import (
    ManifestCache,
    MemoryManifestCache,
    inspect_metadata_location,
    inspect_table,
    inspect_view,
    load_metadata,
    refresh_history,
)
from icepack_core.inspection.status import TableStatus, describe_error
from icepack_core.inspection.transient import is_transient_catalog_error
from icepack_core.settings import Settings
from icepack_core.types import TableRef

__all__ = [
    "InspectionFailed",
    "Inspector",
    "LoadedTable",
    "ManifestCache",
    "MemoryManifestCache",
    "TableStatus",
    "inspect_metadata_location",
    "inspect_table",
]

LOAD_TIMEOUT_SECONDS = 120.0
log = structlog.get_logger("icepack.inspector")


_describe = describe_error


@dataclass(frozen=True, slots=True)
class LoadedTable:
    """A table as loaded for inspection.

    ``table`` is PyIceberg's when its model accepted the metadata; None when the metadata file
    (valid Iceberg, e.g. a v1 snapshot listing its manifests inline or ``*.metadata.json.gz``)
    was read by ``metadata.read_metadata`` instead. ``view`` is what inspection uses either way.
    """

    metadata_location: str
    io: FileIO
    view: MetadataView
    table: Table | None = None

    @property
    def properties(self) -> dict[str, str]:
        return self.view.properties

    def location(self) -> str:
        """The table's base location."""
        return self.view.location


class Inspector:
    """Inspects tables of the configured catalogs."""

    def __init__(
        self,
        settings: Settings,
        catalogs: CatalogSet | None = None,
        cache: ManifestCache | None = None,
    ) -> None:
        self.settings = settings
        self.catalogs = catalogs or CatalogSet(settings.effective_catalogs())
        self.cache = cache
        # Every Avro read of this process (inspection, the executor's readers) is bounded.
        bounded_decompress.configure(settings.avro_max_block_bytes)

    async def load(self, ref: TableRef, known_location: str | None = None) -> LoadedTable:
        """Load a table's current metadata from its catalog.

        When PyIceberg's model rejects the metadata content (its ``ValidationError``, or a
        ``ValueError``: JSON or encoding), the metadata file the catalog points at (a SQL
        catalog's row, else ``known_location``, the file discovery last saw) is read directly
        instead (``metadata.read_metadata``). Errors name that file.

        A transient catalog error (``transient.is_transient_catalog_error``: a dropped
        connection, a REST 5xx or 429) is retried ``inspection_transient_retries`` times,
        ``inspection_retry_base_seconds`` doubling, before it fails the inspection.

        Raises:
            InspectionFailed: the catalog or the table's metadata cannot be read.
        """
        if ref.catalog not in self.catalogs.configs:
            raise InspectionFailed(
                f"catalog {ref.catalog!r} is not configured (ICEPACK_CATALOGS names "
                f"{', '.join(sorted(self.catalogs.configs)) or 'none'})"
            )
        retries = self.settings.inspection_transient_retries
        for attempt in range(retries + 1):
            try:
                return await self._load_once(ref, known_location)
            except InspectionFailed as exc:
                cause = exc.__cause__
                if attempt == retries or cause is None or not is_transient_catalog_error(cause):
                    raise
                wait = self.settings.inspection_retry_base_seconds * 2**attempt
                log.warning(
                    "inspector.catalog_transient",
                    table=str(ref),
                    attempt=attempt + 1,
                    retry_in=wait,
                    error=exc.message,
                )
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _load_once(self, ref: TableRef, known_location: str | None) -> LoadedTable:
        try:
            catalog = await self.catalogs.get(ref.catalog)
        except Exception as exc:
            self.catalogs.forget(ref.catalog)
            raise InspectionFailed(
                f"cannot open catalog {ref.catalog!r}: {_describe(exc)}"
            ) from exc
        try:
            table = await asyncio.wait_for(load_table(catalog, ref), LOAD_TIMEOUT_SECONDS)
        except Exception as exc:
            hint = await metadata_location_hint(catalog, ref)
            location = hint or known_location
            if isinstance(exc, ValueError | ValidationError) and location:
                return await self._load_directly(catalog, ref, location)
            where = f" (metadata {location})" if location else ""
            raise InspectionFailed(f"cannot load table {ref}{where}: {_describe(exc)}") from exc
        return LoadedTable(
            table.metadata_location, table.io, MetadataView.of(table.metadata), table
        )

    async def _load_directly(self, catalog: Catalog, ref: TableRef, location: str) -> LoadedTable:
        def read() -> LoadedTable:
            view, io = load_metadata(location, dict(catalog.properties))
            return LoadedTable(location, io, view)

        try:
            return await asyncio.wait_for(asyncio.to_thread(read), LOAD_TIMEOUT_SECONDS)
        except InspectionFailed as exc:
            raise InspectionFailed(f"cannot load table {ref}: {exc.message}") from exc
        except Exception as exc:
            raise InspectionFailed(
                f"cannot load table {ref} (metadata {location}): {_describe(exc)}"
            ) from exc

    async def inspect(self, ref: TableRef, known_location: str | None = None) -> TableStatus:
        """Load and inspect one table.

        Raises:
            InspectionFailed: naming the table, file and cause.
        """
        t0 = time.monotonic()
        table = await self.load(ref, known_location)
        return await self.inspect_loaded(ref, table, t0)

    async def inspect_loaded(
        self, ref: TableRef, table: LoadedTable, started: float | None = None
    ) -> TableStatus:
        """Inspect an already loaded table with the configured inspector."""
        if self.settings.metadata_inspector == "iceberg-go":
            return await inspect_with_go(
                table.metadata_location,
                catalog=ref.catalog,
                namespace=ref.namespace,
                table=ref.name,
                binary=self.settings.go_inspector_path,
                io_properties=dict(table.io.properties),
                max_block_bytes=self.settings.avro_max_block_bytes,
            )
        try:
            return await inspect_view(
                table.view,
                table.io,
                table.metadata_location,
                catalog=ref.catalog,
                namespace=ref.namespace,
                name=ref.name,
                cache=self.cache,
                started=started,
            )
        except InspectionFailed:
            raise
        except Exception as exc:
            raise InspectionFailed(f"cannot inspect {ref}: {_describe(exc)}") from exc

    async def refresh(
        self, ref: TableRef, previous: TableStatus | None, known_location: str | None = None
    ) -> TableStatus:
        """Age-based refresh: re-read only the metadata JSON when the current snapshot has not
        moved since ``previous``; otherwise a full (incremental) inspection."""
        t0 = time.monotonic()
        table = await self.load(ref, known_location)
        current = table.view.current
        current_id = current.snapshot_id if current else None
        if (
            previous is not None
            and previous.current_snapshot_id == current_id
            and previous.metadata_location == table.metadata_location
        ):
            return refresh_history(previous, table.view)
        return await self.inspect_loaded(ref, table, t0)


def memory_inspector(settings: Settings) -> Inspector:
    """An inspector with a process-local manifest cache (standalone CLI)."""
    return Inspector(settings, cache=MemoryManifestCache())
