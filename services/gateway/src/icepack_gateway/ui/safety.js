// Was a maintenance action safe? The same rules as icepack_core.job_safety (which `icepack job`
// prints), read from one job_actions row: live rows (stored minus deleted) apart from deleted
// rows physically removed, and the post-commit verification evidence per rewrite snapshot.
// Defensive by design: it accepts every output shape the executor has written
// (output.verified_snapshots, a verification block, a failed verification's evidence as the
// whole output) and never throws on unexpected input.
"use strict";

(() => {
  const REWRITES = new Set(["rewrite_data_files", "rewrite_position_delete_files"]);
  const DELETE_FILE_FIELDS = ["position_delete_file_count", "equality_delete_file_count",
                              "deletion_vector_count"];
  const EVIDENCE_KEYS = ["rows_before", "rows_after", "checksum_before", "checksum_after"];
  const MAX_DEPTH = 6;

  const isObj = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
  const int = (v) => (Number.isInteger(v) ? v : null);

  function walk(value, depth, out) {
    if (depth > MAX_DEPTH) return;
    if (Array.isArray(value)) { value.forEach((v) => walk(v, depth + 1, out)); return; }
    if (!isObj(value)) return;
    if ("snapshot_id" in value && EVIDENCE_KEYS.some((k) => k in value)) { out.push(value); return; }
    Object.values(value).forEach((v) => walk(v, depth + 1, out));
  }

  function verificationRecords(output) {
    const found = [];
    walk(output, 0, found);
    const seen = new Set();
    return found.filter((r) => {
      const key = `${r.snapshot_id}/${r.parent_id}`;
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    });
  }

  function pair(impact, key) {
    const b = isObj(impact.before) ? int(impact.before[key]) : null;
    const a = isObj(impact.after) ? int(impact.after[key]) : null;
    return [b, a];
  }

  function deleteFiles(impact, side) {
    const known = DELETE_FILE_FIELDS.map((k) => pair(impact, k)[side]).filter((v) => v !== null);
    return known.length ? known.reduce((s, v) => s + v, 0) : null;
  }

  const live = (stored, deleted, equality) =>
    (stored === null || deleted === null || equality ? null : stored - deleted);

  const recordOk = (r) => r.rows_before === r.rows_after
    && (r.checksum_before ?? null) === (r.checksum_after ?? null);

  function actionSafety(action) {
    const impact = isObj(action.impact) ? action.impact : {};
    const output = action.output;
    const records = verificationRecords(output);
    const stored = pair(impact, "record_count");
    const deleted = pair(impact, "delete_record_count");
    const equality = pair(impact, "equality_delete_file_count");
    // A scoped verification's rows are those of the partitions it fingerprinted, not the
    // table's: live rows then come from metadata like when nothing was verified.
    const tableWide = records.every((r) => r.scope === undefined || r.scope === null
      || r.scope === "table");
    const rows = records.length && tableWide
      ? { before: int(records[0].rows_before), after: int(records[records.length - 1].rows_after),
          source: "verification" }
      : { before: live(stored[0], deleted[0], equality[0]),
          after: live(stored[1], deleted[1], equality[1]), source: "metadata" };
    const removed = stored[0] !== null && stored[1] !== null && rows.before !== null
      && rows.after !== null ? (stored[0] - stored[1]) - (rows.before - rows.after) : null;
    const files = [deleteFiles(impact, 0), deleteFiles(impact, 1)];
    const applied = files[0] !== null && files[1] !== null ? files[0] - files[1] : null;
    const rolledBack = records.some((r) => r.rolled_back);
    const hasKey = isObj(output) && ("verified_snapshots" in output || "verification" in output);
    let verdict;
    if (records.length) {
      verdict = records.every(recordOk) && action.state !== "failed" ? "verified" : "failed";
    } else if (!REWRITES.has(action.action)) verdict = "not_applicable";
    else if (hasKey && action.state === "succeeded") verdict = "nothing_rewritten";
    else verdict = "unverified";
    return { verdict, live_rows: rows, stored_rows: { before: stored[0], after: stored[1] },
             deleted_rows_removed: removed, delete_files_applied: applied, snapshots: records,
             rolled_back: rolledBack };
  }

  window.IcepackSafety = { actionSafety, verificationRecords };
})();
