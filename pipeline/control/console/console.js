// Highwater's console: the changefeeds the server's REST API lists, refreshed every few
// seconds, and what an operator asks of them (create, pause, resume, remove) through the same
// routes the CLI's rules answer. The API token is asked once and kept for this tab only
// (sessionStorage); nothing is shown without a token the server takes. Every value is put in
// the page as text.
"use strict";

const TOKEN_KEY = "highwater-token";
const REFRESH_MS = 3000;
let timer = null;

const $ = (id) => document.getElementById(id);

function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

function cell(row, text, className) {
  const td = document.createElement("td");
  if (text instanceof Node) {
    td.appendChild(text);
  } else {
    td.textContent = text === null || text === undefined ? "" : String(text);
  }
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function badge(text, className) {
  const span = document.createElement("span");
  span.className = "badge " + className;
  span.textContent = text;
  return span;
}

// An HLC text ("<wall nanoseconds>.<logical>") as a date, and its lag behind now.
function wallMs(hlc) {
  if (!hlc) return null;
  const wall = hlc.split(".")[0];
  return Number(BigInt(wall) / 1000000n);
}

function span(seconds) {
  if (seconds === null) return "";
  const s = Math.max(0, Math.floor(seconds));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  if (h) return `${h}h${m}m`;
  if (m) return `${m}m${r}s`;
  return `${r}s`;
}

// The job status's warnings, with a badge for a stuck high-water (its line begins "stuck:",
// operators/lagging.py) and one counting the lagging partitions.
function warnings(changefeed) {
  const box = document.createElement("div");
  if (changefeed.warnings.some((w) => w.startsWith("stuck:"))) {
    box.append(badge("stuck", "stuck"), " ");
  }
  const lagging = changefeed.warnings.filter((w) => w.includes(" is lagging"));
  if (lagging.length) box.appendChild(badge(`lagging (${lagging.length})`, "lagging"));
  for (const text of changefeed.warnings) {
    const line = document.createElement("div");
    line.className = "warning";
    line.textContent = text;
    box.appendChild(line);
  }
  return box;
}

// One request to the API with the token; the answer's JSON, or the API's own refusal thrown
// (a TypeError: no answer at all, the server is away).
async function api(method, path, body) {
  const answer = await fetch("/api/v2" + path, {
    method,
    headers: { Authorization: "Bearer " + token(), "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const found = await answer.json().catch(() => ({}));
  if (answer.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("The server refused this token: enter it again.");
    throw new Error("unauthorized");
  }
  if (!answer.ok) throw new Error(found.error_msg || `the server answered ${answer.status}`);
  return found;
}

function say(text, problem) {
  $("said").textContent = text;
  $("said").className = problem ? "problem" : "";
  $("said").hidden = !text;
}

// Ask the API; say what it answered (or why it refused), then show the list as it is now.
async function ask(what, method, path, body) {
  try {
    const found = await api(method, path, body);
    say(`${what}: ${found.changefeed_id} is ${found.desired || found.state} now.`, false);
  } catch (error) {
    if (error.message !== "unauthorized") say(`${what} refused: ${error.message}`, true);
  }
  refresh();
}

function button(label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = label;
  b.addEventListener("click", onClick);
  return b;
}

function actions(c) {
  const box = document.createElement("div");
  const id = encodeURIComponent(c.changefeed_id);
  if (c.desired === "running") {
    box.appendChild(button("Pause", () => ask("Pause", "POST", `/changefeeds/${id}/pause`)));
  }
  if (c.desired === "paused") {
    box.appendChild(button("Resume", () => ask("Resume", "POST", `/changefeeds/${id}/resume`, {})));
    if (c.bad_record) {
      box.appendChild(button("Resume past " + c.bad_record, () =>
        ask("Resume", "POST", `/changefeeds/${id}/resume`, { skip_bad_record: true })));
    }
  }
  if (c.desired && c.desired !== "removed") {
    box.appendChild(button("Remove", () => {
      if (confirm(`Remove ${c.changefeed_id} for good? Its safepoint is released.`)) {
        ask("Remove", "DELETE", `/changefeeds/${id}`);
      }
    }));
  }
  return box;
}

function render(changefeeds) {
  const body = $("changefeeds");
  body.replaceChildren();
  for (const c of changefeeds) {
    const row = document.createElement("tr");
    row.dataset.changefeed = c.changefeed_id;
    const at = wallMs(c.high_water);
    const link = document.createElement("a");
    link.href = "#changefeed=" + encodeURIComponent(c.changefeed_id);
    link.textContent = c.changefeed_id;
    cell(row, link, "id");
    cell(row, c.desired, "desired");
    cell(row, badge(c.state, "state-" + c.state), "state");
    cell(row, c.delivery, "delivery");
    cell(row, c.sources.join(", "), "sources");
    cell(row, c.outputs.join(", "), "outputs");
    cell(row, at === null ? "" : new Date(at).toISOString(), "high-water");
    cell(row, at === null ? "" : span((Date.now() - at) / 1000), "lag");
    cell(row, c.rows_per_second === null ? "" : Math.round(c.rows_per_second), "rate");
    cell(row, c.dead_letters, "dead-letters");
    cell(row, warnings(c), "warnings");
    cell(row, c.error, "error problem");
    cell(row, actions(c), "actions");
    body.appendChild(row);
  }
  $("empty").hidden = changefeeds.length > 0;
  $("list").hidden = false;
}

function showLogin(message) {
  say("", false);
  $("changefeeds").replaceChildren();
  $("list").hidden = true;
  $("detail").hidden = true;
  $("forget").hidden = true;
  $("login").hidden = false;
  $("refused").hidden = !message;
  $("refused").textContent = message || "";
}

function shown() {
  const hash = location.hash;
  return hash.startsWith("#changefeed=") ? decodeURIComponent(hash.slice(12)) : null;
}

async function refresh() {
  const one = shown();
  if (one === null || !token()) $("detail").hidden = true; // shown once its data is in
  if (one !== null && token()) {
    $("list").hidden = true;
    return refreshOne(one);
  }
  if (!token()) {
    showLogin("");
    return;
  }
  let found;
  try {
    found = await api("GET", "/changefeeds");
  } catch (error) {
    if (error.message === "unauthorized" || shown() !== null) return;
    $("connection").textContent = error instanceof TypeError
      ? "The server does not answer; trying again…"
      : `The server answered: ${error.message}`;
    schedule();
    return;
  }
  if (shown() !== null) return; // a changefeed's page was opened meanwhile: its refresh shows it
  connected();
  render(found);
  schedule();
}

function connected() {
  $("connection").textContent = "Updated " + new Date().toLocaleTimeString();
  $("login").hidden = true;
  $("forget").hidden = false;
}

// A changefeed's page: its facts, lag chart, partitions, scan, schemas and dead letters.
async function refreshOne(id) {
  let found, lag;
  try {
    const path = "/changefeeds/" + encodeURIComponent(id);
    [found, lag] = await Promise.all([api("GET", path), api("GET", path + "/lag")]);
  } catch (error) {
    if (error.message === "unauthorized" || shown() !== id) return;
    if (error instanceof TypeError) { // no answer: the server is away (restarting?)
      $("connection").textContent = "The server does not answer; trying again…";
      schedule();
      return;
    }
    // refused (an unknown or removed changefeed): say why, and show the list instead
    $("detail").hidden = true;
    say(`${error.message} (the list of every changefeed is below)`, true);
    history.replaceState(null, "", "#");
    return refresh();
  }
  // An answer that comes after the operator went elsewhere is dropped (the refresh the move
  // started shows the new view and keeps the timer going), never drawn over it.
  if (shown() !== id) return;
  connected();
  showOne(found, lag.points);
  schedule();
}

function fact(list, name, value) {
  if (value === null || value === undefined || value === "") return;
  const dt = document.createElement("dt");
  dt.textContent = name;
  const dd = document.createElement("dd");
  dd.textContent = String(value);
  list.append(dt, dd);
}

function showOne(c, points) {
  $("detail-id").textContent = c.changefeed_id;
  $("detail-state").replaceChildren(badge(c.state, "state-" + c.state));
  const facts = $("facts");
  facts.replaceChildren();
  const at = wallMs(c.high_water);
  fact(facts, "Asked", c.desired);
  fact(facts, "Delivery", c.delivery);
  fact(facts, "Sources", c.sources.join(", "));
  fact(facts, "Output topics", c.outputs.join(", "));
  fact(facts, "Rows/s", c.rows_per_second === null ? "" : Math.round(c.rows_per_second));
  fact(facts, "Rows this run", c.rows);
  fact(facts, "High-water", c.high_water && `${c.high_water} (${new Date(at).toISOString()})`);
  fact(facts, "Lag", at === null ? "" : span((Date.now() - at) / 1000));
  fact(facts, "Last marker", c.last_marker);
  fact(facts, "Safepoint", c.safepoint && c.safepoint.safepoint);
  fact(facts, "Paused at", c.bad_record);
  fact(facts, "Error", c.error);
  $("detail-warnings").replaceChildren(warnings(c));
  $("detail-actions").replaceChildren(actions(c));
  $("update").hidden = c.desired !== "paused";

  const scan = c.scan;
  $("scan").hidden = !scan || !scan.chunks_total;
  if (scan && scan.chunks_total) {
    $("scan-progress").max = scan.chunks_total;
    $("scan-progress").value = scan.chunks_done || 0;
    $("scan-said").textContent = `${scan.chunks_done || 0} of ${scan.chunks_total} chunks`;
  }

  const lagging = c.warnings.filter((w) => w.includes(" is lagging"));
  const body = $("partitions");
  body.replaceChildren();
  for (const p of c.partitions || []) {
    const name = `${p.topic}/${p.partition}`;
    const row = document.createElement("tr");
    row.dataset.partition = name;
    const holds = p.resolved === c.high_water;
    if (holds) row.className = "holds";
    const ms = wallMs(p.resolved);
    cell(row, name, "partition");
    cell(row, p.offset === undefined ? "from its start" : p.offset, "offset");
    cell(row, `${p.resolved} (${new Date(ms).toISOString()})`, "resolved");
    cell(row, span((Date.now() - ms) / 1000), "lag");
    const notes = [];
    if (holds) notes.push("holds the high-water back");
    if (p.waits_for) notes.push("waits for " + p.waits_for);
    if (lagging.some((w) => w.startsWith(`source partition ${name} is lagging`))) {
      notes.push("lagging");
    }
    cell(row, notes.join("; "), "note");
    body.appendChild(row);
  }

  const schemas = Object.entries(c.schemas || {});
  $("schemas-box").hidden = schemas.length === 0;
  $("schemas").replaceChildren();
  for (const [table, s] of schemas) {
    const row = document.createElement("tr");
    cell(row, table, "table");
    cell(row, s.version, "version");
    cell(row, (s.columns || []).join(", "), "columns");
    cell(row, s.added && s.added.length ? `added ${s.added.join(", ")}` : "", "change");
    $("schemas").appendChild(row);
  }
  chart(points);
  showCount(c.dead_letters, c.dead_letter_topic);
  $("detail").hidden = false;
}

// The count the server's sampler keeps (every few seconds); the records only on asking.
function showCount(offsets, topic) {
  $("dlq-said").textContent = offsets === null
    ? "not counted yet (the server counts them every few seconds)"
    : offsets === 0 ? `none in ${topic}` : `${offsets} by offsets in ${topic}`;
  $("dlq-show").hidden = !offsets;
}

function showRead(dead) {
  $("dlq-said").textContent = dead.problem
    ? `${dead.topic} could not be read: ${dead.problem}`
    : dead.exists
    ? `${dead.offsets} by offsets in ${dead.topic}`
    : `none: ${dead.topic} was never written`;
}

// The latest dead letters, asked for by the button (each is read from Kafka).
async function showLatest() {
  const id = shown();
  let dead;
  try {
    dead = await api("GET", `/changefeeds/${encodeURIComponent(id)}/dead-letters?limit=20`);
  } catch (error) {
    if (error.message !== "unauthorized") say(`Dead letters: ${error.message}`, true);
    return;
  }
  if (shown() !== id) return;
  showRead(dead);
  const body = $("dlq");
  body.replaceChildren();
  for (const d of dead.latest) {
    const row = document.createElement("tr");
    cell(row, `${d.topic}/${d.partition}@${d.offset}`, "where");
    cell(row, d.timestamp_ms === null ? "" : new Date(d.timestamp_ms).toISOString(), "when");
    cell(row, d.error, "why");
    cell(row, d.source, "from");
    cell(row, d.key, "key");
    cell(row, d.value, "value");
    body.appendChild(row);
  }
  $("dlq-table").hidden = false;
}

// The lag of the server's samples over the last hour, as a line (seconds up, time across).
function chart(points) {
  const svg = $("chart");
  const ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  const known = points.filter((p) => p.lag_seconds !== null);
  if (known.length === 0) {
    $("chart-said").textContent = "No sample yet: the server samples every few seconds.";
    return;
  }
  const width = 720, height = 200, pad = 40;
  const first = known[0].at, last = known[known.length - 1].at;
  const top = Math.max(...known.map((p) => p.lag_seconds), 1);
  const x = (at) => pad + (last === first ? 0 : ((at - first) / (last - first)) * (width - 2 * pad));
  const y = (lag) => height - pad + 20 - (lag / top) * (height - pad);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", known.map((p) => `${x(p.at).toFixed(1)},${y(p.lag_seconds).toFixed(1)}`).join(" "));
  svg.appendChild(line);
  const label = (text, lx, ly) => {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", lx);
    t.setAttribute("y", ly);
    t.textContent = text;
    svg.appendChild(t);
  };
  label(span(top), 2, 20);
  label("0s", 2, height - pad + 20);
  label(new Date(first * 1000).toLocaleTimeString(), pad, height - 4);
  label(new Date(last * 1000).toLocaleTimeString(), width - pad - 60, height - 4);
  $("chart-said").textContent =
    `${known.length} samples; lag now ${span(known[known.length - 1].lag_seconds)}, at most ${span(top)}.`;
}

$("dlq-show").addEventListener("click", showLatest);

window.addEventListener("hashchange", () => {
  say("", false);
  $("dlq-table").hidden = true;
  refresh();
});

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(refresh, REFRESH_MS);
}

$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value);
  $("token").value = "";
  refresh();
});

$("new").addEventListener("submit", async (event) => {
  event.preventDefault();
  await ask("Create", "POST", "/changefeeds", { config: $("config").value });
  if (!$("said").className) {
    $("config").value = "";
    $("create").open = false; // made: the list shows it
  }
});

$("changed").addEventListener("submit", async (event) => {
  event.preventDefault();
  const id = shown();
  await ask("Update", "PUT", "/changefeeds/" + encodeURIComponent(id), {
    config: $("changed-config").value,
  });
  if (!$("said").className) $("changed-config").value = "";
});

$("upload").addEventListener("change", async () => {
  const file = $("upload").files[0];
  if (file) $("config").value = await file.text();
});

$("forget").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  clearTimeout(timer);
  showLogin("");
});

refresh();
