// One run: its status, what waits for a person, and its conversation as it happens.
"use strict";

const runId = decodeURIComponent(location.pathname.split("/").pop());
const base = `/v1/runs/${encodeURIComponent(runId)}`;
const transcript = document.getElementById("transcript");
const cards = document.getElementById("cards");
const decidedHere = new Map();  // call id or query id -> what this page did
let calls = {};
let statusTimer = null;

document.getElementById("run-id").textContent = runId;
document.title = `Treadle · ${runId}`;

// -- the conversation ----------------------------------------------------------------------

function blockNode(block) {
  const node = el("li", { class: `block block-${block.kind}`, id: `b-${block.id}` });
  if (block.kind === "user") {
    node.append(el("span", { class: "who", text: "you" }), el("div", { class: "text", text: block.text }));
  } else if (block.kind === "model") {
    node.append(el("span", { class: "who", text: "agent" }), el("div", { class: "text", text: block.text }));
    if (block.retried) node.classList.add("retried");
    if (block.refused) markRefused(node, block.refused);
  } else if (block.kind === "tool") {
    node.dataset.call = block.call_id;
    node.append(
      el("div", { class: "tool-head" },
        el("span", { class: "who", text: "tool" }),
        el("code", { text: `${block.tool} ${block.target || ""}`.trim() }),
        el("span", { class: "outcome" })),
      el("details", {}, el("summary", { text: "arguments and result" }),
        el("div", { class: "arguments" }), el("pre", { class: "result" })));
    setOutcome(node, block.ok, block.output);
    fillCall(node);
  } else {
    node.append(el("span", { class: "label", text: block.label }), el("span", { class: "text", text: ` ${block.text}` }));
  }
  return node;
}

// A reply the run did not take as its answer (too short, not confident enough, not the
// answer's schema): said so, never shown as the agent's answer.
function markRefused(node, why) {
  node.classList.add("block-refused");
  node.querySelector(".who").textContent = "refused reply";
  if (!node.querySelector(".refusal")) {
    node.append(el("p", { class: "refusal", text: why }), el("p", { class: "refusal-note" }));
    clearTimeout(refusalTimer);
    refusalTimer = setTimeout(explainRefusals, 150);
  }
}

// The run's own words to the model for each refused reply (its step's ``Feedback`` trace
// line: "Your answer was 2 characters; ... at least 20"), read once the replies are marked.
let refusalTimer = null;
async function explainRefusals() {
  let trace;
  try { trace = await api(`${base}/trace`); } catch (e) { return; }
  for (const node of transcript.querySelectorAll(".block-refused")) {
    const step = Number(node.id.replace(/^b-m/, ""));
    const said = trace.entries.find((e) => e.step === step && e.event === "Feedback");
    if (said) node.querySelector(".refusal-note").textContent = `The run told the model: “${said.data}”`;
  }
}

function setOutcome(node, ok, output) {
  const outcome = node.querySelector(".outcome");
  outcome.textContent = ok === null || ok === undefined ? "running…" : ok ? `done: ${output}` : `failed: ${output}`;
  outcome.dataset.ok = ok === null || ok === undefined ? "running" : String(ok);
}

function fillCall(node) {
  const call = calls[node.dataset.call];
  if (!call) return;
  if (call.arguments !== undefined) node.querySelector(".arguments").replaceChildren(argumentsView(call.arguments));
  if (call.result !== undefined) node.querySelector(".result").textContent = call.result;
}

function apply(op) {
  if (op.op === "add") {
    if (!document.getElementById(`b-${op.block.id}`)) transcript.append(blockNode(op.block));
  } else if (op.op === "text") {
    const node = document.getElementById(`b-${op.id}`);
    if (!node) return;
    const text = node.querySelector(".text");
    if (op.retried) { text.textContent = op.text; node.classList.add("retried"); }
    else text.textContent += op.text;
  } else if (op.op === "refused") {
    const node = document.getElementById(`b-${op.id}`);
    if (node) markRefused(node, op.why);
  } else if (op.op === "tool") {
    const node = document.getElementById(`b-${op.id}`);
    if (node) setOutcome(node, op.ok, op.output);
    refreshSoon();
  } else if (op.op === "event") {
    refreshSoon();
  }
}

