// Shared by both pages: JSON requests with the CSRF header, and small DOM helpers.
"use strict";

function csrfToken() {
  const found = document.cookie.split(";").map((c) => c.trim().split("="))
    .find(([k]) => k === "treadle_csrf");
  return found ? found[1] : "";
}

// ``signal``: an AbortSignal that cancels the request (a list superseded by a newer one).
async function api(path, body, signal) {
  const options = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Treadle-CSRF": csrfToken() },
    body: JSON.stringify(body),
  };
  if (signal) options.signal = signal;
  const response = await fetch(path, options);
  let data = {};
  try { data = await response.json(); } catch (e) { data = {}; }
  if (!response.ok) throw new Error(data.error || `${response.status} ${response.statusText}`);
  return data;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A state is always named in words; the colour only repeats it.
function stateBadge(state) {
  const kind = /^Waiting/.test(state) ? "waiting"
    : state === "Done" ? "done"
    : /Error|Halted|Cancelled|Failed|Terminated|Timed/.test(state) ? "bad" : "busy";
  return el("span", { class: `badge badge-${kind}`, "data-state": state, text: state });
}

// A call's arguments as a person reads them: each string as text — a file's content with its
// lines, never an escaped JSON string — and any other value as JSON. (The Modify editor keeps
// the JSON, which is what it sends.)
function argumentsView(args) {
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    return el("pre", { class: "arg-text", text: typeof args === "string" ? args : JSON.stringify(args, null, 2) });
  }
  const list = el("dl", { class: "args" });
  for (const [name, value] of Object.entries(args)) {
    let shown;
    if (typeof value !== "string") shown = el("code", { text: JSON.stringify(value) });
    else if (value.includes("\n") || value.length > 60) shown = el("pre", { class: "arg-text", text: value });
    else shown = el("code", { text: value });
    list.append(el("dt", { text: name }), el("dd", { "data-arg": name }, shown));
  }
  return list;
}

function runLink(id) {
  return el("a", { href: `/runs/${encodeURIComponent(id)}`, text: id });
}
