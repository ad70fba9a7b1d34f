// The offsetstore console: static scripts over the HTTP/JSON API (docs/http.md); this one holds
// the API, the lists and routing, actions.js the writes (reset, delete, import), adopt.js the adoption.
// Every name shown is put in with textContent (el() below), never parsed as HTML: group and
// topic names are user input. The token lives in this tab's sessionStorage and travels in
// the Authorization header only: no cookie, so no request forged from another site carries it.
"use strict";

const SERVICE = "/offsetstore.v1.OffsetStoreService/";
const TOKEN_KEY = "offsetstore.token";
const MAX_PAGES = 50;

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
    this.metadata = (info && info.debug && info.debug.metadata) || {};
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
  let first = null;
  for (let i = 0; i < MAX_PAGES; i++) {
    const doc = await call(method, { ...body, pageToken: token });
    first = first || doc;
    out.push(...(doc[key] || []));
    token = doc.nextPageToken || "";
    if (!token) return { items: out, last: doc, first };
  }
  return { items: out, last: {}, first: first || {}, truncated: true };
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
  const stores = ["CHANGE_KIND_COMMIT", "CHANGE_KIND_RESET", "CHANGE_KIND_ADOPT", "CHANGE_KIND_OBSERVED", "CHANGE_KIND_SWITCH"];
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

// The status verdict (docs/operations.md, "Group status"): a badge whose title is its reason.
function statusBadge(status, reason) {
  const name = String(status || "GROUP_STATUS_UNSPECIFIED").replace("GROUP_STATUS_", "");
  if (name === "UNSPECIFIED") return el("span", { class: "muted" }, "-");
  return el("span", { class: "badge status-" + name.toLowerCase(), title: reason || name }, name);
}

// Lag in seconds over the sample ring (PartitionStatus.lagHistory), as a small line.
function sparkline(points) {
  const NS = "http://www.w3.org/2000/svg";
  const [w, h] = [120, 24];
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", "sparkline");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  const values = (points || []).map((p) => Number(p.lagSeconds || 0));
  if (values.length < 2) {
    const text = document.createElementNS(NS, "text");
    text.setAttribute("x", 0);
    text.setAttribute("y", 16);
    text.setAttribute("class", "muted");
    text.textContent = values.length ? "one sample" : "no samples";
    svg.append(text);
    return svg;
  }
  const top = Math.max(1, ...values);
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", values.map((v, i) => `${(i * (w - 2)) / (values.length - 1) + 1},${h - 2 - (v / top) * (h - 4)}`).join(" "));
  const title = document.createElementNS(NS, "title");
  title.textContent = `lag in seconds over the last ${values.length} samples, up to ${top.toFixed(1)} s`;
  svg.append(title, line);
  return svg;
}

// The newest of some RFC 3339 instants (undefined: none). "Last active" is the latest commit, join or
// reset, as the CLI's LAST-ACTIVE and ExpireGroups' last_active_time: activeTime is only the join or reset.
function latest(instants) {
  const known = instants.filter(Boolean);
  return known.length ? known.reduce((a, b) => (Date.parse(b) > Date.parse(a) ? b : a)) : undefined;
}

function when(iso) {
  if (!iso) return el("span", { class: "muted" }, "never");
  const then = new Date(iso);
  const seconds = Math.max(0, (Date.now() - then.getTime()) / 1000);
  const ago = seconds < 90 ? `${Math.round(seconds)} s ago` : seconds < 5400 ? `${Math.round(seconds / 60)} min ago`
    : seconds < 172800 ? `${Math.round(seconds / 3600)} h ago` : `${Math.round(seconds / 86400)} d ago`;
  // The instant itself in UTC beside how long ago, not only on hover (the CLI's tables are UTC too).
  const utc = then.toISOString().slice(0, 19).replace("T", " ") + " UTC";
  return el("time", { datetime: iso, title: iso }, `${ago} (${utc})`);
}

function table(columns, rows, id) {
  return el("table", { id },
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", { class: c.num ? "num" : "" }, c.label)))),
    el("tbody", {}, rows.map((row) => el("tr", {}, columns.map((c) => el("td", { class: c.num ? "num" : "" }, c.cell(row)))))));
}

// --- the groups page -----------------------------------------------------------------

