"""ttsq's synthesis library: voices, text front end, ONNX inference and audio encoding.

A pure library: it imports no Celery, FastAPI or boto3, so the worker and the API stay thin shells.
It is eight wings, each a package whose docstring says what it owns, each importing only the wings
below it: ``base``; ``text`` and ``mastering`` on it; ``lexicon``, ``marks`` and ``books`` on
``text``; ``frontend`` on ``lexicon``; ``voices`` on all but ``books`` (docs/ARCHITECTURE.md draws
them). Import what you need from the wings' modules: no ``__init__`` imports anything. Light
modules load no inference runtime, so the API can use them; ``frontend.phonemes``,
``frontend.segments``, ``voices.alignment``, ``voices.runtime``, ``voices.voice`` and
``voices.kokoro`` load espeak-ng, ONNX and ONNX Runtime and
belong in processes that synthesise.
"""
