"""Commit conflicts: a writer committed while a maintenance action ran, and the writer won.

Iceberg commits optimistically. A rewrite (or manifest rewrite) that finds, at commit time, that
a writer removed or replaced what it rewrote cannot commit: that is not a failure of the table
nor of Icepack, and trying again later (on the new state) is the whole remedy. This module
tells such a conflict from every other failure, and keeps the per-(table, action) record that
defers an action on a table where writers keep winning.

Classification is by Iceberg's Java exception class, as each engine reports it (the class name
is all that crosses Py4J's ``UnknownException``, Spark Connect's gRPC error and HiveServer2's
error text alike):

* ``org.apache.iceberg.exceptions.CommitFailedException``: the table moved and Iceberg's own
  commit retries ran out: always a conflict.
* ``org.apache.iceberg.exceptions.ValidationException`` with one of Iceberg's concurrent-change
  messages (``CONFLICT_MESSAGES``: a replaced file or manifest is gone, or conflicting files or
  deletes were added). Other validation errors (a bad spec id, a schema problem) are not
  conflicts and keep their usual classification.

* ``java.lang.RuntimeException: partial-progress.enabled is true but N rewrite commits failed``
  (``PARTIAL_LOSS``): a data rewrite with partial progress and an operator's
  ``partial-progress.max-failed-commits`` whose batches lost more commits than that allows
  (Iceberg committed every batch it could; those stay and are verified). Under Iceberg's
  default the lost batches are only logged; the executor then finds what they left from the
  manifests (``metadata_scope.left_behind``) and reports it the same way.

``CommitStateUnknownException`` is deliberately not a conflict: whether the commit happened is
unknown, and the verification that follows every failed rewrite decides.

The per-(table, action) conflict record and deferral live in ``queue.deferrals``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from icepack_core.telemetry.logs import redact_text

COMMIT_FAILED = "org.apache.iceberg.exceptions.CommitFailedException"
VALIDATION = "org.apache.iceberg.exceptions.ValidationException"
# Iceberg's messages (core MergingSnapshotProducer, BaseRewriteManifests, BaseOverwriteFiles,
# BaseRowDelta, 1.x) for a concurrent change that invalidates what the operation replaced.
CONFLICT_MESSAGES = (
    "could not be found in the latest snapshot",  # Deleted manifest ... (rewrite_manifests)
    "Missing required files to delete",  # a rewritten data file was removed meanwhile
    "Found conflicting files",
    "Found conflicting deleted files",
    "Found new conflicting delete files",
    "found new delete for replaced data file",
    "found new position delete for replaced data file",
    "Cannot commit, missing data files",
    "Cannot commit, found new delete",
)
# Iceberg's RewriteDataFilesSparkAction (1.4+) when more partial-progress commits failed than
# ``partial-progress.max-failed-commits`` allows (its message, up to the count).
PARTIAL_LOSS = ("partial-progress.enabled is true but ", " rewrite commits failed")
MAX_REASON = 500


def _texts(exc: BaseException) -> list[str]:
    """What an engine error says about itself: its text, and PySpark's captured JVM description
    and stack trace (``Caused by: ...`` lines name wrapped Iceberg exceptions)."""
    seen: list[str] = []
    for error in (exc, exc.__cause__, exc.__context__):
        if error is None:
            continue
        seen.append(str(error))
        for attr in ("_desc", "_stackTrace", "desc"):
            value = getattr(error, attr, None)
            if isinstance(value, str):
                seen.append(value)
    return seen


def conflict_reason(exc: BaseException) -> str | None:
    """The conflict ``exc`` reports, as one redacted line (at most ``MAX_REASON`` characters),
    or None when ``exc`` is not a commit conflict (see the module docstring)."""
    for text in _texts(exc):
        for line in text.splitlines():
            if COMMIT_FAILED in line or (
                VALIDATION in line and any(m in line for m in CONFLICT_MESSAGES)
            ):
                start = line.find("org.apache.iceberg.exceptions.")
                return redact_text(line[start:].strip())[:MAX_REASON]
            lost = partial_loss(line)
            if lost is not None:
                return redact_text(lost)[:MAX_REASON]
    return None


def partial_loss(line: str) -> str | None:
    """The reason for a rewrite whose partial-progress batches partly lost (``PARTIAL_LOSS``
    in ``line``), naming how many commits were lost; None otherwise."""
    head, tail = PARTIAL_LOSS
    start = line.find(head)
    if start < 0:
        return None
    count, sep, _rest = line[start + len(head) :].partition(tail)
    if not sep or not count.strip().isdigit():
        return None
    return (
        f"partial progress: {int(count)} of the rewrite's commits lost to concurrent commits "
        "(the others committed and are kept; the lost file groups are retried)"
    )


def lost_part(action: str, output: Mapping[str, Any]) -> str | None:
    """The conflict a rewrite that succeeded reports for the part it lost: partitions it
    selected whose file groups did not commit (``output["partitions_lost"]``, from
    ``scoping.left_behind``), or None when it lost nothing."""
    lost = output.get("partitions_lost")
    if action != "rewrite_data_files" or not isinstance(lost, int) or lost <= 0:
        return None
    selected = output.get("partitions_selected")
    of = f" of {selected}" if isinstance(selected, int) else ""
    return (
        f"partial progress: {lost}{of} selected partitions not rewritten (their file groups' "
        "commits lost to concurrent commits; the others committed and are kept)"
    )
