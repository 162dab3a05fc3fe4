"""The parameters of a planned compaction, assembled from typed parts into the intent's model.

``recommendation`` decides a ``rewrite_data_files`` in parts: the strategy (``layout.Layout``),
Iceberg's options, how the executor narrows the rewrite to partitions (``PartitionScope``) and
a ``where`` filter. ``compaction_params`` turns them into the one
``intents.RewriteDataFilesParams``, validated once. Only the parameters the planner chose are
set on the model: a stored recommendation lists exactly those (``recommendation.stored_params``),
the job stores the whole model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from icepack_core.intents import RewriteDataFilesParams
from icepack_core.planning.layout import Layout


@dataclass(frozen=True)
class PartitionScope:
    """A partitioned table's rewrite narrowed by the executor (``scope="partitions"``,
    ``execution.scoping.metadata_scope``): at most ``max_partitions`` partitions with enough
    small files, a partition written to within ``open_quiet_seconds`` only once it holds more
    than ``open_max_small_files`` small files. ``min_input_files``, when set, replaces the
    options' ``min-input-files`` (a streaming table's closed partitions: ``streaming_scope``).
    """

    max_partitions: int
    open_quiet_seconds: float
    open_max_small_files: int
    min_input_files: int | None = None


def compaction_params(
    layout: Layout,
    options: Mapping[str, str],
    scope: PartitionScope | None,
    where: str | None,
) -> RewriteDataFilesParams:
    """The compaction's ``RewriteDataFilesParams`` (module doc).

    Raises:
        pydantic.ValidationError: a value the intent refuses (a ``where`` too long, ...); wrap
            the call in ``intents.checked`` to have it named as ``parse_intent`` names it.
    """
    # The model marks as set exactly the fields it is given, so only the chosen ones are
    # passed (the stored recommendation's form); the values are all typed above.
    options = dict(options)
    if scope is not None and scope.min_input_files is not None:
        options["min-input-files"] = str(scope.min_input_files)
    chosen: dict[str, object] = {"strategy": layout.strategy, "options": options}
    if layout.strategy == "zorder":
        chosen["zorder_columns"] = list(layout.zorder_columns)
    if layout.max_overlap_ratio is not None:
        chosen["max_overlap_ratio"] = layout.max_overlap_ratio
    if scope is not None:
        chosen["scope"] = "partitions"
        chosen["max_partitions"] = scope.max_partitions
        chosen["open_quiet_seconds"] = scope.open_quiet_seconds
        chosen["open_max_small_files"] = scope.open_max_small_files
    if where is not None:
        chosen["where"] = where
    return RewriteDataFilesParams.model_validate(chosen)
