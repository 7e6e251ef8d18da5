// The Lexicons view: list, create, edit entries (written form → alias, IPA or katakana reading),
// delete, import and export PLS; listen to a sentence with the edited entries before saving them,
// and beside it without the lexicon.

import { call, getJson, saveFile } from "./api.js";
import { t } from "./i18n.js";

const $ = (id) => document.getElementById(id);
const KINDS = ["alias", "phoneme", "reading"];
let editing = null;

export function init() {
  $("lexicon-new").addEventListener("submit", (event) => {
    event.preventDefault();
    edit({ name: $("lexicon-name").value, language: $("lexicon-language").value, entries: [] });
  });
  $("lexicon-import").addEventListener("change", () => importPls().catch(showError));
  $("entry-add").addEventListener("click", () => addRow({ graphemes: [""], alias: "" }));
  $("lexicon-save").addEventListener("click", () => save().catch(showError));
  $("lexicon-export").addEventListener("click", () => exportPls().catch(showError));
  $("listen").addEventListener("click", () => listen(true).catch(showError));
  $("listen-without").addEventListener("click", () => listen(false).catch(showError));
}

export function show() {
  list().catch(showError);
}

function showError(error) {
  $("lexicons-message").textContent = "";
  $("lexicons-error").textContent = error.code ? `${error.code}: ${error.message}` : String(error.message ?? error);
}

function say(message) {
  $("lexicons-error").textContent = "";
  $("lexicons-message").textContent = message;
}

async function list() {
  const body = await getJson("/v1/lexicons");
  $("lexicons-table").tBodies[0].replaceChildren(...body.lexicons.map((lexicon) => {
    const tr = document.createElement("tr");
    for (const value of [lexicon.name, lexicon.language, lexicon.entries, lexicon.version]) {
      const td = document.createElement("td");
      td.textContent = String(value);
      tr.append(td);
    }
    const actions = document.createElement("td");
    actions.append(
      button(t("edit"), () => open(lexicon.name), `${t("edit")} ${lexicon.name}`),
      button(t("delete"), () => remove(lexicon.name), `${t("delete")} ${lexicon.name}`),
    );
    tr.append(actions);
    return tr;
  }));
}

function button(label, handler, accessibleName) {
  const element = document.createElement("button");
  element.type = "button";
  element.textContent = label;
  if (accessibleName) element.setAttribute("aria-label", accessibleName);
  element.addEventListener("click", () => handler().catch(showError));
  return element;
}

async function open(name) {
  const lexicon = await getJson(`/v1/lexicons/${name}?format=json`);
  edit({ name, ...lexicon });
}

async function remove(name) {
  await call(`/v1/lexicons/${name}`, { method: "DELETE" });
  if (editing?.name === name) $("lexicon-editor").hidden = true;
  say(t("deleted", { name }));
  await list();
}

function edit(lexicon) {
  editing = { name: lexicon.name, language: lexicon.language };
  $("editor-title").textContent = t("editing", { name: lexicon.name });
  $("entries-table").tBodies[0].replaceChildren();
  for (const entry of lexicon.entries) addRow(entry);
  if (!lexicon.entries.length) addRow({ graphemes: [""], alias: "" });
  $("lexicon-editor").hidden = false;
}

function input(value, label) {
  const element = document.createElement("input");
  element.value = value ?? "";
  element.setAttribute("aria-label", label);
  return element;
}

function addRow(entry) {
  const tbody = $("entries-table").tBodies[0];
  const number = tbody.rows.length + 1;
  const tr = document.createElement("tr");
  const kind = document.createElement("select");
  kind.setAttribute("aria-label", `${t("kind")} ${number}`);
  const labels = { alias: t("kindAlias"), phoneme: t("kindPhoneme"), reading: t("kindReading") };
  for (const name of KINDS) kind.append(new Option(labels[name], name, false, entry[name] != null));
  const chosen = KINDS.find((name) => entry[name] != null) ?? "alias";
  const cells = [
    input(entry.graphemes.join(", "), `${t("grapheme")} ${number}`),
    kind,
    input(entry[chosen], `${t("pronunciation")} ${number}`),
    input(entry.accent ?? "", `${t("accent")} ${number}`),
  ];
  cells[0].className = "grapheme";
  cells[2].className = "pronunciation";
  cells[3].className = "accent";
  cells[3].inputMode = "numeric";
  for (const element of cells) {
    const td = document.createElement("td");
    td.append(element);
    tr.append(td);
  }
  const actions = document.createElement("td");
  actions.append(button(t("remove"), async () => tr.remove(), `${t("remove")} ${number}`));
  tr.append(actions);
  tbody.append(tr);
}

/** The editor's entries in ttsq's JSON form, as PUT and the preview take them. */
function draft() {
  const entries = [...$("entries-table").tBodies[0].rows].map((tr) => {
    const [graphemes, kind, pronunciation, accent] = tr.querySelectorAll("input, select");
    const entry = { graphemes: graphemes.value.split(",").map((g) => g.trim()).filter(Boolean) };
    entry[kind.value] = pronunciation.value;
    if (kind.value === "phoneme") entry.alphabet = "ipa";
    if (kind.value === "reading" && accent.value !== "") entry.accent = Number(accent.value);
    return entry;
  });
  return { language: editing.language, entries };
}

async function save() {
  const summary = await getJson(`/v1/lexicons/${editing.name}`, { method: "PUT", json: draft() });
  say(t("saved", { name: summary.name, version: summary.version }));
  await list();
}

async function importPls() {
  const file = $("lexicon-import").files[0];
  const name = $("lexicon-name").value || file.name.replace(/\.[^.]*$/, "").replace(/[^A-Za-z0-9]/g, "").slice(0, 20);
  const summary = await getJson(`/v1/lexicons/${name}`, { method: "PUT", body: await file.text(), type: "application/pls+xml" });
  say(t("saved", { name: summary.name, version: summary.version }));
  $("lexicon-import").value = "";
  await list();
  await open(summary.name);
}

async function exportPls() {
  await saveFile(`/v1/lexicons/${editing.name}?format=pls&download=true`, `${editing.name}.pls`);
}

async function listen(withDraft) {
  const text = $("listen-text").value || draft().entries[0]?.graphemes[0] || "";
  const voice = $("listen-voice").value || undefined;
  const response = withDraft
    ? await call("/v1/lexicon-preview", { method: "POST", json: { lexicon: draft(), text, voice, format: "mp3" } })
    : await call("/v1/audio/speech", { method: "POST", json: { model: "tts-1", input: text, voice, response_format: "mp3", keep: false } });
  const player = $("listen-player");
  if (player.src) URL.revokeObjectURL(player.src);
  player.src = URL.createObjectURL(await response.blob());
  player.dataset.heard = withDraft ? "with" : "without";
  await player.play().catch(() => {});
}
