"""LLaMA-Factory 0.9.5's multimodal plugins, by its names (``mm_plugin.py``), images only:
Qwen's here (``Qwen2VLPlugin`` "qwen2_vl", ``Qwen3VLPlugin`` "qwen3_vl"), LLaVA's, Gemma 3's and
InternVL's in ``ftui.runner.vision.fixed_plugins`` (an image of a fixed number of tokens).

Every plugin answers the same questions, whatever its family: ``image_inputs`` (a record's
images -> the model's tensors), ``grid_tokens`` / ``media_tokens`` (each image's token count
from its grids, ``ftui.runner.vision.batch_images``, or from those tensors), ``expand`` (the
placeholders -> the tokens) and ``token_types_key`` (the token-type tensor its model reads
beside the ids, or None).

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

from ftui.runner.audio.plugin import AUDIO_PLUGINS
from ftui.runner.vision.fixed_plugins import FIXED_PLUGINS
from ftui.runner.vision.images import regularize_qwen
from ftui.runner.vision.placeholders import IMAGE_PLACEHOLDER, expand_placeholders  # noqa: F401 (IMAGE_PLACEHOLDER: re-exported)
from ftui.runner.vision.processor import ImageSettings

@dataclass(frozen=True)
class QwenVLPlugin:
    name: str
    image_token: str = "<|image_pad|>"
    vision_bos: str = "<|vision_start|>"
    vision_eos: str = "<|vision_end|>"
    token_types_key: str | None = "mm_token_type_ids"  # 1 at image tokens, 2 at video tokens
    video_token: str = "<|video_pad|>"

    @property
    def processor_image_text(self) -> str:
        """An image in a chat template's text as the family's transformers Processor expands it
        (its pad token to the image's grid): what an exported chat template renders an image part as."""
        return self.vision_bos + self.image_token + self.vision_eos

    @property
    def processor_video_text(self) -> str | None:
        return self.vision_bos + self.video_token + self.vision_eos

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

    @staticmethod
    def grid_tokens(grids: Any, image_processor: Any) -> list[int]:
        """Each image's token count from its grid (t, h, w): t*h*w / merge_size**2."""
        merge = int(image_processor.merge_size) ** 2
        return [int(t) * int(h) * int(w) // merge for t, h, w in grids]

    def media_tokens(self, media: dict[str, Any], image_processor: Any) -> list[int]:
        """Each image's token count, from its ``image_inputs``."""
        return self.image_tokens(media["image_grid_thw"], image_processor)

    def expand(self, turns: list[dict[str, str]], tokens: list[int]) -> list[dict[str, str]]:
        """The turns with each placeholder replaced by its image's tokens
        (<|vision_start|> + <|image_pad|> x n + <|vision_end|>)."""
        return expand_placeholders(turns, [self.vision_bos + self.image_token * n + self.vision_eos for n in tokens])


PLUGINS: dict[str, Any] = {**{name: QwenVLPlugin(name) for name in ("qwen2_vl", "qwen3_vl")}, **FIXED_PLUGINS, **AUDIO_PLUGINS}


def plugin(name: str) -> Any:
    """The plugin of LLaMA-Factory's name (a family's ``plugin`` in ftui.presets.vision_families)."""
    return PLUGINS[name]
