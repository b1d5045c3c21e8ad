// The runs and threads list, refreshed every few seconds, and the start form.
//
// One list request at a time: the next refresh is scheduled when the newest one ends, so a slow
// list (it asks each running run its state, up to 3 s when a run's worker is gone) never piles
// requests up; a change of filter cancels the request it supersedes, and an answer that arrives
// anyway is not drawn, so an older filter's rows never replace the chosen one's. A request that
// takes longer than GIVE_UP_MS is given up, said, and asked again, so the refreshes never stop.
"use strict";

const list = document.getElementById("runs");
const filter = document.getElementById("filter");
const EVERY_MS = 5000;
const GIVE_UP_MS = 30000;
let next = null;
let pending = null; // the newest list request's AbortController: only it may draw

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

async function refresh() {
  clearTimeout(next);
  if (pending) pending.abort();
  const cancel = new AbortController();
  pending = cancel;
  const giveUp = setTimeout(
    () => cancel.abort(new Error(`no answer in ${GIVE_UP_MS / 1000} s`)), GIVE_UP_MS);
  const error = document.getElementById("list-error");
  try {
    const state = filter.value;
    const path = `/v1/runs${state ? `?state=${encodeURIComponent(state)}` : ""}`;
    const data = await api(path, undefined, cancel.signal);
    if (cancel !== pending) return;
    error.textContent = "";
    list.replaceChildren(...data.runs.map(row));
    if (!data.runs.length) list.append(el("li", { class: "empty", text: "No runs." }));
  } catch (e) {
    if (cancel !== pending) return;
    const reason = cancel.signal.aborted ? cancel.signal.reason : e;
    error.textContent = `Could not list the runs: ${reason.message}`;
  } finally {
    clearTimeout(giveUp);
    if (cancel === pending) {
      pending = null;
      next = setTimeout(refresh, EVERY_MS);
    }
  }
}

function row(run) {
  return el("li", { class: "run" },
    el("div", { class: "row between" },
      el("a", { href: `/runs/${encodeURIComponent(run.id)}`, class: "run-id" }, run.id),
      stateBadge(run.state)),
    run.task ? el("p", { class: "task" }, run.task) : null,
    el("p", { class: "meta" },
      [run.thread ? "thread" : run.thread === false ? "run" : null,
       run.step !== null && run.step !== undefined ? `step ${run.step}` : null,
       run.model, run.last ? `last: ${run.last}` : null,
       run.closed ? `ended ${when(run.closed)}` : `started ${when(run.started)}`]
        .filter(Boolean).join(" · ")),
    run.waiting_for ? el("p", { class: "waiting" }, `Waiting for ${run.waiting_for}`) : null,
    run.waiting_on ? el("p", { class: "meta" }, "Its sub-agent: ", runLink(run.waiting_on)) : null);
}

document.getElementById("start").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const error = document.getElementById("start-error");
  const fields = Object.fromEntries(new FormData(form));
  // The API's StartRun body: the form's limits go into the run's config, empty ones left out.
  const config = {};
  if (fields.require_approval.trim()) config.require_approval = fields.require_approval.trim();
  for (const key of ["token_budget", "max_steps"]) {
    const text = fields[key].trim();
    if (text) config[key] = /^\d+$/.test(text) ? Number(text) : text;
  }
  const data = { task: fields.task.trim(), model: fields.model.trim() || undefined,
    thread: form.thread.checked, workspace: fields.workspace.trim() || undefined, config };
  try {
    const started = await api("/v1/runs", data);
    location.assign(`/runs/${encodeURIComponent(started.id)}`);
  } catch (e) {
    error.textContent = `Not started: ${e.message}`;
  }
});

// A wide screen shows the start form open; a phone shows the runs first, the form one tap away.
const startPanel = document.getElementById("start-panel");
if (window.matchMedia("(min-width: 48rem)").matches) startPanel.open = true;

filter.addEventListener("change", refresh);
refresh();
