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


class MissingExtra(IcepackError, ImportError):
    """An optional dependency group is not installed (e.g. PySpark, the ``spark`` extra).

    Raised instead of a bare ``ImportError`` so the message names the command that needs the
    extra and how to install it; still an ``ImportError`` for code that falls back on one.
    """

    code = "EXTRA_MISSING"

    def __init__(self, extra: str, purpose: str, modules: list[str]) -> None:
        self.extra = extra
        self.purpose = purpose
        self.modules = modules
        package = f"icepack-core[{extra}]"
        super().__init__(
            f"{purpose} needs the optional '{extra}' dependencies, which are not installed "
            f"(missing: {', '.join(modules)}); install them with: pip install '{package}' "
            f"(the executor image has them; the general service image does not)",
            name=modules[0] if modules else None,
        )


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


class CommitConflict(RetryableError):
    """A writer committed during a maintenance action and won its commit (an Iceberg
    ``CommitFailedException`` or concurrent-change ``ValidationException``): not a failure of
    the table; the job gives its claim back and tries again later."""

    code = "COMMIT_CONFLICT"

    def __init__(self, action: str, reason: str) -> None:
        self.action = action
        self.reason = reason
        super().__init__(f"{action}: commit conflict with a writer (the writer won): {reason}")


class PermanentError(IcepackError):
    """A failure that will fail again (bad parameters, missing table)."""

    code = "PERMANENT"


class LeaseLost(IcepackError):
    """The work was stopped because the job's lease or fence was lost."""

    code = "LEASE_LOST"


class CancelRequested(IcepackError):
    """The work was stopped because an operator cancelled the job."""

    code = "CANCEL_REQUESTED"


class InspectionFailed(IcepackError):
    """An inspection could not complete; ``str()`` names the file and what was wrong."""

    code = "INSPECTION_FAILED"

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)

    def to_json(self) -> dict[str, dict[str, str]]:
        return {"error": {"code": self.code, "message": self.message}}


class TokenError(IcepackError):
    """Root of the token errors."""

    code = "TOKEN_ERROR"


class TokenMissing(TokenError):
    """The request carried no bearer token."""

    code = "AUTH_REQUIRED"


class TokenInvalid(TokenError):
    """The presented token is malformed or matches no token."""

    code = "INVALID_TOKEN"


class TokenRevoked(TokenError):
    """The presented token was valid once and has been revoked."""

    code = "TOKEN_REVOKED"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"token {name!r} has been revoked; create a new one with `icepack token create NAME`"
        )


class TokenReadOnly(TokenError):
    """A read-scoped token was presented for a write."""

    code = "TOKEN_READ_ONLY"

    def __init__(self, name: str, method: str, path: str) -> None:
        self.name = name
        super().__init__(
            f"token {name!r} is read-only (scope read) and cannot {method} {path}; writes "
            "need a token created with `icepack token create NAME --scope write`"
        )


class TokenNameTaken(TokenError):
    """A live token already has that name."""

    code = "TOKEN_NAME_TAKEN"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"a live token named {name!r} exists; revoke it first "
            f"(`icepack token revoke {name}`) or pick another name"
        )


class TokenNotFound(TokenError):
    """No live token has that name."""

    code = "TOKEN_NOT_FOUND"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no live token named {name!r}")


class TableNotHeld(IcepackError):
    """The table has no maintenance hold to release."""

    code = "TABLE_NOT_HELD"

    def __init__(self, table: str) -> None:
        self.table = table
        super().__init__(f"{table} is not on hold; nothing to release")


class UnknownTableId(IcepackError):
    """No table row has that id (it was never seen, or was deleted meanwhile)."""

    code = "TABLE_NOT_FOUND"

    def __init__(self, table_id: int) -> None:
        super().__init__(f"no table with id {table_id}")


