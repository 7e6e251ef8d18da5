"""The one gain a job's audio gets to land on its loudness target, limiter included.

The job's measured level (``tts_core.mastering.level_meter``) gives the gain that would land it on target if
nothing were limited. Where that gain would push a true peak over the ceiling, the limiter takes some
level back, and how much depends on the audio: a sample of the job's audio (its pieces spread over
the whole, at most ``SAMPLE_S`` of it; all of a shorter job) is passed once through limiters at that
gain and several above it, and what each took back is measured. The gain is picked where the job's
level, less what the limiter takes at that gain, meets the target (linear between the trial gains),
then tried once more there and picked again between the trials nearest it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from tts_core.base.audio import PCM16
from tts_core.mastering.level_meter import LevelSummary, measure
from tts_core.mastering.limiter import PeakLimiter
from tts_core.mastering.loudness import MAX_GAIN_DB, LoudnessTarget

TRIAL_STEPS_DB: Final = (0.0, 1.0, 2.0, 4.0, 7.0, 11.0, 15.0)
"""Gains tried above the unlimited one: enough to find the gain where a limiter takes back about
10 dB of level (a target ``MIN_HEADROOM_LU`` under its ceiling, on a voice with high peaks)."""
SAMPLE_S: Final = 300.0
"""Audio of a long job the trial pass reads: five minutes spread over the job tell what the limiter
takes as well as all of it, and keep the pass short for a book."""


@dataclass(frozen=True)
class Leveling:
    """What the encoder applies: one gain, then the limiter at the ceiling."""

    gain_db: float
    true_peak_db: float


def leveling_for(
    target: LoudnessTarget, summary: LevelSummary, sample: Callable[[], Iterable[PCM16]], sample_rate: int
) -> Leveling:
    """The leveling that lands the job measured as ``summary`` on ``target``; ``sample`` gives a
    sample of its audio (read only if the limiter would act)."""
    gain = target.gain_db(summary)
    if summary.true_peak_db + gain <= target.true_peak_db:
        return Leveling(gain, target.true_peak_db)
    trials = [min(gain + step, MAX_GAIN_DB) for step in TRIAL_STEPS_DB]
    taken = _taken_back(target, trials, sample(), sample_rate)
    whole = target.level_of(summary)
    points = {trial: whole + trial - loss for trial, loss in zip(trials, taken, strict=True)}
    first = _interpolated(points, target.level)
    if first not in points:  # the level is not linear in the gain: one more trial where it should land
        points[first] = whole + first - _taken_back(target, [first], sample(), sample_rate)[0]
    return Leveling(_interpolated(points, target.level), target.true_peak_db)


def _taken_back(target: LoudnessTarget, gains: list[float], parts: Iterable[PCM16], rate: int) -> list[float]:
    """What a limiter at each of ``gains`` takes back from the level of ``parts``, in dB."""
    limiters = [PeakLimiter(gain, target.true_peak_db, rate) for gain in gains]
    limited = [LevelSummary() for _ in gains]
    plain = LevelSummary()
    for part in parts:
        plain.add(measure(part, rate))
        for limiter, summary in zip(limiters, limited, strict=True):
            summary.add(measure(limiter.push(part), rate))
    for limiter, summary in zip(limiters, limited, strict=True):
        summary.add(measure(limiter.finish(), rate))
    before = target.level_of(plain)
    return [before + gain - target.level_of(summary) for gain, summary in zip(gains, limited, strict=True)]


def _interpolated(levels: dict[float, float], wanted: float) -> float:
    """The gain whose level is ``wanted``, linear between the two tried gains around it (levels by
    gain); beyond the highest, the highest (the limiter is then doing all it can)."""
    points = sorted(levels.items())
    if not all(np.isfinite(level) for _, level in points):
        return points[0][0]
    for (g0, l0), (g1, l1) in itertools.pairwise(points):
        if wanted <= l1:
            return g0 + (wanted - l0) * (g1 - g0) / (l1 - l0) if l1 > l0 else g0
    return points[-1][0]


def spread_sample(durations_s: Sequence[float], budget_s: float = SAMPLE_S) -> list[int]:
    """Indexes of pieces (of these lengths) spread evenly over a job, adding up to about ``budget_s``:
    every piece of a job shorter than that."""
    total = sum(durations_s)
    if total <= budget_s:
        return list(range(len(durations_s)))
    step = total / budget_s
    chosen: list[int] = []
    next_at = 0.0
    position = 0.0
    for index, duration in enumerate(durations_s):
        if position >= next_at:
            chosen.append(index)
            next_at += duration * step
        position += duration
    return chosen
