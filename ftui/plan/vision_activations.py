"""A vision-language run's images, videos and audios in the planner: how many media tokens and
patches an example brings (``image_load``; videos and audios read by ``ftui.plan.media_load``),
and what the vision (or audio) tower keeps for backward (``vision_activations``). No torch.

- **The images of an example.** From the dataset's first records when they can be read here
  (each image's size from its header, the largest example's images: a micro batch of such
  examples is planned), else one image of ``image_max_pixels``. Each image's grid comes from
  its size through LLaMA-Factory's regularisation and the processor's ``smart_resize``
  (``ftui.data.media_tokens``), with the processor's patch and merge sizes from the model's
  preprocessor_config.json (else the vision config's own). ``tokens`` of them go into the
  language model's rows, ``patches`` (tokens x merge²) through the tower.
- **Videos and audios** (``ftui.plan.media_load``): a record's videos add their grids' tokens
  and patches to its images'; an audio example (Qwen2-Audio) brings its audio tokens and 30 s
  of encoder positions per audio through the audio tower, whose input is the mel features.
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

from dataclasses import dataclass, replace
from typing import Any

from ftui.data.audio_files import audio_tokens
from ftui.data.media_tokens import IMAGE_MAX_PIXELS, IMAGE_MIN_PIXELS, VisionProcessor, image_grid
from ftui.plan.media_load import (AUDIO_FRAMES, AUDIO_POSITIONS, AUDIO_RATE, audios_tokens, first_records_media, video_processor_numbers,
                                  video_settings, videos_load)
from ftui.plan.model_json import model_image_processor
from ftui.plan.vision_shape import VisionShape

@dataclass(frozen=True)
class ImageLoad:
    """The media of the example the planner sizes a micro batch by: its images, videos and
    audios (``ftui.plan.media_load``)."""

    images: int
    tokens: int  # media tokens in its ids (each image's and video's t*h*w / merge², each audio's tokens)
    patches: int  # rows through the tower: images' and videos' t*h*w summed; an audio's encoder positions
    source: str  # "dataset" (its first records), "image_max_pixels" or "audio_max_length"
    videos: int = 0
    video_tokens: int = 0  # of ``tokens``
    audios: int = 0
    inputs: int | None = None  # fp32 values the tower reads; None: patches x the patch's kernel
    attended: int = 0  # patch pairs the tower's attention scores (an image's patches², a video's frame patches² per temporal patch)

    @property
    def image_tokens(self) -> int:
        """The image tokens of ``tokens`` (an audio example has none)."""
        return 0 if self.audios else self.tokens - self.video_tokens


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
        each = image_patches or processor.fixed_tokens
        return ImageLoad(len(sizes), processor.fixed_tokens * len(sizes), each * len(sizes), source, attended=each ** 2 * len(sizes))
    grids = [image_grid(w, h, processor, max_pixels, min_pixels) for w, h in sizes]
    patches = sum(t * h * w for t, h, w in grids)
    return ImageLoad(len(sizes), patches // processor.merge_size ** 2, patches, source, attended=sum((t * h * w) ** 2 for t, h, w in grids))


def with_videos(load: ImageLoad, videos: list, numbers: Any, settings: Any) -> ImageLoad:
    """``load`` (a record's images) with the record's videos added: their tokens and patches."""
    if not videos:
        return load
    tokens, patches, attended = videos_load(videos, numbers, settings)
    return replace(load, tokens=load.tokens + tokens, patches=load.patches + patches, videos=len(videos), video_tokens=tokens,
                   attended=load.attended + attended)


def audio_load(audios: int, tokens: int, vision: VisionShape, source: str) -> ImageLoad:
    """An example of ``audios`` audios taking ``tokens`` tokens: its tower runs 30 s of each."""
    return ImageLoad(0, tokens, audios * AUDIO_POSITIONS, source, audios=audios, inputs=audios * vision.mels * AUDIO_FRAMES,
                     attended=audios * AUDIO_POSITIONS ** 2)


def image_load(cfg: Any, vision: VisionShape) -> ImageLoad | None:
    """The example a vision-language (or audio) run's micro batches are planned with: the first
    records' with the most patches (images and videos), or the most audio tokens; one image of
    image_max_pixels (one 30 s audio) where they cannot be read here; None where they can and
    none has media (a text dataset: a micro batch's stand-in image, one merged token, is too
    small to count)."""
    records = first_records_media(cfg)
    if vision.mels:  # Qwen2-Audio: its audio tower
        if records is None:
            return packed_load(audio_load(1, audio_tokens(30 * AUDIO_RATE), vision, "audio_max_length"), cfg)
        loads = [audio_load(len(r.audios), audios_tokens(r.audios), vision, "dataset") for r in records if r.audios]
        return packed_load(max(loads, key=lambda load: (load.patches, load.tokens)), cfg) if loads else None
    processor = vision_processor(cfg.model_name_or_path, vision)
    max_pixels = int(getattr(cfg, "image_max_pixels", None) or IMAGE_MAX_PIXELS)
    min_pixels = int(getattr(cfg, "image_min_pixels", None) or IMAGE_MIN_PIXELS)
    if records is not None:
        numbers = video_processor_numbers(cfg.model_name_or_path, vision.family) if any(r.videos for r in records) else None
        settings = video_settings(cfg)
        loads = [with_videos(load_of(r.images, processor, max_pixels, min_pixels, "dataset", vision.image_patches), r.videos, numbers,
                             settings) for r in records if r.images or r.videos]
        return packed_load(max(loads, key=lambda load: load.patches), cfg) if loads else None
    side = int(max_pixels ** 0.5)
    return packed_load(load_of([(side, side)], processor, max_pixels, min_pixels, "image_max_pixels", vision.image_patches), cfg)


def packed_load(load: ImageLoad, cfg: Any) -> ImageLoad:
    """A row's media with ``packing`` (sft): a packed row holds the media of all its examples
    (ftui.runner.media_packing), so it is planned with as many of the heaviest example as its
    media tokens alone fit in ``cutoff_len`` (a bound: each example's text takes room too)."""
    if not getattr(cfg, "packing", None) or getattr(cfg, "stage", "sft") != "sft" or load.tokens <= 0:
        return load
    n = max(1, int(getattr(cfg, "cutoff_len", 0) or 0) // load.tokens)
    return replace(load, images=load.images * n, tokens=load.tokens * n, patches=load.patches * n, videos=load.videos * n,
                   video_tokens=load.video_tokens * n, audios=load.audios * n, attended=load.attended * n,
                   inputs=None if load.inputs is None else load.inputs * n)


def vision_activations(vision: VisionShape, load: ImageLoad, micro_batch: int, *, act: int, res_bytes: int, tower_trains: bool,
                       projector_trains: bool, gradient_checkpointing: bool = False, eager: bool = False) -> float:
    """Bytes the vision tower keeps for backward over a micro batch, plus its pixels (module doc).
    ``act``/``res_bytes``: the compute type's and the residual stream's bytes (the planner's)."""
    patches = micro_batch * load.patches
    pixels = micro_batch * (load.inputs if load.inputs is not None else load.patches * vision.kernel) * 4.0
    e = vision.width
    if tower_trains:
        per_block = 6 * e * res_bytes + (4 * e + 3 * e + (4 if vision.gated else 2) * vision.mlp) * act
        if eager:  # the softmax of every patch against the patches it attends to (its image's, its video frame's), heads of them
            attended = (load.attended / load.patches if load.attended and load.patches else
                        load.patches // max(1, load.images + load.videos + load.audios))
            per_block += vision.heads * attended * (4 + (act if act < 4 else 0))
        if gradient_checkpointing:
            kept = patches * (vision.depth * e * res_bytes + 2 * per_block)
        else:
            kept = patches * per_block * (vision.depth + 1)
        return pixels + kept + patches * 3 * e * act  # the merger's input, hidden values and output
    if projector_trains:
        return pixels + patches * 3 * e * act
    return pixels


def media_notes(load: ImageLoad, seq_len: int) -> list[str]:
    """What the plan says of an example's media: its tokens and the tower's patches, where they
    were read, and a warning where they alone fill ``cutoff_len``."""
    from ftui.i18n import _

    source = {"dataset": _("the largest of the dataset's first records"),
              "image_max_pixels": _("one image of image_max_pixels (the dataset's images not read here)"),
              "audio_max_length": _("one 30 s audio (the dataset's audios not read here)")}[load.source]
    notes = []
    if load.audios:
        notes.append(_("audios: {audios} audio(s), {tokens} audio tokens an example, within cutoff_len, and {positions} positions through "
                       "the audio tower (30 s of features each); planned from {source}").format(
            audios=load.audios, tokens=load.tokens, positions=load.patches, source=source))
    elif load.videos:
        notes.append(_("videos: {videos} video(s), {tokens} video tokens an example ({images} image tokens beside them), within "
                       "cutoff_len, and {patches} patches through the vision tower; planned from {source}").format(
            videos=load.videos, tokens=load.video_tokens, images=load.image_tokens, patches=load.patches, source=source))
    else:
        notes.append(_("images: {tokens} image tokens an example, within cutoff_len, and {patches} patches through the vision "
                       "tower; planned from {source}").format(tokens=load.tokens, patches=load.patches, source=source))
    if load.tokens >= seq_len and (load.videos or load.audios):
        notes.append(_("an example's media take {tokens} tokens, cutoff_len={cutoff_len} leaves no room for its text: such "
                       "records are refused; raise cutoff_len, or lower video_max_pixels / video_maxlen for videos").format(
            tokens=load.tokens, cutoff_len=seq_len))
    elif load.tokens >= seq_len:
        notes.append(_("an example's images take {tokens} tokens, cutoff_len={cutoff_len} leaves no room for its text: such "
                       "records are refused; raise cutoff_len or lower image_max_pixels").format(tokens=load.tokens, cutoff_len=seq_len))
    return notes
