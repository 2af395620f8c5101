"""LLaMA-Factory 0.9.5's plugins for families whose every image is a fixed number of tokens
(``mm_plugin.py``): ``LlavaPlugin`` "llava" (LLaVA-1.5), ``Gemma3Plugin`` "gemma3" and
``InternVLPlugin`` "intern_vl" (InternVL 3), images only, with the interface of
``ftui.runner.vision.plugins.QwenVLPlugin``.

Each image is regularised as LLaMA-Factory's base plugin does (``ftui.runner.vision.images.regularize``:
image_max_pixels / image_min_pixels, RGB; none of Qwen's side rules) and the image processor
resizes it to the tower's square (``pixel_values`` [images, 3, side, side]). Its ``<image>``
placeholder becomes:

- llava: ``<image>`` x n, n = (side / patch_size)² + num_additional_image_tokens, less one
  with vision_feature_select_strategy "default" (the CLS feature the model drops);
- gemma3: ``\\n\\n<start_of_image>`` + ``<image_soft_token>`` x image_seq_length +
  ``<end_of_image>\\n\\n`` (the Processor's full_image_sequence); the model reads
  ``token_type_ids`` (1 at the soft tokens: bidirectional attention over each image);
- intern_vl: ``<img>`` + ``<IMG_CONTEXT>`` x image_seq_length + ``</img>`` (one patch per image:
  crop_to_patches is refused by name, ftui.config.rules).

The numbers (patch_size, num_additional_image_tokens, vision_feature_select_strategy,
image_seq_length) are the transformers Processor's, which LLaMA-Factory reads: the model
folder's processor_config.json (``ftui.plan.model_json.processor_numbers``), with the Processor classes' defaults.
Pan-and-scan (Gemma 3's image_do_pan_and_scan) is refused by name too (ftui.config.rules).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ftui.i18n import _
from ftui.runner.vision.images import regularize
from ftui.runner.vision.placeholders import expand_placeholders
from ftui.runner.vision.processor import ImageSettings

def _number(numbers: dict[str, Any], key: str, default: Any) -> Any:
    value = numbers.get(key, default)
    if value is None:
        raise ValueError(_("the model's processor_config.json has no {key}, which the {family} image encoding needs; copy "
                           "the file from the model's release").format(key=key, family=numbers.get("processor_class", "?")))
    return value


@dataclass(frozen=True)
class FixedTokensPlugin:
    """The shared part: regularise, run the image processor, one token run per image."""

    name: str
    image_token: str
    token_types_key: str | None = None
    typed_token: str = "image_token_id"  # the config's id of the token whose type is 1 (see Gemma3Plugin)
    processor_video_text = None  # images only (videos are refused by name)

    @property
    def processor_image_text(self) -> str:
        """An image in a chat template's text as the family's transformers Processor expands it
        (LLaVA's <image>, InternVL's <IMG_CONTEXT>; Gemma 3's below): an exported chat template's image part."""
        return self.image_token

    def image_inputs(self, images: list[Any], image_processor: Any, settings: ImageSettings) -> dict[str, Any]:
        regular = [regularize(image, settings.max_pixels, settings.min_pixels) for image in images]
        out = image_processor(regular, return_tensors="pt")
        return {"pixel_values": out["pixel_values"]}

    def per_image(self, height: int, width: int, image_processor: Any) -> int:
        """The tokens of one image whose pixel_values are ``height`` x ``width``."""
        raise NotImplementedError

    @staticmethod
    def image_grid(image: Any) -> tuple[int, int, int]:
        """An image's "grid" as ftui.runner.vision.batch_images keeps it: one row of pixel_values."""
        return (1, 1, 1)

    def grid_tokens(self, grids: Any, image_processor: Any) -> list[int]:
        """Each image's token count (every image the same), before any image is processed."""
        height, width = output_size(image_processor)
        return [self.per_image(height, width, image_processor)] * len(grids)

    def media_tokens(self, media: dict[str, Any], image_processor: Any) -> list[int]:
        """Each image's token count from its processed tensors (every image the same)."""
        pixels = media["pixel_values"]
        return [self.per_image(int(pixels.shape[-2]), int(pixels.shape[-1]), image_processor)] * int(pixels.size(0))

    def image_text(self, n: int) -> str:
        return self.image_token * n

    def expand(self, turns: list[dict[str, str]], tokens: list[int]) -> list[dict[str, str]]:
        return expand_placeholders(turns, [self.image_text(n) for n in tokens])

    def stand_in_tokens(self, config: Any) -> int:
        """The tokens of one image for the model ``config`` (the stand-in image)."""
        raise NotImplementedError

    def stand_in(self, config: Any) -> tuple[tuple[int, ...], dict[str, torch.Tensor]]:
        """A zero image of the tower's size and its image tokens (ftui.runner.media_batch.stand_in)."""
        vision = config.vision_config
        side = vision.image_size[0] if isinstance(vision.image_size, (list, tuple)) else vision.image_size
        channels = int(getattr(vision, "num_channels", 3) or 3)
        ids = (int(config.image_token_id),) * self.stand_in_tokens(config)
        return ids, {"pixel_values": torch.zeros(1, channels, int(side), int(side))}


def output_size(image_processor: Any) -> tuple[int, int]:
    """(height, width) of every image the processor outputs: its crop (CLIP's center crop) or
    its fixed size. ValueError for a processor whose output follows each image's own shape."""
    def get(size: Any, key: str) -> Any:
        return size.get(key) if isinstance(size, dict) else getattr(size, key, None)

    crop = getattr(image_processor, "crop_size", None) if getattr(image_processor, "do_center_crop", False) else None
    for size in (crop, getattr(image_processor, "size", None)):
        if size is not None and get(size, "height") and get(size, "width"):
            return int(get(size, "height")), int(get(size, "width"))
    raise ValueError(_("the image processor {processor} does not resize every image to one size (a crop_size with "
                       "do_center_crop, or a size with height and width), which ftui's {kind} encoding needs").format(
        processor=type(image_processor).__name__, kind="LLaVA / Gemma 3 / InternVL"))


def _patches(config: Any) -> int:
    vision = config.vision_config
    size = vision.image_size[0] if isinstance(vision.image_size, (list, tuple)) else vision.image_size
    patch = vision.patch_size[0] if isinstance(vision.patch_size, (list, tuple)) else vision.patch_size
    return (int(size) // int(patch)) ** 2


@dataclass(frozen=True)
class LlavaPlugin(FixedTokensPlugin):
    @staticmethod
    def refuse_pixtral(image_processor: Any) -> None:
        """Pixtral's checkpoints say model_type llava too; their images are encoded otherwise."""
        if type(image_processor).__name__.startswith("Pixtral"):
            from ftui.data.records import DataFormatError

            raise DataFormatError(_("this llava model is a Pixtral (its image processor is {processor}), whose images ftui "
                                    "does not encode yet; use a LLaVA-1.5 model, or a family ftui trains").format(
                processor=type(image_processor).__name__))

    def image_inputs(self, images: list[Any], image_processor: Any, settings: ImageSettings) -> dict[str, Any]:
        self.refuse_pixtral(image_processor)
        return super().image_inputs(images, image_processor, settings)

    def grid_tokens(self, grids: Any, image_processor: Any) -> list[int]:
        self.refuse_pixtral(image_processor)
        return super().grid_tokens(grids, image_processor)

    def per_image(self, height: int, width: int, image_processor: Any) -> int:
        numbers = getattr(image_processor, "processor_numbers", {})
        patch = int(_number(numbers, "patch_size", None))
        n = (height // patch) * (width // patch) + int(_number(numbers, "num_additional_image_tokens", 0))
        return n - 1 if numbers.get("vision_feature_select_strategy") == "default" else n

    def stand_in_tokens(self, config: Any) -> int:
        return _patches(config) + (0 if config.vision_feature_select_strategy == "default" else 1)


@dataclass(frozen=True)
class Gemma3Plugin(FixedTokensPlugin):
    """LLaMA-Factory 0.9.5 marks ``processor.image_token_id`` in token_type_ids
    (``_get_gemma3_token_type_ids``), which transformers 5's Gemma3Processor sets to the
    ``<start_of_image>`` token's id, not the soft tokens': LLaMA-Factory's Gemma 3 batches have
    type 1 at each <start_of_image> only, so the image tokens attend causally. ftui makes the
    same batches (``typed_token``); tests/test_vl_families.py holds LLaMA-Factory's."""

    boi: str = "<start_of_image>"
    eoi: str = "<end_of_image>"

    @property
    def processor_image_text(self) -> str:
        return self.boi  # Gemma3Processor expands each <start_of_image> to its full image sequence

    def per_image(self, height: int, width: int, image_processor: Any) -> int:
        return int(_number(getattr(image_processor, "processor_numbers", {}), "image_seq_length", 256))

    def image_text(self, n: int) -> str:
        return f"\n\n{self.boi}{self.image_token * n}{self.eoi}\n\n"

    def stand_in_tokens(self, config: Any) -> int:
        return int(config.mm_tokens_per_image)


@dataclass(frozen=True)
class InternVLPlugin(FixedTokensPlugin):
    start: str = "<img>"
    end: str = "</img>"

    def per_image(self, height: int, width: int, image_processor: Any) -> int:
        return int(_number(getattr(image_processor, "processor_numbers", {}), "image_seq_length", 256))

    def image_text(self, n: int) -> str:
        return self.start + self.image_token * n + self.end

    def stand_in_tokens(self, config: Any) -> int:
        return int(_patches(config) * float(config.downsample_ratio) ** 2)


FIXED_PLUGINS: dict[str, FixedTokensPlugin] = {
    "llava": LlavaPlugin("llava", "<image>"),
    "gemma3": Gemma3Plugin("gemma3", "<image_soft_token>", token_types_key="token_type_ids", typed_token="boi_token_id"),
    "intern_vl": InternVLPlugin("intern_vl", "<IMG_CONTEXT>"),
}
