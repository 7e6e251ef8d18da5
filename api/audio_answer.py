"""A streamed job's audio as an HTTP answer, for the routes that answer with sound as it is made
(``POST /v1/audio/speech``, ``POST /v1/lexicon-preview``).

The answer waits for the job's first part, so a job refused or failed before any audio is an error
status, not a broken body; a one-part job is answered whole, with its length; a longer one streams
each part encoded as it comes. Headers name the job (``x-ttsq-job-id``), the sample rate and how much
audio the first part holds. The part reader is closed when the answer ends, however it ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

import numpy as np
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from api.streamed_job import StreamedJob
from tts_core.mastering.encoding import StreamEncoder, encode
from tts_core.mastering.formats import AudioFormat, AudioOutput

PCM_MEDIA_TYPE: Final = "audio/pcm"

FIRST_PART_HEADER: Final = "x-ttsq-first-part-ms"
"""How much audio the answer's first part holds (a streamed job's first clause, or all of a
one-part answer): what a client hears before it depends on the rest being made in time."""


async def audio_answer(
    job: StreamedJob, voice_rate: int, output: AudioOutput, audio_format: AudioFormat | None
) -> Response:
    """The job's audio in ``output`` (``audio_format`` None: raw PCM, the job's output being WAV),
    once its first part is there; the job's reading is closed with the answer."""
    reader = job.reader
    try:
        first = await reader.next_part()
    except BaseException:
        await job.close()
        raise
    media_type = audio_format.content_type if audio_format else PCM_MEDIA_TYPE
    rate = output.rate_for(voice_rate)
    headers = {
        "x-ttsq-job-id": job.record.id,
        "x-ttsq-sample-rate": str(rate),
        FIRST_PART_HEADER: str(round(first.size / voice_rate * 1000)),
    }
    if reader.total == 1 and audio_format is not None:  # all there is: one whole file, with its length
        whole = encode(first, voice_rate, output).data
        return Response(whole, media_type=media_type, headers=headers, background=BackgroundTask(job.close))
    encoder = StreamEncoder(output if audio_format else None, voice_rate, rate)
    if reader.total == 1:  # raw PCM, whole
        whole = encoder.write(first) + encoder.close()
        return Response(whole, media_type=media_type, headers=headers, background=BackgroundTask(job.close))
    return StreamingResponse(_encoded(job, first, encoder), media_type=media_type, headers=headers)


async def _encoded(job: StreamedJob, first: np.ndarray, encoder: StreamEncoder) -> AsyncIterator[bytes]:
    try:
        yield encoder.write(first)
        while (pcm := await job.reader.next_part_or_end()) is not None:  # parts carry their own pauses
            yield encoder.write(pcm)
        yield encoder.close()
    finally:
        await job.close()
