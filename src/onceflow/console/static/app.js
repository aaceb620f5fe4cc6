// Onceflow console: a hash router, one JSON poll per page, tables built with the DOM
// (textContent only, so nothing from the cluster is ever parsed as HTML).
"use strict";

const REFRESH_MS = Number(new URLSearchParams(location.search).get("refresh")) || 2000;
const content = document.getElementById("content");
const statusEl = document.getElementById("status");
const errorEl = document.getElementById("error");
const noticeEl = document.getElementById("notice");
let generation = 0; // bumped on every navigation: stale polls stop themselves

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const fmt = (v) => (v === null || v === undefined ? "—" : String(v));
const num = (v, attrs) => el("td", { class: "num", ...(attrs || {}) }, fmt(v));

function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  const s = Math.floor(ms / 1000);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function time(ms) {
  return ms === null || ms === undefined || ms < 0 ? "—" : new Date(ms).toLocaleString();
}

function table(headers, rows, empty) {
  if (!rows.length) return el("p", { class: "empty" }, empty || "None.");
  return el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

async function getJSON(url, options) {
  let response;
  try {
    response = await fetch(url, options);
  } catch (e) {
    throw new Error("the console server does not answer");
  }
  let body = null;
  try { body = await response.json(); } catch (e) { /* not JSON */ }
  if (!response.ok) {
    const err = new Error((body && body.error) || `HTTP ${response.status}`);
    err.status = response.status;
    throw err;
  }
  return body;
}

function showOk(label) {
  statusEl.className = "ok";
  statusEl.textContent = `${label || "live"} · updated ${new Date().toLocaleTimeString()}`;
  errorEl.hidden = true;
  content.classList.remove("stale");
}

function showError(message) {
  statusEl.className = "error";
  statusEl.textContent = "cluster unreachable · retrying";
  errorEl.hidden = false;
  errorEl.textContent = `Cannot reach the cluster: ${message}. Retrying every ${REFRESH_MS / 1000} s.`;
  content.classList.add("stale");
}

function notice(message) {
  noticeEl.hidden = !message;
  noticeEl.textContent = message || "";
}

// Poll `url` while this page is shown, rendering each answer with `render`.
function poll(url, render, once) {
  const mine = generation;
  const tick = async () => {
    if (mine !== generation) return;
    try {
      const data = await getJSON(typeof url === "function" ? url() : url);
      if (mine !== generation) return;
      const rendered = await render(data);  // a page may fetch more (share groups)
      if (mine !== generation) return;
      content.replaceChildren(rendered);
      showOk();
    } catch (e) {
      if (mine !== generation) return;
      showError(e.message);
    }
    if (!once && mine === generation) setTimeout(tick, REFRESH_MS);
  };
  tick();
}

// ---- pages ------------------------------------------------------------------------------

function transactionsPage() {
  poll("/api/transactions", (data) => {
    const rows = data.transactions.map((t) => el("tr",
      { class: t.near_timeout ? "near-timeout" : (t.two_phase ? "two-phase" : null),
        "data-txn-id": t.transactional_id },
      el("td", {}, t.transactional_id),
      el("td", { class: "state" }, t.two_phase ? `${t.state} (two-phase commit)` : t.state),
      num(t.producer_id), num(t.producer_epoch), num(t.coordinator),
      el("td", { class: "partitions" }, t.partitions.join(", ") || "—"),
      el("td", {}, time(t.start_ms)), num(duration(t.age_ms)),
      t.two_phase ? el("td", {}, "none (2PC)") : num(duration(t.timeout_ms))));
    return el("section", {}, el("h2", {}, "Transactions"),
      el("p", { class: "hint" }, `Every transactional id on every coordinator. Highlighted: open ` +
        `for more than ${Math.round(data.near_timeout_fraction * 100)}% of its timeout. ` +
        `Two-phase commit transactions have no timeout: they hold their partitions' last ` +
        `stable offset until their coordinator, or an operator, completes them.`),
      table(["Transactional id", "State", "Producer id", "Epoch", "Coordinator", "Partitions",
        "Started", "Age", "Timeout"], rows, "No transactional ids."));
  });
}

async function abortHanging(t) {
  const what = `the transaction of producer ${t.producer_id} (epoch ${t.producer_epoch}) on ` +
    `${t.topic}-${t.partition}, which started at offset ${t.start_offset}`;
  if (!confirm(`Abort ${what}?\n\nIts records become aborted and the last stable offset ` +
      `moves on. Aborting a transaction that is not hanging breaks its atomicity.`)) return;
  try {
    const result = await getJSON("/api/hanging/abort", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ topic: t.topic, partition: t.partition, start: t.start_offset }),
    });
    notice(result.message);
  } catch (e) {
    notice(`Abort failed: ${e.message}`);
  }
}