class ActionRefused(PermanentError):
    """A rule forbids running these actions on this table; ``rule`` says which.

    ``rule`` is one of ``TABLE_HELD``, ``TABLE_OPTED_OUT``, ``POLICY_INVALID``, ``SAFETY_FLOOR``,
    ``GC_DISABLED``, ``ORPHAN_REMOVAL_NOT_ENABLED``, ``LOCATION_OVERLAP``, ``LOCATION_UNKNOWN``,
    ``CATALOGS_NOT_LISTED``;
    ``field`` names the offending parameter when there is one.
    """

    code = "ACTION_REFUSED"

    def __init__(self, rule: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.rule = rule
        self.field = field

    @property
    def conflict(self) -> bool:
        """True for refusals about the table's state (HTTP 409), not the request (422)."""
        return self.rule in (
            "TABLE_HELD",
            "TABLE_OPTED_OUT",
            "GC_DISABLED",
            "LOCATION_OVERLAP",
            "LOCATION_UNKNOWN",
            "POLICY_INVALID",
        )


class PolicyError(IcepackError, ValueError):
    """A policy or an ``icepack.*`` table property has an invalid value; the message names it."""

    code = "POLICY_INVALID"


class IntentError(PermanentError, ValueError):
    """Raw actions do not describe valid intents; the message names the field."""

    code = "INVALID_ACTIONS"

    def __init__(self, message: str, field: str = "actions") -> None:
        super().__init__(message)
        self.field = field


class SchemaUnreadable(IcepackError):
    """The table's column types could not be read from ``SHOW CREATE TABLE``."""

    code = "SCHEMA_UNREADABLE"


class OrphanLimitExceeded(IcepackError):
    """An orphan dry run found more than the policy allows; nothing was deleted."""

    code = "ORPHAN_LIMIT_EXCEEDED"

    def __init__(self, message: str, evidence: dict[str, object]) -> None:
        super().__init__(message)
        self.evidence = evidence


class DeletionLedgerViolation(IcepackError):
    """The deletion ledger disagrees with the table: a recorded file is still live (stopped
    before deleting), or the procedure deleted a different number of files than recorded.
    ``evidence`` names the paths or both counts; the table is held."""

    code = "DELETION_LEDGER_VIOLATION"

    def __init__(self, message: str, evidence: dict[str, object]) -> None:
        super().__init__(message)
        self.evidence = evidence


class DeletionOutsideTable(IcepackError):
    """An action would delete or move files that are not its table's (outside the table's own
    roots, or under another known table's); nothing was deleted. ``evidence`` lists the paths
    and, where known, the table each belongs to; the table is held."""

    code = "DELETION_OUTSIDE_TABLE"

    def __init__(self, message: str, evidence: dict[str, object]) -> None:
        super().__init__(message)
        self.evidence = evidence


class AvroUnsupported(IcepackError):
    """This file cannot be scanned here; read it with PyIceberg instead."""


def brief(exc: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters of it): an error as
    evidence and logs name it when it only widens or redirects the work."""
    first_line = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{type(exc).__name__}: {first_line}"


class AvroDamaged(IcepackError):
    """An Avro container's framing is broken (not a container, truncated, a block running past
    the end, a sync marker mismatch). No reader may decode it: PyIceberg's Cython decoder
    does not check lengths against its buffer, so decoding such bytes can read past the end
    of memory; the read fails with this instead."""


class ScopeFallback(IcepackError):
    """Partition scoping is not possible or not safe; ``reason`` says why (column and type)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MetadataDiffUnsupported(IcepackError):
    """The verification's file diff cannot be computed exactly from metadata in this process;
    the caller computes it with the engine instead."""


class UnsupportedLiteral(IcepackError, ValueError):
    """A type, or a value of a type, that cannot be written as an exact Spark SQL literal."""


class PoisonMessage(IcepackError):
    """An SQS message Icepack cannot understand; it is left for the queue's redrive policy."""

    code = "POISON_MESSAGE"


class BudgetInvalid(IcepackError, ValueError):
    """A maintenance budget's scope or limit is not acceptable; ``field`` names it."""

    code = "BUDGET_INVALID"

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class BudgetNotFound(IcepackError):
    """No budget is set for this scope."""

    code = "BUDGET_NOT_FOUND"

    def __init__(self, catalog: str, namespace: str | None) -> None:
        self.catalog = catalog
        self.namespace = namespace
        scope = catalog if namespace is None else f"{catalog} namespace {namespace!r}"
        super().__init__(f"no budget is set for catalog {scope}")


class UnexpectedCatalogAnswer(IcepackError):
    """A catalog answered a table load with a status discovery cannot use (a 304 to a request
    that sent no ``If-None-Match``, a 412, a redirect); ``status`` is the HTTP status."""

    code = "UNEXPECTED_CATALOG_ANSWER"

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}")


class InProcessUnsupported(IcepackError):
    """The verification cannot read the touched partitions exactly in this process; ``reason``
    says why (the Spark scan decides instead)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ClusteringKeyInvalid(PermanentError, ValueError):
    """A sort or z-order key cannot be used on a table: a column the schema does not have (or
    not a primitive), or ``sort`` on a table without a sort order; the message names it."""

    code = "CLUSTERING_KEY_INVALID"
