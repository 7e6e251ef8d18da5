// The Book view: a .txt, .md or .epub read into chapters by the server (the same rules as
// `ttsq narrate`), chosen, narrated as one batch; each chapter downloadable as it finishes, then the
// whole book as a zip and an M4B. A reload, or another browser with the same key, finds the batch again.

import { call, getJson, saveFile } from "./api.js";
import { t } from "./i18n.js";

const $ = (id) => document.getElementById(id);
const BOOK_ITEM = "ttsq.book";
const POLL_MS = 1500;
let found = null;
let watching = null;

export function init() {
  $("book").addEventListener("change", () => read().catch(showError));
  $("narrate").addEventListener("click", () => narrate().catch(showError));
  $("book-cancel").addEventListener("click", () => cancel().catch(showError));
}

export function show() {
  if (!watching) resume().catch(showError);
}

function showError(error) {
  $("book-error").textContent = error.code ? `${error.code}: ${error.message}` : String(error.message ?? error);
}

function minutes(seconds) {
  return seconds >= 90 ? `${Math.round(seconds / 60)} min` : `${Math.round(seconds)} s`;
}

async function read() {
  $("book-error").textContent = "";
  const file = $("book").files[0];
  if (!file) return;
  const query = new URLSearchParams({ filename: file.name, voice: $("book-voice").value });
  found = await getJson(`/v1/books/chapters?${query}`, { method: "POST", body: file, type: "application/octet-stream" });
  $("book-name").textContent = found.title;
  $("chapters-table").tBodies[0].replaceChildren(...found.chapters.map((chapter, index) => {
    const tr = document.createElement("tr");
    const box = document.createElement("input");
    box.type = "checkbox";
    box.checked = true;
    box.dataset.index = String(index);
    box.setAttribute("aria-label", `${t("narrateIt")}: ${chapter.title}`);
    const cells = [box, chapter.title, String(chapter.characters), minutes(chapter.estimated_s)];
    for (const content of cells) {
      const td = document.createElement("td");
      td.append(content);
      tr.append(td);
    }
    return tr;
  }));
  $("chapters-found").hidden = false;
}

async function narrate() {
  const chosen = [...$("chapters-table").querySelectorAll("input[type=checkbox]")]
    .filter((box) => box.checked)
    .map((box) => found.chapters[Number(box.dataset.index)]);
  if (!chosen.length) throw new Error(t("noChapterChosen"));
  const defaults = { voice: $("book-voice").value, format: $("book-format").value, marks: ["sentence"] };
  const preset = $("book-loudness").value;
  if (preset) defaults.loudness = { preset };
  const items = chosen.map((chapter) => ({ text: chapter.text, ref: chapter.file_stem, title: chapter.title }));
  const batch = await getJson("/v1/batches", {
    method: "POST",
    json: { items, defaults, bundle: ["zip", "m4b"], title: found.title },
  });
  sessionStorage.setItem(BOOK_ITEM, batch.id);
  $("chapters-found").hidden = true;
  watch(batch.id);
}

/** The batch of this tab's last book, else the newest batch with bundles: a book from the studio. */
async function resume() {
  const kept = sessionStorage.getItem(BOOK_ITEM);
  if (kept) return watch(kept);
  const body = await getJson("/v1/batches?limit=20");
  const book = body.batches.find((batch) => Object.keys(batch.bundles ?? {}).length > 0);
  if (book) watch(book.id);
}

function watch(batchId) {
  if (watching) clearTimeout(watching.timer);
  watching = { batchId, timer: null };
  const tick = async () => {
    try {
      const batch = await wholeBatch(batchId);
      render(batch);
      const bundlesDone = Object.values(batch.bundles ?? {}).every((b) => b.status !== "pending");
      if (batch.status === "running" || batch.status === "queued" || !bundlesDone) {
        watching.timer = setTimeout(tick, POLL_MS);
      }
    } catch (error) {
      showError(error);
    }
  };
  tick();
}

/** The batch with all its items (a page holds at most 200; a long book has more chapters). */
async function wholeBatch(batchId) {
  const batch = await getJson(`/v1/batches/${batchId}?limit=200`);
  while (batch.next_cursor) {
    const page = await getJson(`/v1/batches/${batchId}?limit=200&cursor=${encodeURIComponent(batch.next_cursor)}`);
    batch.items.push(...page.items);
    batch.next_cursor = page.next_cursor;
  }
  return batch;
}

function link(text, handler) {
  const anchor = document.createElement("a");
  anchor.href = "#book";
  anchor.textContent = text;
  anchor.addEventListener("click", (event) => {
    event.preventDefault();
    handler().catch(showError);
  });
  return anchor;
}

let shown = "";

function render(batch) {
  const signature = JSON.stringify([batch.id, batch.status, batch.counts, (batch.items ?? []).map((i) => i.status),
    Object.values(batch.bundles ?? {}).map((b) => b.status), document.documentElement.lang]);
  if (signature === shown) return;  // links stay put while nothing changed: a click never lands on a redrawn one
  shown = signature;
  $("book-progress").hidden = false;
  $("book-progress-title").textContent = batch.title ?? batch.id;
  const done = batch.counts.succeeded + batch.counts.failed + batch.counts.canceled;
  $("book-status").textContent = `${batch.status}: ${t("bookProgress", { done, total: batch.counts.total })}`;
  $("book-chapters").replaceChildren(...(batch.items ?? []).map((item, index) => {
    const li = document.createElement("li");
    const title = item.title ?? item.ref ?? item.job_id;
    if (item.status === "succeeded" && item.result) {
      const name = `${item.ref ?? String(index + 1).padStart(2, "0")}.${item.result.key.split(".").pop()}`;
      li.append(link(title, () => saveFile(`/v1/jobs/${item.job_id}/files/audio?download=true`, name)));
    } else {
      li.append(`${title}: ${item.status ?? "expired"}`);
    }
    return li;
  }));
  const bundles = [];
  for (const [kind, file, label] of [["zip", "book.zip", t("bundleZip")], ["m4b", "book.m4b", t("bundleM4b")]]) {
    const bundle = batch.bundles?.[kind];
    if (!bundle) continue;
    const li = document.createElement("li");
    if (bundle.status === "ready") li.append(link(label, () => saveFile(`/v1/batches/${batch.id}/files/${file}?download=true`)));
    else if (bundle.status === "pending") li.append(`${label}: ${t("bundlePending")}`);
    else li.append(`${label}: ${bundle.error?.message ?? bundle.status}`);
    bundles.push(li);
  }
  $("book-bundles").replaceChildren(...bundles);
  $("book-cancel").hidden = batch.status !== "running" && batch.status !== "queued";
}

async function cancel() {
  if (!watching) return;
  await call(`/v1/batches/${watching.batchId}`, { method: "DELETE" });
  watch(watching.batchId);
}
