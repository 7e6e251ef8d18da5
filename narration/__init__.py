"""The narration client: the HTTP client of the ttsq API, book readers (one format per module) and
``ttsq narrate`` (its ``.m4b`` is written by ``tts_core.mastering.m4b``). It talks to ttsq over HTTP
only: it imports nothing of ``api``, ``workers`` or ``ttsq``, nor the inference runtime
(``tests/test_narration_isolation.py``)."""
