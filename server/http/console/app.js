// The offsetstore console: one static script over the HTTP/JSON API (docs/http.md).
// Every name shown is put in with textContent (el() below), never parsed as HTML: group and
// topic names are user input. The token lives in this tab's sessionStorage and travels in
// the Authorization header only: no cookie, so no request forged from another site carries it.
"use strict";

const SERVICE = "/offsetstore.v1.OffsetStoreService/";
const TOKEN_KEY = "offsetstore.token";
const IMPORT_MEMBER = "offsetstore-console-import";
const MAX_PAGES = 50;
const PLACEHOLDERS = { "-2": "BOUNDARY_EARLIEST", "-1": "BOUNDARY_LATEST" };

// --- DOM, safely ---------------------------------------------------------------------

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child !== undefined && child !== null) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

const $ = (selector) => document.querySelector(selector);

function say(text, error = false) {
  const box = $("#message");
  box.textContent = text;
  box.className = error ? "error" : "";
  box.hidden = !text;
}

// --- the API -------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, doc) {
    super(doc.message || `HTTP ${status}`);
    this.code = doc.code || "unknown";
    const info = (doc.details || []).find((d) => d.type === "google.rpc.ErrorInfo");
    this.reason = info && info.debug ? info.debug.reason : "";
  }
}

async function call(method, body) {
  const headers = { "Content-Type": "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  const response = await fetch(SERVICE + method, {
    method: "POST", headers, body: JSON.stringify(body || {}), credentials: "omit", cache: "no-store",
  });
  const doc = await response.json().catch(() => ({}));
  if (!response.ok) throw new ApiError(response.status, doc);
  return doc;
}

async function pages(method, body, key) {
  const out = [];
  let token = "";
  for (let i = 0; i < MAX_PAGES; i++) {
    const doc = await call(method, { ...body, pageToken: token });
    out.push(...(doc[key] || []));
    token = doc.nextPageToken || "";
    if (!token) return { items: out, last: doc };
  }
  return { items: out, last: {}, truncated: true };
}

// --- formatting ----------------------------------------------------------------------

const num = (v) => (v === undefined || v === null || v === "" ? 0 : Number(v));

function offsetText(v) {
  const n = num(v);
  return n === -2 ? "earliest" : n === -1 ? "latest" : String(v);
}

// A change's -1 is "none" unless the partition stored the latest placeholder just before (as
// the CLI's history decides): commits and resets store their new offset, deletes and expiries don't.
function storedFlags(changesNewestFirst) {
  const stores = ["CHANGE_KIND_COMMIT", "CHANGE_KIND_RESET"];
  const last = new Map();
  const flags = [];
  for (const c of [...changesNewestFirst].reverse()) {
    const key = `${c.topic}\u0000${c.partition}`;
    const stored = stores.includes(c.kind);
    flags.push({ previous: last.get(key) || false, next: stored });
    last.set(key, stored);
  }
  return flags.reverse();
}

function changeOffsetText(v, stored) {
  return num(v) === -1 && !stored ? "-" : offsetText(v);
}

// A time typed without a zone is UTC, as the label says (a bare date-time would be the browser's own zone).
function utcInstant(v) {
  const text = v.replace(" ", "T");
  const zoned = /(Z|[+-]\d\d:?\d\d)$/i.test(text) || !text.includes("T");
  const instant = new Date(zoned ? text : text + "Z");
  if (Number.isNaN(instant.getTime())) throw new Error("give the time as 2026-01-31T12:00:00 (UTC unless it ends in Z or +hh:mm)");
  return instant.toISOString();
}

function lagText(v) {
  return num(v) < 0 ? "unknown" : String(v);
}

// proto3 JSON leaves out zero values: a known lag of 0 s comes without lagSeconds.
function lagSecondsText(p) {
  if (p.lagSecondsStatus !== "LAG_SECONDS_STATUS_KNOWN") return "unknown";
  return `${Number(p.lagSeconds || 0).toFixed(1)} s`;
}

function when(iso) {
  if (!iso) return el("span", { class: "muted" }, "never");
  const then = new Date(iso);
  const seconds = Math.max(0, (Date.now() - then.getTime()) / 1000);
  const ago = seconds < 90 ? `${Math.round(seconds)} s ago` : seconds < 5400 ? `${Math.round(seconds / 60)} min ago`
    : seconds < 172800 ? `${Math.round(seconds / 3600)} h ago` : `${Math.round(seconds / 86400)} d ago`;
  return el("time", { datetime: iso, title: iso }, ago);
}

