"""ttsq's service domain, shared by the API and the workers: settings, job records and their
progress, segment parts, object storage, the Celery configuration and the service errors.
Operations tooling (command line, local stack) lives in ``ttsq.ops``."""
