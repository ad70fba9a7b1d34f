// The console's writes: reset (preview, then a confirm bound to the previewed generation),
// delete and CSV import/export. Uses app.js's helpers (el, call, pages, table, failure, say).
"use strict";

const IMPORT_MEMBER = "offsetstore-console-import";
const PLACEHOLDERS = { "-2": "BOUNDARY_EARLIEST", "-1": "BOUNDARY_LATEST" };

// Partition checkboxes of one topic, all ticked; `chosen()` is the ticked partitions, and
// null when every one is (the whole topic: partitions the group gains meanwhile included).
function partitionPicker(id, partitions, onChange) {
  const box = el("span", { id, class: "partitions" });
  function show(topic) {
    const numbers = partitions.filter((p) => p.topic === topic).map((p) => num(p.partition)).sort((a, b) => a - b);
    box.replaceChildren(...numbers.map((n) => el("label", {},
      el("input", { type: "checkbox", value: n, checked: true, "data-partition": n, onchange: onChange }), ` ${n}`)));
  }
  function chosen() {
    const all = [...box.querySelectorAll("input")];
    const ticked = all.filter((c) => c.checked).map((c) => Number(c.value));
    if (!ticked.length) throw new Error("tick at least one partition");
    return ticked.length === all.length ? null : ticked;
  }
  return { box, show, chosen };
}

const topicsOf = (partitions) => [...new Set(partitions.map((p) => p.topic))].sort();

// --- reset: preview, then confirm ----------------------------------------------------

function resetPanel(groupId, partitions, group) {
  const scope = el("select", { id: "reset-scope" }, el("option", { value: "" }, "all topics"),
    topicsOf(partitions).map((t) => el("option", { value: t }, t)));
  const target = el("select", { id: "reset-target" },
    el("option", { value: "toOffset" }, "to offset"), el("option", { value: "shiftBy" }, "shift by"),
    el("option", { value: "BOUNDARY_EARLIEST" }, "to earliest"), el("option", { value: "BOUNDARY_LATEST" }, "to latest"),
    el("option", { value: "toCommitTime" }, "to time (UTC, as committed then)"));
  const value = el("input", { id: "reset-value", placeholder: "offset, shift or 2026-01-31T12:00:00Z", size: 28 });
  const clamp = el("input", { type: "checkbox", id: "reset-clamp" });
  const preview = el("div", { id: "preview" });
  const confirm = el("button", { type: "button", id: "reset-confirm", class: "danger", disabled: true }, "Confirm reset");
  // The previewed request and the generation the preview was computed at: the confirm sends
  // both, so it applies only to the state the user saw (the server refuses it otherwise).
  let request = null;
  let previewed = null;
  const invalidate = () => { request = null; previewed = null; confirm.disabled = true; preview.replaceChildren(); };
  const picker = partitionPicker("reset-partitions", partitions, invalidate);
  // "change" too: a select may report a choice with it alone.
  for (const input of [scope, target, value, clamp]) for (const kind of ["input", "change"]) input.addEventListener(kind, invalidate);
  scope.addEventListener("change", () => picker.show(scope.value));

  function build() {
    const body = { groupId };
    if (scope.value) {
      const chosen = picker.chosen();
      body.topics = [chosen ? { topic: scope.value, partitions: chosen } : { topic: scope.value }];
    } else body.allTopics = true;
    const v = value.value.trim();
    if (target.value.startsWith("BOUNDARY_")) body.toBoundary = target.value;
    else if (!v) throw new Error("give a value for the target");
    else if (target.value === "toCommitTime") body.toCommitTime = utcInstant(v);
    else if (!/^-?\d+$/.test(v)) throw new Error("the offset or shift must be a whole number");
    else body[target.value] = v;
    if (clamp.checked) body.clamp = true;
    return body;
  }

  async function dryRun(note) {
    invalidate();
    try {
      const body = build();
      const answer = await call("ResetOffsets", { ...body, dryRun: true });
      const changes = answer.changes || [];
      const generation = String(num(answer.generation));
      const next = changes.length ? changes[0].generation : generation;
      preview.replaceChildren(
        note || "",
        el("p", { class: "fence", id: "fence" }, `Generation ${generation} → ${next}: writers still on generation ${generation} or older are fenced (their next commit fails with STALE_GENERATION).`),
        table([
          { label: "Topic", cell: (c) => c.topic },
          { label: "Partition", num: true, cell: (c) => String(c.partition) },
          { label: "Now", num: true, cell: (c) => offsetText(c.previousOffset) },
          { label: "After", num: true, cell: (c) => el("span", { class: num(c.previousOffset) !== num(c.newOffset) ? "changed" : "" }, offsetText(c.newOffset)) },
        ], changes, "preview-table"),
        outOfRange(answer.outOfRange));
      request = body;
      previewed = generation;
      confirm.disabled = changes.length === 0;
      confirm.textContent = `Confirm reset of ${changes.length} partition(s) at generation ${generation}`;
    } catch (error) {
      preview.replaceChildren(note || "", failure(error));
    }
  }

  confirm.addEventListener("click", async () => {
    if (!request) return;
    confirm.disabled = true;
    const seen = previewed;
    try {
      const answer = await call("ResetOffsets", { ...request, expectedGeneration: seen });
      const outside = (answer.outOfRange || []).filter((o) => !o.clamped).length;
      say(`Reset ${(answer.changes || []).length} partition(s) of ${groupId}; generation is now ${answer.generation}.` +
        (outside ? ` ${outside} offset(s) outside the known log range were set as asked.` : ""));
      await groupPage(groupId, ++visit);
    } catch (error) {
      if (error.reason !== "STALE_GENERATION") { preview.replaceChildren(failure(error)); return; }
      // Someone joined, committed under a new generation, reset or deleted since the preview:
      // nothing was reset. Show what a reset would do now; the user confirms that, or not.
      const now = error.metadata.current_generation;
      if (now !== undefined) {
        $("#generation").textContent = now;
        $("#reset-generation").textContent = generationLine(now);
      }
      await dryRun(el("p", { class: "error-text", id: "reset-stale" },
        `Not reset: the group moved from generation ${seen} to ${now ?? "a newer one"} since the preview, so nothing changed. ` +
        "Below is a fresh preview of the group as it is now; confirm again if it is still what you want."));
    }
  });

  return el("section", { class: "panel", id: "reset" }, el("h2", {}, "Reset offsets"),
    el("div", { class: "toolbar" }, "Reset", scope, picker.box, target, value,
      el("label", { title: "set an offset outside the known log range to the nearer bound" }, clamp, " clamp to the log range"),
      el("button", { type: "button", id: "reset-preview", class: "primary", onclick: () => dryRun() }, "Preview (dry run)"), confirm),
    el("p", { class: "muted", id: "reset-generation" }, generationLine(group.generation)), preview);
}

