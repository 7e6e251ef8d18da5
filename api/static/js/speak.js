// The Speak view: every job option, live progress, first audio before the job ends for short
// texts, then the result with its read-along, subtitles and downloads.

import { follow, getBlob, getJson, call, saveFile } from "./api.js";
import { shared, voiceOf } from "./app.js";
import { t } from "./i18n.js";
import { ReadAlong } from "./readalong.js";
import { canStream, streamSpeech } from "./streamplay.js";
import { recall, remember } from "./texts.js";

const $ = (id) => document.getElementById(id);
const TERMINAL = new Set(["succeeded", "failed", "canceled"]);
const RATES = [8000, 16000, 22050, 24000, 44100, 48000];
const STREAMED_CHARS = 1500;
const MARKS = ["sentence", "word", "phoneme", "viseme", "ssml"];
let readAlong;
let following = null;
let objectUrls = [];

export function init() {
  readAlong = new ReadAlong($("readalong"), $("player"));
  $("speak-form").addEventListener("submit", (event) => {
    event.preventDefault();
    speak().catch(showError);
  });
  $("preview").addEventListener("click", () => preview().catch(showError));
  fillRates();
}

export function show() {
  loadLexicons().catch(() => {});
}

function fillRates() {
  const select = $("sample-rate");
  select.replaceChildren(new Option(t("voiceRate"), ""), ...RATES.map((r) => new Option(`${r} Hz`, String(r))));
}

async function loadLexicons() {
  const body = await getJson("/v1/lexicons");
  shared.lexicons = body.lexicons;
  const select = $("speak-lexicons");
  const chosen = new Set([...select.selectedOptions].map((o) => o.value));
  select.replaceChildren(
    ...body.lexicons.map((l) => new Option(`${l.name} (${l.language})`, l.name, false, chosen.has(l.name))),
  );
}

function showError(error) {
  $("speak-error").textContent = error.code ? `${error.code}: ${error.message}` : String(error.message ?? error);
}

/** The job's options as the form has them (what a job request and the speech request share). */
function options() {
  const body = { voice: $("voice").value || undefined, speed: Number($("speed").value) };
  const rate = $("sample-rate").value;
  if (rate) body.sample_rate = Number(rate);
  const preset = $("loudness").value;
  if (preset) body.loudness = { preset };
  const lexicons = [...$("speak-lexicons").selectedOptions].map((o) => o.value);
  if (lexicons.length) body.lexicons = lexicons;
  const marks = MARKS.filter((kind) => $(`marks-${kind}`).checked);
  if (marks.length) body.marks = marks;
  return body;
}

function reset(keepAudio = false) {
  $("speak-error").textContent = "";
  $("status").textContent = "";
  $("result").hidden = false;
  if (!keepAudio) {
    following?.abort();
    following = null;
    for (const url of objectUrls) URL.revokeObjectURL(url);
    objectUrls = [];
    $("player").pause();
    $("player").removeAttribute("src");
  }
  $("player").replaceChildren();
  $("downloads").replaceChildren();
  $("progress").value = 0;
  $("detail").textContent = "";
  readAlong.clear();
}

async function speak() {
  reset();
  $("job-id").textContent = "";
  const text = $("text").value;
  const ssml = $("ssml").checked;
  const format = $("format").value;
  const ttl = $("ttl").value;
  const body = options();
  $("speak").disabled = true;
  try {
    if (!ssml && !ttl && format === "mp3" && text.length <= STREAMED_CHARS && canStream()) {
      await speakStreamed(text, body);
    } else {
      const request = { ...body, text, format, text_type: ssml ? "ssml" : "text" };
      if (ttl) request.ttl_hours = Number(ttl);
      const job = await getJson("/v1/jobs", { method: "POST", json: request });
      remember(job.id, text, request.text_type);
      render(job);
      await followJob(job.id, false);
    }
  } finally {
    $("speak").disabled = false;
  }
}

async function speakStreamed(text, body) {
  const request = { model: "tts-1", input: text, ...body, voice: body.voice ?? "alloy" };
  let jobId = null;
  let progress = null;
  $("detail").textContent = t("streaming");
  await streamSpeech($("player"), request, (id) => {
    jobId = id;
    remember(id, text, "text");
    $("job-id").textContent = id;
    progress = followJob(id, true);
  });
  await progress;
  return jobId;
}

/** Follow the job's events; on success show the result (keeping the streamed audio if `live`). */
async function followJob(jobId, live) {
  following = new AbortController();
  let last = null;
  await follow(`/v1/jobs/${jobId}/events`, (_, job) => {
    last = job;
    render(job);
  }, following.signal);
  if (last?.status === "succeeded") await present(last, live);
  if (last?.status === "failed") showError(last.error);
}

