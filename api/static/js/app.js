// The studio's frame: sign-in, the views behind the tabs, the pickers every view shares.

import { ApiError, getJson, session } from "./api.js";
import { chooseLanguage, setLanguage, t, translatePage } from "./i18n.js";
import * as book from "./book.js";
import * as jobs from "./jobs.js";
import * as lexicons from "./lexicons.js";
import * as speak from "./speak.js";
import * as usage from "./usage.js";

const VIEWS = { speak, jobs, book, lexicons, usage };
const $ = (id) => document.getElementById(id);
let signedIn = false;
let open = false;

export const shared = { voices: [], lexicons: [] };

function showAuth(message) {
  $("auth-message").textContent = message;
}

function renderSignedIn() {
  $("sign-in").hidden = signedIn;
  $("signed-in").hidden = !signedIn;
  $("who").textContent = signedIn ? t("signedIn") : "";
  document.querySelector("nav").hidden = !(signedIn || open);
  document.querySelector("main").hidden = !(signedIn || open);
}

async function usable() {
  try {
    await getJson("/v1/jobs?limit=1");
    return true;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return false;
    throw error;
  }
}

async function signIn(event) {
  event.preventDefault();
  const key = $("key").value.trim();
  if (!key) return;
  session.key = key;
  $("key").value = "";
  if (await usable()) {
    signedIn = true;
    showAuth("");
    renderSignedIn();
    await start();
  }
}

function signOut(message = t("signedOut")) {
  session.key = null;
  for (const item of ["ttsq.book", "ttsq.texts"]) sessionStorage.removeItem(item);  // the tenant's, not the next one's
  signedIn = false;
  renderSignedIn();
  showAuth(open ? `${message} ${t("noKeysNeeded")}` : message);
}

session.onRefused = (message) => {
  if (!session.key) return;
  signOut(t("keyRefused", { message }));
};

async function loadVoices() {
  const body = await getJson("/v1/voices");
  shared.voices = body.voices;
  for (const select of document.querySelectorAll(".voice-picker")) fillVoices(select);
}

const LANGUAGE_NAMES = { en: ["English", "英語"], ja: ["Japanese", "日本語"] };

function languageName(code) {
  const base = code.slice(0, 2);
  const region = code.length > 2 ? ` (${code.slice(3)})` : "";
  const names = LANGUAGE_NAMES[base];
  return (names ? names[document.documentElement.lang === "ja" ? 1 : 0] : code) + region;
}

function fillVoices(select) {
  const chosen = select.value;
  select.replaceChildren();
  const byLanguage = new Map();
  for (const voice of shared.voices) {
    if (!byLanguage.has(voice.language)) byLanguage.set(voice.language, []);
    byLanguage.get(voice.language).push(voice);
  }
  for (const [code, voices] of [...byLanguage].sort()) {
    const group = document.createElement("optgroup");
    group.label = languageName(code);
    for (const voice of voices) {
      const option = new Option(voice.id, voice.id, voice.default, chosen ? chosen === voice.id : voice.default);
      group.append(option);
    }
    select.append(group);
  }
}

export const FORMATS = ["mp3", "wav", "flac", "ogg", "opus", "aac", "m4a", "mulaw", "alaw", "wav_mulaw"];
const FORMAT_NAMES = {
  ogg: "ogg (Vorbis)", opus: "opus (Ogg)", aac: "aac (ADTS)", m4a: "m4a (AAC)",
  mulaw: "μ-law (raw)", alaw: "A-law (raw)", wav_mulaw: "μ-law (WAV)",
};
const LOUDNESS = ["", "podcast", "broadcast", "audiobook"];

function fillPickers() {
  for (const select of document.querySelectorAll(".format-picker")) {
    const chosen = select.value || "mp3";
    select.replaceChildren(...FORMATS.map((f) => new Option(FORMAT_NAMES[f] ?? f, f, false, f === chosen)));
  }
  for (const select of document.querySelectorAll(".loudness-picker")) {
    const chosen = select.value;
    select.replaceChildren(...LOUDNESS.map((p) => new Option(p || t("loudnessNone"), p, false, p === chosen)));
  }
}

export function voiceOf(id) {
  return shared.voices.find((voice) => voice.id === id);
}

function showView() {
  const name = location.hash.slice(1) in VIEWS ? location.hash.slice(1) : "speak";
  for (const [view] of Object.entries(VIEWS)) $(`view-${view}`).hidden = view !== name;
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.view === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (signedIn || open) VIEWS[name].show?.();
}

let started = false;

async function start() {
  await loadVoices();
  fillPickers();
  if (!started) {
    for (const view of Object.values(VIEWS)) view.init();
    started = true;
  }
  showView();
}

async function boot() {
  $("ui-language").value = chooseLanguage();
  translatePage();
  $("ui-language").addEventListener("change", (event) => setLanguage(event.target.value));
  document.addEventListener("ttsq:language", () => {
    document.querySelectorAll(".voice-picker").forEach(fillVoices);
    fillPickers();
    renderSignedIn();
  });
  $("sign-in").addEventListener("submit", (event) => signIn(event).catch(report));
  $("sign-out").addEventListener("click", () => signOut());
  window.addEventListener("hashchange", showView);
  if (session.key && (await usable())) signedIn = true;
  if (!signedIn) {
    session.key = null;
    open = document.body.dataset.keys !== "required";
    showAuth(open ? t("noKeysNeeded") : t("keyNeeded"));
  }
  renderSignedIn();
  if (signedIn || open) await start();
}

function report(error) {
  showAuth(error.message);
}

boot().catch(report);