const GROUP_COLUMNS = [
  { key: "groupId", label: "Group", value: (g) => g.groupId, cell: (g) => el("span", {},
    el("a", { class: "group-link", href: "#/group/" + encodeURIComponent(g.groupId) }, g.groupId), observedBadge(g)) },
  { key: "partitionCount", label: "Partitions", num: true, value: (g) => num(g.partitionCount), cell: (g) => String(num(g.partitionCount)) },
  { key: "generation", label: "Generation", num: true, value: (g) => num(g.generation), cell: (g) => String(g.generation) },
  { key: "totalLag", label: "Lag (offsets)", num: true, value: (g) => num(g.totalLag), cell: (g) => lagText(g.totalLag) },
  // ListGroups' last_commit_time, the CLI list's LAST-COMMIT: a group's newest offset.
  { key: "lastCommitTime", label: "Last commit", value: (g) => g.lastCommitTime || "", cell: (g) => when(g.lastCommitTime) },
  // From the same DescribeGroup as the status (ListGroups does not carry it): "-" until it is asked.
  { key: "kafkaClusterId", label: "Kafka cluster", value: (g) => g.kafkaClusterId || "", cell: (g) => clusterText(g.kafkaClusterId) },
  { key: "status", label: "Status", value: (g) => STATUS_ORDER.indexOf(statusName(g.status)), cell: (g) => statusBadge(g.status, g.statusReason) },
];

// The Kafka cluster a group is bound to (its writers' cluster, or a switch's); undefined: not asked yet.
function clusterText(id) {
  if (id === undefined) return el("span", { class: "muted" }, "-");
  if (!id) return el("span", { class: "muted", title: "bound to no cluster: its first writer that knows its Kafka cluster binds it" }, "none");
  return el("code", { class: "cluster", title: "the Kafka cluster id its offsets belong to; groups switch moves it to another" }, id);
}

// An observed group (its pipeline keeps its positions, offsetstore records them): marked wherever it is shown.
function observedBadge(g) {
  if (!g.observed) return "";
  const lost = num(g.observedLostPartitions);
  return el("span", {},
    el("span", { class: "badge observed", title: `observed: read from ${g.observedSource || "?"}; commits are refused until it is adopted` }, "observed"),
    lost ? el("span", { class: "badge observed-lost", title: "its source no longer has these positions (a Kafka group's offsets expired or deleted); the last observed ones are kept here" }, `${lost} lost at source`) : "");
}

