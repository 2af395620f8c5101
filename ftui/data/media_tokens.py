"""How many tokens an image becomes for the Qwen2-VL family, computed from its size alone (no
pixel decoded, no torch, no transformers): the preview lists it beside each image, and the
planner can size activations with it.

Two resizes, in the order a run applies them:

1. LLaMA-Factory 0.9.5's regularisation (``mm_plugin.py``: ``MMPluginMixin._preprocess_image``
   with ``image_max_pixels`` / ``image_min_pixels``, then ``Qwen2VLPlugin._preprocess_image``:
   each side at least 28, an aspect ratio above 200 cut to 180);
2. transformers' ``smart_resize`` in the image processor (both sides multiples of patch_size
   x merge_size, the pixels within the processor's min_pixels / max_pixels), whose result in
   patches is the grid ``(t=1, h / patch_size, w / patch_size)``.

An image then stands for ``h * w / patch_size^2 / merge_size^2`` ``<|image_pad|>`` tokens. (LLaVA,
Gemma 3 and InternVL resize every image to one square: a fixed count, ``fixed_image_tokens``.) The
processor's numbers come from the model folder's preprocessor_config.json (plain JSON, read by
ftui.plan.model_json; ``processor_from_config`` here reads them as
transformers does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ftui.i18n import _

# LLaMA-Factory's defaults (hparams/model_args.py) and the Qwen2-VL image processor's own
# (transformers: size {shortest_edge: 56 * 56, longest_edge: 28 * 28 * 1280}, patch 14, merge 2)
IMAGE_MAX_PIXELS, IMAGE_MIN_PIXELS = 768 * 768, 32 * 32
PROCESSOR_DEFAULTS = {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 2, "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 1280}
QWEN_MIN_SIDE, QWEN_MAX_RATIO, QWEN_CUT_RATIO = 28, 200, 180


@dataclass(frozen=True)
class VisionProcessor:
    """The numbers of a Qwen2-VL-style image processor that decide an image's grid."""

    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    fixed_tokens: int | None = None  # LLaVA, Gemma 3, InternVL: every image the same tokens (fixed_image_tokens)