function hangingPage() {
  poll("/api/hanging", (data) => {
    const rows = data.hanging.map((t) => el("tr",
      { "data-topic": t.topic, "data-partition": t.partition },
      el("td", {}, t.topic), num(t.partition), num(t.producer_id), num(t.producer_epoch),
      num(t.coordinator_epoch), num(t.start_offset), el("td", {}, time(t.last_timestamp)),
      num(duration(t.idle_ms)),
      el("td", {}, el("button", { class: "danger abort", onclick: () => abortHanging(t) },
        "Abort…"))));
    return el("section", {}, el("h2", {}, "Hanging transactions"),
      el("p", { class: "hint" }, "Open on a partition, idle for longer than the maximum " +
        `transaction timeout (${duration(data.max_transaction_timeout_ms)}), and not in flight ` +
        "at any coordinator: nothing will ever end them, and they hold the LSO back."),
      data.problems.map((p) => el("p", { class: "banner error" }, p)),
      table(["Topic", "Partition", "Producer id", "Epoch", "Coordinator epoch", "Start offset",
        "Last write", "Idle", ""], rows, "No hanging transactions found."));
  });
}

function groupSection(g) {
  const members = g.members.map((m) => el("tr", {},
    el("td", {}, m.member_id), el("td", {}, m.client_id), el("td", {}, m.host),
    el("td", {}, m.assignment.join(", "))));
  const partitions = g.partitions.map((p) => el("tr",
    { "data-topic": p.topic, "data-partition": p.partition },
    el("td", {}, p.topic), num(p.partition), num(p.committed), num(p.high_watermark),
    num(p.lso), num(p.lag, { class: `num lag${p.lag > 0 ? " positive" : ""}` }),
    el("td", {}, fmt(p.member))));
  return el("div", { class: "group", "data-group": g.group_id },
    el("h3", {}, `${g.group_id} · ${g.state} · total lag ${g.total_lag}`),
    table(["Member", "Client id", "Host", "Assigned"], members, "No members."),
    table(["Topic", "Partition", "Committed", "High watermark", "LSO", "Lag", "Owner"],
      partitions, "No committed offsets."));
}

function shareGroupSection(g) {
  const members = g.members.map((m) => el("tr", {},
    el("td", {}, m.member_id), el("td", {}, m.client_id), el("td", {}, m.host),
    el("td", {}, m.assignment.join(", "))));
  const partitions = g.partitions.map((p) => el("tr",
    { "data-topic": p.topic, "data-partition": p.partition },
    el("td", {}, p.topic), num(p.partition), num(p.start_offset),
    num(p.lag, { class: `num lag${p.lag > 0 ? " positive" : ""}` })));
  return el("div", { class: "group share-group", "data-group": g.group_id },
    el("h3", {}, `${g.group_id} · share · ${g.state} · total lag ${g.total_lag}`),
    table(["Member", "Client id", "Host", "Assigned"], members, "No members."),
    table(["Topic", "Partition", "Start offset", "Lag"], partitions, "No share-partitions yet."));
}