// Worst first, as the server orders a group's partitions (storage/status.py's SEVERITY).
const STATUS_ORDER = ["LOST", "PAST_END", "STOPPED", "STALLED", "LAGGING", "UNCONFIRMED", "OK", "IDLE", "UNSPECIFIED"];
const statusName = (s) => String(s || "GROUP_STATUS_UNSPECIFIED").replace("GROUP_STATUS_", "");
// ListGroups carries no verdict: the first page of a DescribeGroup of one partition does (over all of them).
const STATUS_LOOKUPS = 200;

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
    for (const g of items.slice(0, STATUS_LOOKUPS)) {
      try {
        const first = await call("DescribeGroup", { groupId: g.groupId, pageSize: 1 });
        if (movedOn(mine)) return;
        [g.status, g.statusReason, g.kafkaClusterId] = [first.status, first.statusReason, first.kafkaClusterId || ""];
      } catch (error) {
        g.statusReason = error.message;
      }
    }
    if (!movedOn(mine)) renderGroups();
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
    described = await pages("DescribeGroup", { groupId, pageSize: 1000, includeLagHistory: true }, "partitions");
  } catch (error) {
    if (!movedOn(mine)) main.replaceChildren(el("h1", {}, groupId), failure(error));
    return;
  }
  if (movedOn(mine)) return;
  const g = described.last;
  const partitions = described.items;
  const first = described.first || g;
  const commits = partitions.map((p) => p.commitTime);
  main.replaceChildren(
    el("p", {}, el("a", { href: "#/?prefix=" + encodeURIComponent(view.prefix) }, "← groups")),
    el("h1", { id: "group-id" }, groupId, " ", observedBadge(first)),
    el("p", { class: "status-line" }, el("span", { id: "group-status" }, statusBadge(first.status, first.statusReason)), " ",
      el("span", { id: "status-reason", class: "muted" }, first.statusReason || "")),
    el("dl", { class: "facts" },
      ...(first.observed ? [el("dt", {}, "Observed from"), el("dd", { id: "observed-source" }, first.observedSource || "")] : []),
      el("dt", {}, "Kafka cluster"), el("dd", { id: "kafka-cluster" }, clusterText(first.kafkaClusterId || g.kafkaClusterId || "")),
      el("dt", {}, "Generation"), el("dd", { id: "generation" }, String(g.generation)),
      el("dt", {}, "Resets"), el("dd", {}, String(g.resetCount)),
      el("dt", {}, "Member"), el("dd", {}, g.memberId ? (g.memberHost ? `${g.memberId} (${g.memberHost})` : g.memberId) : "none"),
      el("dt", {}, "Last active"), el("dd", { id: "last-active" }, when(latest([g.activeTime, ...commits]))),
      el("dt", {}, "Last commit"), el("dd", { id: "last-commit" }, when(latest(commits)))),
    el("div", { class: "toolbar", id: "actions" },
      el("button", { type: "button", id: "export", onclick: () => exportCsv(groupId) }, "Export CSV")),
    el("h2", {}, "Partitions"),
    table([
      { label: "Topic", cell: (p) => p.topic },
      { label: "Partition", num: true, cell: (p) => String(p.partition) },
      // The commit's metadata (a CDC engine's position map, say) on hover.
      { label: "Offset", num: true, cell: (p) => el("span", { title: p.metadata || undefined }, offsetText(p.offset)) },
      { label: "Log end", num: true, cell: (p) => (num(p.logEndOffset) < 0 ? "unknown" : String(p.logEndOffset)) },
      { label: "Lag", num: true, cell: (p) => lagText(p.lag) },
      { label: "Lag (time)", num: true, cell: (p) => lagSecondsText(p) },
      { label: "Lag trend (15 min)", cell: (p) => sparkline(p.lagHistory) },
      { label: "Status", cell: (p) => statusBadge(p.status, p.statusReason) },
      { label: "Committed", cell: (p) => when(p.commitTime) },
    ], partitions, "partitions"),
    el("div", { id: "admin" }),
    el("h2", {}, "History"),
    el("div", { id: "history" }, "Loading…"));
  history(groupId, mine);
  // The server decides; the console only asks it, with a dry run that changes nothing,
  // whether this token may reset this group (grants are per prefix). Only an answer given
  // after authorisation says yes; a busy or unavailable server says nothing either way.
  let admin = "no";
  let unsure = null;
  try {
    await call("ResetOffsets", { groupId, allTopics: true, shiftBy: "0", dryRun: true });
    admin = "yes";
  } catch (error) {
    if (AUTHORISED_REFUSALS.includes(error.code)) admin = "yes";
    else if (!["permission_denied", "unauthenticated"].includes(error.code)) [admin, unsure] = ["unsure", error];
  }
  if (movedOn(mine)) return;
  main.dataset.admin = admin;
  if (admin === "yes") {
    $("#admin").replaceChildren(resetPanel(groupId, partitions, g), deletePanel(groupId, partitions), importPanel(groupId),
      adoptPanel(groupId, partitions));
  } else if (unsure) {
    $("#admin").replaceChildren(el("div", { id: "admin-unknown" },
      el("p", { class: "muted" }, "Could not ask the server whether this token may change the group; reload to ask again."),
      failure(unsure)));
  }
}

// Refusals the server gives only to a caller it authorised for the call.
const AUTHORISED_REFUSALS = ["invalid_argument", "failed_precondition", "not_found", "out_of_range"];

async function history(groupId, mine) {
  try {
    const { items } = await pages("ListOffsetHistory", { groupId, pageSize: 1000 }, "changes");
    if (movedOn(mine)) return;
    items.sort((a, b) => (a.changeTime < b.changeTime ? 1 : a.changeTime > b.changeTime ? -1 : 0));
    const stored = storedFlags(items);
    const list = el("ol", { class: "timeline", id: "timeline" }, items.slice(0, 500).map((c, i) => el("li", { class: "kind-" + c.kind },
      when(c.changeTime), " ", el("span", { class: "kind" }, String(c.kind).replace("CHANGE_KIND_", "").toLowerCase()), " ",
      `${c.topic} [${c.partition}]: ${changeOffsetText(c.previousOffset, stored[i].previous)} → ${changeOffsetText(c.newOffset, stored[i].next)}`,
      el("span", { class: "muted" }, ` generation ${c.generation}, by ${c.actor}` + (c.source ? `, from ${c.source}` : "")))));
    $("#history").replaceChildren(items.length ? list : el("p", { class: "muted" }, "No history kept."));
  } catch (error) {
    if (!movedOn(mine)) $("#history").replaceChildren(failure(error));
  }
}

// --- errors, token, routing ----------------------------------------------------------

function failure(error) {
  say("");  // a new error: an older answer's banner (a success) would contradict it
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
