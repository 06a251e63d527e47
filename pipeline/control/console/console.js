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

function warnings(changefeed) {
  const box = document.createElement("div");
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

// One request to the API with the token; the answer's JSON, or the API's own refusal thrown.
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
    cell(row, c.changefeed_id, "id");
    cell(row, c.desired, "desired");
    cell(row, badge(c.state, "state-" + c.state), "state");
    cell(row, c.delivery, "delivery");
    cell(row, at === null ? "" : new Date(at).toISOString(), "high-water");
    cell(row, at === null ? "" : span((Date.now() - at) / 1000), "lag");
    cell(row, warnings(c), "warnings");
    cell(row, c.error, "error problem");
    cell(row, actions(c), "actions");
    body.appendChild(row);
  }
  $("empty").hidden = changefeeds.length > 0;
  $("list").hidden = false;
}

function showLogin(message) {
  $("changefeeds").replaceChildren();
  $("list").hidden = true;
  $("forget").hidden = true;
  $("login").hidden = false;
  $("refused").hidden = !message;
  $("refused").textContent = message || "";
}

async function refresh() {
  const current = token();
  if (!current) {
    showLogin("");
    return;
  }
  let answer;
  try {
    answer = await fetch("/api/v2/changefeeds", {
      headers: { Authorization: "Bearer " + current },
    });
  } catch (error) {
    $("connection").textContent = "The server does not answer; trying again…";
    schedule();
    return;
  }
  if (answer.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("The server refused this token: enter it again.");
    return;
  }
  if (!answer.ok) {
    const body = await answer.json().catch(() => ({}));
    $("connection").textContent = `The server answered ${answer.status}: ${body.error_msg || ""}`;
    schedule();
    return;
  }
  $("connection").textContent = "Updated " + new Date().toLocaleTimeString();
  $("login").hidden = true;
  $("forget").hidden = false;
  render(await answer.json());
  schedule();
}

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
  if (!$("said").className) $("config").value = "";
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
