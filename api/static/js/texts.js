// The texts this tab submitted, by job id: the API keeps no text to hand back, and "run again" and
// the read-along lay out the words as they were written. sessionStorage: gone with the tab.

const ITEM = "ttsq.texts";
const KEPT = 50;

function all() {
  try {
    return JSON.parse(sessionStorage.getItem(ITEM) || "{}");
  } catch {
    return {};
  }
}

export function remember(jobId, text, textType) {
  const texts = all();
  texts[jobId] = { text, textType };
  const ids = Object.keys(texts);
  for (const old of ids.slice(0, Math.max(0, ids.length - KEPT))) delete texts[old];
  sessionStorage.setItem(ITEM, JSON.stringify(texts));
}

export function recall(jobId) {
  return all()[jobId] ?? null;
}
