"""The module the ``celery`` command line reads (``app.config_from_object("celeryconfig")``).

It holds no values of its own: every one comes from :func:`ttsq.broker.celery_config`, built from the
process's settings (``TTSQ_*`` variables and ``.env``), where each is explained.
"""

from __future__ import annotations

from ttsq.broker import celery_config
from ttsq.settings import get_settings

globals().update(celery_config(get_settings()))
