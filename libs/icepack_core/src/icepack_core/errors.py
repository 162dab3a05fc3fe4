"""Icepack's exception hierarchy: one root, small typed children that carry their fields.

Retryable and permanent failures are different types; nothing is decided by message text.
"""

from __future__ import annotations


class IcepackError(Exception):
    """Root of every error Icepack raises on purpose."""

    code = "ICEPACK_ERROR"


class ConfigError(IcepackError):
    """Settings are missing, malformed or half-configured; the message names the variable."""

    code = "CONFIG_INVALID"


class MigrationError(IcepackError):
    """The database schema cannot be brought to the version this code needs."""

    code = "MIGRATION_FAILED"


class StaleFence(IcepackError):
    """A write was refused because the caller no longer holds the job's fence.

    The caller's lease expired and the job was re-claimed (or finished) meanwhile: it must stop
    without touching anything else.
    """

    code = "STALE_FENCE"

    def __init__(self, job_id: int, fence: int, operation: str) -> None:
        self.job_id = job_id
        self.fence = fence
        self.operation = operation
        super().__init__(
            f"job {job_id}: cannot {operation} with fence {fence}; the lease was lost and the "
            "job now belongs to another holder or has finished"
        )


class LockHeld(IcepackError):
    """The table is locked by another job; try again later."""

    code = "TABLE_LOCKED"

    def __init__(self, table_id: int) -> None:
        self.table_id = table_id
        super().__init__(f"table {table_id} is locked by another running job")


class JobNotFound(IcepackError):
    """No job has that id."""

    code = "JOB_NOT_FOUND"

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(f"no job with id {job_id}")


class InvalidIdentifier(IcepackError, ValueError):
    """A string cannot be used as a SQL identifier."""

    code = "INVALID_IDENTIFIER"


class RetryableError(IcepackError):
    """A failure worth retrying later (lost connection, commit conflict, timeout)."""

    code = "RETRYABLE"


class PermanentError(IcepackError):
    """A failure that will fail again (bad parameters, missing table)."""

    code = "PERMANENT"
