"""The ``ttsq`` command line and the process harness: the local stack of ``ttsq dev`` (embedded Redis
and SeaweedFS, supervised child processes), the worker launcher, key administration. It sits on top
of the service (``api``, ``workers``, ``ttsq``) and of the narration client, and nothing below imports
it; none of it runs inside the API or a worker's tasks."""
