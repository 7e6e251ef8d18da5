"""The module the ``celery`` command line reads (``app.config_from_object("celeryconfig")``).

It holds no values of its own: every one comes from :func:`ttsq.broker.celery_config`, built from the
process's settings (``TTSQ_*`` variables and ``.env``), where each is explained. They are read when
Celery first asks for one (as a worker or Flower configures its app), not when this is imported.
"""

from __future__ import annotations

from typing import Any

from ttsq.broker import LazyConfig, celery_config
from ttsq.settings import get_settings

_CONFIG = LazyConfig(lambda: celery_config(get_settings()))


def __getattr__(name: str) -> Any:
    try:
        return _CONFIG[name]
    except KeyError:
        raise AttributeError(name) from None


def __dir__() -> list[str]:
    return list(_CONFIG)
