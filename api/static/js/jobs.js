// The Jobs view: the tenant's jobs a page at a time, filtered by status; open, cancel, delete,
// run again, download.

import { call, getJson, saveFile } from "./api.js";
import { t } from "./i18n.js";
import { load, present } from "./speak.js";

const $ = (id) => document.getElementById(id);
const TERMINAL = new Set(["succeeded", "failed", "canceled"]);
let cursor = null;

export function init() {
  $("jobs-status").addEventListener("change", () => refresh().catch(showError));
  $("jobs-refresh").addEventListener("click", () => refresh().catch(showError));
  $("jobs-more").addEventListener("click", () => page(false).catch(showError));
}

export function show() {
  refresh().catch(showError);
}

function showError(error) {
  $("jobs-error").textContent = error.code ? `${error.code}: ${error.message}` : String(error.message ?? error);
}

async function refresh() {
  cursor = null;
  await page(true);
}

async function page(first) {
  $("jobs-error").textContent = "";
  const query = new URLSearchParams({ limit: "20" });
  const status = $("jobs-status").value;
  if (status) query.set("status", status);
  if (!first && cursor) query.set("cursor", cursor);
  const body = await getJson(`/v1/jobs?${query}`);
  cursor = body.next_cursor;
  const rows = body.jobs.map(row);
  const tbody = $("jobs-table").tBodies[0];
  if (first) tbody.replaceChildren(...rows);
  else tbody.append(...rows);
  if (first && rows.length === 0) {
    const empty = document.createElement("tr");
    const cell = document.createElement("td");
    cell.colSpan = 6;
    cell.textContent = t("noJobs");
    empty.append(cell);
    tbody.append(empty);
  }
  $("jobs-more").hidden = !cursor;
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString(document.documentElement.lang) : "";
}

function cell(content) {
  const td = document.createElement("td");
  if (content instanceof Node) td.append(content);
  else td.textContent = content;
  return td;
}

function action(label, handler, jobId) {
  const button = document.createElement("button");
  button.type = "button";
  button.textContent = label;
  button.dataset.job = jobId;
  button.addEventListener("click", () => handler().catch(showError));
  return button;
}

function row(job) {
  const tr = document.createElement("tr");
  tr.dataset.job = job.id;
  const length = job.result ? `${job.result.duration_s.toFixed(1)} s` : t("chars", { n: job.characters });
  const actions = document.createElement("div");
  actions.className = "actions";
  if (job.status === "succeeded" && job.result) {
    actions.append(action(t("open"), async () => {
      location.hash = "#speak";
      await present(job);
    }, job.id));
    actions.append(action(t("download", { what: t("audio") }), () =>
      saveFile(`/v1/jobs/${job.id}/files/audio?download=true`, `${job.id}.${job.format}`), job.id));
  }
  if (!TERMINAL.has(job.status)) actions.append(action(t("cancel"), () => remove(job.id), job.id));
  else if (!job.purged_at) actions.append(action(t("delete"), () => remove(job.id), job.id));
  actions.append(action(t("runAgain"), async () => load(job), job.id));
  tr.append(cell(when(job.created_at)), cell(job.status), cell(job.voice), cell(length), cell(when(job.finished_at)), cell(actions));
  return tr;
}

async function remove(jobId) {
  await call(`/v1/jobs/${jobId}`, { method: "DELETE" });
  await refresh();
}
