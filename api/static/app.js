// The ttsq try-it page: submit a job, follow it over Server-Sent Events, play the result.
"use strict";

const $ = (id) => document.getElementById(id);
const TERMINAL = new Set(["succeeded", "failed", "canceled"]);
let stream = null;

function showError(code, message) {
  $("error").textContent = `${code}: ${message}`;
  $("error").hidden = false;
}

async function loadVoices() {
  const response = await fetch("/v1/voices");
  const body = await response.json();
  for (const voice of body.voices) {
    const option = new Option(`${voice.id} (${voice.language}, ${voice.sample_rate} Hz)`, voice.id);
    option.selected = voice.default;
    $("voice").add(option);
  }
}

function render(job) {
  $("job").hidden = false;
  $("job-id").textContent = job.id;
  $("status").textContent = job.status;
  const { segments_total: total, segments_done: done, audio_s: audio } = job.progress;
  if (total) {
    $("progress").max = total;
    $("progress").value = done;
  }
  $("detail").textContent = total ? `${done} of ${total} segments` + (audio ? `, ${audio.toFixed(1)} s of audio` : "") : "";
  if (job.status === "succeeded" && job.result) {
    $("progress").value = $("progress").max;
    $("detail").textContent = `${job.result.duration_s.toFixed(2)} s of ${job.format}, ${job.result.bytes} bytes`;
    $("player").src = `/v1/jobs/${job.id}/audio`;
    $("player").hidden = false;
    $("download").href = job.result.url;
    $("download").download = `ttsq-${job.id}.${job.format}`;
    $("download").hidden = false;
  }
  if (job.status === "failed" && job.error) {
    showError(job.error.code, job.error.message);
  }
}

function follow(jobId) {
  if (stream) stream.close();
  stream = new EventSource(`/v1/jobs/${jobId}/events`);
  const onEvent = (event) => {
    const job = JSON.parse(event.data);
    render(job);
    if (TERMINAL.has(job.status)) stream.close();  // the server ends the stream; don't reconnect
  };
  for (const name of ["queued", "running", "progress", "succeeded", "failed", "canceled"]) {
    stream.addEventListener(name, onEvent);
  }
  stream.onerror = () => {
    if (stream.readyState === EventSource.CLOSED) return;
    stream.close();
    showError("stream_lost", "the event stream broke; reload the job with GET /v1/jobs/" + jobId);
  };
}

async function submit(event) {
  event.preventDefault();
  $("error").hidden = true;
  $("player").hidden = true;
  $("download").hidden = true;
  $("player").removeAttribute("src");
  const body = {
    text: $("text").value,
    voice: $("voice").value || undefined,
    format: $("format").value,
    speed: Number($("speed").value),
  };
  $("submit").disabled = true;
  try {
    const response = await fetch("/v1/jobs", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok) {
      showError(answer.error.code, answer.error.message);
      return;
    }
    render(answer);
    follow(answer.id);
  } catch (error) {
    showError("network_error", String(error));
  } finally {
    $("submit").disabled = false;
  }
}

$("form").addEventListener("submit", submit);
loadVoices().catch((error) => showError("voices_unavailable", String(error)));