async function follow() {
  let offset = 0;
  try {
    const snapshot = await api(`${base}/transcript`);
    transcript.replaceChildren(...snapshot.blocks.map(blockNode));
    if (snapshot.offset === null) {
      document.getElementById("stream-note").textContent = `No live stream: ${snapshot.unavailable}`;
      return;
    }
    offset = snapshot.offset;
  } catch (e) {
    document.getElementById("stream-note").textContent = `Could not read the conversation: ${e.message}`;
    return;
  }
  const source = new EventSource(`${base}/transcript/events?from=${offset}`);
  // The status read at load may predate the transcript: read it again once the stream is
  // open (and after every reconnection), so what waits matches what the transcript shows.
  source.addEventListener("open", refreshSoon);
  source.addEventListener("ops", (event) => {
    document.getElementById("stream-note").textContent = "";
    for (const op of JSON.parse(event.data)) apply(op);
  });
  source.addEventListener("notice", (event) => {
    document.getElementById("stream-note").textContent = JSON.parse(event.data).text;
  });
  source.addEventListener("end", () => { source.close(); refreshSoon(); });
  source.addEventListener("unavailable", (event) => {
    source.close();
    document.getElementById("stream-note").textContent = JSON.parse(event.data).error;
  });
  source.addEventListener("error", () => {
    if (source.readyState !== EventSource.CLOSED) {
      document.getElementById("stream-note").textContent = "Connection lost; reconnecting…";
    }
  });
}

// -- the status ----------------------------------------------------------------------------

function refreshSoon() {
  clearTimeout(statusTimer);
  statusTimer = setTimeout(refresh, 150);
}

// One refresh at a time, so an older answer never overwrites a newer one; asked again while
// one runs, it runs once more after it.
let refreshing = false;
let refreshAgain = false;

async function refresh() {
  if (refreshing) { refreshAgain = true; return; }
  refreshing = true;
  try {
    do { refreshAgain = false; await refreshOnce(); } while (refreshAgain);
  } finally {
    refreshing = false;
  }
}

async function refreshOnce() {
  let view;
  try {
    view = await api(`${base}/view`);
  } catch (e) {
    document.getElementById("status").replaceChildren(el("p", { class: "error", text: e.message }));
    return;
  }
  calls = view.calls;
  transcript.querySelectorAll(".block-tool").forEach(fillCall);
  renderStatus(view);
  renderCards(view);
  loadTrace();
  const s = view.status;
  const open = !["Done", "Error", "Halted", "Cancelled"].includes(s.state);
  document.getElementById("thread").hidden = !(s.thread && open);
}

function renderStatus(view) {
  const s = view.status;
  document.getElementById("state").replaceChildren(stateBadge(s.state));
  const u = s.usage;
  const facts = [
    ["State", s.state],
    ["Task", s.task],
    ["Step", `${s.step} of ${s.max_steps}`],
    ["Model", s.model],
    ["Tokens", `${u.total_tokens} (prompt ${u.prompt_tokens}, completion ${u.completion_tokens})`],
    ["Budget left", s.token_budget ? `${Math.max(0, s.token_budget - u.total_tokens)} of ${s.token_budget} tokens` : null],
    ["Cost", s.cost_usd !== null ? `$${s.cost_usd.toFixed(4)}` : null],
    ["Progress", view.progress],
    ["Stuck", s.stuck],
    ["Waiting for", s.outage],
    ["Last", s.last_event],
    ["Queued messages", s.thread && s.queued_messages ? String(s.queued_messages) : null],
    ["Memory", view.memory ? el("a", { href: `/memory?namespace=${encodeURIComponent(view.memory)}`, text: view.memory }) : null],
    ["Forked from", s.forked_from ? el("span", {}, runLink(s.forked_from.workflow_id), ` at step ${s.forked_from.step}`) : null],
    ["Sub-agent", waitsOn(s)],
    // The answer is in the conversation; here only when the stream could not show it.
    ["Answer", transcript.querySelector(".block-model") ? null : s.final_answer],
    ["Error", s.error],
  ];
  const list = el("dl", { class: "facts" });
  for (const [name, value] of facts) {
    if (value === null || value === undefined || value === "") continue;
    list.append(el("dt", { text: name }), el("dd", { "data-fact": name }, value));
  }
  const child = waitsOn(s);
  document.getElementById("waits-on").replaceChildren(...(child ? ["Waiting for its sub-agent: ", child] : []));
  const links = view.web_ui ? el("p", {}, el("a", { href: view.web_ui, target: "_blank", rel: "noopener", text: "Open in the Temporal Web UI" })) : null;
  document.getElementById("status").replaceChildren(list, links || "");
}

