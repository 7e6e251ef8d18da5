"""Edits of a serialized ONNX graph, made on one parse of it.

A voice's graph may be edited more than once as it loads (Kokoro's vocoder in float, then the 2-D
layout a CPU session gets): with each edit parsing and serializing the 92 MB graph by itself, making
a session's graph took 1.12 s against 0.74 s on one parse, for the model's own session and again for
its twin, which loads while calls run (docs/PERFORMANCE.md, "Loads, and the runs of 30 Nov").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx

GraphEdit = Callable[[onnx.ModelProto], int]
"""Changes a parsed graph in place; returns how many places it changed (0: the graph is as it was)."""


def edited(model: bytes, edits: Sequence[GraphEdit]) -> bytes:
    """``model`` with ``edits`` made in turn on one parse of it; the same bytes when none changed
    anything (or there are none)."""
    if not edits:
        return model
    parsed = onnx.load_from_string(model)
    changed = 0
    for edit in edits:
        changed += edit(parsed)
    return parsed.SerializeToString() if changed else model
