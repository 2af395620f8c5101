"""A vision-language run's images in the planner: how many image tokens and patches an example
brings (``image_load``), and what the vision tower keeps for backward (``vision_activations``).
No torch.

- **The images of an example.** From the dataset's first records when they can be read here
  (each image's size from its header, the largest example's images: a micro batch of such
  examples is planned), else one image of ``image_max_pixels``. Each image's grid comes from
  its size through LLaMA-Factory's regularisation and the processor's ``smart_resize``
  (``ftui.data.media_tokens``), with the processor's patch and merge sizes from the model's
  preprocessor_config.json (else the vision config's own). ``tokens`` of them go into the
  language model's rows, ``patches`` (tokens x merge²) through the tower.
- **The language model.** The image tokens are tokens of its rows: LLaMA-Factory cuts the
  expanded ids at ``cutoff_len`` and ftui refuses an example whose image tokens the cut would
  reach, so the rows the planner already sizes (``micro_batch x cutoff_len``) hold them; an
  example whose images alone take more than ``cutoff_len`` is said in a note. A packed row
  (``packing``) holds several examples' images: it is planned with as many of the heaviest
  example as its image tokens fit in ``cutoff_len`` (``packed_load``).
- **The tower.** Its blocks keep, per patch, what a decoder layer keeps per token, at the
  tower's width (``planner``'s per-layer sum: the residual stream and the norms' inputs,
  q/k/v, the attention's output, and the MLP's hidden values: two for a plain MLP, four for a
  gated one), over ``depth + 1`` blocks (the gradients flowing back through one), or each
  block's input and two blocks' worth with gradient checkpointing (transformers checkpoints
  the vision blocks with the decoder layers). Kept only where something in or before the
  tower trains: a frozen tower (LLaMA-Factory's default) with a trained projector keeps the
  merger's input and hidden values; a frozen tower and projector keep nothing (the tower's
  forward runs before the language model's and frees its work as it goes). The pixels
  (``patches x kernel`` fp32 values) are there for the whole step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ftui.data.media_tokens import IMAGE_MAX_PIXELS, IMAGE_MIN_PIXELS, VisionProcessor, image_grid
from ftui.plan.model_json import model_image_processor
from ftui.plan.vision_shape import VisionShape

FIRST_RECORDS = 16  # the records whose images are read for the plan


@dataclass(frozen=True)
class ImageLoad:
    """The images of the example the planner sizes a micro batch by."""

    images: int
    tokens: int  # image tokens in its ids (each image's t*h*w / merge²)
    patches: int  # rows of pixel_values (t*h*w summed)
    source: str  # "dataset" (its first records) or "image_max_pixels"


def vision_processor(model_name_or_path: str, vision: VisionShape) -> VisionProcessor:
    """The image processor's numbers: its preprocessor_config.json's (with the processor_config.json
    beside it), else the model's patch and merge sizes with the processor's default pixel bounds."""
    try:
        processor = model_image_processor(model_name_or_path)
    except ValueError:  # said by the config's checks (media_checks.read_processor); planned with the model's sizes
        processor = None
    return processor or VisionProcessor(patch_size=vision.patch_size, merge_size=vision.merge)


def load_of(sizes: list[tuple[int, int]], processor: VisionProcessor, max_pixels: int, min_pixels: int, source: str,
            image_patches: int = 0) -> ImageLoad:
    """The load of one example whose images have ``sizes`` (width, height); a family whose
    images all take the same tokens (``fixed_tokens``) runs ``image_patches`` through its tower
    for each, whatever its size."""
    if processor.fixed_tokens is not None:
        return ImageLoad(len(sizes), processor.fixed_tokens * len(sizes), (image_patches or processor.fixed_tokens) * len(sizes),
                         source)
    grids = [image_grid(w, h, processor, max_pixels, min_pixels) for w, h in sizes]
    patches = sum(t * h * w for t, h, w in grids)
    return ImageLoad(len(sizes), patches // processor.merge_size ** 2, patches, source)


def first_records_sizes(cfg: Any) -> list[list[tuple[int, int]]] | None:
    """Each of the first records' image sizes (from the headers), over the run's datasets; None
    where the data cannot be read here (a hub dataset, another machine, a bad file: the
    config's checks say why)."""
    from ftui.data.dataset_files import read_records
    from ftui.data.media_files import image_header
    from ftui.data.preference_media import preference_images
    from ftui.data.registry import resolve_datasets
    from ftui.stages import describe

    kind = describe(getattr(cfg, "stage", "sft")).data  # a dpo pair's record ends with its prompt: its images are the pair's
    out = []
    try:
        specs = resolve_datasets(cfg.dataset, cfg.dataset_dir)
        if not specs:
            return None
        for spec in specs:
            for index, record in enumerate(read_records(spec, limit=FIRST_RECORDS)):
                paths = preference_images(record, spec, index, kind)
                out.append([(info.width, info.height) for info in (image_header(p, spec, index) for p in paths)])
    except Exception:  # noqa: BLE001 - a plan from what can be read; every error is the checks' to report
        return None
    return out


def image_load(cfg: Any, vision: VisionShape) -> ImageLoad | None:
    """The example a vision-language run's micro batches are planned with: the first records'
    with the most patches; one image of image_max_pixels where they cannot be read here; None
    where they can and none has an image (a text dataset: a micro batch's stand-in image, one
    merged token, is too small to count)."""
    processor = vision_processor(cfg.model_name_or_path, vision)
    max_pixels = int(getattr(cfg, "image_max_pixels", None) or IMAGE_MAX_PIXELS)
    min_pixels = int(getattr(cfg, "image_min_pixels", None) or IMAGE_MIN_PIXELS)
    sizes = first_records_sizes(cfg)
    if sizes is not None:
        loads = [load_of(each, processor, max_pixels, min_pixels, "dataset", vision.image_patches) for each in sizes if each]
        return packed_load(max(loads, key=lambda load: load.patches), cfg) if loads else None
    side = int(max_pixels ** 0.5)
    return packed_load(load_of([(side, side)], processor, max_pixels, min_pixels, "image_max_pixels", vision.image_patches), cfg)


def packed_load(load: ImageLoad, cfg: Any) -> ImageLoad:
    """A row's images with ``packing`` (sft): a packed row holds the images of all its examples
    (ftui.runner.media_packing), so it is planned with as many of the heaviest example as its
    image tokens alone fit in ``cutoff_len`` (a bound: each example's text takes room too)."""
    if not getattr(cfg, "packing", None) or getattr(cfg, "stage", "sft") != "sft" or load.tokens <= 0:
        return load
    examples = max(1, int(getattr(cfg, "cutoff_len", 0) or 0) // load.tokens)
    return ImageLoad(load.images * examples, load.tokens * examples, load.patches * examples, load.source)


def vision_activations(vision: VisionShape, load: ImageLoad, micro_batch: int, *, act: int, res_bytes: int, tower_trains: bool,
                       projector_trains: bool, gradient_checkpointing: bool = False, eager: bool = False) -> float:
    """Bytes the vision tower keeps for backward over a micro batch, plus its pixels (module doc).
    ``act``/``res_bytes``: the compute type's and the residual stream's bytes (the planner's)."""
    patches = micro_batch * load.patches
    pixels = patches * vision.kernel * 4.0
    e = vision.width
    if tower_trains:
        per_block = 6 * e * res_bytes + (4 * e + 3 * e + (4 if vision.gated else 2) * vision.mlp) * act
        if eager:  # the softmax of every patch against its image's patches, heads of them
            per_block += vision.heads * (load.patches // max(1, load.images)) * (4 + (act if act < 4 else 0))
        if gradient_checkpointing:
            kept = patches * (vision.depth * e * res_bytes + 2 * per_block)
        else:
            kept = patches * per_block * (vision.depth + 1)
        return pixels + kept + patches * 3 * e * act  # the merger's input, hidden values and output
    if projector_trains:
        return pixels + patches * 3 * e * act
    return pixels
