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

``CommitStateUnknownException`` is deliberately not a conflict: whether the commit happened is
unknown, and the verification that follows every failed rewrite decides.

The per-(table, action) conflict record and deferral live in ``queue.deferrals``.
"""

from __future__ import annotations

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
    return None
