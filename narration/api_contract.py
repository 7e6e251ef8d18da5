"""What the narration client knows of the ttsq API besides its routes: job statuses, the longest
long poll and the file suffix of each audio format. The client talks to ttsq over HTTP only, so it
keeps its own copy of these values rather than importing the service's modules (which bring Redis
and the service settings with them); ``tests/test_layers.py`` checks that the copy and the service
agree."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class JobStatus(StrEnum):
    """A job's ``status`` as the API reports it."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"

    @property
    def terminal(self) -> bool:
        """Whether the job is finished for good."""
        return self in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELED}


MAX_WAIT_S: Final = 60.0
"""Longest long poll (``GET /v1/jobs/{id}?wait=``) the API accepts; the client waits longer in rounds."""


SUFFIXES: Final = {"mulaw": "ulaw", "wav_mulaw": "wav", "wav_alaw": "wav"}
"""Audio formats whose files are not named after the format (raw μ-law is ``.ulaw``, as Asterisk
names it; G.711 in WAV is ``.wav``)."""


def suffix(audio_format: str) -> str:
    """The file suffix of a chapter's audio in ``audio_format``."""
    return SUFFIXES.get(audio_format, audio_format)
