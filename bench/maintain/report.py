"""The maintenance benchmark's figures: what ``bench.maintain`` measured, and how it is printed
beside each goal."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from bench.maintain import table as bench_table
from bench.maintain.prefetch_ab import Side, report_prefetch_ab
from icepack_core.execution.maintenance import Fingerprint
from icepack_core.intents import Intent
from icepack_core.planning.recommendation import stored_params

MIN_INPUT_FILES = 5  # the default data-compaction policy's min_input_files
WA_GOAL = 1.1
OVERHEAD_GOAL = 1.2
SCAN_GOAL = 3.0
SCAN_REPEAT = 3
MiB = 1 << 20
FLOOR = "Spark floor: replaced partitions read once"
IN_PROCESS = "scoped, in-process reader (the job's)"
SPARK_SCAN = "scoped, Spark scan (its fallback)"


@dataclass
class FileSet:
    paths: dict[str, int]  # data file path -> bytes
    parts: dict[str, int]  # partition -> files

    @property
    def count(self) -> int:
        return len(self.paths)

    @property
    def bytes(self) -> int:
        return sum(self.paths.values())


@dataclass
class Rewrite:
    name: str
    seconds: float
    files_after: FileSet
    output: dict[str, Any]
    fingerprint: Fingerprint
    breakdown: dict[str, float] = field(default_factory=dict)
    sql: str = ""
    verification_scans: list[float] = field(default_factory=list)
    snapshot: int | None = None  # the table's snapshot after this rewrite (rolled back later)
    verification_steps: dict[str, float] = field(default_factory=dict)

    def rewritten_bytes(self, before: FileSet) -> tuple[int, int]:
        """(``rewritten_bytes_count`` output, bytes of the files gone from ``files``)."""
        diff = sum(b for p, b in before.paths.items() if p not in self.files_after.paths)
        return int(self.output.get("rewritten_bytes_count") or 0), diff


@dataclass
class Scan:
    seconds: list[float]
    tasks: int  # Spark input partitions of the scan
    result: list[tuple[Any, ...]]

    @property
    def best(self) -> float:
        return min(self.seconds)


@dataclass
class Measured:
    intent: Intent
    snapshot: int
    before: FileSet
    need: tuple[int, int, int]  # files, bytes, partitions
    fingerprint: Fingerprint
    base: Rewrite
    jobs: list[Rewrite]
    directs: list[Rewrite]
    scans: dict[str, Scan]  # before / icepack / whole table
    load_before: str
    verification_ab: dict[str, list[float]]  # comparison kind -> seconds per repeat
    prefetch: dict[str, Side] | None = None  # ``--prefetch-ab``: side -> its runs
    first_sight: tuple[int, float] = (0, 0.0)  # files fingerprinted at inspection, seconds


def file_diffs(snaps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The snapshot records that each ran a file diff: a chain's one comparison is shared by
    all its records, so it counts once."""
    found: dict[Any, dict[str, Any]] = {}
    for snap in snaps:
        if snap.get("files_diff"):
            key = "chain" if snap.get("checked") == "chain" else snap["snapshot_id"]
            found.setdefault(key, snap)
    return list(found.values())


def mib(n: float) -> str:
    return f"{n / MiB:6.1f} MiB"


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISS"


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def report(m: Measured) -> None:
    job = min(m.jobs, key=lambda r: r.seconds)
    direct = min(m.directs, key=lambda r: r.seconds)
    _report_files(m, job, direct)
    _report_times(m, job, direct)
    _report_scans(m)
    _report_contents(m)
    if m.prefetch is not None:
        report_prefetch_ab(m.prefetch)


def _report_files(m: Measured, job: Rewrite, direct: Rewrite) -> None:
    """The table, the planner's intent and each rewrite's write amplification."""
    before, base = m.before, m.base
    need_files, need_bytes, need_parts = m.need
    hot = sorted(p for p in before.parts if before.parts[p] >= MIN_INPUT_FILES)
    print()
    print(
        f"table: {before.count} data files ({mib(before.bytes).strip()}) in "
        f"{len(before.parts)} partitions, target file size "
        f"{mib(bench_table.TARGET_FILE_SIZE).strip()}; {need_files} files "
        f"({mib(need_bytes).strip()}) in {need_parts} partitions ({', '.join(hot)}) need "
        f"rewriting (< 75 % of target, >= {MIN_INPUT_FILES} in the partition)"
    )
    print(f"planner intent: {stored_params(m.intent)}")
    print(f"icepack CALL: {job.sql}")
    print()
    print(
        "                                    files before -> after  bytes rewritten  "
        "write amplification"
    )
    for label, r in (
        ("icepack job (scope: partitions)", job),
        ("direct CALL, same where", direct),
        ("baseline: whole table, rewrite-all", base),
    ):
        out, diff = r.rewritten_bytes(before)
        wa = out / need_bytes
        goal = f"  (goal <= {WA_GOAL}) {verdict(wa <= WA_GOAL)}" if r is job else ""
        note = "" if out == diff else f"  [files diff {mib(diff).strip()}]"
        print(
            f"  {label:34s} {before.count:6d} -> {r.files_after.count:5d}   {mib(out)}"
            f"        {wa:5.2f}{goal}{note}"
        )


