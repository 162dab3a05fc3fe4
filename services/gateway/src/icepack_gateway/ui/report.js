// What a job bought and what it cost: the planner's prediction beside the measured outcome
// (jobs.predicted / jobs.outcome), the files it deleted or quarantined (the deletion ledger,
// GET /jobs/{id}/deletions), and budget use (GET /budgets). Pure HTML builders over the
// gateway's JSON; every value is escaped, and unexpected shapes render as "–", never throw.
"use strict";

(() => {
  const isObj = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
  const SHAPE = [["data_files", "data files"], ["delete_files", "delete files"],
                 ["manifests", "manifests"], ["snapshots", "snapshots"],
                 ["data_bytes", "data bytes"]];

  function esc(value) {
    return String(value ?? "").replace(/[&<>"']/g, (c) => ({
      "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  function num(v) {
    if (v === null || v === undefined) return "–";
    return typeof v === "number" ? v.toLocaleString("en-US") : String(v);
  }

  function bytes(v) {
    if (typeof v !== "number") return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let n = v; let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
  }

  function pct(ratio) {
    return typeof ratio === "number" ? `${Math.round(ratio * 100)} %` : "–";
  }

  function change(before, after, key) {
    if (!isObj(before) || !isObj(after)) return "–";
    const b = before[key]; const a = after[key];
    if (typeof b !== "number" || typeof a !== "number") return "–";
    const show = key === "data_bytes" ? bytes : num;
    return `${show(b)} → ${show(a)}`;
  }

  // One line for the table page's maintenance history.
  function outcomeLine(job) {
    const o = isObj(job.outcome) ? job.outcome : null;
    const p = isObj(job.predicted) ? job.predicted : null;
    if (!o && !p) return "";
    const predicted = o && typeof o.predicted_benefit === "number" ? o.predicted_benefit
      : p && typeof p.benefit === "number" ? p.benefit : null;
    const measured = o && typeof o.benefit === "number" ? o.benefit : null;
    const text = o
      ? `benefit: predicted ${num(predicted)}, measured ${num(measured)} (${pct(o.ratio)})`
      : `benefit: predicted ${num(predicted)}, not measured yet`;
    return `<p class="outcome-line" data-test="outcome-line">${esc(text)}</p>`;
  }

  // The job page: per action, predicted vs measured shape change and benefit; the read probe.
  function outcomeHtml(job) {
    const p = isObj(job.predicted) ? job.predicted : null;
    const o = isObj(job.outcome) ? job.outcome : null;
    if (!p && !o) {
      return '<p class="empty" data-test="outcome-none">No prediction and no measured outcome '
        + "for this job (operators' and CLI jobs carry no prediction; orphan removal and "
        + "restores change no table shape).</p>";
    }
    const pa = p && Array.isArray(p.actions) ? p.actions : [];
    const oa = o && Array.isArray(o.actions) ? o.actions : [];
    const names = [...new Set([...pa, ...oa].map((a) => a && a.action).filter(Boolean))];
    const blocks = names.map((name) => {
      const pr = pa.find((a) => a && a.action === name) || {};
      const me = oa.find((a) => a && a.action === name) || {};
      const rows = SHAPE.map(([key, label]) => `<tr><th>${esc(label)}</th>`
        + `<td>${esc(change(pr.before, pr.after, key))}</td>`
        + `<td>${esc(change(me.before, me.after, key))}</td></tr>`).join("");
      const benefit = `<tr class="benefit" data-test="outcome-benefit"><th>benefit</th>`
        + `<td>${esc(num(pr.benefit ?? me.predicted_benefit))}</td>`
        + `<td>${esc(num(me.benefit))}${typeof me.ratio === "number"
          ? ` (${esc(pct(me.ratio))} of predicted)` : ""}</td></tr>`;
      const rewrite = typeof pr.rewrite_bytes === "number"
        ? `<tr><th>bytes to rewrite</th><td>${esc(bytes(pr.rewrite_bytes))}</td><td></td></tr>` : "";
      return `<p class="impact-title">${esc(name)}</p><div class="scroll">`
        + `<table class="impact outcome" data-test="outcome-action"><thead><tr><th></th>`
        + `<th>predicted</th><th>measured</th></tr></thead><tbody>${rows}${rewrite}${benefit}`
        + "</tbody></table></div>";
    }).join("");
    let probe = "";
    const rp = o && isObj(o.read_probe) ? o.read_probe : null;
    if (rp) {
      const side = (s) => (isObj(s) && "error" in s ? `error: ${s.error}`
        : isObj(s) ? `${num(s.files_planned)} files, ${num(s.delete_files_planned)} delete files, `
          + `${num(typeof s.plan_ms === "number" ? Math.round(s.plan_ms) : s.plan_ms)} ms` : "–");
      probe = `<p class="probe" data-test="read-probe"><strong>read probe</strong> (plan a full `
        + `scan): before ${esc(side(rp.before))}; after ${esc(side(rp.after))}</p>`;
    }
    const total = o ? `<p data-test="outcome-total"><strong>job benefit</strong>: predicted `
      + `${esc(num(o.predicted_benefit))}, measured ${esc(num(o.benefit))} (${esc(pct(o.ratio))})</p>`
      : '<p class="muted" data-test="outcome-pending">Measured when the job succeeds.</p>';
    return `<div class="outcome" data-test="outcome">${total}${blocks}${probe}</div>`;
  }

  function when(ts) {
    return ts ? new Date(ts).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" })
              : "–";
  }

  // The job page: what the job deleted or quarantined (GET /jobs/{id}/deletions, one page or
  // more of it; the totals cover every row).
  function deletionsHtml(report) {
    if (!isObj(report) || !Array.isArray(report.items)) return "";
    if (!report.items.length) {
      return '<p class="empty" data-test="deletions-none">This job deleted no files.</p>';
    }
    const states = isObj(report.by_state) ? report.by_state : {};
    const totals = Object.entries(states).map(([state, t]) =>
      `<span class="chip" data-test="deletions-state">${esc(state)}: ${esc(num(t.files))} files, `
      + `${esc(bytes(t.bytes))}</span>`).join(" ");
    const rows = report.items.map((d) => {
      const where = d.state === "quarantined" && d.quarantine_path
        ? `<div class="muted">in ${esc(d.quarantine_path)}; purged after ${esc(when(d.purge_after))}</div>`
        : "";
      return `<tr data-test="deletion-row"><td class="path">${esc(d.path)}${where}</td>`
        + `<td>${esc(d.kind)}</td><td class="num">${esc(bytes(d.size_bytes))}</td>`
        + `<td><span class="badge ${esc(d.state)}">${esc(d.state)}</span></td></tr>`;
    }).join("");
    const shown = report.items.length < (report.totals?.files ?? 0)
      ? ` <span class="muted" data-test="deletions-shown">(showing the first `
        + `${esc(num(report.items.length))})</span>` : "";
    return `<p data-test="deletions-totals"><strong>${esc(num(report.totals?.files))} files, `
      + `${esc(bytes(report.totals?.bytes))}</strong> ${totals}${shown}</p><div class="scroll">`
      + `<table class="impact deletions" data-test="deletions"><thead><tr><th>path</th>`
      + `<th>kind</th><th>size</th><th>state</th></tr></thead><tbody>${rows}</tbody></table></div>`;
  }

  // The budgets page: each budget's limits beside what is used now (GET /budgets).
  function meter(used, limit) {
    if (typeof limit !== "number" || limit <= 0 || typeof used !== "number") return "";
    const share = Math.min(1, used / limit);
    return `<span class="meter${share >= 1 ? " full" : ""}" title="${esc(pct(used / limit))}">`
      + `<span style="width:${(share * 100).toFixed(1)}%"></span></span>`;
  }

  window.IcepackReport = {
    outcomeHtml, outcomeLine, deletionsHtml, meter, bytes, pct, esc, num, when,
  };
})();
