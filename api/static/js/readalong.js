// The read-along: the words of the word marks laid out as text, the one being spoken marked
// aria-current="true" and highlighted, a click (or Enter) on a word seeks there.

/** The index of the word being spoken at `ms`: the last word that has started (none before the first). */
export function wordAt(words, ms) {
  let low = 0;
  let high = words.length - 1;
  let found = -1;
  while (low <= high) {
    const middle = (low + high) >> 1;
    if (words[middle].start_ms <= ms) {
      found = middle;
      low = middle + 1;
    } else {
      high = middle - 1;
    }
  }
  return found;
}

function wordButton(mark, index) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "word";
  button.textContent = mark.value;
  button.dataset.index = String(index);
  button.dataset.startMs = String(mark.start_ms);
  button.tabIndex = index === 0 ? 0 : -1;
  return button;
}

/** Words placed in the written text when the page has it (punctuation and spacing kept, a word's
 * punctuation on its line), else joined with spaces (none for Japanese). */
function layOut(container, words, text, spaced) {
  const usable = typeof text === "string" && words.every((w) => text.slice(w.text_start, w.text_end) === w.value);
  const pieces = [];
  words.forEach((mark, index) => {
    const word = document.createElement("span");
    word.className = "nowrap";
    word.append(wordButton(mark, index));
    if (usable) {
      if (index === 0 && mark.text_start > 0) pieces.push(document.createTextNode(text.slice(0, mark.text_start)));
      const gap = text.slice(mark.text_end, words[index + 1]?.text_start ?? text.length);
      const attached = /^\S*/.exec(gap)[0];
      if (attached) word.append(attached);
      pieces.push(word);
      if (gap.length > attached.length) pieces.push(document.createTextNode(gap.slice(attached.length)));
    } else {
      if (index > 0 && spaced) pieces.push(document.createTextNode(" "));
      pieces.push(word);
    }
  });
  container.replaceChildren(...pieces);
}

export class ReadAlong {
  constructor(container, audio) {
    this.container = container;
    this.audio = audio;
    this.words = [];
    this.current = -1;
    const update = () => this.update();
    for (const name of ["timeupdate", "seeked", "seeking", "play", "loadedmetadata"]) audio.addEventListener(name, update);
    audio.addEventListener("play", () => this.follow());
    container.addEventListener("click", (event) => this.seekTo(event.target));
    container.addEventListener("keydown", (event) => this.move(event));
  }

  show(marks, text, language) {
    this.words = marks.filter((m) => m.type === "word").sort((a, b) => a.start_ms - b.start_ms);
    this.current = -1;
    this.container.lang = language;
    layOut(this.container, this.words, text, !language.startsWith("ja"));
    this.container.hidden = this.words.length === 0;
    this.update();
  }

  clear() {
    this.words = [];
    this.container.replaceChildren();
    this.container.hidden = true;
  }

  buttons() {
    return this.container.querySelectorAll("button.word");
  }

  update() {
    const index = wordAt(this.words, this.audio.currentTime * 1000);
    if (index === this.current) return;
    const buttons = this.buttons();
    buttons[this.current]?.removeAttribute("aria-current");
    buttons[index]?.setAttribute("aria-current", "true");
    this.current = index;
  }

  follow() {
    const step = () => {
      this.update();
      if (!this.audio.paused && !this.audio.ended) requestAnimationFrame(step);
    };
    requestAnimationFrame(step);
  }

  seekTo(target) {
    if (!(target instanceof HTMLElement) || !target.classList.contains("word")) return;
    this.audio.currentTime = Number(target.dataset.startMs) / 1000;
    this.update();
    this.audio.play().catch(() => {});
  }

  move(event) {
    const step = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 }[event.key];
    if (!step || !(event.target instanceof HTMLElement)) return;
    const buttons = [...this.buttons()];
    const next = buttons[buttons.indexOf(event.target) + step];
    if (!next) return;
    event.preventDefault();
    event.target.tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  }
}
