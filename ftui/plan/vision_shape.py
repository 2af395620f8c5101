"""The parameters of a vision-language model's vision tower and projector, from its
config.json's ``vision_config`` alone (no torch): the planner counts them in parameter memory
beside the language model (``ftui.plan.model_shape.ModelShape``).

Written per family from transformers 5's modules (Qwen2-VL, Qwen2.5-VL, Qwen3-VL: the patch
embedding, the blocks, the merger that projects into the language model, Qwen3-VL's position
table and deepstack mergers), with transformers' defaults for keys a config.json leaves out;
tests/test_vl_plan.py checks every count against the models transformers builds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ftui.presets.vision_families import vision_family


@dataclass(frozen=True)
class VisionShape:
    """A vision tower's parameters (all of it but the projector), one block's, how many blocks,
    and the projector's (the merger into the language model); and the numbers its activations
    are sized by (ftui.plan.vision_activations): a block's width and MLP width (``gated``: a
    gate and an up projection, as Qwen2.5-VL's), its heads, the patch (``patch_size`` pixels a
    side, ``kernel`` values: channels x temporal patch x patch_size²) and ``merge`` (patches a
    side merged into one token)."""

    tower: int = 0
    projector: int = 0
    block: int = 0
    depth: int = 0
    width: int = 0
    mlp: int = 0
    gated: bool = False
    heads: int = 1
    patch_size: int = 14
    merge: int = 2
    kernel: int = 0
    image_patches: int = 0  # LLaVA, Gemma 3, InternVL: the tower's sequence for every image (its square's patches)
    family: str = ""  # the Qwen-VL families' name: their videos' processor (Qwen3-VL resizes a whole clip)
    mels: int = 0  # an audio tower (Qwen2-Audio's): the mel bins of its input features; no images


def _linear(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + (n_out if bias else 0)


# family -> transformers' vision config defaults (the keys read below)
DEFAULTS: dict[str, dict[str, Any]] = {
    "qwen2_vl": {"depth": 32, "embed_dim": 1280, "num_heads": 16, "hidden_size": 3584, "mlp_ratio": 4, "in_channels": 3, "patch_size": 14,
                 "spatial_merge_size": 2, "temporal_patch_size": 2},
    "qwen2_5_vl": {"depth": 32, "hidden_size": 3584, "num_heads": 16, "intermediate_size": 3420, "in_channels": 3, "patch_size": 14,
                   "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584},
    "qwen3_vl": {"depth": 27, "hidden_size": 1152, "num_heads": 16, "intermediate_size": 4304, "in_channels": 3, "patch_size": 16,
                 "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584, "num_position_embeddings": 2304,
                 "deepstack_visual_indexes": [8, 16, 24]},
}


def vision_shape(model: dict[str, Any]) -> VisionShape:
    """The vision parts of a config.json (as a dict); all zero for a text model or a family the
    planner does not size."""
    family = vision_family(model.get("model_type"))
    if family is not None and "audios" in family.media:  # Qwen2-Audio's audio tower
        from ftui.plan.audio_shape import audio_tower_parameters

        sized = audio_tower_parameters(model)
        return VisionShape(**sized) if sized is not None else VisionShape()
    if family is not None and family.name not in DEFAULTS and isinstance(model.get("vision_config"), dict):
        from ftui.plan.vision_towers import tower_parameters  # LLaVA, Gemma 3, InternVL

        sized = tower_parameters(family.name, model)
        return VisionShape(**sized) if sized is not None else VisionShape()
    if family is None or family.name not in DEFAULTS or not isinstance(model.get("vision_config"), dict):
        return VisionShape()
    v = {**DEFAULTS[family.name], **{k: x for k, x in model["vision_config"].items() if x is not None}}
    if "in_chans" in model["vision_config"] and "in_channels" not in model["vision_config"]:
        v["in_channels"] = model["vision_config"]["in_chans"]  # older Qwen2-VL configs
    depth, m2 = int(v["depth"]), int(v["spatial_merge_size"]) ** 2
    kernel = int(v["in_channels"]) * int(v["temporal_patch_size"]) * int(v["patch_size"]) ** 2
    sizes = dict(heads=int(v["num_heads"]), patch_size=int(v["patch_size"]), merge=int(v["spatial_merge_size"]),
                 kernel=kernel, family=family.name)
    if family.name == "qwen2_vl":
        e, hidden = int(v["embed_dim"]), int(v["embed_dim"]) * int(v["mlp_ratio"])
        block = 4 * e + _linear(e, 3 * e) + _linear(e, e) + _linear(e, hidden) + _linear(hidden, e)  # two LayerNorms
        projector = 2 * e + _linear(e * m2, e * m2) + _linear(e * m2, int(v["hidden_size"]))
        return VisionShape(kernel * e + depth * block, projector, block, depth, e, hidden, **sizes)
    h, i, out = int(v["hidden_size"]), int(v["intermediate_size"]), int(v["out_hidden_size"])
    if family.name == "qwen2_5_vl":  # RMSNorms, a gated MLP
        block = 2 * h + _linear(h, 3 * h) + _linear(h, h) + 2 * _linear(h, i) + _linear(i, h)
        return VisionShape(kernel * h + depth * block, h + _linear(h * m2, h * m2) + _linear(h * m2, out), block, depth, h, i,
                           gated=True, **sizes)
    # qwen3_vl: LayerNorms, a biased patch embedding, a learned position table, deepstack mergers
    block = 4 * h + _linear(h, 3 * h) + _linear(h, h) + _linear(h, i) + _linear(i, h)
    merger = _linear(h * m2, h * m2) + _linear(h * m2, out)
    deepstack = len(v["deepstack_visual_indexes"]) * (2 * h * m2 + merger)  # each normalises the merged patches
    tower = kernel * h + h + int(v["num_position_embeddings"]) * h + depth * block + deepstack
    return VisionShape(tower, 2 * h + merger, block, depth, h, i, **sizes)
