// The console's adoption (as `offsetstore groups adopt`): positions pasted from Kafka's reset CSV
// or a Spark startingOffsets JSON, a dry run beside the log's known range, then one fencing
// ResetOffsets with toOffsets and its source, which the history records as an adoption.
// Uses app.js's helpers (el, call, table, failure, say) and actions.js' outOfRange.
"use strict";

// Kafka's CSV (topic,partition,offset, or group,topic,partition,offset: this group's lines) or
// Spark's startingOffsets JSON ({"topic": {"0": 42}}); real offsets only, as the CLI takes them.
function parsePositions(text, groupId) {
  const found = new Map();
  const add = (topic, partition, offset, where) => {
    if (!topic || !/^\d+$/.test(String(partition)) || !/^\d+$/.test(String(offset))) {
      throw new Error(`${where}: expected a topic, a partition and an offset >= 0 (a placeholder -2 or -1 is no position)`);
    }
    const key = `${topic}\u0000${partition}`;
    if (found.has(key)) throw new Error(`${where}: ${topic} [${partition}] is given twice`);
    found.set(key, { topic, partition: Number(partition), offset: String(offset) });
  };
  const trimmed = text.trim();
  if (trimmed.startsWith("{")) {
    let json;
    try { json = JSON.parse(trimmed); } catch (error) { throw new Error(`not JSON: ${error.message}`); }
    for (const [topic, partitions] of Object.entries(json)) {
      if (typeof partitions !== "object" || partitions === null) throw new Error(`${topic}: expected {"partition": offset, ...}`);
      for (const [partition, offset] of Object.entries(partitions)) add(topic, partition, offset, `${topic} [${partition}]`);
    }
  } else {
    trimmed.split(/\r?\n/).forEach((line, i) => {
      const fields = line.split(",").map((f) => f.trim());
      if (!line.trim() || (i === 0 && !/^\d+$/.test(fields[fields.length - 2] || ""))) return;  // blank, or a header
      if (fields.length === 4) {
        if (fields[0] !== groupId) return;  // another group's line of a multi-group file
        fields.shift();
      }
      if (fields.length !== 3) throw new Error(`line ${i + 1}: expected topic,partition,offset or group,topic,partition,offset`);
      add(fields[0], fields[1], fields[2], `line ${i + 1}`);
    });
  }
  if (!found.size) throw new Error(`no positions for ${groupId} to adopt`);
  return [...found.values()];
}

function adoptRequest(groupId, positions, source) {
  const byTopic = new Map();
  for (const p of positions) byTopic.set(p.topic, [...(byTopic.get(p.topic) || []), p.partition]);
  return {
    groupId,
    topics: [...byTopic].map(([topic, partitions]) => ({ topic, partitions })),
    toOffsets: { offsets: positions },
    source,
  };
}

function adoptPanel(groupId, partitions) {
  const text = el("textarea", { id: "adopt-text", rows: 5, cols: 60,
    placeholder: "orders,0,1200 (Kafka's reset CSV) or {\"orders\":{\"0\":1200}} (Spark's startingOffsets)" });
  const source = el("input", { id: "adopt-source", size: 40, value: "pasted in the console",
    title: "where the positions come from: the history records it beside the adoption" });
  const preview = el("div", { id: "adopt-preview" });
  const confirm = el("button", { type: "button", id: "adopt-confirm", class: "danger", disabled: true }, "Confirm adoption");
  const logEnds = new Map(partitions.map((p) => [`${p.topic}\u0000${num(p.partition)}`, p.logEndOffset]));
  let request = null;
  let previewed = null;
  const invalidate = () => { request = null; previewed = null; confirm.disabled = true; };
  for (const input of [text, source]) input.addEventListener("input", invalidate);

  async function dryRun() {
    invalidate();
    try {
      const body = adoptRequest(groupId, parsePositions(text.value, groupId), source.value.trim() || "pasted in the console");
      const answer = await call("ResetOffsets", { ...body, dryRun: true });
      const changes = answer.changes || [];
      const outside = new Map((answer.outOfRange || []).map((o) => [`${o.topic}\u0000${num(o.partition)}`, o]));
      const note = (c) => {
        const o = outside.get(`${c.topic}\u0000${num(c.partition)}`);
        if (!o) return "";
        return num(o.offset) > num(o.bound) ? `past the log end ${o.bound}` : `before the log start ${o.bound}`;
      };
      const generation = String(num(answer.generation));
      preview.replaceChildren(
        el("p", { class: "fence", id: "adopt-fence" }, `Dry run from ${body.source}: generation ${generation} → ${changes.length ? changes[0].generation : generation} when confirmed (writers on generation ${generation} or older are fenced).`),
        table([
          { label: "Topic", cell: (c) => c.topic },
          { label: "Partition", num: true, cell: (c) => String(num(c.partition)) },
          { label: "Now", num: true, cell: (c) => offsetText(c.previousOffset) },
          { label: "Adopted", num: true, cell: (c) => offsetText(c.newOffset) },
          { label: "Log end", num: true, cell: (c) => { const e = logEnds.get(`${c.topic}\u0000${num(c.partition)}`); return e === undefined || num(e) < 0 ? "-" : String(e); } },
          { label: "Note", cell: note },
        ], changes, "adopt-table"),
        outOfRange(answer.outOfRange));
      request = body;
      previewed = generation;
      confirm.disabled = changes.length === 0;
      confirm.textContent = `Confirm adoption of ${changes.length} position(s) at generation ${generation}`;
    } catch (error) {
      preview.replaceChildren(failure(error));
    }
  }

  confirm.addEventListener("click", async () => {
    if (!request) return;
    confirm.disabled = true;
    try {
      const answer = await call("ResetOffsets", { ...request, expectedGeneration: previewed });
      say(`Adopted ${(answer.changes || []).length} position(s) into ${groupId} from ${request.source}; generation is now ${answer.generation}.`);
      await groupPage(groupId, ++visit);
    } catch (error) {
      preview.replaceChildren(failure(error));
    }
  });

  return el("section", { class: "panel", id: "adopt" }, el("h2", {}, "Adopt positions"),
    el("p", { class: "muted" }, "Take positions over from a Kafka group (kafka-consumer-groups --export CSV) or a Spark job (its startingOffsets JSON): one fencing reset, recorded in the history as an adoption with its source."),
    text,
    el("div", { class: "toolbar" }, "Source", source,
      el("button", { type: "button", id: "adopt-preview-button", class: "primary", onclick: () => dryRun() }, "Preview (dry run)"), confirm),
    preview);
}
