// Short texts start playing before their job ends: the speech endpoint's MP3 answer, read with
// fetch (the key in a header) and appended to a MediaSource as it arrives.

import { call } from "./api.js";

const MP3 = "audio/mpeg";

export function canStream() {
  return typeof MediaSource !== "undefined" && MediaSource.isTypeSupported(MP3);
}

function opened(source) {
  return new Promise((resolve) => source.addEventListener("sourceopen", resolve, { once: true }));
}

function appended(buffer, chunk) {
  return new Promise((resolve, reject) => {
    buffer.addEventListener("updateend", resolve, { once: true });
    buffer.addEventListener("error", reject, { once: true });
    buffer.appendBuffer(chunk);
  });
}

/** POST the speech request and play its answer in `audio` as it streams; `onJob(id)` as soon as
 * the job is known. Resolves with the job id when the whole answer is in. */
export async function streamSpeech(audio, body, onJob) {
  const response = await call("/v1/audio/speech", { method: "POST", json: { ...body, response_format: "mp3" } });
  const jobId = response.headers.get("x-ttsq-job-id");
  onJob(jobId);
  const source = new MediaSource();
  audio.src = URL.createObjectURL(source);
  audio.dataset.file = "stream";
  await opened(source);
  const buffer = source.addSourceBuffer(MP3);
  const reader = response.body.getReader();
  let first = true;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    await appended(buffer, value);
    if (first) {
      first = false;
      audio.play().catch(() => {});  // autoplay may be refused; the controls still play it
    }
  }
  source.endOfStream();
  return jobId;
}
