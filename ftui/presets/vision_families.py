"""Vision-language model families ftui trains: what each one's parts are called and how its
multimodal records are encoded, described once and torch-free (the app side reads it to accept
or refuse a multimodal dataset, the planner to size the vision tower, the runner to freeze,
target LoRA and encode).

The module keys are LLaMA-Factory 0.9.5's (``model/model_utils/visual.py``: projector, vision
tower and language model of each composite model, as paths under the
``*ForConditionalGeneration`` model's ``model.`` prefix in transformers 5); ``plugin`` names
the encoding in ``ftui.runner.vision`` that matches LLaMA-Factory's ``mm_plugin`` of that name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VisionFamily:
    name: str
    model_types: tuple[str, ...]  # config.json's model_type
    template: str  # LLaMA-Factory's template for it (ftui.presets.templates)
    plugin: str  # LLaMA-Factory's mm_plugin name; ftui.runner.vision has the same encoding
    projector_keys: tuple[str, ...]
    vision_model_keys: tuple[str, ...]
    language_model_keys: tuple[str, ...]
    lora_conflict_keys: tuple[str, ...] = ()  # never LoRA targets (a conv LoRA cannot wrap)
    media: tuple[str, ...] = ("images", "videos")  # the columns this family reads
    image_token: str = "<|image_pad|>"
    video_token: str = "<|video_pad|>"
    name_pattern: str = ""  # matched against a hub name when no config.json is readable


QWEN_LANGUAGE = ("language_model", "lm_head")

VISION_FAMILIES: tuple[VisionFamily, ...] = (
    VisionFamily("qwen2_vl", ("qwen2_vl",), "qwen2_vl", "qwen2_vl", ("visual.merger",),
                 ("visual.patch_embed", "visual.blocks"), QWEN_LANGUAGE, ("patch_embed",), name_pattern=r"qwen-?2-?vl"),
    VisionFamily("qwen2_5_vl", ("qwen2_5_vl",), "qwen2_vl", "qwen2_vl", ("visual.merger",),
                 ("visual.patch_embed", "visual.blocks"), QWEN_LANGUAGE, ("patch_embed",), name_pattern=r"qwen-?2\.5-?vl"),
    VisionFamily("qwen3_vl", ("qwen3_vl",), "qwen3_vl", "qwen3_vl", ("visual.merger",),
                 ("visual.pos_embed", "visual.patch_embed", "visual.blocks", "visual.deepstack_merger_list"),
                 QWEN_LANGUAGE, ("patch_embed",), name_pattern=r"qwen-?3-?vl"),
)


def vision_family(model_type: str | None) -> VisionFamily | None:
    """The vision family of a config.json model_type, or None (a text-only model, or a
    vision-language family ftui does not train yet)."""
    for family in VISION_FAMILIES:
        if model_type in family.model_types:
            return family
    return None