// A parent whose delegate call runs is Acting while its sub-agent works or waits: it waits for
// that sub-agent, which this names and links (and what the sub-agent waits for, if anything).
function waitsOn(s) {
  if (["Done", "Error", "Halted", "Cancelled"].includes(s.state)) return null;
  const child = (s.children || []).find((c) => c.status === "running");
  if (!child) return null;
  const waits = { WaitingForHuman: "a person", WaitingForClient: "an answer to its question", WaitingForUserInput: "its next message" }[child.state];
  return el("span", { class: "child" }, runLink(child.workflow_id),
    child.state ? ` (${child.state}${waits ? `: it waits for ${waits}` : ""})` : "");
}

// -- what waits for a person ---------------------------------------------------------------

function renderCards(view) {
  const s = view.status;
  const waiting = new Map();
  for (const p of s.pending_approvals) if (!p.decision) waiting.set(`call:${p.call_id}`, () => approvalCard(p, view.schemas[p.tool]));
  if (s.client_query) waiting.set(`query:${s.client_query.id}`, () => queryCard(s.client_query));
  // A sub-agent's query or stuck run, answered through this run (call_1/q1, --child call_1).
  for (const q of s.child_queries || []) waiting.set(`query:${q.id}`, () => queryCard(q));
  for (const c of s.children || []) {
    // Stuck itself (waiting for guidance), or a run below it is (guided by its path).
    if (c.status === "running" && c.stuck && (c.stuck_at || c.state === "WaitingForHuman")) {
      const path = c.stuck_at ? `${c.call_id}/${c.stuck_at}` : c.call_id;
      waiting.set(`guide:${path}`, () => guidanceCard({ stuck: `sub-agent ${c.workflow_id}${c.stuck_at ? ` (its ${c.stuck_at})` : ""}: ${c.stuck}` }, path));
    }
  }
  // Waiting for a human with no call waiting (decided ones included): stuck, asking for guidance.
  if (s.state === "WaitingForHuman" && s.pending_approvals.length === 0) {
    waiting.set(`guide:${s.step}`, () => guidanceCard(s));
  }
  for (const card of [...cards.children]) {
    const key = card.dataset.key;
    if (waiting.has(key) || card.classList.contains("settled")) continue;
    settle(card, decidedHere.get(key) || "Decided elsewhere (another page or client) — nothing left to do here.");
  }
  for (const [key, make] of waiting) {
    const existing = cards.querySelector(`[data-key="${CSS.escape(key)}"]`);
    if (!existing) cards.append(make());
  }
}

function settle(card, message) {
  card.classList.add("settled");
  card.replaceChildren(el("p", { class: "settled-note", role: "status", text: message }));
}

function cardShell(key, title) {
  return el("article", { class: "card", "data-key": key, "aria-label": title },
    el("h2", { text: title }));
}

async function act(card, path, body, done) {
  const error = card.querySelector(".error");
  error.textContent = "";
  card.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  try {
    await api(`${base}/${path}`, body);
    decidedHere.set(card.dataset.key, done);
    settle(card, done);
    refreshSoon();
  } catch (e) {
    error.textContent = e.message;
    card.querySelectorAll("button").forEach((b) => { b.disabled = false; });
  }
}

