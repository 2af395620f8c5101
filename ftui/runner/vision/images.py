"""An image read and regularised before the image processor sees it, as LLaMA-Factory 0.9.5
does (``mm_plugin.py``: ``MMPluginMixin._preprocess_image``, then ``Qwen2VLPlugin``'s own):
the same PIL calls in the same order, so the pixels match its to the last bit.

1. more than ``max_pixels``: scaled down to about ``max_pixels`` (both sides by the square
   root of the ratio, truncated to whole pixels, PIL's default resampling);
2. fewer than ``min_pixels``: scaled up the same way;
3. a mode other than RGB is converted to RGB;
4. Qwen2-VL (and Qwen3-VL, which inherits it): a side under 28 pixels is raised to 28, and an
   aspect ratio over 200 is cut to 180 (the model's patch merger needs both).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

QWEN_MIN_SIDE = 28
QWEN_MAX_RATIO, QWEN_CUT_RATIO = 200, 180


def scaled(image: Any, pixels: int) -> Any:
    """The image resized to about ``pixels`` pixels, its aspect ratio kept."""
    factor = math.sqrt(pixels / (image.width * image.height))
    return image.resize((int(image.width * factor), int(image.height * factor)))


def regularize(image: Any, max_pixels: int, min_pixels: int) -> Any:
    """Steps 1-3 of the module doc (LLaMA-Factory's BasePlugin)."""
    if image.width * image.height > max_pixels:
        image = scaled(image, max_pixels)
    if image.width * image.height < min_pixels:
        image = scaled(image, min_pixels)
    if image.mode != "RGB":
        image = image.convert("RGB")
    return image


def regularize_qwen(image: Any, max_pixels: int, min_pixels: int) -> Any:
    """Steps 1-4 (LLaMA-Factory's Qwen2VLPlugin)."""
    image = regularize(image, max_pixels, min_pixels)
    if min(image.width, image.height) < QWEN_MIN_SIDE:
        image = image.resize((max(image.width, QWEN_MIN_SIDE), max(image.height, QWEN_MIN_SIDE)))
    if image.width / image.height > QWEN_MAX_RATIO:
        image = image.resize((image.height * QWEN_CUT_RATIO, image.height))
    if image.height / image.width > QWEN_MAX_RATIO:
        image = image.resize((image.width, image.width * QWEN_CUT_RATIO))
    return image


def open_image(path: str | Path) -> Any:
    """The image at ``path``, decoded (so a truncated file fails here, not in the processor).
    Raises OSError (PIL's UnidentifiedImageError is one) or PIL's DecompressionBombError."""
    from PIL import Image

    image = Image.open(path)
    image.load()
    return image