function table(columns, rows, id) {
  return el("table", { id },
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", { class: c.num ? "num" : "" }, c.label)))),
    el("tbody", {}, rows.map((row) => el("tr", {}, columns.map((c) => el("td", { class: c.num ? "num" : "" }, c.cell(row)))))));
}

// --- the groups page -----------------------------------------------------------------

const GROUP_COLUMNS = [
  { key: "groupId", label: "Group", value: (g) => g.groupId, cell: (g) => el("a", { class: "group-link", href: "#/group/" + encodeURIComponent(g.groupId) }, g.groupId) },
  { key: "partitionCount", label: "Partitions", num: true, value: (g) => num(g.partitionCount), cell: (g) => String(num(g.partitionCount)) },
  { key: "generation", label: "Generation", num: true, value: (g) => num(g.generation), cell: (g) => String(g.generation) },
  { key: "totalLag", label: "Lag (offsets)", num: true, value: (g) => num(g.totalLag), cell: (g) => lagText(g.totalLag) },
  { key: "lastCommitTime", label: "Last activity", value: (g) => g.lastCommitTime || "", cell: (g) => when(g.lastCommitTime) },
];

const view = { sort: "groupId", dir: 1, groups: [], prefix: "" };

// Each navigation has a number; a page drops an answer that arrives after the user has moved
// on, so that a slow answer for an older view (all groups, say) never overwrites the newer one.
let visit = 0;
const movedOn = (mine) => mine !== visit;

async function groupsPage(prefix, mine) {
  view.prefix = prefix;
  const main = $("#main");
  const filter = el("input", { id: "prefix", type: "search", placeholder: "group id prefix", value: prefix });
  const form = el("form", { class: "toolbar", onsubmit: (e) => { e.preventDefault(); location.hash = "#/?prefix=" + encodeURIComponent(filter.value); } },
    el("label", { for: "prefix" }, "Filter by prefix"), filter, el("button", { type: "submit", id: "filter" }, "Filter"),
    el("span", { id: "count", class: "muted" }));
  main.replaceChildren(el("h1", {}, "Consumer groups"), form, el("div", { id: "groups" }, "Loading…"));
  main.dataset.page = "groups";
  try {
    const { items, truncated } = await pages("ListGroups", { prefix, pageSize: 1000 }, "groups");
    if (movedOn(mine)) return;
    view.groups = items;
    $("#count").textContent = `${items.length} group(s)${truncated ? " (first pages only)" : ""}`;
    renderGroups();
  } catch (error) {
    if (!movedOn(mine)) $("#groups").replaceChildren(failure(error));
  }
}

function renderGroups() {
  const column = GROUP_COLUMNS.find((c) => c.key === view.sort);
  const rows = [...view.groups].sort((a, b) => {
    const x = column.value(a), y = column.value(b);
    return (x < y ? -1 : x > y ? 1 : 0) * view.dir;
  });
  const head = el("tr", {}, GROUP_COLUMNS.map((c) => el("th", {
    class: ["sortable", c.num ? "num" : "", c.key === view.sort ? (view.dir > 0 ? "sorted-asc" : "sorted-desc") : ""].join(" "),
    "data-key": c.key,
    onclick: () => { view.dir = view.sort === c.key ? -view.dir : 1; view.sort = c.key; renderGroups(); },
  }, c.label)));
  const body = el("tbody", {}, rows.map((g) => el("tr", {}, GROUP_COLUMNS.map((c) => el("td", { class: c.num ? "num" : "" }, c.cell(g))))));
  $("#groups").replaceChildren(rows.length ? el("table", { id: "groups-table" }, el("thead", {}, head), body)
    : el("p", { class: "muted" }, "No groups with this prefix."));
}

// --- one group -----------------------------------------------------------------------

