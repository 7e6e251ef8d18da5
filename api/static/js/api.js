// Every call the studio makes: the key (kept in sessionStorage only) as an Authorization header,
// errors as ApiError with the API's code and message, and Server-Sent Events read with fetch and a
// stream reader, since EventSource cannot send the header.

const KEY_ITEM = "ttsq.key";

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export const session = {
  get key() {
    return sessionStorage.getItem(KEY_ITEM);
  },
  set key(value) {
    if (value) sessionStorage.setItem(KEY_ITEM, value);
    else sessionStorage.removeItem(KEY_ITEM);
  },
  onRefused: () => {},
};

function headers(extra = {}) {
  const key = session.key;
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function failure(response) {
  let code = "http_error";
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body.error) ({ code, message } = body.error);
  } catch {
    // not JSON: keep the status line
  }
  if (response.status === 401) session.onRefused(message);
  return new ApiError(response.status, code, message);
}

/** A fetch with the key; an ApiError unless the answer is 2xx. */
export async function call(path, { method = "GET", json, body, type, signal } = {}) {
  const extra = {};
  if (json !== undefined) extra["content-type"] = "application/json";
  else if (type) extra["content-type"] = type;
  const response = await fetch(path, {
    method,
    headers: headers(extra),
    body: json !== undefined ? JSON.stringify(json) : body,
    signal,
  });
  if (!response.ok) throw await failure(response);
  return response;
}

export async function getJson(path, options) {
  return (await call(path, options)).json();
}

/** A file of the API as a Blob (audio, marks, subtitles, bundles): fetched with the key. */
export async function getBlob(path) {
  return (await call(path)).blob();
}

/** The file name a Content-Disposition header gives (RFC 6266's filename* first). */
function dispositionName(header) {
  const exact = /filename\*=UTF-8''([^;]+)/i.exec(header ?? "");
  if (exact) return decodeURIComponent(exact[1]);
  return /filename="([^"]*)"/i.exec(header ?? "")?.[1] ?? "download";
}

/** Save a file the API holds, fetched with the key (never a key in a URL), under `name` or the
 * name the server gives it. */
export async function saveFile(path, name) {
  const response = await call(path);
  const url = URL.createObjectURL(await response.blob());
  name ??= dispositionName(response.headers.get("content-disposition"));
  const link = document.createElement("a");
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** Follow an SSE stream: `onEvent(name, data)` per event, until the server ends it or `signal` aborts. */
export async function follow(path, onEvent, signal) {
  const response = await call(path, { signal });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value.replaceAll("\r\n", "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
    }
  }
}