function groupsPage() {
  poll("/api/groups", async (data) => {
    const share = await getJSON("/api/share-groups");
    return el("section", {}, el("h2", {}, "Consumer groups"),
      el("p", { class: "hint" }, "Lag: high watermark − committed offset, per partition."),
      data.groups.length ? data.groups.map(groupSection)
        : el("p", { class: "empty" }, "No consumer groups."),
      el("h2", {}, "Share groups"),
      el("p", { class: "hint" }, "Queues (KIP-932): start offset = every record before it was " +
        "delivered for good; lag = high watermark − start offset − records delivered past it."),
      share.share_groups.length ? share.share_groups.map(shareGroupSection)
        : el("p", { class: "empty" }, "No share groups."));
  });
}

function topicsPage() {
  poll("/api/overview", (data) => el("section", {},
    el("h2", {}, "Brokers"),
    table(["Id", "Host", "Port", "Controller"], data.brokers.map((b) => el("tr", {},
      num(b.id), el("td", {}, b.host), num(b.port), el("td", {}, b.controller ? "yes" : "")))),
    el("h2", {}, "Topics"),
    table(["Topic", "Partitions", "Replication", "Under-replicated", "Error"],
      data.topics.map((t) => el("tr", { "data-topic": t.name },
        el("td", {}, el("a", { href: `#/topic/${encodeURIComponent(t.name)}` }, t.name)),
        num(t.partitions), num(t.replication), num(t.under_replicated), el("td", {}, fmt(t.error)))),
      "No topics.")));
}

function topicPage(name) {
  const enc = encodeURIComponent(name);
  poll(`/api/topics/${enc}`, (data) => el("section", {}, el("h2", {}, `Topic ${name}`),
    el("p", { class: "hint" }, "LSO: ListOffsets latest, read_committed. LSO lag: high " +
      "watermark − LSO, the records read_committed consumers cannot see yet."),
    table(["Partition", "Leader", "Replicas", "ISR", "Earliest", "High watermark", "LSO",
      "LSO lag", ""], data.partitions.map((p) => el("tr",
      { "data-partition": p.partition, class: p.lso_lag > 0 ? "lagging" : null },
      num(p.partition), num(p.leader), el("td", {}, p.replicas.join(", ")),
      el("td", {}, p.isr.join(", ")), num(p.earliest), num(p.high_watermark), num(p.lso),
      num(p.lso_lag, { class: "num lso-lag" }),
      el("td", {}, el("a", { href: `#/producers/${enc}/${p.partition}` }, "producers"), " · ",
        el("a", { href: `#/records/${enc}/${p.partition}` }, "records")))))));
}

function producersPage(topic, partition) {
  const url = `/api/topics/${encodeURIComponent(topic)}/${partition}/producers`;
  poll(url, (data) => el("section", {}, el("h2", {}, `Producers on ${topic}-${partition}`),
    el("p", { class: "hint" }, `DescribeProducers at the leader, broker ${data.leader}.`),
    table(["Producer id", "Epoch", "Coordinator epoch", "Last sequence", "Last write",
      "Open transaction from offset"], data.producers.map((p) => el("tr",
      { "data-producer-id": p.producer_id }, num(p.producer_id), num(p.producer_epoch),
      num(p.coordinator_epoch), num(p.last_sequence), el("td", {}, time(p.last_timestamp)),
      num(p.txn_start_offset))), "No active producers.")));
}

// The record browser. With "follow" on (the default from the end) it asks every
// REFRESH_MS for the records after the last one it showed, appends them and drops the
// oldest rows beyond KEEP_ROWS; the server never reads past the LSO read_committed (the
// high watermark read_uncommitted), so a transaction's records appear once it commits.
const KEEP_ROWS = 500;

function recordRow(r) {
  return el("tr", { "data-offset": r.offset }, num(r.offset), el("td", {}, time(r.timestamp)),
    el("td", {}, el("pre", {}, fmt(r.key))), el("td", {}, el("pre", {}, fmt(r.value))),
    el("td", {}, el("pre", {}, r.headers.map(([k, v]) => `${k}: ${fmt(v)}`).join("\n"))));
}

