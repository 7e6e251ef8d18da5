"""Expose per-phoneme frame counts from a Piper or Kokoro ONNX graph: batched items trimmed exactly,
and every input id's share of the audio (word marks).

Piper's graph outputs padded audio only. Its single ``Ceil`` node computes the frame count of each
phoneme (zero on padding), so marking that tensor as an extra graph output gives every item's true
length: ``sum(frames) * HOP_LENGTH`` samples. Same idea as piper-tts's
``patch_voice_with_alignment.add_alignment_output``.

The output is added to the model's bytes, not to a parsed model serialised again: protobuf merges a
message field that appears twice and appends to repeated fields, so a small ``ModelProto`` holding
only the new graph output, appended to the bytes, adds it. Serialising a parsed 90 MB model holds
the GIL for about 0.45 s on this CPU, which stopped every other thread of a worker (its running jobs
among them) while it loaded a voice on demand.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import onnx

from tts_core.base.errors import VoiceLoadError

OutputFinder = Callable[[onnx.ModelProto], str]
"""Names the tensor of a parsed graph to output (raises :class:`VoiceLoadError` if there is none)."""


def alignment_output_name(model: onnx.ModelProto) -> str:
    """Piper: the output of the graph's one ``Ceil`` node (frames per phoneme)."""
    ceil_nodes = [node for node in model.graph.node if node.op_type == "Ceil"]
    if len(ceil_nodes) != 1:
        raise VoiceLoadError(f"expected exactly one Ceil node in a Piper VITS graph, found {len(ceil_nodes)}")
    return str(ceil_nodes[0].output[0])


def duration_output_name(model: onnx.ModelProto) -> str:
    """Kokoro's (StyleTTS2) equivalent: its duration predictor rounds the frames of each input id
    (``Round``) and clips them to at least one (``Clip``); the ``Clip``'s output. Frames times
    ``tts_core.voices.kokoro.HOP_SAMPLES`` are samples."""
    rounds = {str(node.output[0]) for node in model.graph.node if node.op_type == "Round"}
    clips = [node for node in model.graph.node if node.op_type == "Clip" and node.input[0] in rounds]
    if len(rounds) != 1 or len(clips) != 1:
        raise VoiceLoadError(f"expected one Round then Clip in a Kokoro graph, found {len(rounds)} and {len(clips)}")
    return str(clips[0].output[0])


def with_output(model: bytes, find: OutputFinder, identity: str) -> tuple[bytes, str]:
    """``model`` with the tensor ``find`` names added to its graph outputs, and that name. The graph
    is parsed once per ``identity`` (a path with its size and time, or a checksum) in a process."""
    with _found_lock:
        known = _found.get(identity)
    if known is None:
        parsed = onnx.load_from_string(model)
        name = find(parsed)
        known = name, name in {output.name for output in parsed.graph.output}
        with _found_lock:
            _found[identity] = known
    name, present = known
    if present:
        return model, name
    output = onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
    return model + onnx.ModelProto(graph=onnx.GraphProto(output=[output])).SerializeToString(), name


def file_identity(path: Path) -> str:
    """A model file's identity for :func:`with_output`: a changed file is parsed again."""
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


_found: dict[str, tuple[str, bool]] = {}
"""Per model identity: the output's name, and whether the graph outputs it already."""
_found_lock = threading.Lock()