function approvalCard(p, schema) {
  const key = `call:${p.call_id}`;
  const card = cardShell(key, `Approve ${p.tool}?`);
  const argsText = JSON.stringify(p.arguments, null, 2);
  const reason = el("input", { name: "reason", "aria-label": "reason for rejecting (the model reads it)", placeholder: "reason (the model reads it)" });
  const editor = el("textarea", { name: "arguments", rows: 6, spellcheck: "false", "aria-label": "new arguments as JSON" });
  editor.value = argsText;
  const editing = el("div", { class: "editor", hidden: true }, editor,
    schema ? el("details", {}, el("summary", { text: `${p.tool}'s schema` }), el("pre", { text: JSON.stringify(schema, null, 2) })) : null,
    el("button", { type: "button", onclick: () => {
      const problem = checkArguments(editor.value, schema);
      if (problem) { card.querySelector(".error").textContent = problem; return; }
      act(card, "modify", { call_id: p.call_id, tool: p.tool, arguments: JSON.parse(editor.value) }, `Modified by you; ${p.tool} runs with the new arguments.`);
    } }, "Send the new arguments"));
  card.append(
    el("p", { class: "meta", text: `call ${p.call_id} · step ${p.step}` }),
    el("div", { class: "arguments" }, argumentsView(p.arguments)),
    el("div", { class: "row" },
      el("button", { type: "button", onclick: () => act(card, "approve", { call_id: p.call_id }, `Approved by you; ${p.tool} runs.`) }, "Approve"),
      el("button", { type: "button", class: "secondary", onclick: () => { editing.hidden = !editing.hidden; if (!editing.hidden) editor.focus(); } }, "Modify…")),
    el("div", { class: "row" }, reason,
      el("button", { type: "button", class: "danger", onclick: () => {
        if (!reason.value.trim()) { card.querySelector(".error").textContent = "A rejection needs a reason (the model reads it)."; reason.focus(); return; }
        act(card, "reject", { call_id: p.call_id, reason: reason.value }, "Rejected by you; the model reads your reason.");
      } }, "Reject")),
    editing,
    el("p", { class: "error", role: "alert" }));
  return card;
}

// The editor's check before sending: JSON, an object, the schema's required keys and no
// keys it does not name. The server checks the whole schema again, and so does the run.
function checkArguments(text, schema) {
  let value;
  try { value = JSON.parse(text); } catch (e) { return `Not valid JSON: ${e.message}`; }
  if (value === null || typeof value !== "object" || Array.isArray(value)) return "The arguments must be a JSON object.";
  if (!schema) return null;
  const missing = (schema.required || []).filter((k) => !(k in value));
  if (missing.length) return `Missing: ${missing.join(", ")} (the tool's schema requires them).`;
  const known = Object.keys(schema.properties || {});
  const extra = Object.keys(value).filter((k) => known.length && !known.includes(k));
  if (extra.length && schema.additionalProperties === false) return `Not in the tool's schema: ${extra.join(", ")}.`;
  return null;
}

function queryCard(q) {
  const key = `query:${q.id}`;
  const asks = { file_read: `the file ${q.what}`, environment: `the environment variable(s) ${q.what}`, question: q.what };
  const card = cardShell(key, q.kind === "question" ? "The run asks you" : `The run asks for ${asks[q.kind]}`);
  const answer = el("textarea", { name: "answer", rows: 3, "aria-label": "your answer" });
  const why = el("input", { name: "decline", "aria-label": "why you decline", placeholder: "why you decline" });
  card.append(
    el("p", { class: "question", text: asks[q.kind] || q.what }),
    el("p", { class: "meta", text: `query ${q.id} · ${q.kind}` }),
    answer,
    el("div", { class: "row" },
      el("button", { type: "button", onclick: () => act(card, "answer", { query_id: q.id, content: answer.value }, "Answered by you.") }, "Answer"),
      why,
      el("button", { type: "button", class: "secondary", onclick: () => act(card, "answer", { query_id: q.id, declined: why.value || "declined by the user" }, "Declined by you.") }, "Decline")),
    el("p", { class: "error", role: "alert" }));
  return card;
}

function guidanceCard(s, child) {
  const card = cardShell(child ? `guide:${child}` : `guide:${s.step}`, child ? "A sub-agent is stuck and asks for guidance" : "The run is stuck and asks for guidance");
  const guidance = el("textarea", { name: "guidance", rows: 2, "aria-label": "guidance for the model" });
  const why = el("input", { name: "reason", "aria-label": "why halt", placeholder: "why halt (optional)" });
  card.append(
    el("p", { class: "question", text: s.stuck || "" }),
    guidance,
    el("div", { class: "row" },
      el("button", { type: "button", onclick: () => act(card, "guide", { guidance: guidance.value.trim() || undefined, child: child || undefined }, "Guidance sent by you.") }, "Guide"),
      why,
      el("button", { type: "button", class: "danger", onclick: () => act(card, "guide", { halt: true, reason: why.value.trim() || undefined, child: child || undefined }, "Halted by you.") }, "Halt")),
    el("p", { class: "error", role: "alert" }));
  return card;
}

