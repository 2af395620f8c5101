"""An example's images kept as their files and grids, decoded and processed per micro batch, as
LLaMA-Factory 0.9.5 does it (its dataset keeps the image paths; its collator,
``MultiModalDataCollatorForSeq2Seq``, runs the plugin's ``_get_mm_inputs`` over each batch's
images).

Holding the processor's tensors per example from encoding to the end of a run costs about
14 MB per 768 x 768 image (``pixel_values`` [patches, 1176] in fp32): a 10,000-image dataset
would not fit in memory. Encoding keeps, per example, the image paths and each image's grid
(``image_grid_thw``), computed exactly from the image's size through LLaMA-Factory's
regularisation and the processor's ``smart_resize`` (``ftui.data.media_tokens.image_grid``,
the same arithmetic: no resize, no processor run); the collator (``ftui.runner.media_batch``,
in the training loop's prefetch thread: ``ftui.runner.feed.Prefetcher``) opens, regularises
and processes the batch's images and checks that each grid it gets equals the encoded one,
since the example's ``<|image_pad|>`` tokens were counted from it: a file changed since
encoding is named, not trained on with tokens that no longer match its pixels.

Cost per step, measured on this project's 2-core CPU machine (``bench/vl_step.py``,
``results/vl_step_cpu.json``: 448 x 448 PNG files of noise, Qwen2-VL's processor): a micro batch
of two images takes 0.089 s to open, regularise and process (about 45 ms an image, PNG decoding
and the processor's resize and normalisation). The prefetch thread does it while the previous
step computes (that step took 10 to 11 s there, a small Qwen2-VL at 2 x 1,280 tokens), so a step
waits for its images only when it is shorter than their processing. On a GPU, whose steps can
take tenths of a second, a micro batch of many images can make the step wait (the step events'
``data_wait_s`` shows it): LLaMA-Factory spreads its collation over dataloader workers, ftui's
one prefetch thread does it alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ftui.data.media_tokens import VisionProcessor, image_grid
from ftui.data.records import DataFormatError
from ftui.i18n import _
from ftui.runner.vision.images import open_image
from ftui.runner.vision.plugins import QwenVLPlugin
from ftui.runner.vision.processor import ImageSettings

Grid = tuple[int, int, int]  # (t, h, w) in patches, as image_grid_thw has it


def grid_numbers(image_processor: Any) -> VisionProcessor:
    """The numbers of a loaded Qwen2-VL-style image processor that decide an image's grid (its
    ``size`` holds min_pixels / max_pixels as shortest_edge / longest_edge in transformers 5)."""
    size = getattr(image_processor, "size", None) or {}
    get = size.get if isinstance(size, dict) else (lambda key: getattr(size, key, None))
    return VisionProcessor(patch_size=int(image_processor.patch_size), merge_size=int(image_processor.merge_size),
                           temporal_patch_size=int(image_processor.temporal_patch_size),
                           min_pixels=int(get("shortest_edge") or image_processor.min_pixels),
                           max_pixels=int(get("longest_edge") or image_processor.max_pixels))


@dataclass(eq=False)
class ImageReader:
    """What turns image files into the model's tensors, one per run: the family's plugin, the
    image processor and the run's image settings."""

    plugin: Any  # QwenVLPlugin, or a FixedTokensPlugin (ftui.runner.vision.fixed_plugins)
    image_processor: Any
    settings: ImageSettings
    numbers: VisionProcessor | None = field(init=False)  # None: a family whose images all take one grid

    def __post_init__(self) -> None:
        self.numbers = grid_numbers(self.image_processor) if isinstance(self.plugin, QwenVLPlugin) else None

    def grid(self, image: Any) -> Grid:
        """An opened image's grid, from its size alone (what the processor will give it); for
        LLaVA, Gemma 3 and InternVL (1, 1, 1): one row of pixel_values, whatever the size."""
        if self.numbers is None:
            return self.plugin.image_grid(image)
        return image_grid(image.width, image.height, self.numbers, self.settings.max_pixels, self.settings.min_pixels)

    def tensors(self, images: "ExampleImages") -> dict[str, Any]:
        """The processor's tensors for one example's images (``pixel_values``,
        ``image_grid_thw``), each file opened and regularised now. DataFormatError naming the
        file when it cannot be read any more or its grid is not the one encoded."""
        from PIL import Image

        opened = []
        for path in images.paths:
            try:
                opened.append(open_image(path))
            except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
                raise DataFormatError(_("the image {path} could be read when the dataset was encoded but not now ({error}); "
                                        "restore the file and start the run again").format(
                    path=path, error=f"{type(err).__name__}: {err}")) from None
        out = self.plugin.image_inputs(opened, self.image_processor, self.settings)
        if "image_grid_thw" in out:
            got = [tuple(int(x) for x in row) for row in out["image_grid_thw"].tolist()]
        else:  # one pixel_values row per image (fixed_plugins)
            got = [self.plugin.image_grid(None)] * int(out["pixel_values"].size(0))
        for path, encoded, now in zip(images.paths, images.grids, got):
            if tuple(encoded) != now:
                raise DataFormatError(_("the image {path} changed since the dataset was encoded: its grid of patches is now "
                                        "{now}, not {encoded}, so its example's image tokens no longer match it; restore the "
                                        "file, or start the run again to encode the dataset anew").format(
                    path=path, now="x".join(map(str, now)), encoded="x".join(map(str, encoded))))
        return out


@dataclass(frozen=True, eq=False)
class ExampleImages:
    """An example's images as ``Example.media`` holds them until its batch is collated: the
    files, each one's grid (the tokens the example's ids hold for it), and the run's reader."""

    paths: tuple[str, ...]
    grids: tuple[Grid, ...]
    reader: ImageReader
    videos: tuple[Any, ...] = ()  # its videos' headers (ftui.data.video_files.VideoInfo), in order
    video_grids: tuple[Grid, ...] = ()  # each video's grid (the tokens the ids hold for it)
    video_reader: Any = None  # ftui.runner.vision.videos.VideoReader, where it has videos

    @property
    def patches(self) -> int:
        """The rows of ``pixel_values`` these images give (t x h x w each)."""
        return sum(t * h * w for t, h, w in self.grids)

    def tensors(self) -> dict[str, Any]:
        """The processor's tensors for these images (``ImageReader.tensors``) and videos
        (``VideoReader.tensors``: pixel_values_videos, video_grid_thw ...), made now."""
        out = self.reader.tensors(self) if self.paths else {}
        if self.videos:
            out.update(self.video_reader.tensors(self.videos, self.video_grids))
        return out
