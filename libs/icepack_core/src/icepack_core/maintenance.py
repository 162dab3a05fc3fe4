"""Running maintenance actions on one table through a Spark engine, and proving they lost nothing.

``TableMaintenance.run(action)`` turns an action intent (``{"action": NAME, ...params}``, as made
by ``recommendation``) into one Iceberg procedure call built by ``sql_ident``, runs it, and
returns what it did. For rewrites it then verifies every ``replace`` snapshot committed since
the action started: the live row count and a content checksum must equal its parent's. On a
violation it rolls the table back to the snapshot before the bad commit (if nothing was committed
on top of it) and raises ``VerificationFailed`` with the evidence.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from icepack_core.errors import IcepackError, PermanentError
from icepack_core.partition_filter import (
    PartitionColumn,
    ScopeFallback,
    identity_columns,
    scope_partitions,
)
from icepack_core.spark.engine import Rows, SparkEngine
from icepack_core.sql_ident import (
    ProcedureValue,
    TableRef,
    procedure_call,
    qualified_name,
    spark_conf_statements,
)
from icepack_core.types import TableRef as CatalogTableRef

MAINTENANCE_ACTIONS = (
    "rewrite_data_files",
    "rewrite_position_delete_files",
    "rewrite_manifests",
    "expire_snapshots",
    "remove_orphan_files",
)
# Actions that replace data files and therefore get verified against their parent snapshot.
REWRITES = frozenset({"rewrite_data_files", "rewrite_position_delete_files"})
DEFAULT_TARGET_FILE_SIZE = 536_870_912
MAX_SCOPED_PARTITIONS = 100


class VerificationFailed(IcepackError):
    """A rewrite changed the table's live contents; ``evidence`` says how."""

    code = "VERIFICATION_FAILED"

    def __init__(self, message: str, evidence: dict[str, Any]) -> None:
        super().__init__(message)
        self.evidence = evidence


@dataclass(frozen=True)
class Fingerprint:
    """Live contents of a table at one snapshot: row count and an order-independent checksum."""

    rows: int
    checksum: int


@dataclass
class ActionOutcome:
    action: str
    procedure: str
    sql: list[str]
    output: dict[str, Any]
    verification: dict[str, Any] = field(default_factory=dict)


AfterCall = Callable[[str], Awaitable[None]]  # test-only hook: runs after the procedure commits


def _parse_time(value: Any, name: str) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, str):
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise PermanentError(f"parameter {name}={value!r} must be a timestamp")