// -- a thread's next message ----------------------------------------------------------------

// What the API's ``Sent.done`` says happened to the message.
const SENT = {
  sent: () => "Sent: it starts a turn.",
  queued: (m) => `Queued: answered after the running turn (${m.position === 1 ? "next" : `position ${m.position}`}).`,
  steered: () => "Steered: it joins the running turn; the model reads it before its next call.",
  interrupting: () => "Interrupting: the running model call stops and the turn starts again with it.",
};

document.getElementById("send").addEventListener("submit", async (event) => {
  event.preventDefault();
  const box = document.getElementById("message");
  const error = document.getElementById("send-error");
  const result = document.getElementById("send-result");
  const mode = document.getElementById("mode").value;
  error.textContent = "";
  result.textContent = "";
  try {
    const sent = await api(`${base}/messages`, { text: box.value, mode: mode || undefined });
    box.value = "";
    result.textContent = SENT[sent.done](sent);
    result.dataset.done = sent.done;
    refreshSoon();
  } catch (e) { error.textContent = `Not sent: ${e.message}`; }
});
document.getElementById("message").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) document.getElementById("send").requestSubmit();
});
document.getElementById("close").addEventListener("click", async () => {
  const error = document.getElementById("send-error");
  try { await api(`${base}/close`, {}); refreshSoon(); } catch (e) { error.textContent = e.message; }
});

// -- the trace, and a fork from any of its steps ----------------------------------------------

const tracePanel = document.getElementById("trace");

// Read when opened, and again at each refresh while open (one read at a time).
let tracing = false;
async function loadTrace() {
  if (!tracePanel.open || tracing) return;
  tracing = true;
  const steps = document.getElementById("steps");
  const note = document.getElementById("trace-note");
  try {
    const trace = await api(`${base}/trace`);
    note.textContent = trace.earlier ? `${trace.earlier} earlier entries are not kept (the run continued as new).` : "";
    const byStep = new Map();
    for (const entry of trace.entries) {
      if (!byStep.has(entry.step)) byStep.set(entry.step, []);
      byStep.get(entry.step).push(entry);
    }
    for (const [step, entries] of byStep) {
      let item = steps.querySelector(`[data-step="${step}"]`);
      if (!item) {
        item = stepNode(step);
        steps.append(item);
      }
      item.querySelector(".entries").replaceChildren(...entries.map((e) =>
        el("li", {}, el("span", { class: "label", text: e.event }), el("span", { text: ` ${e.state}${e.data ? ` · ${e.data}` : ""}` }))));
    }
  } catch (e) {
    note.textContent = `Could not read the trace: ${e.message}`;
  } finally {
    tracing = false;
  }
}

function stepNode(step) {
  const item = el("li", { class: "step", "data-step": step },
    el("div", { class: "row between" }, el("h3", { text: `Step ${step}` })),
    el("ul", { class: "entries" }));
  const message = el("textarea", { rows: 2, "aria-label": `new message for the fork from step ${step} (optional)`, placeholder: "a new instruction the fork reads first (optional)" });
  const error = el("p", { class: "error", role: "alert" });
  const form = el("div", { class: "fork", hidden: true }, message,
    el("div", { class: "row" },
      el("button", { type: "button", onclick: async (event) => {
        event.target.disabled = true;
        error.textContent = "";
        try {
          const forked = await api(`${base}/fork`, { step, message: message.value.trim() || undefined });
          location.assign(`/runs/${encodeURIComponent(forked.id)}`);
        } catch (e) {
          error.textContent = `Not forked: ${e.message}`;
          event.target.disabled = false;
        }
      } }, "Start the fork")),
    error);
  item.querySelector(".row").append(el("button", { type: "button", class: "secondary", "aria-label": `Fork from step ${step}`, onclick: () => {
    form.hidden = !form.hidden;
    if (!form.hidden) message.focus();
  } }, "Fork from here"));
  item.append(form);
  return item;
}

tracePanel.addEventListener("toggle", loadTrace);

refresh();
follow();
