// The runs and threads list, refreshed every few seconds, and the start form.
"use strict";

const list = document.getElementById("runs");
const filter = document.getElementById("filter");

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

async function refresh() {
  const error = document.getElementById("list-error");
  try {
    const state = filter.value;
    const data = await api(`/api/runs${state ? `?state=${encodeURIComponent(state)}` : ""}`);
    error.textContent = "";
    list.replaceChildren(...data.runs.map(row));
    if (!data.runs.length) list.append(el("li", { class: "empty", text: "No runs." }));
  } catch (e) {
    error.textContent = `Could not list the runs: ${e.message}`;
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
    run.waiting_for ? el("p", { class: "waiting" }, `Waiting for ${run.waiting_for}`) : null);
}

document.getElementById("start").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = event.target;
  const error = document.getElementById("start-error");
  const data = Object.fromEntries(new FormData(form));
  data.thread = form.thread.checked;
  try {
    const started = await api("/api/start", data);
    location.assign(`/runs/${encodeURIComponent(started.id)}`);
  } catch (e) {
    error.textContent = `Not started: ${e.message}`;
  }
});

filter.addEventListener("change", refresh);
refresh();
setInterval(refresh, 5000);
