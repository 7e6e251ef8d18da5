// The studio's words in English and Japanese: by the browser's language, switchable in the header.

const WORDS = {
  skip: ["Skip to the studio", "スタジオへ移動"],
  studio: ["studio", "スタジオ"],
  apiKey: ["API key", "API キー"],
  signIn: ["Sign in", "サインイン"],
  signOut: ["Sign out", "サインアウト"],
  signedIn: ["Signed in", "サインイン中"],
  noKeysNeeded: ["This server needs no key: you may use the studio as it is, or sign in with a key.",
    "このサーバーはキーなしで使えます。キーでサインインすることもできます。"],
  keyNeeded: ["Sign in with an API key to use the studio.", "スタジオを使うには API キーでサインインしてください。"],
  keyRefused: ["That key was not accepted (wrong or revoked): {message}", "そのキーは使えません（誤りか失効）: {message}"],
  signedOut: ["Signed out: the key is forgotten.", "サインアウトしました。キーは消去されました。"],
  language: ["Language", "表示言語"],
  navSpeak: ["Speak", "読み上げ"],
  navJobs: ["Jobs", "ジョブ"],
  navBook: ["Book", "本"],
  navLexicons: ["Lexicons", "辞書"],
  navUsage: ["Usage", "利用状況"],
  speakTitle: ["Speak and read along", "読み上げとテキスト追従"],
  text: ["Text", "テキスト"],
  ssml: ["The text is SSML", "テキストは SSML"],
  voice: ["Voice", "音声"],
  preview: ["Preview voice", "音声を試聴"],
  format: ["Format", "形式"],
  sampleRate: ["Sample rate", "サンプリングレート"],
  voiceRate: ["the voice's", "音声の既定"],
  speed: ["Speed", "速さ"],
  loudness: ["Loudness", "ラウドネス"],
  loudnessNone: ["as the voice is", "音声のまま"],
  marks: ["Marks", "マーク"],
  markSentence: ["sentences", "文"],
  markWord: ["words", "単語"],
  markPhoneme: ["phonemes", "音素"],
  markViseme: ["visemes", "口形素"],
  markSsml: ["SSML marks", "SSML マーク"],
  lexiconsUsed: ["Lexicons", "辞書"],
  ttl: ["Keep for (hours)", "保存期間（時間）"],
  speakButton: ["Speak", "読み上げる"],
  result: ["Result", "結果"],
  job: ["Job", "ジョブ"],
  segments: ["{done} of {total} segments", "{total} 区間中 {done} 区間"],
  audioReady: ["{seconds} s of {format}", "{format} {seconds} 秒"],
  streaming: ["Playing as it is made…", "生成しながら再生中…"],
  download: ["Download {what}", "{what} をダウンロード"],
  audio: ["audio", "音声"],
  marksFile: ["marks (JSON)", "マーク (JSON)"],
  vtt: ["subtitles (VTT)", "字幕 (VTT)"],
  srt: ["subtitles (SRT)", "字幕 (SRT)"],
  readAlong: ["Read along", "テキスト追従"],
  jobsTitle: ["Your jobs", "ジョブ一覧"],
  status: ["Status", "状態"],
  all: ["all", "すべて"],
  refresh: ["Refresh", "更新"],
  created: ["Created", "作成"],
  length: ["Length", "長さ"],
  finished: ["Finished", "完了"],
  actions: ["Actions", "操作"],
  more: ["More", "さらに表示"],
  open: ["Open", "開く"],
  cancel: ["Cancel", "キャンセル"],
  delete: ["Delete", "削除"],
  runAgain: ["Run again with these options", "同じ設定で再実行"],
  noJobs: ["No jobs yet.", "ジョブはまだありません。"],
  chars: ["{n} characters", "{n} 文字"],
  bookTitle: ["Narrate a book", "本を朗読"],
  book: ["Book", "本"],
  narrateIt: ["Narrate", "朗読"],
  chapter: ["Chapter", "章"],
  characters: ["Characters", "文字数"],
  estimate: ["Estimated length", "推定の長さ"],
  narrate: ["Narrate", "朗読する"],
  noChapterChosen: ["Choose at least one chapter.", "章を一つ以上選んでください。"],
  bookProgress: ["{done} of {total} chapters done", "{total} 章中 {done} 章完了"],
  bundleZip: ["All chapters (zip)", "全章 (zip)"],
  bundleM4b: ["Audiobook (M4B with chapters)", "オーディオブック（章付き M4B）"],
  bundlePending: ["being made…", "作成中…"],
  lexiconsTitle: ["Pronunciations", "発音辞書"],
  name: ["Name", "名前"],
  languageCode: ["Language", "言語"],
  entries: ["Entries", "項目数"],
  version: ["Version", "版"],
  newLexicon: ["New lexicon", "新しい辞書"],
  importPls: ["Import PLS", "PLS を読み込む"],
  edit: ["Edit", "編集"],
  grapheme: ["Written", "表記"],
  kind: ["Said as", "読み方の種類"],
  kindAlias: ["alias (words)", "言い換え"],
  kindPhoneme: ["IPA", "IPA"],
  kindReading: ["reading (katakana)", "読み（カタカナ）"],
  pronunciation: ["Pronunciation", "読み"],
  accent: ["Accent", "アクセント"],
  remove: ["Remove", "削除"],
  addEntry: ["Add entry", "項目を追加"],
  save: ["Save", "保存"],
  saved: ["Saved {name}, version {version}.", "{name} を保存しました（版 {version}）。"],
  deleted: ["Deleted {name}.", "{name} を削除しました。"],
  exportPls: ["Export PLS", "PLS で書き出す"],
  sentence: ["Sentence", "文"],
  listen: ["Listen", "聞く"],
  listenWithout: ["Listen without the lexicon", "辞書なしで聞く"],
  editing: ["Editing {name}", "{name} を編集中"],
  usageTitle: ["Usage", "利用状況"],
  today: ["Today (UTC)", "今日 (UTC)"],
  used: ["Used", "使用量"],
  limit: ["Limit", "上限"],
  left: ["Left today", "今日の残り"],
  unlimited: ["no limit", "無制限"],
  byDay: ["By day", "日別"],
  byVoice: ["By voice", "音声別"],
  day: ["Day", "日付"],
  audioSeconds: ["Audio seconds", "音声（秒）"],
  jobsCount: ["Jobs", "ジョブ数"],
  reserved: ["Audio seconds reserved by unfinished jobs", "未完了ジョブが予約中の音声（秒）"],
  activeJobs: ["Active jobs", "実行中のジョブ"],
  apiDocs: ["API documentation", "API ドキュメント"],
};

const LANGUAGES = ["en", "ja"];
const CHOICE_ITEM = "ttsq.language";
let current = "en";

export function chooseLanguage() {
  const chosen = sessionStorage.getItem(CHOICE_ITEM);
  const browser = (navigator.language || "en").slice(0, 2);
  current = LANGUAGES.includes(chosen) ? chosen : LANGUAGES.includes(browser) ? browser : "en";
  return current;
}

export function setLanguage(language) {
  current = LANGUAGES.includes(language) ? language : "en";
  sessionStorage.setItem(CHOICE_ITEM, current);
  translatePage();
}

export function language() {
  return current;
}

/** The word for `key` in the page's language, `{name}` filled from `values`. */
export function t(key, values = {}) {
  const entry = WORDS[key];
  const text = entry ? entry[LANGUAGES.indexOf(current)] ?? entry[0] : key;
  return text.replace(/\{(\w+)\}/g, (_, name) => String(values[name] ?? ""));
}

export function translatePage() {
  document.documentElement.lang = current;
  for (const element of document.querySelectorAll("[data-i18n]")) {
    element.textContent = t(element.dataset.i18n);
  }
  document.dispatchEvent(new CustomEvent("ttsq:language"));
}
