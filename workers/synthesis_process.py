"""What a synthesis worker process builds once as it starts, from the settings it read then: its
stores, its voices, its task sender, and the threads that renew its claims, share its held models and
prove it alive. The start handlers (``workers.tasks``) build it; its tasks and its interactive slot
read it from :data:`SYNTHESIS`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from celery import Celery

from ttsq.broker import TaskPublisher
from ttsq.liveness import WorkerLiveness
from ttsq.redis_clients import redis_client
from ttsq.settings import Settings
from ttsq.stores import CONNECT_TIMEOUT_S, WORKER_SOCKET_TIMEOUT_S, Stores
from workers.fitness import FITNESS
from workers.heartbeat import Heartbeat
from workers.held_models import HeldModels, worker_id
from workers.job_context import JobContext
from workers.leases import LeaseKeeper
from workers.process_scope import ProcessScope

if TYPE_CHECKING:
    from workers.voice_host import VoiceHost


@dataclass
class SynthesisProcess:
    """A synthesis worker process's own parts, each built once."""

    settings: Settings
    context: JobContext
    leases: LeaseKeeper
    """Renews the step claims and held messages of this process (``workers.leases``)."""
    held: HeldModels
    """Shares the models this process holds with the other workers (voice affinity)."""
    heartbeat: Heartbeat
    """Proves this process alive for ``/readyz`` and for whoever gives a dead worker's work back."""

    @property
    def engine(self) -> VoiceHost:
        return self.context.engine

    @classmethod
    def build(cls, settings: Settings, app: Celery) -> SynthesisProcess:
        """Build every part; the inference runtime is imported here, as the process starts, so that
        Flower importing the tasks never loads it."""
        from tts_core.voices.runtime import resolve_device
        from workers.voice_host import VoiceHost

        engine = VoiceHost(settings, resolve_device(settings.worker.device))
        stores = Stores.connect(settings, WORKER_SOCKET_TIMEOUT_S)
        context = JobContext(stores, engine, TaskPublisher(app, settings.queue))
        leases = LeaseKeeper(redis_client(settings, 10, CONNECT_TIMEOUT_S), settings.step_lease_s)
        held = HeldModels(redis_client(settings, 5, CONNECT_TIMEOUT_S), settings.queue, engine.models.loaded)
        liveness = WorkerLiveness(redis_client(settings, 5, CONNECT_TIMEOUT_S), settings.queue)
        heartbeat = Heartbeat(liveness, worker_id(), lambda: engine.healthy and FITNESS.able)
        return cls(settings, context, leases, held, heartbeat)


SYNTHESIS: ProcessScope[SynthesisProcess] = ProcessScope("the synthesis worker's process")
"""This process's :class:`SynthesisProcess`, once a start handler built it."""
