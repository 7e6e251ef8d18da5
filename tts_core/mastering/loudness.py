"""Loudness targets for a whole job, and the one gain that brings a measured job to its target.

A target is an integrated loudness (ITU-R BS.1770-4, in LUFS; podcast and broadcast practice) or,
for audiobooks, the RMS level ACX checks, with a true-peak ceiling either way. The gain is decided
once for the whole job from its level summary (``tts_core.mastering.level_meter``), so a book does not pump
from chapter to chapter; the ceiling is held by the limiter at encoding (``tts_core.mastering.limiter``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Literal, get_args

from tts_core.mastering.level_meter import LevelSummary

LoudnessPreset = Literal["podcast", "broadcast", "audiobook"]
LOUDNESS_PRESETS: Final[tuple[str, ...]] = get_args(LoudnessPreset)
TARGET_LUFS_RANGE: Final = (-30.0, -10.0)
TRUE_PEAK_RANGE_DB: Final = (-9.0, 0.0)
MIN_HEADROOM_LU: Final = 12.0
"""The least room between a ``target_lufs`` and its ceiling: closer, speech would be limited flat."""
DEFAULT_TRUE_PEAK_DB: Final = -1.0
"""The ceiling of a ``target_lufs`` without one: what podcast and EBU R128 practice ask."""
MAX_GAIN_DB: Final = 40.0
"""The most a job is raised: beyond it the job is nearly silent, and raising it would only raise noise."""


@dataclass(frozen=True)
class LoudnessTarget:
    """Where a job's level should land: ``level`` in LUFS (``measure`` "lufs") or dBFS RMS ("rms"),
    its true peaks at most ``true_peak_db`` dBTP."""

    measure: Literal["lufs", "rms"]
    level: float
    true_peak_db: float

    def level_of(self, summary: LevelSummary) -> float:
        """The measured level, in the target's measure."""
        return summary.integrated_lufs() if self.measure == "lufs" else summary.rms_dbfs()

    def gain_db(self, summary: LevelSummary) -> float:
        """The gain that brings the measured job to the target before any limiting; 0 for a silent job."""
        measured = self.level_of(summary)
        if math.isinf(measured):
            return 0.0
        return min(self.level - measured, MAX_GAIN_DB)


ACX_RMS_RANGE_DB: Final = (-23.0, -18.0)
ACX_PEAK_DB: Final = -3.0
ACX_NOISE_FLOOR_DB: Final = -60.0

PRESETS: Final[dict[str, LoudnessTarget]] = {
    "podcast": LoudnessTarget("lufs", -16.0, -1.0),
    "broadcast": LoudnessTarget("lufs", -23.0, -1.0),  # EBU R128
    # ACX: RMS in the middle of -23..-18 dBFS; peaks at most -3 dBFS, held half a dB lower so the
    # MP3 ACX asks for (whose decoder may overshoot the PCM's peaks a little) stays under it too.
    "audiobook": LoudnessTarget("rms", -20.0, ACX_PEAK_DB - 0.5),
}


def loudness_target(
    preset: str | None = None, target_lufs: float | None = None, true_peak_db: float | None = None
) -> LoudnessTarget:
    """The target a request names: a preset, or an integrated loudness with an optional ceiling.
    Raises ``ValueError`` naming the problem (the API checks the same before a job exists)."""
    if preset is not None:
        if target_lufs is not None or true_peak_db is not None:
            raise ValueError("give either preset or target_lufs (with true_peak_db), not both")
        if preset not in PRESETS:
            raise ValueError(f"loudness.preset must be one of {', '.join(LOUDNESS_PRESETS)}, not {preset!r}")
        return PRESETS[preset]
    if target_lufs is None:
        raise ValueError("give preset or target_lufs")
    ceiling = DEFAULT_TRUE_PEAK_DB if true_peak_db is None else true_peak_db
    for name, value, (low, high) in (
        ("target_lufs", target_lufs, TARGET_LUFS_RANGE),
        ("true_peak_db", ceiling, TRUE_PEAK_RANGE_DB),
    ):
        if not low <= value <= high:
            raise ValueError(f"loudness.{name} must be within {low:g} to {high:g}, not {value:g}")
    if ceiling - target_lufs < MIN_HEADROOM_LU:
        raise ValueError(
            f"target_lufs {target_lufs:g} is {ceiling - target_lufs:g} LU under its true_peak_db "
            f"{ceiling:g}; speech needs at least {MIN_HEADROOM_LU:g} between them"
        )
    return LoudnessTarget("lufs", target_lufs, ceiling)