function offsetsLine(data, view) {
  const held = data.high_watermark - data.lso;
  const shown = view.body.rows.length;
  const span = (cls, label, v) => el("span", { class: cls }, `${label} `, el("b", {}, fmt(v)));
  return [
    span("earliest", "earliest", data.earliest), span("lso", "LSO", data.lso),
    span("hwm", "high watermark", data.high_watermark),
    el("span", { class: "shown" }, shown ? `${shown} rows, offsets ` +
      `${view.body.rows[0].dataset.offset}–${view.body.rows[shown - 1].dataset.offset}` :
      "no rows"),
    el("span", { class: "next" }, view.following ? `following from offset ${data.next}` :
      `next offset ${data.next}`),
    held > 0 ? el("span", { class: "held" }, data.isolation === "read_committed" ?
      `${held} offsets above the LSO: held back from read_committed until the open ` +
      "transactions end" : `${held} offsets above the LSO (shaded): read_committed consumers ` +
      "do not see them yet") : null,
  ].filter(Boolean);
}

function recordsPage(topic, partition) {
  const form = el("form", { class: "records" },
    el("label", {}, "Topic", el("input", { name: "topic", value: topic || "", required: true })),
    el("label", {}, "Partition", el("input", { name: "partition", type: "number", min: 0,
      value: partition || 0 })),
    el("label", {}, "Isolation", el("select", { name: "isolation" },
      el("option", { value: "read_committed" }, "read_committed"),
      el("option", { value: "read_uncommitted" }, "read_uncommitted"))),
    el("label", {}, "From", el("select", { name: "from" },
      el("option", { value: "end" }, "the end (latest)"),
      el("option", { value: "earliest" }, "earliest"),
      el("option", { value: "offset" }, "offset"), el("option", { value: "time" }, "time"))),
    el("label", {}, "Offset", el("input", { name: "offset", type: "number", min: 0 })),
    el("label", {}, "Time", el("input", { name: "time", type: "datetime-local", step: 1 })),
    el("label", {}, "Show as", el("select", { name: "format" },
      ["text", "json", "hex"].map((f) => el("option", { value: f }, f)))),
    el("label", {}, "Max", el("input", { name: "limit", type: "number", min: 1, max: KEEP_ROWS,
      value: 50 })),
    el("label", { class: "check" }, el("input", { name: "follow", type: "checkbox",
      checked: true }), "Follow"),
    el("button", { type: "submit" }, "Load"));
  const fields = form.elements;
  const summary = el("p", { id: "offsets", class: "offsets" });
  const results = el("div", { id: "records" });
  content.replaceChildren(el("section", {}, el("h2", {}, "Records"), form, summary, results));
  // Following is the default from the end, and a choice otherwise.
  fields.from.addEventListener("change", () => {
    fields.follow.checked = fields.from.value === "end";
  });
  for (const [name, from] of [["offset", "offset"], ["time", "time"]]) {
    fields[name].addEventListener("input", () => {
      if (fields[name].value && fields.from.value !== from) {
        fields.from.value = from;
        fields.from.dispatchEvent(new Event("change"));
      }
    });
  }
  let view = null; // the records shown: {url, query, next, last answer, body, following, ...}
  const page = generation;
  const live = (v) => v === view && page === generation;

  function render(v, data) {
    const shade = data.isolation === "read_uncommitted";
    for (const row of v.body.rows) {
      row.classList.toggle("above-lso", shade && Number(row.dataset.offset) >= data.lso);
    }
    summary.replaceChildren(...offsetsLine(data, v));
    if (v.body.rows.length) {
      if (results.firstChild !== v.table) results.replaceChildren(v.table);
      return;
    }
    results.replaceChildren(el("p", { class: "empty" }, !v.following ? "No records in that range."
      : "No records yet: following, they appear once written" +
        (data.isolation === "read_committed" ? " and committed." : ".")));
  }

  async function fetchRecords(v, first) {
    const q = new URLSearchParams(v.query);
    if (!first) {
      for (const k of ["from", "timestamp"]) q.delete(k);
      q.set("offset", v.next);
      q.set("limit", KEEP_ROWS);
    }
    let delay = REFRESH_MS;
    v.busy = true;
    try {
      const data = await getJSON(`${v.url}?${q}`);
      if (!live(v)) return;
      // A reader at the bottom of the page stays there as rows come (tail -f).
      const atBottom = innerHeight + scrollY >= document.body.scrollHeight - 40;
      v.loaded = true;
      v.next = data.next;
      v.last = data;
      v.body.append(...data.records.map(recordRow));
      const extra = v.body.rows.length - KEEP_ROWS;
      for (let i = 0; i < extra; i += 1) v.body.rows[0].remove();
      render(v, data);
      if (!first && atBottom && data.records.length) scrollTo(0, document.body.scrollHeight);
      showOk(v.following ? "live" : "loaded");
      if (data.more) delay = 0; // behind the end: catch up at once
    } catch (e) {
      if (!live(v)) return;
      showError(e.message); // the rows stay, greyed, and following goes on from v.next
    } finally {
      v.busy = false;
    }
    if (v.following && live(v)) v.loop = setTimeout(() => fetchRecords(v, !v.loaded), delay);
  }

  fields.follow.addEventListener("change", () => {
    if (!view) return;
    view.following = fields.follow.checked;
    clearTimeout(view.loop);
    // A request under way goes on by itself once it is answered: never two loops.
    if (view.following && !view.busy) fetchRecords(view, !view.loaded);
    else if (view.loaded) render(view, view.last);
  });

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    if (view) clearTimeout(view.loop);
    const f = new FormData(form);
    const q = new URLSearchParams({ isolation: f.get("isolation"), format: f.get("format"),
      limit: f.get("limit") || 50 });
    const from = f.get("from");
    if (from === "time" && f.get("time")) {
      q.set("timestamp", String(new Date(f.get("time")).getTime()));
    } else if (from === "offset" && f.get("offset")) q.set("offset", f.get("offset"));
    else if (from === "end") q.set("from", "end");
    const body = el("tbody");
    view = {
      url: `/api/topics/${encodeURIComponent(f.get("topic"))}/${f.get("partition") || 0}/records`,
      query: q, next: null, last: null, loaded: false, busy: false, following: fields.follow.checked,
      loop: null, body,
      table: el("table", {}, el("thead", {}, el("tr", {},
        ["Offset", "Timestamp", "Key", "Value", "Headers"].map((h) => el("th", {}, h)))), body),
    };
    summary.replaceChildren();
    results.replaceChildren(el("p", { class: "empty" }, "Loading…"));
    fetchRecords(view, true);
  });
  if (topic) form.requestSubmit();
}

const ROUTES = [
  [/^\/transactions$/, transactionsPage, "transactions"],
  [/^\/hanging$/, hangingPage, "hanging"],
  [/^\/groups$/, groupsPage, "groups"],
  [/^\/topics$/, topicsPage, "topics"],
  [/^\/topic\/([^/]+)$/, topicPage, "topics"],
  [/^\/producers\/([^/]+)\/(\d+)$/, producersPage, "topics"],
  [/^\/records(?:\/([^/]+)\/(\d+))?$/, recordsPage, "records"],
];

function route() {
  generation += 1;
  notice("");
  const path = location.hash.replace(/^#/, "") || "/transactions";
  for (const [pattern, page, nav] of ROUTES) {
    const m = path.match(pattern);
    if (!m) continue;
    document.querySelectorAll("nav a").forEach((a) =>
      a.classList.toggle("active", a.dataset.page === nav));
    content.replaceChildren(el("p", { class: "empty" }, "Loading…"));
    page(...m.slice(1).map((part) => (part === undefined ? part : decodeURIComponent(part))));
    return;
  }
  content.replaceChildren(el("p", { class: "empty" }, `No page ${path}.`));
}

window.addEventListener("hashchange", route);
route();
