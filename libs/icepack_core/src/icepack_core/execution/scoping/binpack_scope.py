"""Which partitions a binpack ``rewrite_data_files`` compacts: its ``where`` filter and note.

``BinpackScoping.scope`` selects the partitions whose small files can be compacted, from the
loaded table's manifests (``metadata_scope``) or, where that cannot be exact, from Spark's
``files`` metadata table (``partition_filter``). It never fails the action: any reason it
cannot scope exactly widens the rewrite to the whole table, with the reason in the note.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyiceberg.table import Table

from icepack_core.errors import ScopeFallback, brief
from icepack_core.execution.scoping.clustering_scope import ScopeNote
from icepack_core.execution.scoping.left_behind import ScopedRun
from icepack_core.execution.scoping.metadata_scope import OpenRule, scope_from_metadata
from icepack_core.execution.scoping.partition_filter import (
    PartitionColumn,
    PartitionScope,
    identity_columns,
    scope_partitions,
)
from icepack_core.inspection.status import (
    DEFAULT_TARGET_FILE_SIZE,
    TARGET_FILE_SIZE_PROPERTY,
    parse_target_file_size,
)
from icepack_core.intents import RewriteDataFilesParams
from icepack_core.spark.engine import SparkEngine

MAX_SCOPED_PARTITIONS = 100  # the Spark queries' cap (the manifests' is ``max_partitions``)


@dataclass(frozen=True)
class BinpackScope:
    """A binpack's scope: its ``where`` (None: the whole table), the note recorded with the
    action, and the selection ``left_behind`` checks after the call (None: whole table)."""

    where: str | None
    note: ScopeNote
    run: ScopedRun | None


class BinpackScoping:
    """The binpack scope of one table (``qualified``, its ``files`` metadata table
    ``files_table``) through one engine."""

    def __init__(
        self,
        engine: SparkEngine,
        *,
        catalog: str,
        qualified: str,
        files_table: str,
        properties: Mapping[str, str],
        clock: Callable[[], float],
    ) -> None:
        self.engine = engine
        self.catalog = catalog
        self.qualified = qualified
        self.files_table = files_table
        self.properties = properties
        self.clock = clock  # wall-clock seconds: when a partition last written counts as open

    async def scope(
        self,
        options: Mapping[str, str],
        loaded: Table | None = None,
        params: RewriteDataFilesParams | None = None,
    ) -> BinpackScope:
        """A ``where`` filter selecting only the partitions whose small files can be compacted
        (at least ``min-input-files`` files under Iceberg's binpack threshold, 75 % of target).

        The ``where`` is None -- the rewrite then runs table-wide and binpack's own
        ``min-input-files`` skips healthy groups -- when the table is unpartitioned, a partition
        field's transform cannot be scoped exactly (void, unknown), or any partition value
        cannot be written as an exact literal; ``note["scope_reason"]`` then names the field.
        An error while scoping also falls back to the whole table.

        With ``loaded`` (the table as the catalog has it now) the partitions are counted from
        its manifests in this process (``metadata_scope``, ``note["scope_source"]`` =
        ``metadata``): every transform and every partition spec, at most
        ``params.max_partitions`` per run (``partitions_deferred``: the rest), open partitions
        skipped below their bound (``open_partitions_skipped``, named). Where that cannot be
        exact, by the Spark queries over the ``files`` table (identity partitions of the
        current spec only; ``engine``, with ``scope_source_fallback`` saying why).
        """
        params = params or RewriteDataFilesParams()
        source = ScopeNote()
        try:
            target = self.target(options)
            min_files = int(options.get("min-input-files", "5"))
            scope = None
            if loaded is not None:
                scope = await self._from_metadata(loaded, target, min_files, params, source)
            if scope is None:
                source["scope_source"] = "engine"
                scope = await self._from_engine(target, min_files)
        except ScopeFallback as exc:
            return _whole_table(exc.reason, source)
        except Exception as exc:  # any scoping failure must not fail the job, only widen it
            return _whole_table(f"partition scoping failed: {brief(exc)}", source)
        run = ScopedRun(scope.keys, int(target * 0.75), min_files)
        return BinpackScope(scope.where, _partitions_note(scope, source), run)

    def target(self, options: Mapping[str, str], *, strict: bool = True) -> int:
        """The rewrite's target file size: its option, the table's property, Iceberg's. A
        value that is not a number raises ``ValueError`` (``strict``) or gives Iceberg's."""
        raw = options.get("target-file-size-bytes") or self.properties.get(
            TARGET_FILE_SIZE_PROPERTY
        )
        if not raw:
            return DEFAULT_TARGET_FILE_SIZE
        try:
            return parse_target_file_size(raw)
        except ValueError:
            if strict:
                raise
            return DEFAULT_TARGET_FILE_SIZE

    async def identity_partition_columns(self) -> list[PartitionColumn] | None:
        """The table's identity partition columns with their Spark types (``[]`` when
        unpartitioned); None when any partition field is not an identity transform.

        Read from ``DESCRIBE TABLE EXTENDED`` (``partition_filter.identity_columns``), so it
        works the same on every engine.
        """
        rows = await self.engine.sql(f"DESCRIBE TABLE EXTENDED {self.qualified}")
        return identity_columns(rows)

    async def _from_metadata(
        self,
        loaded: Table,
        target: int,
        min_files: int,
        params: RewriteDataFilesParams,
        source: ScopeNote,
    ) -> PartitionScope | None:
        """``scope`` from the loaded table's manifests (``metadata_scope``); None, with
        ``source["scope_source_fallback"]`` saying why, when the Spark queries must decide.
        Its ``ScopeFallback`` is the answer (raised)."""
        source["scope_source"] = "metadata"
        try:
            return await scope_from_metadata(
                loaded,
                self.engine,
                undersized_bytes=int(target * 0.75),
                min_files=min_files,
                max_partitions=params.max_partitions,
                catalog=self.catalog,
                rule=OpenRule(params.open_quiet_seconds, params.open_max_small_files),
                now_ms=int(self.clock() * 1000),
            )
        except ScopeFallback:
            raise
        except Exception as exc:  # the Spark queries decide
            source["scope_source_fallback"] = brief(exc)
            return None

    async def _from_engine(self, target: int, min_files: int) -> PartitionScope:
        """``scope``'s filter from ``DESCRIBE`` and the ``files`` metadata table.

        Raises:
            ScopeFallback: see ``partition_filter.scope_partitions``.
        """
        columns = await self.identity_partition_columns()
        if columns is None:
            raise ScopeFallback("not identity-partitioned (a non-identity transform)")
        if not columns:
            raise ScopeFallback("not identity-partitioned (unpartitioned)")
        return await scope_partitions(
            self.engine,
            self.files_table,
            columns,
            undersized_bytes=int(target * 0.75),
            min_files=min_files,
            max_partitions=MAX_SCOPED_PARTITIONS,
        )


def _whole_table(reason: str, source: ScopeNote) -> BinpackScope:
    return BinpackScope(None, ScopeNote(scope="table", scope_reason=reason, **source), None)


def _partitions_note(scope: PartitionScope, source: ScopeNote) -> ScopeNote:
    """The note of a partition-scoped rewrite."""
    note = ScopeNote(
        scope="partitions",
        partitions_selected=scope.selected,
        partitions_total=scope.total,
        **source,
    )
    if scope.deferred:
        note["partitions_deferred"] = scope.deferred
    if scope.open_skipped_count:
        note["open_partitions_skipped"] = list(scope.open_skipped)
        note["open_partitions_skipped_count"] = scope.open_skipped_count
    if scope.older_specs:
        note["older_specs_scoped"] = scope.older_specs
    return note
