// Was a maintenance action safe? The same rules as icepack_core.job_safety (which `icepack job`
// prints), read from one job_actions row: live rows (stored minus deleted) apart from deleted
// rows physically removed, and the post-commit verification evidence per rewrite snapshot.
// The evidence is read in its one stored form (output.verification); defensive by design: it
// never throws on unexpected input.
"use strict";

(() => {
  const REWRITES = new Set(["rewrite_data_files", "rewrite_position_delete_files"]);
  const DELETE_FILE_FIELDS = ["position_delete_file_count", "equality_delete_file_count",
                              "deletion_vector_count"];
  const ROLLED_BACK = new Set(["rolled_back", "rolled_back_reverting_writer"]);

  const isObj = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
  const int = (v) => (Number.isInteger(v) ? v : null);
  const evidenceOf = (output) => (isObj(output) && isObj(output.verification)
    ? output.verification : null);

  // The checked snapshots of output.verification (icepack_core.safety.verification.Evidence),
  // in the order checked; the violating snapshot's record also says whether it was
  // rolled_back.
  function verificationRecords(output) {
    const evidence = evidenceOf(output);
    if (!evidence || !Array.isArray(evidence.snapshots)) return [];
    const rollback = isObj(evidence.rollback) ? evidence.rollback : null;
    return evidence.snapshots.filter(isObj).map((r) => (
      rollback && r.snapshot_id === rollback.bad_snapshot_id
        ? { ...r, rolled_back: ROLLED_BACK.has(rollback.status) } : r));
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
    const hasKey = evidenceOf(output) !== null;
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
