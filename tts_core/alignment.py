"""Expose per-phoneme frame counts from a Piper or Kokoro ONNX graph: batched items trimmed exactly,
and every input id's share of the audio (word marks).

Piper's graph outputs padded audio only. Its single ``Ceil`` node computes the frame count of each
phoneme (zero on padding), so marking that tensor as an extra graph output gives every item's true
length: ``sum(frames) * HOP_LENGTH`` samples. Same idea as piper-tts's
``patch_voice_with_alignment.add_alignment_output``.
"""

from __future__ import annotations

import onnx

from tts_core.errors import VoiceLoadError


def add_alignment_output(model: onnx.ModelProto) -> str:
    """Add the ``Ceil`` tensor to the graph outputs (in place) and return its name."""
    ceil_nodes = [node for node in model.graph.node if node.op_type == "Ceil"]
    if len(ceil_nodes) != 1:
        raise VoiceLoadError(f"expected exactly one Ceil node in a Piper VITS graph, found {len(ceil_nodes)}")
    name = str(ceil_nodes[0].output[0])
    if name not in {output.name for output in model.graph.output}:
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return name


def add_duration_output(model: onnx.ModelProto) -> str:
    """Kokoro's (StyleTTS2) equivalent: its duration predictor rounds the frames of each input id
    (``Round``) and clips them to at least one (``Clip``); that tensor is added as a graph output
    (in place) and its name returned. Frames times ``tts_core.kokoro.HOP_SAMPLES`` are samples."""
    rounds = {str(node.output[0]) for node in model.graph.node if node.op_type == "Round"}
    clips = [node for node in model.graph.node if node.op_type == "Clip" and node.input[0] in rounds]
    if len(rounds) != 1 or len(clips) != 1:
        raise VoiceLoadError(f"expected one Round then Clip in a Kokoro graph, found {len(rounds)} and {len(clips)}")
    name = str(clips[0].output[0])
    if name not in {output.name for output in model.graph.output}:
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    return name