def _options(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PermanentError(f"options must be a mapping of strings, got {value!r}")
    return {str(k): str(v) for k, v in value.items()}


def procedure_args(
    action: Mapping[str, Any], table: TableRef
) -> tuple[str, dict[str, ProcedureValue]]:
    """The procedure and its typed arguments for one action intent.

    Raises:
        PermanentError: unknown action or a parameter of the wrong type (named).
    """
    name = str(action.get("action"))
    params = action.get("params", {}) or {}
    args: dict[str, ProcedureValue] = {"table": table}
    if name == "rewrite_data_files":
        args["strategy"] = str(params.get("strategy", "binpack"))
        args["options"] = _options(params.get("options"))
        if params.get("where"):
            args["where"] = str(params["where"])
    elif name == "rewrite_position_delete_files":
        args["options"] = _options(params.get("options"))
    elif name == "rewrite_manifests":
        args["use_caching"] = bool(params.get("use_caching", True))
    elif name == "expire_snapshots":
        args["older_than"] = _parse_time(params.get("older_than"), "older_than")
        args["retain_last"] = int(params.get("retain_last", 1))
    elif name == "remove_orphan_files":
        args["older_than"] = _parse_time(params.get("older_than"), "older_than")
        args["dry_run"] = bool(params.get("dry_run", False))
    else:
        raise PermanentError(f"unknown maintenance action {name!r}")
    return name, args


class TableMaintenance:
    """Maintenance of one table (``ref``) through one engine."""

    def __init__(
        self,
        engine: SparkEngine,
        ref: CatalogTableRef,
        properties: Mapping[str, str] | None = None,
        *,
        verify_checksum: bool = True,
        after_call: AfterCall | None = None,
    ) -> None:
        self.engine = engine
        self.ref = ref
        self.levels = tuple(ref.namespace.split("."))
        self.table = TableRef(self.levels, ref.name)
        self.qualified = qualified_name(ref.catalog, self.levels, ref.name)
        self.properties = dict(properties or {})
        self.verify_checksum = verify_checksum
        self.after_call = after_call

    def metadata_table(self, name: str) -> str:
        return qualified_name(self.ref.catalog, (*self.levels, self.ref.name), name)

    async def current_snapshot_id(self) -> int | None:
        rows = await self.engine.sql(
            f"SELECT snapshot_id FROM {self.metadata_table('history')} "
            "WHERE is_current_ancestor ORDER BY made_current_at DESC LIMIT 1")
        return int(rows[0]["snapshot_id"]) if rows else None

    async def fingerprint(self, snapshot_id: int | None = None) -> Fingerprint:
        """Row count and checksum of the live rows (deletes applied) at a snapshot."""
        version = f" VERSION AS OF {int(snapshot_id)}" if snapshot_id is not None else ""
        checksum = "coalesce(sum(cast(hash(*) AS BIGINT)), 0)" if self.verify_checksum else "0"
        rows = await self.engine.sql(
            f"SELECT count(*) AS n, {checksum} AS h FROM {self.qualified}{version}")
        return Fingerprint(int(rows[0]["n"]), int(rows[0]["h"]))

    async def snapshots_since(self, start: int | None) -> Rows:
        """Snapshots on the current branch after ``start``, oldest first.

        Ordered by following parent links, not by commit time: commits of one rewrite
        (partial progress) can share a millisecond.
        """
        rows = await self.engine.sql(
            "SELECT s.snapshot_id, s.parent_id, s.operation, s.committed_at "
            f"FROM {self.metadata_table('snapshots')} s "
            f"JOIN {self.metadata_table('history')} h ON h.snapshot_id = s.snapshot_id "
            "WHERE h.is_current_ancestor")
        by_parent = {(int(r["parent_id"]) if r["parent_id"] is not None else None): r
                     for r in rows}
        known = {int(r["snapshot_id"]) for r in rows}
        # The oldest ancestor still in the metadata (its parent may have been expired).
        roots = [r for r in rows if r["parent_id"] is None or int(r["parent_id"]) not in known]
        # start None (no snapshot before) or no longer an ancestor: check from the root.
        cursor = by_parent.get(start) if start in known else (roots[0] if roots else None)
        chain: Rows = []
        while cursor is not None:
            chain.append(cursor)
            cursor = by_parent.get(int(cursor["snapshot_id"]))
        return chain

    async def run(self, action: Mapping[str, Any]) -> ActionOutcome:
        """Run one action; rewrites are verified (and rolled back on a violation).

        Raises:
            PermanentError: bad parameters.
            VerificationFailed: a rewrite changed the live contents (rolled back if possible).
        """
        name, args = procedure_args(action, self.table)
        params = action.get("params", {}) or {}
        scope_note: dict[str, Any] = {}
        if name == "rewrite_data_files" and params.get("scope") == "partitions" \
                and "where" not in args:
            where, scope_note = await self.partition_scope(_options(params.get("options")))
            if where is not None:
                args["where"] = where
        statements = spark_conf_statements(self.properties)
        for statement in statements:
            await self.engine.sql(statement)
        start = await self.current_snapshot_id() if name in REWRITES else None
        outcome = ActionOutcome(name, name, list(statements), dict(scope_note))
        if name == "remove_orphan_files" and params.get("dry_run_first", True) \
                and not params.get("dry_run", False):
            dry = procedure_call(self.ref.catalog, name, {**args, "dry_run": True})
            outcome.sql.append(dry)
            found = await self.engine.sql(dry)
            outcome.output["dry_run_orphans"] = len(found)
            outcome.output["dry_run_sample"] = [str(next(iter(r.values()))) for r in found[:20]]
        call = procedure_call(self.ref.catalog, name, args)
        outcome.sql.append(call)
        started = time.monotonic()
        rows = await self.engine.sql(call)
        outcome.output.update(_summarise(name, rows))
        outcome.output["procedure_ms"] = int((time.monotonic() - started) * 1000)
        if self.after_call is not None:
            await self.after_call(name)
        if name in REWRITES:
            outcome.verification = await self.verify_rewrites(start)
        return outcome

    async def identity_partition_columns(self) -> list[PartitionColumn] | None:
        """The table's identity partition columns with their Spark types (``[]`` when
        unpartitioned); None when any partition field is not an identity transform.

        Read from ``DESCRIBE TABLE EXTENDED`` (``partition_filter.identity_columns``), so it
        works the same on every engine.
        """
        rows = await self.engine.sql(f"DESCRIBE TABLE EXTENDED {self.qualified}")
        return identity_columns(rows)

    async def partition_scope(
        self, options: Mapping[str, str]
    ) -> tuple[str | None, dict[str, Any]]:
        """A ``where`` filter selecting only the partitions whose small files can be compacted
        (at least ``min-input-files`` files under Iceberg's binpack threshold, 75 % of target).

        Returns ``(None, note)`` -- the rewrite then runs table-wide and binpack's own
        ``min-input-files`` skips healthy groups -- when the table is unpartitioned, a partition
        field is not an identity transform, too many partitions qualify, or any partition value
        cannot be written as an exact literal of its column's type; ``note["scope_reason"]``
        then names the column and type. Scoping never fails the action: an error while
        scoping also falls back to the whole table.
        """
        def whole_table(reason: str) -> tuple[None, dict[str, Any]]:
            return None, {"scope": "table", "scope_reason": reason}

        try:
            columns = await self.identity_partition_columns()
            if columns is None:
                return whole_table("not identity-partitioned (a non-identity transform)")
            if not columns:
                return whole_table("not identity-partitioned (unpartitioned)")
            target = int(options.get("target-file-size-bytes") or self.properties.get(
                "write.target-file-size-bytes") or DEFAULT_TARGET_FILE_SIZE)
            min_files = int(options.get("min-input-files", "5"))
            scope = await scope_partitions(
                self.engine, self.metadata_table("files"), columns,
                undersized_bytes=int(target * 0.75), min_files=min_files,
                max_partitions=MAX_SCOPED_PARTITIONS)
        except ScopeFallback as exc:
            return whole_table(exc.reason)
        except Exception as exc:  # any scoping failure must not fail the job, only widen it
            first_line = (str(exc).strip().splitlines() or [""])[0][:300]
            return whole_table(f"partition scoping failed: {type(exc).__name__}: {first_line}")
        note = {"scope": "partitions", "partitions_selected": scope.selected,
                "partitions_total": scope.total}
        return scope.where, note

    async def verify_rewrites(self, start: int | None) -> dict[str, Any]:
        """Check every ``replace`` snapshot after ``start`` kept its parent's live contents.

        When nothing but replaces was committed since ``start`` (no concurrent writer), the
        chain as a whole is checked with two scans (start vs. newest); only if that differs,
        or other commits are interleaved, is each replace checked against its own parent.
        Fingerprints are memoised, so consecutive replaces share scans.
        """
        snaps = await self.snapshots_since(start)
        replaces = [s for s in snaps if s["operation"] == "replace" and s["parent_id"] is not None]
        if not replaces:
            return {"verified_snapshots": []}
        memo: dict[int, Fingerprint] = {}

        async def fp(snapshot_id: int) -> Fingerprint:
            if snapshot_id not in memo:
                memo[snapshot_id] = await self.fingerprint(snapshot_id)
            return memo[snapshot_id]

        only_ours = start is not None and len(replaces) == len(snaps) \
            and int(snaps[0]["parent_id"]) == start
        if only_ours:
            assert start is not None
            first, last = await fp(start), await fp(int(snaps[-1]["snapshot_id"]))
            if first == last:
                return {"verified_snapshots": [
                    {"snapshot_id": int(s["snapshot_id"]), "parent_id": int(s["parent_id"]),
                     "rows_before": first.rows, "rows_after": last.rows, "checked": "chain"}
                    for s in replaces]}
        checked = []
        for snap in replaces:
            snapshot_id, parent_id = int(snap["snapshot_id"]), int(snap["parent_id"])
            before, after = await fp(parent_id), await fp(snapshot_id)
            record = {"snapshot_id": snapshot_id, "parent_id": parent_id,
                      "rows_before": before.rows, "rows_after": after.rows,
                      "checksum_before": before.checksum, "checksum_after": after.checksum}
            if before != after:
                record["rolled_back"] = await self._roll_back(snapshot_id, parent_id)
                raise VerificationFailed(
                    f"rewrite snapshot {snapshot_id} changed the live contents of {self.ref}: "
                    f"{before.rows} rows -> {after.rows} rows"
                    f"{', checksum differs' if before.checksum != after.checksum else ''}",
                    record,
                )
            checked.append(record)
        return {"verified_snapshots": checked}

    async def _roll_back(self, bad_snapshot: int, parent: int) -> bool:
        """Roll back to ``parent`` when ``bad_snapshot`` is still current (nothing on top)."""
        if await self.current_snapshot_id() != bad_snapshot:
            return False
        await self.engine.sql(procedure_call(
            self.ref.catalog, "rollback_to_snapshot", {"table": self.table, "snapshot_id": parent}))
        return True


def _summarise(name: str, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Procedure output columns as JSON-safe values (orphan listings are counted, not kept)."""
    if name == "remove_orphan_files":
        return {"orphan_files_removed": len(rows),
                "sample": [str(next(iter(r.values()))) for r in rows[:20]]}
    if not rows:
        return {}
    return {str(k): (v if isinstance(v, int | float | str | bool) or v is None else str(v))
            for k, v in rows[0].items()}
