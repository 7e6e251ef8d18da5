"""ttsq's service domain, shared by the API and the workers: settings, job records and their
progress, segment parts, object storage, the Celery configuration and the service errors.
What runs on top of it lives in top-level packages of its own: ``cli`` (the ``ttsq`` command and the
process harness of ``ttsq dev``, the tests and the bench) and ``narration`` (the HTTP client and
``ttsq narrate``)."""
