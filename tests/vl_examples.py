"""Examples with images for the model-side tests of vision-language models, made without the
encoding side (ftui.runner.vision): the tiny model's own image processor gives the tensors and
the test expands one placeholder per image to its tokens as Qwen2-VL's plugin does
(<|vision_start|>, grid_t x grid_h x grid_w / merge_size² <|image_pad|>, <|vision_end|>)."""

from __future__ import annotations

from pathlib import Path

from tests.vlm_models import vlm_dir


def tiny_vlm_cfg(family: str, root: Path, **over):
    """A run config over the tiny ``family`` model, its fields set past the config's rules (the
    runner's parts are driven directly, as the engine tests of tests/test_gpu_readiness.py do)."""
    from ftui.config.load import demo_config

    path = vlm_dir(family, root)
    return demo_config().model_copy(update=dict(model_name_or_path=str(path), model_init="pretrained", **over))


class ImageExamples:
    """Makes ``Example``s with images for the tiny model in ``folder``."""

    def __init__(self, folder: Path):
        from transformers import AutoImageProcessor, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.processor = AutoImageProcessor.from_pretrained(str(folder))
        self.image_id = self.tokenizer.convert_tokens_to_ids("<|image_pad|>")

    def media(self, sizes: list[tuple[int, int]], colour=(120, 30, 200)):
        """The processor's tensors for images of ``sizes`` (width, height), and each one's token count."""
        from PIL import Image

        images = [Image.new("RGB", size, colour) for size in sizes]
        out = self.processor(images=images, return_tensors="pt")
        counts = [int(g.prod()) // self.processor.merge_size ** 2 for g in out["image_grid_thw"]]
        return {"pixel_values": out["pixel_values"], "image_grid_thw": out["image_grid_thw"]}, counts

    def example(self, prompt: str, answer: str, sizes: list[tuple[int, int]] = ((56, 84),), colour=(120, 30, 200)):
        """One example: each image's tokens, then the prompt (no loss) and the answer (loss)."""
        from ftui.runner.data import IGNORE, Example

        media, counts = self.media(list(sizes), colour) if sizes else (None, [])
        vision = "".join("<|vision_start|>" + "<|image_pad|>" * n + "<|vision_end|>" for n in counts)
        prompt_ids = self.tokenizer.encode(vision + prompt, add_special_tokens=False)
        answer_ids = self.tokenizer.encode(answer, add_special_tokens=False)
        ids = prompt_ids + answer_ids
        return Example(ids, [IGNORE] * len(prompt_ids) + answer_ids, real_tokens=len(ids), media=media)
