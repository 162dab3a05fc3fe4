// Icepack web UI: one Alpine.js component, hash routes, data from the gateway's read APIs.
// Chart instances live outside Alpine's reactive state (Chart.js objects must not be proxied).
"use strict";

const charts = {};
let followTimer = null;

const CHART_DEFS = [
  { key: "data_file_count", label: "Data files", color: "#2563eb" },
  { key: "small_file_count", label: "Small files", color: "#d97706" },
  { key: "snapshot_count", label: "Snapshots", color: "#7c3aed" },
  { key: "delete_file_count", label: "Delete files", color: "#dc2626" },
];

// With ICEPACK_GATEWAY_READ_AUTH=true every API call needs a bearer token; the UI keeps the
// one the operator typed in sessionStorage (gone when the tab closes), never in localStorage.
const TOKEN_KEY = "icepack.token";

function storedToken() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (_) { return ""; }
}

// Snapshot ids and content checksums are 64-bit: beyond 2^53 a JS number would show other
// digits, so such integers stay strings of their exact source text.
function exactIntegers(_key, value, context) {
  if (typeof value === "number" && Number.isInteger(value) && !Number.isSafeInteger(value)
      && context && typeof context.source === "string") return context.source;
  return value;
}

// One gateway call. Resolves to the parsed body (``withStatus``: ``{status, body}``); rejects
// with an Error carrying ``status`` and ``code`` whose message is the gateway's own reason.
async function api(path, { method = "GET", json = undefined, withStatus = false } = {}) {
  const headers = { Accept: "application/json" };
  const token = storedToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers };
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(json);
  }
  const response = await fetch(path, init);
  let body = null;
  try { body = JSON.parse(await response.text(), exactIntegers); } catch (_) { body = null; }
  if (!response.ok) {
    const err = new Error(body && body.message ? `${body.code}: ${body.message}`
                                               : `HTTP ${response.status}`);
    err.status = response.status;
    err.code = body && body.code;
    err.reason = body && body.message ? body.message : `HTTP ${response.status}`;
    throw err;
  }
  return withStatus ? { status: response.status, body } : body;
}

// The job page re-reads a job that is not finished yet at this interval (ms): often enough to
// watch it run, rarely enough that an open tab costs the gateway nothing worth mentioning.
const JOB_POLL_MS = 2000;
// Ledger rows per page on the job page; "Load more" reads the next page.
const DELETIONS_PAGE = 100;
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
let jobTimer = null;

function stopJobPolling() {
  if (jobTimer) { clearTimeout(jobTimer); jobTimer = null; }
}

function escapeHtml(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function destroyCharts() {
  for (const key of Object.keys(charts)) { charts[key].destroy(); delete charts[key]; }
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== "" && v != null) q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
}

