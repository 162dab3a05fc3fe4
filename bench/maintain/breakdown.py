"""The job's wall time split by part (procedure, scoping, verification, other) from the
engine's statement log and the evidence's in-process steps (``bench.maintain``'s breakdown)."""

from __future__ import annotations

from bench.maintain.report import file_diffs
from icepack_core.execution.job_execution import ActionRecord


def verification_kind(statement: str) -> str:
    """Which step of the verification a statement is (for the breakdown)."""
    if statement.startswith("EXPLAIN"):
        return "EXPLAIN"
    if ".`entries`" in statement:
        return "entries diff"
    if (
        statement.startswith("SELECT")
        and "count(*)" in statement
        and ("VERSION AS OF" in statement or "icepack_verify_" in statement)
    ):
        return "fingerprint scans"
    if "TEMPORARY VIEW" in statement or statement.startswith("DROP VIEW"):
        return "snapshot views"
    if statement.startswith("DESCRIBE") or statement.startswith("SHOW"):
        return "schema"
    if ".`snapshots`" in statement or ".`history`" in statement:
        return "snapshot list"
    return "other"


def statement_breakdown(
    log: list[tuple[str, float]], breakdown: dict[str, float]
) -> tuple[list[float], dict[str, float]]:
    """Add each statement's seconds to its part of ``breakdown`` (procedure, scoping,
    verification, other); returns the fingerprint scans' seconds and the verification's
    seconds by kind of statement."""
    scans: list[float] = []
    steps: dict[str, float] = {}
    called = False
    for statement, took in log:
        if statement.startswith("CALL"):
            breakdown["procedure"] += took
            called = True
        elif called and not statement.startswith(("SET", "RESET")):
            # Everything after the CALL but the conf restores is the verification:
            # snapshot list, DESCRIBE, the entries diff, literal round trip, EXPLAIN and
            # the fingerprint scans (count(*) + checksum, scoped or whole-table).
            breakdown["verification"] += took
            kind = verification_kind(statement)
            steps[kind] = steps.get(kind, 0.0) + took
            if kind == "fingerprint scans":
                scans.append(took)
        elif statement.startswith("DESCRIBE") or ".`files`" in statement:
            breakdown["scoping"] += took
        else:
            breakdown["other statements"] += took
    return scans, steps


def in_process_steps(
    rec: ActionRecord, breakdown: dict[str, float], steps: dict[str, float]
) -> None:
    """A file diff read from metadata and the in-process read of the touched partitions'
    files run in this process, not as statements: their seconds (in the evidence) are added
    to the verification's."""
    compared = file_diffs(rec.output.get("verification", {}).get("snapshots") or [])
    for step, seconds_key, how, value in (
        ("file diff (metadata, in process)", "files_diff_seconds", "files_diff", "metadata"),
        ("touched partitions read (in process)", "reader_seconds", "reader", "in_process"),
    ):
        took = sum(float(s.get(seconds_key) or 0) for s in compared if s.get(how) == value)
        if took:
            breakdown["verification"] += took
            steps[step] = took
