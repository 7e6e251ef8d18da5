"""The narration client: the HTTP client of the ttsq API, book readers (one format per module),
``ttsq narrate`` and the ``.m4b`` audiobook. It talks to ttsq over HTTP only: it imports nothing of
``api``, ``workers`` or ``ttsq``, nor the inference runtime (``tests/test_narration_isolation.py``)."""