def fixed_image_tokens(config: dict[str, Any], numbers: dict[str, Any]) -> int | None:
    """The tokens every image takes in a family whose images are resized to one square
    (LLaMA-Factory 0.9.5's llava / gemma3 / intern_vl plugins, ftui.runner.vision.fixed_plugins),
    from the image processor's config and the Processor's (processor_config.json: ``numbers``);
    None for the Qwen-VL families (their images' tokens follow their sizes)."""
    kind = numbers.get("processor_class")
    if kind in ("Gemma3Processor", "InternVLProcessor"):
        return int(numbers.get("image_seq_length") or 256)
    if kind != "LlavaProcessor" or not numbers.get("patch_size"):
        return None
    crop = config.get("crop_size") if isinstance(config.get("crop_size"), dict) else {}
    size = config.get("size") if isinstance(config.get("size"), dict) else {}
    side_h = crop.get("height") or size.get("height") or size.get("shortest_edge")
    side_w = crop.get("width") or size.get("width") or size.get("shortest_edge")
    if not isinstance(side_h, int) or not isinstance(side_w, int):
        return None
    patch = int(numbers["patch_size"])
    tokens = (side_h // patch) * (side_w // patch) + int(numbers.get("num_additional_image_tokens") or 0)
    return tokens - 1 if numbers.get("vision_feature_select_strategy") == "default" else tokens


def processor_numbers(config: dict[str, Any], defaults: dict[str, int], file_name: str) -> dict[str, int]:
    """Patch, merge and temporal sizes and the pixel limits of an image or video processor
    config, read as transformers reads it: ``defaults`` (the class's), then its ``size`` dict
    (shortest_edge / longest_edge), then ``min_pixels`` / ``max_pixels`` over it (their older
    spelling). ValueError naming ``file_name`` for numbers that are not positive whole numbers."""
    size = config.get("size") if isinstance(config.get("size"), dict) else {}
    values = dict(defaults)
    for key in ("patch_size", "merge_size", "temporal_patch_size"):
        if config.get(key) is not None:
            values[key] = config[key]
    if size.get("shortest_edge") is not None:
        values["min_pixels"] = size["shortest_edge"]
    if size.get("longest_edge") is not None:
        values["max_pixels"] = size["longest_edge"]
    for key in ("min_pixels", "max_pixels"):
        if config.get(key) is not None:
            values[key] = config[key]
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(_("{file}: {key} is {value}, not a positive whole number").format(file=file_name, key=key, value=repr(value)))
    return values


def processor_from_config(config: dict[str, Any], numbers: dict[str, Any] | None = None) -> VisionProcessor:
    """The processor a preprocessor_config.json describes, read as transformers reads it: its
    ``size`` dict (shortest_edge / longest_edge) where given, else the class defaults, then
    ``min_pixels`` / ``max_pixels`` over it (their older spelling). ValueError for numbers that
    are not positive whole numbers."""
    values = processor_numbers(config, PROCESSOR_DEFAULTS, "preprocessor_config.json")
    return VisionProcessor(**values, fixed_tokens=fixed_image_tokens(config, numbers or {}))


def regularized_size(width: int, height: int, max_pixels: int = IMAGE_MAX_PIXELS, min_pixels: int = IMAGE_MIN_PIXELS) -> tuple[int, int]:
    """(width, height) after LLaMA-Factory's Qwen2-VL image regularisation: scaled down to
    ``max_pixels`` (image_max_pixels) or up to ``min_pixels`` (image_min_pixels), keeping the
    aspect ratio with sides truncated to whole pixels; each side at least 28; an aspect ratio
    above 200 cut to 180. ValueError where a side would reach 0 pixels (PIL cannot resize to
    it: LLaMA-Factory fails on such an image too)."""
    if width * height > max_pixels:
        factor = math.sqrt(max_pixels / (width * height))
        width, height = int(width * factor), int(height * factor)
    if width < 1 or height < 1:
        raise ValueError(_("the image is too thin: scaled to image_max_pixels one side would be 0 pixels"))
    if width * height < min_pixels:
        factor = math.sqrt(min_pixels / (width * height))
        width, height = int(width * factor), int(height * factor)
    if min(width, height) < QWEN_MIN_SIDE:
        width, height = max(width, QWEN_MIN_SIDE), max(height, QWEN_MIN_SIDE)
    if width / height > QWEN_MAX_RATIO:
        width, height = height * QWEN_CUT_RATIO, height
    if height / width > QWEN_MAX_RATIO:
        width, height = width, width * QWEN_CUT_RATIO
    return width, height


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width) the image processor resizes to (transformers' ``smart_resize`` of
    Qwen2-VL, rewritten): multiples of ``factor`` nearest the size, scaled into
    [min_pixels, max_pixels]."""
    if max(height, width) / min(height, width) > QWEN_MAX_RATIO:
        raise ValueError(_("the image's aspect ratio is above 200, which the image processor refuses"))
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def image_grid(width: int, height: int, processor: VisionProcessor, max_pixels: int = IMAGE_MAX_PIXELS,
               min_pixels: int = IMAGE_MIN_PIXELS) -> tuple[int, int, int]:
    """The image's grid (t, h, w) in patches, as the image processor's image_grid_thw gives it."""
    width, height = regularized_size(width, height, max_pixels, min_pixels)
    h, w = smart_resize(height, width, processor.patch_size * processor.merge_size, processor.min_pixels, processor.max_pixels)
    return 1, h // processor.patch_size, w // processor.patch_size


def image_tokens(width: int, height: int, processor: VisionProcessor, max_pixels: int = IMAGE_MAX_PIXELS,
                 min_pixels: int = IMAGE_MIN_PIXELS) -> int:
    """How many image tokens (``<|image_pad|>``) the image expands to in the text."""
    if processor.fixed_tokens is not None:
        return processor.fixed_tokens
    t, h, w = image_grid(width, height, processor, max_pixels, min_pixels)
    return t * h * w // processor.merge_size ** 2
