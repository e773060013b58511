// The dashboard page: sign-in, tabs, and the WebSocket. Every message body is HTML the server
// rendered safe (surfaces/dashboard/convert.py); everything else is set as text, never as markup.
"use strict";

const state = { csrf: "", socket: null, tabs: new Map(), current: "", commands: [], retry: 500 };
const $ = (id) => document.getElementById(id);
const clone = (id) => $(id).content.firstElementChild.cloneNode(true);

async function probe() {
  const answer = await fetch("/api/session", { credentials: "same-origin" });
  if (answer.ok) {
    const body = await answer.json();
    state.csrf = body.csrf;
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
  showChat();
}

function showChat() {
  $("sign-in").hidden = true;
  $("chat").hidden = false;
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
  const buttons = node.querySelector(".buttons");
  buttons.replaceChildren();
  for (const choice of frame.buttons) {
    const isStop = frame.kind !== "choice" && choice.label === "Stop";
    const button = isStop ? clone("tpl-stop") : clone("tpl-approval");
    button.textContent = choice.label;
    if (choice.style === "danger") button.classList.add("danger");
    button.addEventListener("click", () => post({ type: "press", tab: frame.tab, token: choice.token }));
    buttons.appendChild(button);
  }
  for (const copy of node.querySelectorAll("button.copy")) {
    copy.addEventListener("click", () => navigator.clipboard.writeText(copy.parentElement.querySelector("pre").innerText));
  }
  node.scrollIntoView({ block: "end" });
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

document.addEventListener("DOMContentLoaded", () => {
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