function render(job) {
  $("job-id").textContent = job.id;
  $("status").textContent = job.status;
  const { segments_total: total, segments_done: done } = job.progress;
  if (total) {
    $("progress").max = total;
    $("progress").value = done;
    $("detail").textContent = t("segments", { done, total });
  }
}

function blobUrl(blob) {
  const url = URL.createObjectURL(blob);
  objectUrls.push(url);
  return url;
}

/** The finished job in the player: its audio (unless it already streams there), read-along and track. */
export async function present(job, live = false) {
  reset(live);
  render(job);
  const result = job.result;
  $("progress").value = $("progress").max;
  $("detail").textContent = t("audioReady", { seconds: result.duration_s.toFixed(2), format: job.format });
  const player = $("player");
  const stored = blobUrl(await getBlob(`/v1/jobs/${job.id}/files/audio`));
  if (live && player.src) {
    swapWhenIdle(player, stored);
  } else {
    player.src = stored;
    player.dataset.file = "stored";
  }
  const voice = voiceOf(job.voice);
  const language = (voice?.language ?? "en").replace("_", "-");
  if (result.subtitles_key) {
    const track = document.createElement("track");
    track.kind = "subtitles";
    track.label = t("vtt");
    track.srclang = language.slice(0, 2);
    track.default = true;
    track.src = blobUrl(await getBlob(`/v1/jobs/${job.id}/files/subtitles.vtt`));
    player.append(track);
  }
  if (result.marks_key) {
    const marks = await getJson(`/v1/jobs/${job.id}/files/marks.json`);
    readAlong.show(marks, recall(job.id)?.textType === "text" ? recall(job.id).text : null, language);
  }
  addDownloads(job);
}

/** The streamed audio gives way to the stored file once it is not playing: the file's length is the
 * job's exactly (a stream of MP3 frames carries the encoder's padding), and it seeks anywhere. */
function swapWhenIdle(player, url) {
  const swap = () => {
    const at = player.ended ? 0 : player.currentTime;
    player.src = url;
    player.currentTime = at;
    player.dataset.file = "stored";
  };
  if (player.paused || player.ended) swap();
  else player.addEventListener("ended", swap, { once: true });
}

function addDownloads(job) {
  const files = [["audio", t("audio"), `${job.id}.${job.format}`]];
  if (job.result.marks_key) files.push(["marks.json", t("marksFile"), `${job.id}.marks.json`]);
  if (job.result.subtitles_key) files.push(["subtitles.vtt", t("vtt"), `${job.id}.vtt`]);
  if (job.result.srt_key) files.push(["subtitles.srt", t("srt"), `${job.id}.srt`]);
  $("downloads").replaceChildren(
    ...files.map(([file, label, name]) => {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = t("download", { what: label });
      button.addEventListener("click", () => saveFile(`/v1/jobs/${job.id}/files/${file}?download=true`, name).catch(showError));
      item.append(button);
      return item;
    }),
  );
}

/** Fill the form from a job's options ("run again"); its text too when this tab wrote it. */
export function load(job) {
  const options = job.options;
  $("voice").value = job.voice;
  $("format").value = job.format;
  $("speed").value = String(options.speed);
  $("sample-rate").value = options.sample_rate ? String(options.sample_rate) : "";
  $("loudness").value = options.loudness?.preset ?? "";
  for (const kind of MARKS) $(`marks-${kind}`).checked = options.marks.includes(kind);
  for (const option of $("speak-lexicons").options) option.selected = options.lexicons.some((l) => l.name === option.value);
  $("ttl").value = job.ttl_hours ? String(job.ttl_hours) : "";
  const written = recall(job.id);
  if (written) {
    $("text").value = written.text;
    $("ssml").checked = written.textType === "ssml";
  }
  location.hash = "#speak";
  $("text").focus();
}

const SAMPLES = { en: "Hello, this is how I sound.", ja: "こんにちは、この声で読み上げます。" };

/** A short sentence in the chosen voice, in its own language, not kept. */
async function preview() {
  const voice = voiceOf($("voice").value);
  const input = SAMPLES[voice?.language.slice(0, 2)] ?? SAMPLES.en;
  const response = await call("/v1/audio/speech", {
    method: "POST",
    json: { model: "tts-1", input, voice: voice?.id ?? "alloy", response_format: "mp3", keep: false },
  });
  const audio = new Audio(blobUrl(await response.blob()));
  await audio.play();
}
