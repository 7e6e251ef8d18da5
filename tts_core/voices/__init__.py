"""Voices and the models behind them: the engine registry, Piper and Kokoro, the voice catalog, ONNX Runtime sessions,
dynamic batching, alignment of ids to audio and loudness calibration. Imports every wing below it.
"""
