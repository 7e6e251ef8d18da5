"""``make bench-loudness``: loudness targets checked with meters ttsq does not use, on real jobs.

* ``voices``: each voice's level as it comes (one paragraph of its language, a job without a
  target), then with the podcast preset as a job and through the speech endpoint (whose gain is the
  voice's calibration): how far apart the voices are, before and after.
* ``book``: over 30 minutes of narration as one job per preset (WAV): integrated loudness by
  pyloudnorm, true peak by SciPy's 4x polyphase resampler, and ACX's checks for the audiobook one
  (RMS of the whole file, sample peak, noise floor as the quietest half second's RMS).
* ``chapters``: the same book in chapters as one batch with the audiobook preset in its defaults:
  each chapter's level, the first against the last.
* ``assembly``: the assembly's encoding of ``--hours`` of speech (the 1,000,000-character job's
  16.7 h by default) in 10 s parts from memory, in a fresh process each, without and with leveling:
  peak RSS and seconds (the trial pass included).

Writes ``bench/results/<stamp>-loudness.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyloudnorm
import soundfile
from scipy.signal import resample_poly

from bench import corpus
from bench.machine import describe
from bench.stack import BenchStack, Submitted
from tts_core.voices.catalog import VoiceCatalog

RESULTS = Path(__file__).parent / "results"
PRESETS: Final = ("podcast", "broadcast", "audiobook")
TARGETS: Final = {"podcast": (-16.0, -1.0), "broadcast": (-23.0, -1.0), "audiobook": (None, -3.0)}
CHAPTERS: Final = 8


def levels(audio: np.ndarray, rate: int) -> dict[str, float]:
    """Integrated loudness (pyloudnorm), true peak (4x oversampled), RMS, sample peak, noise floor."""
    window = rate // 2
    sums = np.concatenate(([0.0], np.cumsum(audio**2)))
    power = (sums[window:] - sums[:-window]) / window  # each half second's mean square, in O(n)
    return {
        "lufs": float(pyloudnorm.Meter(rate).integrated_loudness(audio)),
        "true_peak_db": float(20 * np.log10(np.abs(resample_poly(audio, 4, 1)).max())),
        "rms_db": float(10 * np.log10(np.mean(audio**2))),
        "peak_db": float(20 * np.log10(np.abs(audio).max())),
        "noise_floor_db": float(10 * np.log10(max(power.min(), 1e-20))),
        "duration_s": audio.size / rate,
    }


def fetched(stack: BenchStack, job: Submitted) -> tuple[np.ndarray, int]:
    record = stack.wait_all([job], timeout_s=7200)[0]
    assert record.result is not None
    data = stack.objects.get(record.result.key)
    assert data is not None
    audio, rate = soundfile.read(io.BytesIO(data), dtype="float64")
    return audio, rate


def voices(stack: BenchStack) -> list[dict[str, Any]]:
    english, japanese = corpus.paragraphs()[0], corpus.ja_paragraphs()[0]
    rows = []
    for info in VoiceCatalog.discover().all():
        text = japanese if info.language.startswith("ja") else english
        plain = levels(*fetched(stack, stack.submit(text, voice=info.id, format="wav")))
        job = levels(*fetched(stack, stack.submit(text, voice=info.id, format="wav", loudness={"preset": "podcast"})))
        body = {"model": "tts-1", "voice": info.id, "input": text, "response_format": "wav", "keep": False}
        spoken = stack.http.post("/v1/audio/speech", json={**body, "loudness": {"preset": "podcast"}}, timeout=600)
        spoken.raise_for_status()
        streamed = levels(*soundfile.read(io.BytesIO(spoken.content), dtype="float64"))
        rows.append({"voice": info.id, "plain": plain, "podcast_job": job, "podcast_stream": streamed})
    return rows


def book_text() -> str:
    """Over 30 minutes of narration: the corpus's narration twice (about 17.5 minutes each with the
    default voice)."""
    text = corpus.narration()
    return text + "\n\n" + text


def book(stack: BenchStack, text: str) -> dict[str, Any]:
    results = {}
    for preset in PRESETS:
        started = time.perf_counter()
        audio, rate = fetched(stack, stack.submit(text, format="wav", loudness={"preset": preset}))
        results[preset] = {**levels(audio, rate), "wall_s": time.perf_counter() - started}
    return results


def chapters(stack: BenchStack, text: str) -> dict[str, Any]:
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    size = -(-len(paragraphs) // CHAPTERS)
    items = [{"text": "\n\n".join(paragraphs[i : i + size])} for i in range(0, len(paragraphs), size)]
    body = {"defaults": {"format": "wav", "loudness": {"preset": "audiobook"}}, "items": items}
    response = stack.http.post("/v1/batches", json=body)
    response.raise_for_status()
    batch = stack.http.get(f"/v1/batches/{response.json()['id']}", params={"limit": 200}).json()
    jobs = [Submitted(item["job_id"], time.time()) for item in batch["items"]]
    found = [levels(*fetched(stack, job)) for job in jobs]
    return {
        "chapters": found,
        "first_last_lufs_lu": abs(found[0]["lufs"] - found[-1]["lufs"]),
        "first_last_rms_db": abs(found[0]["rms_db"] - found[-1]["rms_db"]),
        "spread_lufs_lu": max(c["lufs"] for c in found) - min(c["lufs"] for c in found),
    }


ASSEMBLY_SCRIPT = """
import resource, sys, tempfile, time
import numpy as np
from tts_core.voices.catalog import VoiceCatalog
from tts_core.base.config import SynthesisConfig
from tts_core.base.device import Device
from tts_core.mastering.encoding import encode_stream
from tts_core.voices.engines import engine_of
from tts_core.mastering.formats import AudioFormat, AudioOutput
from tts_core.mastering.level_meter import measure
from tts_core.mastering.leveling import leveling_for, spread_sample
from tts_core.mastering.loudness import PRESETS
hours, preset = float(sys.argv[1]), sys.argv[2]
catalog = VoiceCatalog.discover()
info = catalog.get("en_US-joe-medium")
voice = engine_of(info).load(info, Device.CPU, 1, False)
rate = info.sample_rate
part = voice.speak(" ".join(["The quick brown fox jumps over the lazy dog, and then it rests."] * 2), SynthesisConfig())
part = np.concatenate((part, np.zeros(rate // 4, dtype=np.int16)))
count = round(hours * 3600 / (part.size / rate))
level = measure(part, rate)
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
leveling = None
if preset != "none":
    summary = level.__class__()
    for _ in range(count):
        summary.add(level)
    chosen = spread_sample([part.size / rate] * count)
    leveling = leveling_for(PRESETS[preset], summary, lambda: (part for _ in chosen), rate)
with tempfile.TemporaryFile() as sink:
    encode_stream((part for _ in range(count)), 0.0, rate, AudioOutput(AudioFormat.WAV), sink, leveling)
    size = sink.tell()
print(count, part.size / rate, baseline, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      time.perf_counter() - started, size)
"""


def assembly(hours: float) -> dict[str, Any]:
    runs = {}
    for preset in ("none", "podcast"):
        out = subprocess.run(
            [sys.executable, "-c", ASSEMBLY_SCRIPT, str(hours), preset], check=True, capture_output=True, text=True
        ).stdout.split()
        count, part_s, before, peak, seconds, size = out[-6:]
        runs[preset] = {
            "parts": int(count), "part_s": float(part_s), "rss_before_mib": int(before) / 1024,
            "rss_peak_mib": int(peak) / 1024, "seconds": float(seconds), "bytes": int(size),
        }  # fmt: skip
    return {"hours": hours, "runs": runs}


def table(result: dict[str, Any]) -> str:
    rows = ["| Measure | Result |", "|---|---|"]
    for row in result.get("voices", []):
        plain, job, stream = row["plain"], row["podcast_job"], row["podcast_stream"]
        rows.append(
            f"| {row['voice']}: as it comes / podcast job / podcast stream | {plain['lufs']:.1f} / "
            f"{job['lufs']:.1f} / {stream['lufs']:.1f} LUFS (true peak {plain['true_peak_db']:.1f} / "
            f"{job['true_peak_db']:.1f} / {stream['true_peak_db']:.1f} dBTP) |"
        )
    if result.get("voices"):
        spread = {k: [r[k]["lufs"] for r in result["voices"]] for k in ("plain", "podcast_job", "podcast_stream")}
        rows.append(
            "| spread between voices: as they come / podcast job / podcast stream | "
            + " / ".join(f"{max(v) - min(v):.1f} LU" for v in spread.values())
            + " |"
        )
    for preset, found in result.get("book", {}).items():
        rows.append(
            f"| {found['duration_s'] / 60:.0f}-minute book, {preset} | {found['lufs']:.2f} LUFS, true peak "
            f"{found['true_peak_db']:.2f} dBTP, RMS {found['rms_db']:.2f} dBFS, peak {found['peak_db']:.2f} dBFS, "
            f"noise floor {found['noise_floor_db']:.0f} dBFS ({found['wall_s']:.0f} s) |"
        )
    if "chapters" in result:
        found = result["chapters"]
        lufs = ", ".join(f"{c['lufs']:.2f}" for c in found["chapters"])
        rows.append(
            f"| {len(found['chapters'])} chapters, audiobook: LUFS | {lufs}; first vs last "
            f"{found['first_last_lufs_lu']:.2f} LU (RMS {found['first_last_rms_db']:.2f} dB), spread "
            f"{found['spread_lufs_lu']:.2f} LU |"
        )
    if "assembly" in result:
        runs = result["assembly"]["runs"]
        for name, run in runs.items():
            rows.append(
                f"| assembly encoding of {result['assembly']['hours']:g} h ({run['parts']} parts), leveling "
                f"{name} | peak RSS {run['rss_peak_mib']:.0f} MiB ({run['rss_before_mib']:.0f} before), "
                f"{run['seconds']:.0f} s |"
            )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="voices,book,chapters,assembly")
    parser.add_argument("--hours", type=float, default=16.7, help="audio the assembly section encodes")
    args = parser.parse_args()
    sections = args.sections.split(",")
    result: dict[str, Any] = {"started_at": datetime.now(UTC).isoformat(), "machine": describe()}
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-loudness.json"

    def save(name: str, found: Any) -> None:
        """Each section's results written as it ends, so a later section's failure loses none."""
        result[name] = found
        out.write_text(json.dumps(result, indent=2, default=str))
        print(table({name: found}), flush=True)

    if "assembly" in sections:
        save("assembly", assembly(args.hours))
    if {"voices", "book", "chapters"} & set(sections):
        with tempfile.TemporaryDirectory(prefix="ttsq-bench-") as root:
            stack = BenchStack(Path(root))
            try:
                stack.start_workers(1)
                text = book_text()
                if "voices" in sections:
                    save("voices", voices(stack))
                if "book" in sections:
                    save("book", book(stack, text))
                if "chapters" in sections:
                    save("chapters", chapters(stack, text))
            finally:
                stack.close()
    result["finished_at"] = datetime.now(UTC).isoformat()
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nwritten to {out}")


if __name__ == "__main__":
    main()
