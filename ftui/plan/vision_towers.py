"""The vision tower and projector parameters of LLaVA-1.5 (a CLIP tower), Gemma 3 (SigLIP) and
InternVL 3 (InternViT), from config.json alone (no torch), for ``ftui.plan.vision_shape``.

Written from transformers 5's modules, with the defaults its config classes give keys a
config.json leaves out; tests/test_vl_families.py checks each count against the models
transformers builds.
"""

from __future__ import annotations

from typing import Any


def _linear(n_in: int, n_out: int, bias: bool = True) -> int:
    return n_in * n_out + (n_out if bias else 0)


def _side(value: Any) -> int:
    return int(value[0] if isinstance(value, (list, tuple)) else value)


# family -> transformers' vision config defaults (LlavaConfig's CLIP, SiglipVisionConfig, InternVLVisionConfig)
TOWER_DEFAULTS: dict[str, dict[str, Any]] = {
    "llava": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "image_size": 336, "patch_size": 14,
              "num_channels": 3, "num_attention_heads": 16},
    "gemma3": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "image_size": 224, "patch_size": 16,
               "num_channels": 3, "vision_use_head": True, "num_attention_heads": 12},
    "internvl": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "image_size": 448, "patch_size": 14,
                 "num_channels": 3, "num_attention_heads": 16, "attention_bias": False, "use_qk_norm": False, "use_mask_token": False,
                 "use_absolute_position_embeddings": True, "use_mean_pooling": True},
}
TEXT_HIDDEN = {"llava": 4096, "gemma3": 2304, "internvl": 4096}  # the text configs' default hidden sizes


def tower_parameters(family: str, model: dict[str, Any]) -> dict[str, Any] | None:
    """The ``VisionShape`` fields of a config.json of ``family`` (tower, projector, one block,
    depth, and the numbers its activations are sized by); None for a family this module does
    not size."""
    if family not in TOWER_DEFAULTS:
        return None
    given = model.get("vision_config") if isinstance(model.get("vision_config"), dict) else {}
    v = {**TOWER_DEFAULTS[family], **{k: x for k, x in given.items() if x is not None}}
    text = model.get("text_config") if isinstance(model.get("text_config"), dict) else {}
    t = int(text.get("hidden_size") or TEXT_HIDDEN[family])
    h, i, depth = int(v["hidden_size"]), int(v["intermediate_size"]), int(v["num_hidden_layers"])
    patch, channels = _side(v["patch_size"]), int(v["num_channels"])
    patches = (_side(v["image_size"]) // patch) ** 2
    mlp = _linear(h, i) + _linear(i, h)
    sizes = dict(depth=depth, width=h, mlp=i, heads=int(v.get("num_attention_heads") or 16), patch_size=patch, merge=1,
                 kernel=channels * patch * patch, image_patches=patches + (0 if family == "gemma3" else 1))
    if family == "llava":  # CLIP: class token, bias-free patch conv, pre and post LayerNorms
        block = 4 * _linear(h, h) + 4 * h + mlp
        tower = h + channels * patch * patch * h + (patches + 1) * h + 2 * h + depth * block + 2 * h
        bias = bool(model.get("multimodal_projector_bias", True))
        return dict(tower=tower, projector=_linear(h, t, bias) + _linear(t, t, bias), block=block, **sizes)
    if family == "gemma3":  # SigLIP: biased patch conv, post LayerNorm, an optional attention-pooling head
        block = 4 * _linear(h, h) + 4 * h + mlp
        head = h + _linear(h, 3 * h) + _linear(h, h) + 2 * h + mlp if v["vision_use_head"] else 0
        tower = _linear(channels * patch * patch, h) + patches * h + depth * block + 2 * h + head
        return dict(tower=tower, projector=h * t + h, block=block, **sizes)  # the projection matrix and its RMSNorm
    # internvl: InternViT blocks with layer scale; the projector LayerNorms the pixel-shuffled features
    norms = 2 * h if v.get("norm_type", "layer_norm") == "layer_norm" else h
    block = (3 * _linear(h, h, bool(v["attention_bias"])) + _linear(h, h) + (2 * h if v["use_qk_norm"] else 0)
             + 2 * norms + mlp + 2 * h)
    tower = (h + (h if v["use_mask_token"] else 0) + _linear(channels * patch * patch, h)
             + ((patches + 1) * h if v["use_absolute_position_embeddings"] else 0) + depth * block
             + (0 if v["use_mean_pooling"] else norms))
    shuffled = h * int(round(1 / float(model.get("downsample_ratio") or 0.5))) ** 2
    return dict(tower=tower, projector=2 * shuffled + _linear(shuffled, t) + _linear(t, t), block=block, **sizes)
