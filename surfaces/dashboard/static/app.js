// The dashboard page: sign-in, tabs, and the WebSocket. Every message body is HTML the server
// rendered safe (surfaces/dashboard/convert.py); everything else is set as text, never as markup.
"use strict";

const state = { csrf: "", admin: false, opsTimer: 0, socket: null, tabs: new Map(), current: "", commands: [], retry: 500 };
const $ = (id) => document.getElementById(id);
const clone = (id) => $(id).content.firstElementChild.cloneNode(true);

async function probe() {
  const answer = await fetch("/api/session", { credentials: "same-origin" });
  if (answer.ok) {
    const body = await answer.json();
    state.csrf = body.csrf;
    state.admin = Boolean(body.admin);
    showChat();
  } else {
    $("sign-in").hidden = false;
    $("chat").hidden = true;
    $("token").focus();
  }
}

async function signIn(event) {
  event.preventDefault();
  const answer = await fetch("/api/sign-in", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token: $("token").value }),
  });
  const body = await answer.json();
  if (!answer.ok) {
    $("sign-in-error").textContent = body.error || "Sign-in failed.";
    return;
  }
  $("token").value = "";
  state.csrf = body.csrf;
  await probe(); // the session probe says whether this person is an admin
}

function showChat() {
  $("sign-in").hidden = true;
  $("chat").hidden = false;
  $("ops-toggle").hidden = !state.admin;
  connect();
  $("composer").focus();
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${location.host}/ws?csrf=${encodeURIComponent(state.csrf)}`);
  state.socket = socket;
  socket.onopen = () => { state.retry = 500; };
  socket.onmessage = (event) => handle(JSON.parse(event.data));
  socket.onclose = () => {
    state.socket = null;
    setTimeout(() => probe(), state.retry); // reconnect; the server resends every message
    state.retry = Math.min(state.retry * 2, 10000);
  };
}

function handle(frame) {
  if (frame.type === "hello") {
    state.commands = frame.commands || [];
    fillCommands();
  } else if (frame.type === "tab") {
    addTab(frame.tab, frame.title);
    if (frame.created) select(frame.tab);
  } else if (frame.type === "message") {
    showMessage(frame);
  } else if (frame.type === "agent_commands") {
    const tab = state.tabs.get(frame.tab);
    if (tab) { tab.agentCommands = frame.commands; fillCommands(); }
  }
}

function addTab(id, title) {
  if (state.tabs.has(id)) return;
  const button = clone("tpl-tab");
  button.textContent = title;
  button.dataset.tab = id;
  button.addEventListener("click", () => select(id));
  const pane = document.createElement("div");
  pane.className = "pane";
  pane.dataset.tab = id;
  pane.hidden = true;
  $("tabs").appendChild(button);
  $("messages").appendChild(pane);
  state.tabs.set(id, { button, pane, agentCommands: [] });
  if (!state.current) select(id);
}

function select(id) {
  state.current = id;
  for (const [tab, parts] of state.tabs) {
    parts.button.setAttribute("aria-selected", String(tab === id));
    parts.pane.hidden = tab !== id;
  }
  fillCommands();
}

function showMessage(frame) {
  const tab = state.tabs.get(frame.tab || state.current);
  if (!tab) return;
  let node = tab.pane.querySelector(`[data-id="${CSS.escape(frame.id)}"]`);
  if (!node) {
    node = clone("tpl-message");
    node.dataset.id = frame.id;
    tab.pane.appendChild(node);
  }
  node.dataset.role = frame.role;
  node.querySelector(".body").innerHTML = frame.html; // server-rendered, safe by construction
  if (frame.buttons) showButtons(node, frame);
  for (const copy of node.querySelectorAll("button.copy")) {
    copy.addEventListener("click", () => navigator.clipboard.writeText(copy.parentElement.querySelector("pre").innerText));
  }
  node.scrollIntoView({ block: "end" });
}

// A message's buttons are rebuilt only when they change (a frame without "buttons" keeps them):
// a press is a mouse down and a mouse up on the same element, so replacing a button while the
// text streams would lose the press.
function showButtons(node, frame) {
  const wanted = JSON.stringify([frame.kind, frame.buttons]);
  if (node.dataset.buttons === wanted) return;
  node.dataset.buttons = wanted;
  const buttons = node.querySelector(".buttons");
  buttons.replaceChildren();
  for (const choice of frame.buttons) {
    if (choice.url !== undefined) {
      const link = linkButton(choice);
      if (link) buttons.appendChild(link);
      continue;
    }
    const isStop = frame.kind !== "choice" && choice.label === "Stop";
    const button = isStop ? clone("tpl-stop") : clone("tpl-approval");
    button.textContent = choice.label;
    if (choice.style === "danger") button.classList.add("danger");
    button.addEventListener("click", () => post({ type: "press", tab: frame.tab, token: choice.token }));
    buttons.appendChild(button);
  }
}

// A link button opens its page in a new tab that cannot reach back into this one (the template's
// rel="noopener noreferrer"); the server sends only http(s) links, checked again where it opens.
function linkButton(choice) {
  let url;
  try {
    url = new URL(choice.url);
  } catch {
    return null;
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return null;
  const link = clone("tpl-link");
  link.href = url.href;
  link.textContent = choice.label;
  if (choice.style === "danger") link.classList.add("danger");
  return link;
}

function fillCommands() {
  const menu = $("commands");
  menu.replaceChildren(new Option("Commands…", ""));
  const tab = state.tabs.get(state.current);
  const entries = [
    ...state.commands.map((c) => [`/${c.name}`, c.description]),
    ...(tab ? tab.agentCommands.map((c) => [c.text, c.description]) : []),
  ];
  for (const [text, description] of entries) menu.appendChild(new Option(`${text} — ${description}`, text));
}

function post(frame) {
  if (state.socket && state.socket.readyState === WebSocket.OPEN) state.socket.send(JSON.stringify(frame));
}

function sendMessage(event) {
  event.preventDefault();
  const text = $("composer").value;
  if (!text.trim() || !state.current) return;
  post({ type: "send", tab: state.current, text });
  $("composer").value = "";
}

// ---- the operations view (admins only: the server refuses anyone else) ----------------------
function toggleOps() {
  const ops = $("ops");
  ops.hidden = !ops.hidden;
  clearInterval(state.opsTimer);
  if (!ops.hidden) { refreshOps(); state.opsTimer = setInterval(refreshOps, 1000); }
}

async function refreshOps() {
  const answer = await fetch("/api/ops", { credentials: "same-origin", headers: { "X-CSRF-Token": state.csrf } });
  const body = await answer.json();
  if (!answer.ok) { $("ops-said").textContent = body.error || "The operations view is not available."; return; }
  fillRows("ops-agents", body.agents, "ops-agent", (a) => [
    a.project, a.agent, `pid ${a.pid}`, `up ${Math.round(a.uptime)} s`,
    a.rss === null ? "memory unknown" : `${(a.rss / 1048576).toFixed(1)} MiB`, `${a.sessions} sessions`,
  ], (a) => ["ops-stop-agent", "Stop agent", "stop-agent", String(a.pid)]);
  fillRows("ops-conversations", body.conversations, "ops-conversation", (c) => [
    c.conversation, c.state === "answering" ? `answering for ${Math.round(c.for)} s` : c.state, `queued ${c.queued}`,
  ], (c) => c.turn ? ["ops-stop-turn", "Stop turn", "stop-turn", c.conversation] : null,
  (c) => c.turn ? "ops-turn" : "ops-conversation");
  fillRows("ops-approvals", body.approvals, "ops-approval", (p) => [p.conversation, p.requester, p.tool]);
  $("ops-surfaces").textContent = `${body.surfaces.map((s) => `${s.name}: ${s.connected ? "connected" : "not connected"}`).join(", ")}; ledger backlog ${body.ledger_backlog}`;
  fillRows("ops-faults", body.faults, "ops-fault", (f) => [
    new Date(f.at * 1000).toISOString(), f.error, f.conversation, f.told,
    Object.entries(f.crumbs).map(([k, v]) => `${k}=${v}`).join(" "), stderrCell(f.stderr_tail),
  ]);
  const named = new Set(["at", "kind", "surface", "actor", "action"]);
  fillRows("ops-audit", body.audit, "ops-audit", (r) => [
    new Date(r.at * 1000).toISOString(), r.kind, r.surface, r.actor, r.action,
    Object.entries(r).filter(([k]) => !named.has(k)).map(([k, v]) => `${k}=${v}`).join(" "),
  ]);
}

// The agent's stderr tail: its first line in the row, the rest collapsed (text only).
const STDERR_SHOWN = 160;
function stderrCell(tail) {
  const text = String(tail || "");
  if (text.length <= STDERR_SHOWN && !text.includes("\n")) return text;
  const details = document.createElement("details");
  details.dataset.testid = "ops-stderr";
  const summary = document.createElement("summary");
  const first = text.split("\n", 1)[0];
  summary.textContent = `stderr: ${first.slice(0, STDERR_SHOWN)}… (${text.split("\n").length} lines)`;
  const pre = document.createElement("pre");
  pre.textContent = text;
  details.append(summary, pre);
  return details;
}

// Rows as text only: everything here is the server's data, never markup (a cell is a string,
// or an element this file built from text).
function fillRows(id, items, testid, cells, action = () => null, testidOf = () => testid) {
  const rows = items.map((item) => {
    const row = document.createElement("tr");
    row.dataset.testid = testidOf(item);
    for (const text of cells(item)) {
      const cell = document.createElement("td");
      if (text instanceof Node) cell.appendChild(text);
      else cell.textContent = String(text);
      row.appendChild(cell);
    }
    const wanted = action(item);
    if (wanted) {
      const [hookName, label, name, target] = wanted;
      const button = document.createElement("button");
      button.type = "button";
      button.className = "danger";
      button.dataset.testid = hookName;
      button.textContent = label;
      button.addEventListener("click", () => opsAction(name, target));
      const cell = document.createElement("td");
      cell.appendChild(button);
      row.appendChild(cell);
    }
    return row;
  });
  $(id).replaceChildren(...rows);
}

async function opsAction(action, target) {
  const answer = await fetch("/api/ops/action", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": state.csrf },
    body: JSON.stringify({ action, target }),
  });
  const body = await answer.json();
  $("ops-said").textContent = body.said || body.error || "";
  refreshOps();
}

document.addEventListener("DOMContentLoaded", () => {
  $("ops-toggle").addEventListener("click", toggleOps);
  $("sign-in-form").addEventListener("submit", signIn);
  $("composer-form").addEventListener("submit", sendMessage);
  $("composer").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) sendMessage(event);
  });
  $("new-tab").addEventListener("click", () => post({ type: "new_tab" }));
  $("commands").addEventListener("change", (event) => {
    const text = event.target.value;
    if (text) { $("composer").value = `${text} `; $("composer").focus(); }
    event.target.value = "";
  });
  probe();
});