document.addEventListener("alpine:init", () => {
  window.Alpine.data("icepack", () => ({
    view: "fleet",
    loading: false,
    error: "",
    summary: null,
    fleet: { items: [], next: null, q: "", health: "" },
    detail: null,
    history: [],
    jobsOfTable: [],
    jobs: { items: [], next: null, state: "" },
    job: null,
    deletions: null,
    budgets: [],
    restore: { state: "idle", job: null, created: false, message: "" },
    events: { items: [], topic: "", follow: false },
    jobTable: null,
    jobPoll: { active: false, error: "" },
    // "Maintain now" on the table page: idle | busy | done ({job, created}) | refused (error).
    maintain: { state: "idle", job: null, created: false, status: 0, code: "", message: "" },
    auth: { needed: false, editing: false, input: "", has: !!storedToken() },
    chartDefs: CHART_DEFS,

    init() {
      window.addEventListener("hashchange", () => this.route());
      this.$watch("events.follow", (on) => this.follow(on));
      this.route();
    },

    async route() {
      const parts = (location.hash.replace(/^#\/?/, "") || "").split("/")
        .filter((p) => p !== "").map(decodeURIComponent);
      this.error = "";
      destroyCharts();
      stopJobPolling();
      this.jobPoll = { active: false, error: "" };
      this.follow(false);
      this.events.follow = false;
      const [page, ...rest] = parts;
      try {
        if (!page) { this.view = "fleet"; await this.loadFleet(); }
        else if (page === "table" && rest.length === 3) { this.view = "table"; await this.loadTable(...rest); }
        else if (page === "jobs") { this.view = "jobs"; await this.loadJobs(); }
        else if (page === "job" && rest.length === 1) { this.view = "job"; await this.loadJob(rest[0]); }
        else if (page === "events") { this.view = "events"; await this.loadEvents(); }
        else if (page === "budgets") { this.view = "budgets"; await this.loadBudgets(); }
        else { this.view = "fleet"; this.error = `no page ${location.hash}`; }
      } catch (e) {
        this.fail(e);
      }
    },

    fail(e) {
      this.error = e.message;
      if (e.status === 401) this.auth.needed = true;
    },

    async guarded(work) {
      this.loading = true;
      this.error = "";
      try { await work(); } catch (e) { this.fail(e); } finally { this.loading = false; }
    },

    saveToken() {
      const token = this.auth.input.trim();
      try {
        if (token) sessionStorage.setItem(TOKEN_KEY, token);
        else sessionStorage.removeItem(TOKEN_KEY);
      } catch (_) { /* storage disabled: nothing to keep */ }
      this.auth = { needed: false, editing: false, input: "", has: !!token };
      this.route();
    },

    async loadFleet() {
      await this.guarded(async () => { this.summary = await api("/summary"); });
      await this.loadTables();
    },

    async loadTables(more = false) {
      await this.guarded(async () => {
        const page = await api("/tables" + query({
          limit: 50, sort: "score", q: this.fleet.q.trim(), health: this.fleet.health,
          cursor: more ? this.fleet.next : "" }));
        this.fleet.items = more ? this.fleet.items.concat(page.items) : page.items;
        this.fleet.next = page.next_cursor;
      });
    },

    async loadTable(catalog, namespace, name) {
      this.detail = null;
      this.maintain = { state: "idle", job: null, created: false, status: 0, code: "",
                        message: "" };
      this.history = [];
      this.jobsOfTable = [];
      await this.guarded(async () => {
        const base = "/tables/" + [catalog, namespace, name].map(encodeURIComponent).join("/");
        const [detail, history, jobs] = await Promise.all([
          api(base), api(`${base}/status/history?limit=200`), api(`${base}/history?limit=20`)]);
        this.detail = detail;
        this.history = history.items;
        this.jobsOfTable = jobs.items;
      });
      await this.$nextTick();
      this.drawCharts();
    },

    drawCharts() {
      destroyCharts();
      if (!this.history.length || !window.Chart) return;
      const labels = this.history.map((p) => new Date(p.inspected_at).toLocaleString(
        undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }));
      for (const def of CHART_DEFS) {
        const canvas = document.getElementById(`chart-${def.key}`);
        if (!canvas) continue;
        charts[def.key] = new window.Chart(canvas, {
          type: "line",
          data: { labels, datasets: [{ label: def.label, data: this.history.map((p) => p[def.key]),
                  borderColor: def.color, backgroundColor: def.color + "33", fill: true,
                  tension: 0.2, pointRadius: 2 }] },
          options: { animation: false, responsive: true, maintainAspectRatio: false,
                     plugins: { legend: { display: false } },
                     scales: { y: { beginAtZero: true, ticks: { precision: 0 } },
                               x: { ticks: { maxTicksLimit: 4, maxRotation: 0 } } } },
        });
      }
    },

    // POST /jobs without actions: the planner's latest recommendation, through the same safety
    // choke point as every write. Needs an operator token; every outcome is shown.
    async maintainNow() {
      const t = this.detail && this.detail.table;
      if (!t || this.maintain.state === "busy") return;
      if (!storedToken()) {
        this.auth.editing = true;
        this.maintain = { state: "refused", job: null, created: false, status: 0,
                          code: "TOKEN_NEEDED",
                          message: "Maintain now needs an operator token (icepack token create "
                                   + "NAME): enter it above, then click Maintain now again." };
        return;
      }
      this.maintain = { state: "busy", job: null, created: false, status: 0, code: "",
                        message: "" };
      try {
        const { status, body } = await api("/jobs", {
          method: "POST", withStatus: true,
          json: { catalog: t.catalog, namespace: t.namespace, table: t.name } });
        this.maintain = { state: "done", job: body.job, created: body.created, status,
                          code: "", message: "" };
      } catch (e) {
        if (e.status === 401 || e.status === 403) this.auth.editing = true;
        this.maintain = { state: "refused", job: null, created: false, status: e.status || 0,
                          code: e.code || "", message: e.reason || e.message || String(e) };
      }
    },

    maintainTitle() {
      const m = this.maintain;
      if (m.state !== "refused") return "";
      if (m.status === 401) return "Not allowed: the token is missing or unknown";
      if (m.code === "TOKEN_READ_ONLY") return "Not allowed: this token is read-only";
      if (m.status === 403) return "Not allowed: the token was revoked";
      if (m.status === 409) return "Refused";
      if (m.status === 422) return "Invalid request";
      if (m.code === "TOKEN_NEEDED") return "Operator token needed";
      return m.status ? `Failed (HTTP ${m.status})` : "Failed: the gateway did not answer";
    },

    async loadJobs(more = false) {
      await this.guarded(async () => {
        if (!this.summary) this.summary = await api("/summary");
        const page = await api("/jobs" + query({ limit: 50, state: this.jobs.state,
                                                 cursor: more ? this.jobs.next : "" }));
        this.jobs.items = more ? this.jobs.items.concat(page.items) : page.items;
        this.jobs.next = page.next_cursor;
      });
    },

    async loadJob(id) {
      this.job = null;
      this.jobTable = null;
      this.deletions = null;
      this.restore = { state: "idle", job: null, created: false, message: "" };
      await this.guarded(async () => {
        const base = `/jobs/${encodeURIComponent(id)}`;
        [this.job, this.deletions] = await Promise.all([
          api(base), api(`${base}/deletions` + query({ limit: DELETIONS_PAGE }))]);
      });
      this.pollJob(id);
      await this.loadJobTable();
    },

    // The next page of the job's ledger (GET /jobs/{id}/deletions is paged; totals cover all).
    async moreDeletions() {
      const d = this.deletions;
      if (!d || !d.next_cursor) return;
      await this.guarded(async () => {
        const page = await api(`/jobs/${encodeURIComponent(d.job_id)}/deletions`
                               + query({ limit: DELETIONS_PAGE, cursor: d.next_cursor }));
        if (this.deletions !== d) return;  // the page changed meanwhile
        this.deletions = { ...page, items: d.items.concat(page.items) };
      });
    },

    // Re-read an unfinished job every JOB_POLL_MS until it is terminal or the page changes.
    // A failed re-read is shown and retried; it never replaces the job already on the page.
    pollJob(id) {
      stopJobPolling();
      if (!this.job || TERMINAL.has(this.job.state)) {
        this.jobPoll = { active: false, error: "" };
        return;
      }
      this.jobPoll.active = true;
      const hash = location.hash;
      jobTimer = setTimeout(async () => {
        jobTimer = null;
        if (location.hash !== hash || this.view !== "job") return;
        try {
          const fresh = await api(`/jobs/${encodeURIComponent(id)}`);
          if (location.hash !== hash) return;
          const wasHeld = this.jobTable && this.jobTable.maintenance_hold;
          this.job = fresh;
          this.jobPoll.error = "";
          // A job that just failed may have held its table: show the hold as it appears.
          if (TERMINAL.has(fresh.state) && !wasHeld) await this.loadJobTable();
        } catch (e) {
          if (location.hash !== hash) return;
          this.jobPoll.error = e.message;
          if (e.status === 404) { this.jobPoll.active = false; return; }
        }
        this.pollJob(id);
      }, JOB_POLL_MS);
    },

    // POST /jobs/{id}/restore: an executor moves the job's quarantined files back.
    async restoreJob() {
      if (!this.job || this.restore.state === "busy") return;
      if (!storedToken()) {
        this.auth.editing = true;
        this.restore = { state: "refused", job: null, created: false,
                         message: "Restoring needs an operator token: enter it above, then "
                                  + "click Restore again." };
        return;
      }
      this.restore = { state: "busy", job: null, created: false, message: "" };
      try {
        const body = await api(`/jobs/${encodeURIComponent(this.job.id)}/restore`,
                               { method: "POST" });
        this.restore = { state: "done", job: body.job, created: body.created, message: "" };
      } catch (e) {
        if (e.status === 401 || e.status === 403) this.auth.editing = true;
        this.restore = { state: "refused", job: null, created: false,
                         message: e.reason || e.message || String(e) };
      }
    },

    async loadJobTable() {
      const t = this.job && this.job.table;
      if (!t) return;
      // The table's hold (set when a rewrite failed verification) belongs on the job page.
      try {
        this.jobTable = (await api("/tables/" + [t.catalog, t.namespace, t.name]
          .map(encodeURIComponent).join("/"))).table;
      } catch (_) { this.jobTable = null; }
    },

    async loadBudgets() {
      await this.guarded(async () => { this.budgets = (await api("/budgets")).items; });
    },

    async loadEvents() {
      const topic = this.events.topic.trim();
      if (topic && !/^[a-z]+\.[a-z_]+$/.test(topic)) { this.events.items = []; return; }
      await this.guarded(async () => {
        this.events.items = (await api("/events" + query({ limit: 100, topic }))).items;
      });
    },

    follow(on) {
      if (followTimer) { clearInterval(followTimer); followTimer = null; }
      if (on) followTimer = setInterval(() => this.loadEvents(), 3000);
    },

    tableHref(t) {
      return "#/table/" + [t.catalog, t.namespace, t.name].map(encodeURIComponent).join("/");
    },

    metricList() {
      const s = this.detail?.status?.status;
      if (!s) return [];
      const deletes = (s.position_delete_file_count || 0) + (s.equality_delete_file_count || 0)
        + (s.deletion_vector_count || 0);
      return [
        ["data files", this.num(s.data_file_count)], ["data size", this.bytes(s.data_file_bytes)],
        ["records", this.num(s.record_count)], ["small files", this.num(s.small_file_count)],
        ["avg file", this.bytes(s.avg_data_file_bytes)], ["snapshots", this.num(s.snapshot_count)],
        ["manifests", this.num(s.manifest_count)], ["delete files", this.num(deletes)],
        ["partitions", this.num(s.partition_count)], ["format", s.format_version ?? "–"],
      ];
    },

    paramsSummary(params) {
      if (!params || typeof params !== "object") return "";
      const text = Object.entries(params).map(([k, v]) =>
        `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(", ");
      return text.length > 160 ? `${text.slice(0, 157)}…` : text;
    },

    skipLabel(action) {
      return action === "*" ? "all actions" : action;
    },

    impactHtml(action) {
      const impact = action.impact || {};
      const before = impact.before || {};
      const after = impact.after || {};
      // Row counts are shown by safetyHtml, split into live and deleted rows.
      const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])]
        .filter((k) => k !== "record_count" && k !== "delete_record_count");
      const title = `<p class="impact-title">${escapeHtml(action.action)}: impact</p>`;
      if (!keys.length) {
        const rest = Object.keys(impact).filter((k) => k !== "before" && k !== "after");
        return rest.length && !Object.keys(before).length
          ? `${title}<pre>${escapeHtml(JSON.stringify(impact, null, 2))}</pre>` : "";
      }
      const rows = keys.map((k) => {
        const b = before[k]; const a = after[k];
        const delta = typeof a === "number" && typeof b === "number" ? a - b : null;
        const cls = delta === null ? "" : delta < 0 ? "down" : delta > 0 ? "up" : "";
        return `<tr><th>${escapeHtml(k.replaceAll("_", " "))}</th><td>${escapeHtml(this.num(b))}</td>`
          + `<td>${escapeHtml(this.num(a))}</td><td class="${cls}">`
          + `${delta === null ? "" : (delta > 0 ? "+" : "") + escapeHtml(this.num(delta))}</td></tr>`;
      }).join("");
      return `${title}<table class="impact" data-test="impact"><thead><tr><th></th><th>before</th>`
        + `<th>after</th><th>change</th></tr></thead><tbody>${rows}</tbody></table>`;
    },

    safetyHtml(action) {
      const s = window.IcepackSafety.actionSafety(action);
      const label = { verified: "verified", failed: "verification failed",
                      nothing_rewritten: "nothing rewritten", unverified: "not verified",
                      not_applicable: "" }[s.verdict];
      const lr = s.live_rows;
      const sr = s.stored_rows;
      const rows = [];
      if (lr.before !== null || lr.after !== null) {
        const same = lr.before !== null && lr.before === lr.after;
        const how = lr.source === "verification" ? "verified by scanning both snapshots"
                                                 : "from metadata, not scanned";
        const change = lr.before === null || lr.after === null ? ""
          : same ? `unchanged (${how})` : `${this.num(lr.after - lr.before)} (${how})`;
        rows.push(`<tr data-test="live-rows"><th>live rows</th><td>${escapeHtml(this.num(lr.before))}</td>`
          + `<td>${escapeHtml(this.num(lr.after))}</td><td class="${same ? "" : "up"}">`
          + `${escapeHtml(change)}</td></tr>`);
      }
      if (sr.before !== null || sr.after !== null) {
        const removed = s.deleted_rows_removed;
        const note = removed ? `${this.num(removed)} deleted rows physically removed`
          : sr.before !== null && sr.before === sr.after ? "unchanged" : "";
        rows.push(`<tr data-test="stored-rows"><th>stored rows (incl. deleted)</th>`
          + `<td>${escapeHtml(this.num(sr.before))}</td><td>${escapeHtml(this.num(sr.after))}</td>`
          + `<td>${escapeHtml(note)}</td></tr>`);
      }
      if (s.delete_files_applied) {
        rows.push(`<tr data-test="delete-files"><th>delete files applied</th><td></td><td></td>`
          + `<td>${escapeHtml(this.num(s.delete_files_applied))}</td></tr>`);
      }
      if (!rows.length && !s.snapshots.length && !label) return "";
      const head = label ? `<p class="verdict"><span class="badge ${escapeHtml(s.verdict)}" `
        + `data-test="verdict">${escapeHtml(label)}</span></p>` : "";
      const table = rows.length ? `<div class="scroll"><table class="impact rows" data-test="rows">`
        + `<thead><tr><th>rows</th><th>before</th><th>after</th><th></th></tr></thead>`
        + `<tbody>${rows.join("")}</tbody></table></div>` : "";
      let evidence = "";
      if (s.snapshots.length) {
        const cell = (b, a) => (b === undefined && a === undefined ? "–"
          : `${escapeHtml(this.num(b ?? null))} → ${escapeHtml(this.num(a ?? null))}`);
        const lines = s.snapshots.map((r) => `<tr data-test="evidence-row">`
          + `<td>${escapeHtml(String(r.snapshot_id ?? "–"))}</td>`
          + `<td>${escapeHtml(String(r.parent_id ?? "–"))}</td>`
          + `<td>${cell(r.rows_before, r.rows_after)}</td>`
          + `<td>${r.checksum_before === undefined && r.checksum_after === undefined
                    ? (r.checked === "chain" ? "not recorded (chain check)" : "–")
                    : cell(r.checksum_before, r.checksum_after)}</td>`
          + `<td>${r.checked === "chain" ? "start vs. newest" : "against its parent"}</td>`
          + `<td>${"rolled_back" in r ? (r.rolled_back ? "rolled back" : "not rolled back") : ""}</td>`
          + "</tr>").join("");
        evidence = `<p class="impact-title">verification evidence</p><div class="scroll">`
          + `<table class="impact evidence" data-test="evidence"><thead><tr><th>snapshot</th>`
          + `<th>parent</th><th>live rows</th><th>checksum</th><th>checked</th><th></th></tr>`
          + `</thead><tbody>${lines}</tbody></table></div>`;
      }
      return `<div class="safety ${escapeHtml(s.verdict)}" data-test="safety">${head}${table}${evidence}</div>`;
    },

    num(v) {
      if (v === null || v === undefined) return "–";
      return typeof v === "number" ? v.toLocaleString("en-US") : String(v);
    },

    bytes(v) {
      if (v === null || v === undefined) return "–";
      const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
      let n = v; let i = 0;
      while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
      return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
    },

    when(ts) {
      return ts ? new Date(ts).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" })
                : "–";
    },
  }));
});
