"""The model's image processor and the run's image settings.

``AutoImageProcessor`` only, never ``AutoProcessor``: transformers 5 cannot build a Qwen2-VL
*Processor* on a machine without torchvision (its video-processor lookup imports it), while the
image processor falls back to its PIL implementation (Qwen2VLImageProcessorPil) there and gives
the same tensors. The settings are LLaMA-Factory's keys with its defaults (read with getattr
until the schema has them all).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftui.i18n import _
from ftui.data.records import DataFormatError
from ftui.plan.model_json import processor_numbers

IMAGE_MAX_PIXELS, IMAGE_MIN_PIXELS = 768 * 768, 32 * 32  # LLaMA-Factory's defaults


@dataclass(frozen=True)
class ImageSettings:
    max_pixels: int = IMAGE_MAX_PIXELS  # image_max_pixels
    min_pixels: int = IMAGE_MIN_PIXELS  # image_min_pixels


def image_settings(cfg: Any) -> ImageSettings:
    """A run's image settings (LLaMA-Factory's image_max_pixels / image_min_pixels)."""
    return ImageSettings(int(getattr(cfg, "image_max_pixels", IMAGE_MAX_PIXELS) or IMAGE_MAX_PIXELS),
                         int(getattr(cfg, "image_min_pixels", IMAGE_MIN_PIXELS) or IMAGE_MIN_PIXELS))


def load_image_processor(model_dir: str) -> Any:
    """The image processor of the model folder (or hub name already resolved to one), with the
    folder's processor_config.json numbers as ``processor_numbers`` (read by ftui.runner.vision.fixed_plugins)."""
    from transformers import AutoImageProcessor

    try:
        image_processor = AutoImageProcessor.from_pretrained(model_dir)
        # the Processor's numbers LLaMA-Factory reads beside the image processor (image_seq_length ...)
        image_processor.processor_numbers = processor_numbers(Path(model_dir))
        return image_processor
    except (OSError, ValueError, KeyError) as err:
        raise DataFormatError(_("the model {model} has no image processor ftui can load ({error}); a vision-language "
                                "model folder needs its preprocessor_config.json").format(model=model_dir, error=err)) from None