function generationLine(generation) {
  return `Generation ${generation} now. Nothing changes until you confirm; a confirm applies only if the group is still at the previewed generation.`;
}

// The server's word on offsets outside a partition's known [log start, log end].
function outOfRange(list) {
  if (!list || !list.length) return "";
  return el("ul", { class: "fence", id: "out-of-range" }, list.map((o) => {
    const side = num(o.offset) > num(o.bound) ? "past the log end" : "before the log start";
    const action = o.clamped ? `set to ${o.bound} (clamp)` : `set as asked; tick clamp to set ${o.bound} instead`;
    return el("li", {}, `${o.topic} [${num(o.partition)}]: offset ${o.offset} is ${side} ${o.bound}: ${action}.`);
  }));
}

// --- delete: a topic or some of its partitions, with a confirm -----------------------

function deletePanel(groupId, partitions) {
  const topics = topicsOf(partitions);
  const scope = el("select", { id: "delete-topic" }, topics.map((t) => el("option", { value: t }, t)));
  const ask = el("div", { id: "delete-ask" });
  const picker = partitionPicker("delete-partitions", partitions, () => ask.replaceChildren());
  scope.addEventListener("change", () => { picker.show(scope.value); ask.replaceChildren(); });
  if (topics.length) picker.show(scope.value);

  function review() {
    let selection;
    try {
      const chosen = picker.chosen();
      selection = chosen ? { topic: scope.value, partitions: chosen } : { topic: scope.value };
    } catch (error) {
      ask.replaceChildren(failure(error));
      return;
    }
    const what = selection.partitions ? `partition(s) ${selection.partitions.join(", ")} of ${selection.topic}` : `every partition of ${selection.topic}`;
    const confirm = el("button", { type: "button", id: "delete-confirm", class: "danger" }, "Confirm delete");
    confirm.addEventListener("click", async () => {
      confirm.disabled = true;
      try {
        const answer = await call("DeleteOffsets", { groupId, topics: [selection] });
        const deleted = answer.deleted || [];
        say(`Deleted ${deleted.length} offset(s) of ${groupId}: ${deleted.map((d) => `${d.topic} [${num(d.partition)}]`).join(", ") || "none were stored"}.`);
        await groupPage(groupId, ++visit);
      } catch (error) {
        ask.replaceChildren(failure(error));
      }
    });
    ask.replaceChildren(el("p", { class: "fence", id: "delete-question" },
      `Delete the offsets of ${what}? The group's generation moves on, fencing its live writers; a consumer restarting there starts from its own reset policy. The history keeps a record.`),
    el("div", { class: "toolbar" }, confirm,
      el("button", { type: "button", id: "delete-cancel", onclick: () => ask.replaceChildren() }, "Cancel")));
  }

  return el("section", { class: "panel", id: "delete" }, el("h2", {}, "Delete offsets"),
    topics.length ? el("div", { class: "toolbar" }, "Delete", scope, picker.box,
      el("button", { type: "button", id: "delete-review", onclick: review }, "Delete…"))
      : el("p", { class: "muted" }, "The group has no offsets."),
    ask);
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
