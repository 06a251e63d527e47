// Highwater's console: the changefeeds the server's REST API lists, refreshed every few
// seconds. The API token is asked once and kept for this tab only (sessionStorage); nothing
// is shown without a token the server takes. Every value is put in the page as text.
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

function render(changefeeds) {
  const body = $("changefeeds");
  body.replaceChildren();
  for (const c of changefeeds) {
    const row = document.createElement("tr");
    row.dataset.changefeed = c.changefeed_id;
    const at = wallMs(c.high_water);
    cell(row, c.changefeed_id, "id");
    cell(row, badge(c.state, "state-" + c.state), "state");
    cell(row, c.delivery, "delivery");
    cell(row, at === null ? "" : new Date(at).toISOString(), "high-water");
    cell(row, at === null ? "" : span((Date.now() - at) / 1000), "lag");
    cell(row, warnings(c), "warnings");
    cell(row, c.error, "error problem");
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

$("forget").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  clearTimeout(timer);
  showLogin("");
});

refresh();
