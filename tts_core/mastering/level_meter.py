"""A job's level, measured piece by piece: ITU-R BS.1770-4 gating blocks and the plain RMS.

The integrated loudness of a whole job needs every 400 ms gating block of it (75 % overlap, so one
every 100 ms), but not the audio: a summary keeps the blocks' loudness as a histogram of 0.1 LU bins
(as libebur128 does), plus the sum of squares for ACX's RMS. Summaries of a job's segments are
measured where each segment is synthesised and merged at assembly, in bounded memory whatever the
job's length. The blocks come from FFmpeg's ``ebur128`` filter (through PyAV); the three blocks that
reach over a segment's edges are measured as if silence lay beyond them, which is nearly what
does lie there: each segment but the last ends with the pause after its last sentence.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final

import av
import av.filter
import numpy as np

from tts_core.base.audio import PCM16
from tts_core.mastering.limiter import true_peaks

ABSOLUTE_GATE_LUFS: Final = -70.0
RELATIVE_GATE_LU: Final = 10.0
BIN_LU: Final = 0.1
_BLOCK_OFFSET: Final = -0.691
"""BS.1770's constant between a K-weighted mean square and its loudness."""
_PARTIAL_BLOCKS: Final = 3
"""ebur128 reports a block every 100 ms; the first three of a stream span less than 400 ms (the
silence put before the audio, which they would measure, is left out with them)."""
_FULL_SCALE: Final = 32768.0


@dataclass
class LevelSummary:
    """What a job's level is measured from: its gating blocks' loudness (bin → count, bins of 0.1 LU,
    absolute gate applied), its samples' sum of squares and its highest true peak (full scale 1)."""

    blocks: Counter[int] = field(default_factory=Counter)
    square_sum: float = 0.0
    samples: int = 0
    true_peak: float = 0.0

    def add(self, other: LevelSummary) -> None:
        self.blocks.update(other.blocks)
        self.square_sum += other.square_sum
        self.samples += other.samples
        self.true_peak = max(self.true_peak, other.true_peak)

    @property
    def true_peak_db(self) -> float:
        return 20.0 * math.log10(self.true_peak) if self.true_peak > 0.0 else float("-inf")

    def integrated_lufs(self) -> float:
        """BS.1770-4 integrated loudness: blocks above -70 LUFS, then those within 10 LU of their
        mean; -inf where nothing passes the gates."""
        ungated = self._mean_energy(lambda _: True)
        if ungated == 0.0:
            return float("-inf")
        relative = _loudness(ungated) - RELATIVE_GATE_LU
        gated = self._mean_energy(lambda level: level > relative)
        return _loudness(gated) if gated > 0.0 else float("-inf")

    def rms_dbfs(self) -> float:
        """RMS of every sample, silence included (as ACX measures a file), in dBFS; -inf if silent."""
        if self.samples == 0 or self.square_sum <= 0.0:
            return float("-inf")
        return 10.0 * math.log10(self.square_sum / self.samples)

    def _mean_energy(self, passes: object) -> float:
        total = count = 0.0
        for key, number in self.blocks.items():
            level = key * BIN_LU
            if passes(level):  # type: ignore[operator]
                total += number * 10 ** ((level - _BLOCK_OFFSET) / 10)
                count += number
        return total / count if count else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "blocks": sorted(self.blocks.items()),
            "square_sum": self.square_sum,
            "samples": self.samples,
            "true_peak": self.true_peak,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> LevelSummary:
        blocks = data["blocks"]
        assert isinstance(blocks, list)
        return cls(
            Counter({int(key): int(number) for key, number in blocks}),
            float(str(data["square_sum"])),
            int(str(data["samples"])),
            float(str(data["true_peak"])),
        )


def _loudness(mean_energy: float) -> float:
    return _BLOCK_OFFSET + 10.0 * math.log10(mean_energy)


def measure(pcm: PCM16, sample_rate: int) -> LevelSummary:
    """The summary of one run of mono 16-bit PCM."""
    audio = pcm.astype(np.float32) / np.float32(_FULL_SCALE)
    peak = float(true_peaks(audio.astype(np.float64)).max(initial=0.0))
    summary = LevelSummary(samples=int(pcm.size), square_sum=float(np.dot(audio, audio)), true_peak=peak)
    summary.blocks.update(_block_bins(_block_levels(audio, sample_rate)))
    return summary


def summary_of(pieces: Iterable[LevelSummary]) -> LevelSummary:
    whole = LevelSummary()
    for piece in pieces:
        whole.add(piece)
    return whole


def _block_bins(levels: Iterable[float]) -> Iterable[int]:
    return (round(level / BIN_LU) for level in levels if level > ABSOLUTE_GATE_LUFS)


def _block_levels(audio: np.ndarray, sample_rate: int) -> list[float]:
    """The momentary loudness (400 ms blocks, every 100 ms) FFmpeg's ebur128 filter reports, over
    the audio with 300 ms of silence either side: the blocks that reach over its edges count too, as
    if the audio before and after were silent (a segment ends with its pause; the next starts after)."""
    if audio.size == 0:
        return []
    graph = av.filter.Graph()
    source = graph.add_abuffer(format="flt", sample_rate=sample_rate, layout="mono", time_base=Fraction(1, sample_rate))
    meter = graph.add("ebur128", "metadata=1")
    sink = graph.add("abuffersink")
    source.link_to(meter)
    meter.link_to(sink)
    graph.configure()
    lead = np.zeros(_PARTIAL_BLOCKS * sample_rate // 10, dtype=np.float32)
    padded = np.concatenate((lead, audio, lead))
    frame = av.AudioFrame.from_ndarray(padded.reshape(1, -1), format="flt", layout="mono")
    frame.sample_rate = sample_rate
    frame.pts = 0
    frame.time_base = Fraction(1, sample_rate)
    graph.push(frame)
    graph.push(None)
    levels: list[float] = []
    while True:
        try:
            out = graph.pull()
        except (av.BlockingIOError, av.EOFError):
            break
        momentary = out.metadata.get("lavfi.r128.M")
        if momentary is not None:
            levels.append(float(momentary))
    return levels[_PARTIAL_BLOCKS:]