def _report_times(m: Measured, job: Rewrite, direct: Rewrite) -> None:
    """Wall times: the job against the direct CALL (and its verification), the baseline."""
    ratio = job.seconds / direct.seconds
    how = f"best of {len(m.jobs)}" if len(m.jobs) > 1 else "once"
    print()
    print(f"wall time ({how} each, ABBA order; baseline once, first):")
    print(
        f"  icepack job                  : {job.seconds:6.1f} s   {ratio:.2f}x direct "
        f"(goal <= {OVERHEAD_GOAL}x) {verdict(ratio <= OVERHEAD_GOAL)}"
    )
    print("    " + ", ".join(f"{k} {v:.2f} s" for k, v in job.breakdown.items()))
    verification = _report_verification(job)
    rest = job.seconds - verification
    print(f"    job without the verification: {rest:.1f} s = {rest / direct.seconds:.2f}x direct")
    _report_own_time(m, direct)
    _report_verification_ab(m, direct)
    print(
        f"  direct CALL, same where      : {direct.seconds:6.1f} s   (all runs: job "
        f"{', '.join(f'{r.seconds:.1f}' for r in m.jobs)}; direct "
        f"{', '.join(f'{r.seconds:.1f}' for r in m.directs)})"
    )
    print(f"  baseline whole-table rewrite : {m.base.seconds:6.1f} s")
    taken, seconds = m.first_sight
    print(
        f"  first sight (the inspection) : {seconds:6.2f} s to fingerprint {taken} small files, "
        "before any job (not in the job's time)"
    )


def _report_own_time(m: Measured, direct: Rewrite) -> None:
    """Each job run split into its ``CALL`` and Icepack's own time (everything else). The
    ``CALL`` is the same statement as the direct run's, so the spread between the job's
    ``CALL`` and the direct ``CALL`` is the engine's noise; the own time is Icepack's
    overhead."""
    runs = [(r.seconds, r.breakdown.get("procedure", 0.0)) for r in m.jobs]
    own = sorted(total - call for total, call in runs)
    calls = [call for _, call in runs] + [r.seconds for r in m.directs]
    print(
        "    per job run, its CALL + Icepack's own time: "
        + "; ".join(f"{t:.1f} = {c:.1f} + {t - c:.1f} s" for t, c in runs)
    )
    print(
        f"    Icepack's own time (median of {len(own)}): {own[len(own) // 2]:.2f} s = "
        f"{own[len(own) // 2] / direct.seconds:.2f}x the best direct CALL; the same CALL ran "
        f"{min(calls):.1f}-{max(calls):.1f} s over the job and direct runs (engine noise)"
    )


