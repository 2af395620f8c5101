"""LLaMA-Factory 0.9.5's multimodal plugins for Qwen's vision-language models, by its names
(``mm_plugin.py``: ``Qwen2VLPlugin`` "qwen2_vl", ``Qwen3VLPlugin`` "qwen3_vl"), images only.

A record's images become the image processor's tensors (``pixel_values`` [patches, d] and
``image_grid_thw`` [images, 3], each image regularised first: ``ftui.runner.vision.images``),
and each ``<image>`` placeholder of its turns, in order over all turns, becomes
``<|vision_start|>`` + ``<|image_pad|>`` x n + ``<|vision_end|>`` with n = t*h*w / merge_size**2
of that image's grid (``process_messages``). The text around it is the template's
(``ftui.presets.templates``), tokenized as LLaMA-Factory tokenizes it.

Qwen3VLPlugin differs from Qwen2VLPlugin only for videos (per-frame timestamps, its own video
resize); for images the two are the same code in LLaMA-Factory, and the same here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ftui.i18n import _
from ftui.data.conversation import ConversationError
from ftui.runner.vision.images import regularize_qwen
from ftui.runner.vision.processor import ImageSettings

IMAGE_PLACEHOLDER = "<image>"  # LLaMA-Factory's (its IMAGE_PLACEHOLDER environment variable is not read)


@dataclass(frozen=True)
class QwenVLPlugin:
    name: str
    image_token: str = "<|image_pad|>"
    vision_bos: str = "<|vision_start|>"
    vision_eos: str = "<|vision_end|>"

    def image_inputs(self, images: list[Any], image_processor: Any, settings: ImageSettings) -> dict[str, Any]:
        """The processor's tensors for opened PIL ``images`` (one record's, in order)."""
        regular = [regularize_qwen(image, settings.max_pixels, settings.min_pixels) for image in images]
        out = image_processor(regular, return_tensors="pt")
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}

    @staticmethod
    def image_tokens(grid_thw: Any, image_processor: Any) -> list[int]:
        """How many image tokens each image expands to: its grid's t*h*w / merge_size**2."""
        merge = int(image_processor.merge_size) ** 2
        return [int(t) * int(h) * int(w) // merge for t, h, w in grid_thw.tolist()]

    def expand(self, turns: list[dict[str, str]], tokens: list[int]) -> list[dict[str, str]]:
        """The turns with each placeholder replaced by its image's tokens, in order over the
        turns; the number of placeholders must equal the number of images (LLaMA-Factory's
        rule, ``_validate_messages``)."""
        found = sum(turn["content"].count(IMAGE_PLACEHOLDER) for turn in turns)
        if found != len(tokens):
            raise ConversationError(_("it has {images} images but {placeholders} {placeholder} placeholders in its messages; "
                                      "each image needs one placeholder where it goes").format(
                images=len(tokens), placeholders=found, placeholder=IMAGE_PLACEHOLDER))
        out, k = [], 0
        for turn in turns:
            content = turn["content"]
            while IMAGE_PLACEHOLDER in content:
                content = content.replace(IMAGE_PLACEHOLDER, self.vision_bos + self.image_token * tokens[k] + self.vision_eos, 1)
                k += 1
            out.append({**turn, "content": content})
        return out


PLUGINS: dict[str, QwenVLPlugin] = {name: QwenVLPlugin(name) for name in ("qwen2_vl", "qwen3_vl")}


def plugin(name: str) -> QwenVLPlugin:
    """The plugin of LLaMA-Factory's name (a family's ``plugin`` in ftui.presets.vision_families)."""
    return PLUGINS[name]