async function groupPage(groupId, mine) {
  const main = $("#main");
  main.dataset.page = "group";
  main.dataset.admin = "unknown";
  main.replaceChildren(el("p", { class: "muted" }, "Loading…"));
  let described;
  try {
    described = await pages("DescribeGroup", { groupId, pageSize: 1000 }, "partitions");
  } catch (error) {
    if (!movedOn(mine)) main.replaceChildren(el("h1", {}, groupId), failure(error));
    return;
  }
  if (movedOn(mine)) return;
  const g = described.last;
  const partitions = described.items;
  const topics = [...new Set(partitions.map((p) => p.topic))].sort();
  main.replaceChildren(
    el("p", {}, el("a", { href: "#/?prefix=" + encodeURIComponent(view.prefix) }, "← groups")),
    el("h1", { id: "group-id" }, groupId),
    el("dl", { class: "facts" },
      el("dt", {}, "Generation"), el("dd", { id: "generation" }, String(g.generation)),
      el("dt", {}, "Resets"), el("dd", {}, String(g.resetCount)),
      el("dt", {}, "Member"), el("dd", {}, g.memberId ? `${g.memberId} (${g.memberHost || "?"})` : "none"),
      el("dt", {}, "Last active"), el("dd", {}, when(g.activeTime))),
    el("div", { class: "toolbar", id: "actions" },
      el("button", { type: "button", id: "export", onclick: () => exportCsv(groupId) }, "Export CSV")),
    el("h2", {}, "Partitions"),
    table([
      { label: "Topic", cell: (p) => p.topic },
      { label: "Partition", num: true, cell: (p) => String(p.partition) },
      { label: "Offset", num: true, cell: (p) => offsetText(p.offset) },
      { label: "Log end", num: true, cell: (p) => (num(p.logEndOffset) < 0 ? "unknown" : String(p.logEndOffset)) },
      { label: "Lag", num: true, cell: (p) => lagText(p.lag) },
      { label: "Lag (time)", num: true, cell: (p) => lagSecondsText(p) },
      { label: "Committed", cell: (p) => when(p.commitTime) },
    ], partitions, "partitions"),
    el("div", { id: "admin" }),
    el("h2", {}, "History"),
    el("div", { id: "history" }, "Loading…"));
  history(groupId, mine);
  // The server decides; the console only asks it, with a dry run that changes nothing,
  // whether this token may reset this group (grants are per prefix).
  let admin = false;
  try {
    await call("ResetOffsets", { groupId, allTopics: true, shiftBy: "0", dryRun: true });
    admin = true;
  } catch (error) {
    admin = !["permission_denied", "unauthenticated"].includes(error.code);
  }
  if (movedOn(mine)) return;
  main.dataset.admin = admin ? "yes" : "no";
  if (admin) $("#admin").replaceChildren(resetPanel(groupId, topics, g), importPanel(groupId));
}

async function history(groupId, mine) {
  try {
    const { items } = await pages("ListOffsetHistory", { groupId, pageSize: 1000 }, "changes");
    if (movedOn(mine)) return;
    items.sort((a, b) => (a.changeTime < b.changeTime ? 1 : a.changeTime > b.changeTime ? -1 : 0));
    const stored = storedFlags(items);
    const list = el("ol", { class: "timeline", id: "timeline" }, items.slice(0, 500).map((c, i) => el("li", { class: "kind-" + c.kind },
      when(c.changeTime), " ", el("span", { class: "kind" }, String(c.kind).replace("CHANGE_KIND_", "").toLowerCase()), " ",
      `${c.topic} [${c.partition}]: ${changeOffsetText(c.previousOffset, stored[i].previous)} → ${changeOffsetText(c.newOffset, stored[i].next)}`,
      el("span", { class: "muted" }, ` generation ${c.generation}, by ${c.actor}`))));
    $("#history").replaceChildren(items.length ? list : el("p", { class: "muted" }, "No history kept."));
  } catch (error) {
    if (!movedOn(mine)) $("#history").replaceChildren(failure(error));
  }
}

// --- reset: preview, then confirm ----------------------------------------------------