def _report_verification(job: Rewrite) -> float:
    """What the job's verification time went into, per replace snapshot; returns that time."""
    snaps = job.output.get("verification", {}).get("snapshots") or []
    verification = job.breakdown["verification"]
    read = job.verification_steps.get("touched partitions read (in process)", 0.0)
    scanned = sum(job.verification_scans) + read
    print(
        f"    verification: {verification:.2f} s for {len(snaps)} replace snapshot(s) = "
        f"reading the touched partitions {scanned:.2f} s (in process {read:.2f} s; "
        f"{len(job.verification_scans)} Spark scan(s): "
        f"{', '.join(f'{t:.2f}' for t in job.verification_scans) or '-'} s) + metadata and "
        f"planning {verification - scanned:.2f} s"
    )
    print("      steps: " + ", ".join(f"{k} {v:.2f} s" for k, v in job.verification_steps.items()))
    for snap in file_diffs(snaps):
        fallback = snap.get("files_diff_fallback")
        print(
            f"      file diff ({snap['checked']}): {snap['files_diff']}, "
            f"{snap.get('files_diff_seconds', 0):.3f} s (table load included)"
            + (f"; fallback: {fallback}" if fallback else "")
        )
    for snap in snaps:
        scope = snap.get("scope", "table (pre-scoping evidence)")
        detail = (
            f"{snap.get('partitions_proven')} of {snap.get('partitions_total')} "
            f"partitions proven from metadata, {snap.get('partitions_fingerprinted', '-')} "
            "fingerprinted"
            if "partitions_total" in snap
            else ""
        )
        reason = f"; fallback: {snap['scope_reason']}" if snap.get("scope_reason") else ""
        if snap.get("reader"):
            reason += f"; read by {snap['reader']}"
        if snap.get("reader_files_read") is not None:
            reason += (
                f" ({snap['reader_files_read']} files read, "
                f"{snap.get('reader_files_prefetched') or 0} known already: stored at first "
                "sight or read during the CALL)"
            )
        if snap.get("reader_fallback"):
            reason += f" (in-process reader: {snap['reader_fallback']})"
        print(
            f"      snapshot {snap['snapshot_id']} ({snap['checked']}): scope {scope}"
            f"{', ' + detail if detail else ''}; rows {snap['rows_before']} -> "
            f"{snap['rows_after']}{reason}"
        )
    return verification


def _report_verification_ab(m: Measured, direct: Rewrite) -> None:
    """Each way of verifying the job's snapshots, timed side by side."""
    if not m.verification_ab:  # not measured on the object store (see bench.maintain.objstore)
        return
    print(f"    verification A/B on the job's snapshots (round-robin, best of {SCAN_REPEAT}):")
    whole = min(next(iter(m.verification_ab.values())))
    for label, times in m.verification_ab.items():
        best = min(times)
        print(
            f"      {label:40s}: {best:6.2f} s  ({', '.join(f'{t:.2f}' for t in times)})"
            f"  {whole / best:4.1f}x faster than whole table"
        )
    floor = min(m.verification_ab[FLOOR])
    print(
        f"    a verification that re-reads the replaced rows through Spark costs at least "
        f"{floor:.2f} s = {floor / direct.seconds:.2f}x the direct CALL (the job at least "
        f"{1 + floor / direct.seconds:.2f}x direct); the in-process reader's whole comparison: "
        f"{min(m.verification_ab[IN_PROCESS]):.2f} s"
    )


def _report_scans(m: Measured) -> None:
    """The full-table scan before and after the rewrites."""
    scans = m.scans
    first = scans["before"]
    print(
        f"full-table scan (SELECT part, count(*), sum(length(payload)) ... GROUP BY part; "
        f"time travel to each state, round-robin, best of {SCAN_REPEAT}):"
    )
    for label, name in (
        ("before", "before"),
        ("after icepack job", "icepack"),
        ("after whole-table rewrite", "whole table"),
    ):
        scan = scans[name]
        speedup = first.best / scan.best
        note = ""
        if name != "before":
            note = f"{speedup:4.1f}x faster"
            if name == "icepack":
                note += f" (goal >= {SCAN_GOAL:.0f}x) {verdict(speedup >= SCAN_GOAL)}"
        print(
            f"  {label:28s} : {scan.best:6.2f} s  ({', '.join(f'{t:.2f}' for t in scan.seconds)}"
            f"; {scan.tasks:3d} Spark tasks)  {note}"
        )


def _report_contents(m: Measured) -> None:
    """Contents after every rewrite against before, and the rollbacks between them."""
    before, base, scans = m.before, m.base, m.scans
    first = scans["before"]
    fp = m.fingerprint
    print(f"contents before: {fp.rows} rows, checksum {fp.checksum}")
    for r in [*m.jobs, *m.directs, base]:
        print(
            f"  {'MATCH' if r.fingerprint == fp else 'MISMATCH'}  after {r.name}: "
            f"{r.fingerprint.rows} rows, checksum {r.fingerprint.checksum}"
        )
    for name in ("icepack", "whole table"):
        same = scans[name].result == first.result
        print(f"  {'MATCH' if same else 'MISMATCH'}  scan result per partition after {name}")
    print(
        f"  rollback to snapshot {m.snapshot} restored all {before.count} data files "
        f"after each of the {len(m.jobs) + len(m.directs) + 1} rewrites"
    )
    print(f"({m.load_before} before measuring, {load()} after; {os.cpu_count()} CPUs)")
