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
# LLaMA-Factory's defaults for a composite model registered with no keys (LLaVA, Gemma 3, InternVL)
PROJECTOR, TOWER, LANGUAGE = ("multi_modal_projector",), ("vision_tower",), ("language_model", "lm_head")

VISION_FAMILIES: tuple[VisionFamily, ...] = (
    VisionFamily("qwen2_vl", ("qwen2_vl",), "qwen2_vl", "qwen2_vl", ("visual.merger",),
                 ("visual.patch_embed", "visual.blocks"), QWEN_LANGUAGE, ("patch_embed",), name_pattern=r"qwen-?2-?vl"),
    VisionFamily("qwen2_5_vl", ("qwen2_5_vl",), "qwen2_vl", "qwen2_vl", ("visual.merger",),
                 ("visual.patch_embed", "visual.blocks"), QWEN_LANGUAGE, ("patch_embed",), name_pattern=r"qwen-?2\.5-?vl"),
    VisionFamily("qwen3_vl", ("qwen3_vl",), "qwen3_vl", "qwen3_vl", ("visual.merger",),
                 ("visual.pos_embed", "visual.patch_embed", "visual.blocks", "visual.deepstack_merger_list"),
                 QWEN_LANGUAGE, ("patch_embed",), name_pattern=r"qwen-?3-?vl"),
    # LLaVA-1.5 (model_type llava; Pixtral's llava checkpoints are refused by their image processor)
    VisionFamily("llava", ("llava",), "llava", "llava", PROJECTOR, TOWER, LANGUAGE, media=("images",),
                 image_token="<image>", video_token="", name_pattern=r"llava-?(v)?1\.5"),
    VisionFamily("gemma3", ("gemma3",), "gemma3", "gemma3", PROJECTOR, TOWER, LANGUAGE, media=("images",),
                 image_token="<image_soft_token>", video_token="", name_pattern=r"gemma-?3-(4|12|27)b"),
    VisionFamily("internvl", ("internvl",), "intern_vl", "intern_vl", PROJECTOR, TOWER, LANGUAGE, media=("images",),
                 image_token="<IMG_CONTEXT>", video_token="", name_pattern=r"internvl-?3"),
    # Qwen2-Audio: LLaMA-Factory registers its audio tower as the "vision" tower; audios only
    VisionFamily("qwen2_audio", ("qwen2_audio",), "qwen2_audio", "qwen2_audio", PROJECTOR, ("audio_tower",), LANGUAGE,
                 media=("audios",), image_token="", video_token="", name_pattern=r"qwen-?2-?audio"),
)
AUDIO_TEMPLATES = {"qwen2_audio": "qwen2_audio"}  # LLaMA-Factory's templates that encode audios, and their mm_plugin

# LLaMA-Factory's templates that encode images, and the mm_plugin each one encodes them with
# (its template.py): ftui.runner.vision has the same encoding under the plugin's name.
IMAGE_TEMPLATES: dict[str, str] = {
    "qwen2_vl": "qwen2_vl", "qwen3_vl": "qwen3_vl", "qwen3_vl_nothink": "qwen3_vl", "qwen3_5": "qwen3_vl",
    "qwen3_5_nothink": "qwen3_vl", "llava": "llava", "gemma3": "gemma3", "intern_vl": "intern_vl",
}
QWEN_PLUGINS = frozenset({"qwen2_vl", "qwen3_vl"})  # the same image encoding (they differ for videos only)


def template_fits(template: str, family: VisionFamily) -> bool:
    """Whether the image template encodes images as ``family``'s models read them."""
    plugin = IMAGE_TEMPLATES.get(template)
    return plugin == family.plugin or (plugin in QWEN_PLUGINS and family.plugin in QWEN_PLUGINS)


FAMILY_NAMES = "Qwen2-VL, Qwen2.5-VL, Qwen3-VL, LLaVA-1.5, Gemma 3, InternVL 3"


def vision_family(model_type: str | None) -> VisionFamily | None:
    """The vision family of a config.json model_type, or None (a text-only model, or a
    vision-language family ftui does not train yet)."""
    for family in VISION_FAMILIES:
        if model_type in family.model_types:
            return family
    return None
