// The Usage view: today's characters, audio and jobs beside the key's limits and what is left,
// then by day and by voice (GET /v1/usage, counted from the events the quotas count).

import { getJson } from "./api.js";
import { t } from "./i18n.js";

const $ = (id) => document.getElementById(id);

export function init() {}

export function show() {
  load().catch((error) => {
    $("usage-error").textContent = error.code ? `${error.code}: ${error.message}` : String(error.message ?? error);
  });
}

function tr(cells, header = false) {
  const row = document.createElement("tr");
  cells.forEach((value, index) => {
    const cell = document.createElement(header && index === 0 ? "th" : "td");
    if (header && index === 0) cell.scope = "row";
    cell.textContent = value === null || value === undefined ? t("unlimited") : String(value);
    row.append(cell);
  });
  return row;
}

function seconds(value) {
  return value === null || value === undefined ? value : Number(value).toFixed(1);
}

async function load() {
  $("usage-error").textContent = "";
  const usage = await getJson("/v1/usage?days=30");
  const { today } = usage;
  const { limits, remaining } = today;
  $("usage-today").tBodies[0].replaceChildren(
    tr([t("characters"), today.characters, limits.chars_per_day, remaining.characters], true),
    tr([t("audioSeconds"), seconds(today.audio_seconds), seconds(limits.audio_seconds_per_day), seconds(remaining.audio_seconds)], true),
    tr([t("activeJobs"), today.active_jobs, limits.max_active_jobs, remaining.active_jobs], true),
    tr([t("jobsCount"), today.jobs, "", ""], true),
    tr([t("reserved"), seconds(today.reserved_audio_seconds), "", ""], true),
  );
  $("usage-days").tBodies[0].replaceChildren(
    ...usage.by_day.filter((day) => day.jobs || day.characters).reverse()
      .map((day) => tr([day.day, day.characters, seconds(day.audio_seconds), day.jobs], true)),
  );
  $("usage-voices").tBodies[0].replaceChildren(
    ...usage.by_voice.map((voice) => tr([voice.voice, voice.characters, seconds(voice.audio_seconds), voice.jobs], true)),
  );
}