function resetPanel(groupId, topics, group) {
  const scope = el("select", { id: "reset-scope" }, el("option", { value: "" }, "all topics"),
    topics.map((t) => el("option", { value: t }, t)));
  const target = el("select", { id: "reset-target" },
    el("option", { value: "toOffset" }, "to offset"), el("option", { value: "shiftBy" }, "shift by"),
    el("option", { value: "BOUNDARY_EARLIEST" }, "to earliest"), el("option", { value: "BOUNDARY_LATEST" }, "to latest"),
    el("option", { value: "toCommitTime" }, "to time (UTC, as committed then)"));
  const value = el("input", { id: "reset-value", placeholder: "offset, shift or 2026-01-31T12:00:00Z", size: 28 });
  const preview = el("div", { id: "preview" });
  const confirm = el("button", { type: "button", id: "reset-confirm", class: "danger", disabled: true }, "Confirm reset");
  let request = null;
  const invalidate = () => { request = null; confirm.disabled = true; preview.replaceChildren(); };
  for (const input of [scope, target, value]) input.addEventListener("input", invalidate);

  function build() {
    const body = { groupId };
    if (scope.value) body.topics = [{ topic: scope.value }]; else body.allTopics = true;
    const v = value.value.trim();
    if (target.value.startsWith("BOUNDARY_")) body.toBoundary = target.value;
    else if (!v) throw new Error("give a value for the target");
    else if (target.value === "toCommitTime") body.toCommitTime = utcInstant(v);
    else if (!/^-?\d+$/.test(v)) throw new Error("the offset or shift must be a whole number");
    else body[target.value] = v;
    return body;
  }

  async function dryRun() {
    invalidate();
    try {
      const body = build();
      const answer = await call("ResetOffsets", { ...body, dryRun: true });
      const changes = answer.changes || [];
      const next = changes.length ? changes[0].generation : answer.generation;
      preview.replaceChildren(
        el("p", { class: "fence", id: "fence" }, `Generation ${answer.generation} → ${next}: writers still on generation ${answer.generation} or older are fenced (their next commit fails with STALE_GENERATION).`),
        table([
          { label: "Topic", cell: (c) => c.topic },
          { label: "Partition", num: true, cell: (c) => String(c.partition) },
          { label: "Now", num: true, cell: (c) => offsetText(c.previousOffset) },
          { label: "After", num: true, cell: (c) => el("span", { class: num(c.previousOffset) !== num(c.newOffset) ? "changed" : "" }, offsetText(c.newOffset)) },
        ], changes, "preview-table"));
      request = body;
      confirm.disabled = changes.length === 0;
      confirm.textContent = `Confirm reset of ${changes.length} partition(s)`;
    } catch (error) {
      preview.replaceChildren(failure(error));
    }
  }

  confirm.addEventListener("click", async () => {
    if (!request) return;
    confirm.disabled = true;
    try {
      const answer = await call("ResetOffsets", request);
      say(`Reset ${(answer.changes || []).length} partition(s) of ${groupId}; generation is now ${answer.generation}.`);
      await groupPage(groupId, ++visit);
    } catch (error) {
      preview.replaceChildren(failure(error));
    }
  });

  return el("section", { class: "panel", id: "reset" }, el("h2", {}, "Reset offsets"),
    el("div", { class: "toolbar" }, "Reset", scope, target, value,
      el("button", { type: "button", id: "reset-preview", class: "primary", onclick: dryRun }, "Preview (dry run)"), confirm),
    el("p", { class: "muted" }, `Generation ${group.generation} now. Nothing changes until you confirm.`), preview);
}

// --- CSV: topic,partition,offset as kafka-consumer-groups and `offsetstore groups` write it ---

async function exportCsv(groupId) {
  try {
    const { items } = await pages("FetchOffsets", { groupId, pageSize: 1000 }, "offsets");
    const lines = ["topic,partition,offset", ...items.map((o) => `${o.topic},${o.partition},${o.offset}`)];
    const link = el("a", { href: URL.createObjectURL(new Blob([lines.join("\n") + "\n"], { type: "text/csv" })),
      download: groupId.replace(/[^A-Za-z0-9._-]+/g, "_") + ".csv" });
    document.body.append(link);
    link.click();
    link.remove();
  } catch (error) {
    say(`Export failed: ${error.message}`, true);
  }
}

function parseCsv(text) {
  const rows = new Map();
  text.split(/\r?\n/).forEach((line, i) => {
    const fields = line.trim().split(",").map((f) => f.trim());
    if (!line.trim() || (i === 0 && fields.join(",").toLowerCase() === "topic,partition,offset")) return;
    if (fields.length !== 3 || !fields[0] || !/^\d+$/.test(fields[1]) || !/^-?\d+$/.test(fields[2]) || Number(fields[2]) < -2) {
      throw new Error(`line ${i + 1}: expected topic,partition,offset (offset >= 0, or -2 earliest, -1 latest)`);
    }
    rows.set(`${fields[0]}\u0000${fields[1]}`, { topic: fields[0], partition: Number(fields[1]), offset: fields[2] });
  });
  if (!rows.size) throw new Error("no offsets to import");
  return [...rows.values()];
}

