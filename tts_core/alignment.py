"""Expose per-phoneme frame counts from a Piper ONNX graph so batched items can be trimmed exactly.

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
