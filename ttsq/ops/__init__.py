"""Operations: the ``ttsq`` command line, the local stack behind ``ttsq dev`` and the tests (embedded
Redis and SeaweedFS, supervised child processes), the worker launcher and a small API client.
Nothing here runs inside the API or a worker's tasks."""