function importPanel(groupId) {
  const file = el("input", { type: "file", id: "import-file", accept: ".csv,text/csv" });
  const preview = el("div", { id: "import-preview" });
  const confirm = el("button", { type: "button", id: "import-confirm", class: "danger", disabled: true }, "Confirm import");
  let rows = null;
  file.addEventListener("change", async () => {
    rows = null;
    confirm.disabled = true;
    try {
      const parsed = parseCsv(await file.files[0].text());
      const current = await pages("FetchOffsets", { groupId, pageSize: 1000 }, "offsets");
      const now = new Map(current.items.map((o) => [`${o.topic}\u0000${o.partition}`, o.offset]));
      preview.replaceChildren(table([
        { label: "Topic", cell: (r) => r.topic },
        { label: "Partition", num: true, cell: (r) => String(r.partition) },
        { label: "Now", num: true, cell: (r) => { const o = now.get(`${r.topic}\u0000${r.partition}`); return o === undefined ? "none" : offsetText(o); } },
        { label: "After", num: true, cell: (r) => offsetText(r.offset) },
      ], parsed, "import-table"));
      rows = parsed;
      confirm.disabled = false;
    } catch (error) {
      preview.replaceChildren(failure(error));
    }
  });
  confirm.addEventListener("click", async () => {
    if (!rows) return;
    confirm.disabled = true;
    try {
      const generation = await applyImport(groupId, rows);
      say(`Imported ${rows.length} offset(s) into ${groupId}; generation is now ${generation}.`);
      await groupPage(groupId, ++visit);
    } catch (error) {
      preview.replaceChildren(failure(error));
    }
  });
  return el("section", { class: "panel", id: "import" }, el("h2", {}, "Import CSV"),
    el("p", { class: "muted" }, "topic,partition,offset lines (-2 earliest, -1 latest). The import bumps the generation, fencing live writers."),
    el("div", { class: "toolbar" }, file, confirm), preview);
}

// As `offsetstore groups import`: placeholders by resets to that end, real offsets by a
// commit under a fresh generation (a join), so a live fenced writer cannot overwrite them.
async function applyImport(groupId, rows) {
  let generation = "0";
  for (const [placeholder, boundary] of Object.entries(PLACEHOLDERS)) {
    const selected = rows.filter((r) => r.offset === placeholder);
    if (!selected.length) continue;
    const byTopic = new Map();
    for (const r of selected) byTopic.set(r.topic, [...(byTopic.get(r.topic) || []), r.partition]);
    const topics = [...byTopic].map(([topic, partitions]) => ({ topic, partitions }));
    generation = (await call("ResetOffsets", { groupId, topics, toBoundary: boundary })).generation;
  }
  const real = rows.filter((r) => num(r.offset) >= 0);
  if (real.length) {
    if (num(generation) === 0) generation = (await call("JoinGroup", { groupId, memberId: IMPORT_MEMBER })).generation;
    await call("CommitOffsets", { groupId, generation, offsets: real.map(({ topic, partition, offset }) => ({ topic, partition, offset })) });
  }
  return generation;
}

// --- errors, token, routing ----------------------------------------------------------

function failure(error) {
  const hint = error.code === "unauthenticated" ? " Enter a token above." : "";
  return el("p", { class: "error-text", "data-code": error.code || "" },
    `${error.code || "error"}${error.reason ? " (" + error.reason + ")" : ""}: ${error.message}.${hint}`);
}

function showToken() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  $("#who").textContent = token ? "token set for this tab" : "no token";
  $("#forget").hidden = !token;
}

function route() {
  say("");
  const mine = ++visit;
  const hash = location.hash || "#/";
  if (hash.startsWith("#/group/")) return groupPage(decodeURIComponent(hash.slice("#/group/".length)), mine);
  const query = new URLSearchParams(hash.split("?")[1] || "");
  return groupsPage(query.get("prefix") || "", mine);
}

document.addEventListener("DOMContentLoaded", () => {
  $("#login").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("#token").value.trim());
    $("#token").value = "";
    showToken();
    route();
  });
  $("#forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    showToken();
    route();
  });
  window.addEventListener("hashchange", route);
  showToken();
  route();
});
