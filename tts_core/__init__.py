"""ttsq's synthesis library: voices, text front end, ONNX inference and audio encoding.

A pure library: it imports no Celery, FastAPI or boto3, so the worker and the API stay thin shells.
Import what you need from its modules. Light ones (``config``, ``device``, ``errors``, ``text``,
``catalog``, ``engines`` and the engine modules ``piper_engine`` and ``kokoro_engine``, ``formats``,
``audio``, ``batching``, and ``stop_signal``, the signal-safe stop that every process's entry point
uses) load no inference runtime, so the API can use them; ``phonemes``,
``segments``, ``alignment``, ``runtime``, ``voice`` and ``kokoro`` load espeak-ng, ONNX and ONNX
Runtime and belong in processes that synthesise.
"""
