// A long-term memory namespace: its items listed, edited and forgotten, one added
// (GET /v1/memory, POST /v1/memory/remember | edit | forget). The namespace is in the address
// (/memory?namespace=NS), so a page of one namespace can be linked to and reloaded.
"use strict";

const input = document.getElementById("namespace");
const items = document.getElementById("items");
let namespace = new URLSearchParams(location.search).get("namespace") || "";

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

async function load() {
  const error = document.getElementById("memory-error");
  document.getElementById("memory").hidden = false;
  document.getElementById("memory-title").textContent = `Items of ${namespace}`;
  error.textContent = "";
  try {
    const data = await api(`/v1/memory?namespace=${encodeURIComponent(namespace)}`);
    items.replaceChildren(...data.items.map(itemNode));
    if (!data.items.length) items.append(el("li", { class: "empty", text: "Nothing remembered here yet." }));
  } catch (e) {
    error.textContent = `Could not read the memory: ${e.message}`;
  }
}

function itemNode(item) {
  const meta = [item.id, item.by ? `by ${item.by}` : null, `changed ${when(item.updated_at)}`,
    item.expires_at ? `forgotten after ${when(item.expires_at)}` : null].filter(Boolean).join(" · ");
  const editor = el("textarea", { rows: 3, maxlength: 2000, "aria-label": `new text of ${item.id}` });
  editor.value = item.text;
  const error = el("p", { class: "error", role: "alert" });
  const editing = el("div", { hidden: true }, editor,
    el("div", { class: "row" }, el("button", { type: "button", onclick: () => change(node, "edit", { id: item.id, text: editor.value.trim() }) }, "Save")));
  const node = el("li", { class: "item", "data-id": item.id },
    el("p", { class: "text", text: item.text }),
    el("p", { class: "meta", text: meta }),
    el("div", { class: "row" },
      el("button", { type: "button", class: "secondary", "aria-label": `Edit ${item.id}`, onclick: () => {
        editing.hidden = !editing.hidden;
        if (!editing.hidden) editor.focus();
      } }, "Edit"),
      el("button", { type: "button", class: "danger", "aria-label": `Forget ${item.id}`, onclick: () => change(node, "forget", { id: item.id }) }, "Forget")),
    editing, error);
  return node;
}

async function change(node, action, body) {
  const error = node.querySelector(".error");
  error.textContent = "";
  node.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  try {
    const item = await api(`/v1/memory/${action}`, { namespace, ...body });
    document.getElementById("memory-note").textContent = action === "forget" ? `Forgot ${item.id}.` : `Saved ${item.id}.`;
    await load();
  } catch (e) {
    error.textContent = e.message;
    node.querySelectorAll("button").forEach((b) => { b.disabled = false; });
  }
}

document.getElementById("open").addEventListener("submit", (event) => {
  event.preventDefault();
  namespace = input.value.trim();
  history.replaceState(null, "", `/memory?namespace=${encodeURIComponent(namespace)}`);
  document.getElementById("memory-note").textContent = "";
  load();
});

document.getElementById("add").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const error = document.getElementById("add-error");
  error.textContent = "";
  const ttl = form.ttl_days.value.trim();
  if (ttl && !(Number(ttl) > 0)) { error.textContent = "Forget after: a number of days, or empty for never."; return; }
  try {
    const item = await api("/v1/memory/remember", { namespace, text: form.text.value.trim(), ttl_days: ttl ? Number(ttl) : undefined });
    form.reset();
    document.getElementById("memory-note").textContent = `Remembered ${item.id}.`;
    await load();
  } catch (e) {
    error.textContent = `Not remembered: ${e.message}`;
  }
});

if (namespace) {
  input.value = namespace;
  load();
}
