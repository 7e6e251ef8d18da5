"""A voice as the catalog and the engines know it, whatever its engine: apart from the catalog, so
that the engine registry (``tts_core.voices.engines``) and the catalog that asks it both read it without
importing each other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tts_core.base.errors import InvalidOption


class EngineName(str):
    """The name of a voice's engine ("piper", "kokoro"…): any name a registered engine has, so a new
    engine adds no member here. ``value`` reads it as the enum it replaced did."""

    __slots__ = ()

    @property
    def value(self) -> str:
        return str(self)


@dataclass(frozen=True)
class VoiceInfo:
    """A voice as the catalog knows it, whatever its engine."""

    id: str
    engine: EngineName
    language: str
    sample_rate: int
    quality: str
    num_speakers: int
    speaker_id_map: Mapping[str, int]
    """Speaker names to the model's speaker ids (empty for a single-speaker voice)."""
    source: object
    """What the engine needs to load the voice (its files, its table): only its engine reads it."""

    @property
    def speakers(self) -> tuple[str, ...]:
        """Speaker names in the order of their ids."""
        return tuple(name for name, _ in sorted(self.speaker_id_map.items(), key=lambda item: item[1]))

    def speaker_index(self, speaker: str | int | None) -> int | None:
        """The model's speaker id for a name or an index; None (the voice's default) when not given.
        An unknown speaker, or any speaker for a single-speaker voice, is an :class:`InvalidOption`."""
        if speaker is None:
            return None
        if self.num_speakers < 2:
            raise InvalidOption(f"voice {self.id} has a single speaker; leave speaker out")
        if isinstance(speaker, int):
            if not 0 <= speaker < self.num_speakers:
                raise InvalidOption(f"voice {self.id} has speakers 0 to {self.num_speakers - 1}; got {speaker}")
            return speaker
        if speaker not in self.speaker_id_map:
            raise InvalidOption(f"voice {self.id} has no speaker {speaker!r}; it has {', '.join(self.speakers)}")
        return self.speaker_id_map[speaker]
