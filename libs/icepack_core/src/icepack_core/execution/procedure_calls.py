"""One intent as the Spark procedure that performs it: its name and typed arguments
(``spark.sql`` renders and quotes them). Orphan removal is confined to the table's own root and,
on an object store, lists through the table's FileIO.
"""

from __future__ import annotations

from icepack_core.errors import (
    PermanentError,
)
from icepack_core.execution.scoping.clustering_scope import (
    strategy_args,
)
from icepack_core.intents import (
    ExpireSnapshots,
    Intent,
    RemoveOrphanFiles,
    RewriteDataFiles,
    RewriteManifests,
    RewritePositionDeleteFiles,
)
from icepack_core.safety.locations import object_store_scheme
from icepack_core.spark.sql import (
    ProcedureValue,
)
from icepack_core.types import TableRef


def lists_through_file_io(location: str) -> bool:
    """Whether an orphan listing of ``location`` goes through the table's FileIO
    (``prefix_listing => true``: S3FileIO's paged ``ListObjectsV2``) rather than Hadoop's
    ``FileSystem``, which a Spark with only Iceberg's cloud bundles lacks for them
    (``No FileSystem for scheme "s3"``). Object stores only; an unparseable location keeps the
    procedure's default (the confinement refuses it anyway)."""
    return object_store_scheme(location) is not None


def procedure_args(
    intent: Intent, table: TableRef, *, location: str | None = None
) -> tuple[str, dict[str, ProcedureValue]]:
    """The procedure and its typed arguments for one intent. ``location`` confines orphan
    removal to the table's own root (with ``prefix_mismatch_mode => 'ERROR'``); on an object
    store the listing goes through the table's FileIO (``lists_through_file_io``).

    Raises:
        PermanentError: orphan removal without a location.
    """
    args: dict[str, ProcedureValue] = {"table": table}
    if isinstance(intent, RewriteDataFiles):
        args.update(strategy_args(intent.params))
        args["options"] = dict(intent.params.options)
        if intent.params.where:
            args["where"] = intent.params.where
    elif isinstance(intent, RewritePositionDeleteFiles):
        args["options"] = dict(intent.params.options)
    elif isinstance(intent, RewriteManifests):
        args["use_caching"] = intent.params.use_caching
    elif isinstance(intent, ExpireSnapshots):
        args["older_than"] = intent.params.older_than
        args["retain_last"] = intent.params.retain_last
    elif isinstance(intent, RemoveOrphanFiles):
        if location is None:
            raise PermanentError("remove_orphan_files needs the table's location")
        args["older_than"] = intent.params.older_than
        args["location"] = location
        args["prefix_mismatch_mode"] = "ERROR"
        if lists_through_file_io(location):
            args["prefix_listing"] = True
        args["dry_run"] = intent.params.dry_run
    return intent.kind.value, args
