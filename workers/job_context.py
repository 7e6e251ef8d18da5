"""What a job's steps need from their worker process: its stores, its voices, its task sender."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ttsq import lifecycle
from ttsq.broker import TaskPublisher
from ttsq.settings import Settings
from ttsq.stores import Stores

if TYPE_CHECKING:
    from workers.voice_host import VoiceHost


@dataclass(frozen=True)
class JobContext:
    """What a job needs from its worker process: its stores, its voices (``engine``), its task sender."""

    stores: Stores
    engine: VoiceHost
    send: TaskPublisher

    @property
    def settings(self) -> Settings:
        return self.stores.settings

    @property
    def lifecycle(self) -> lifecycle.Lifecycle:
        return self.stores.lifecycle(self.send.finish_batch)
