"""How many tokens a video becomes for the Qwen2-VL family, from its header and the run's video
keys alone (no frame decoded, no torch): LLaMA-Factory 0.9.5 expands ``<video>`` the same way
(``Qwen2VLPlugin._get_qwen_video_grid_metadata``), and the runner's video processor then makes
exactly that grid from the decoded frames.

1. frames: ``VideoInfo.sampled_frames`` (video_fps per second, at most video_maxlen, made even);
2. frame size: LLaMA-Factory's regularisation under video_max_pixels / video_min_pixels (the
   image rule of ftui.data.media_tokens.regularized_size);
3. the video processor's ``smart_resize``: Qwen2-VL's per frame (its image rule), Qwen3-VL's
   over the whole clip (frames x height x width within its pixel bounds);
4. grid ``(frames / temporal_patch_size, h / patch_size, w / patch_size)``, and
   ``t * h * w / merge_size^2`` ``<|video_pad|>`` tokens. Qwen3-VL writes each temporal
   patch as ``<T seconds><|vision_start|>...<|vision_end|>``: ``video_timestamps``.

One divergence, for Qwen3-VL records with several videos only: LLaMA-Factory 0.9.5 writes every
video with the first one's frame count and reads the timestamps by message index (it fails, or
stamps a later video with an earlier one's times); ftui writes each video with its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ftui.data.media_tokens import processor_numbers, regularized_size, smart_resize
from ftui.data.video_files import VIDEO_FPS, VIDEO_MAX_PIXELS, VIDEO_MAXLEN, VIDEO_MIN_PIXELS, VideoInfo
from ftui.i18n import _


@dataclass(frozen=True)
class VideoSettings:
    """The run's video keys (LLaMA-Factory's names and defaults)."""

    video_fps: float = VIDEO_FPS
    video_maxlen: int = VIDEO_MAXLEN
    video_max_pixels: int = VIDEO_MAX_PIXELS
    video_min_pixels: int = VIDEO_MIN_PIXELS


@dataclass(frozen=True)
class VideoProcessorNumbers:
    """The numbers of a Qwen-VL video processor that decide a video's grid; ``whole_clip``:
    Qwen3-VL's resize bounds the pixels of all frames together."""

    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    min_pixels: int = 128 * 28 * 28
    max_pixels: int = 28 * 28 * 768
    whole_clip: bool = False


# transformers 5.24's class defaults: Qwen2VLVideoProcessor, Qwen3VLVideoProcessor
QWEN2_VIDEO = VideoProcessorNumbers()
QWEN3_VIDEO = VideoProcessorNumbers(patch_size=16, min_pixels=128 * 32 * 32, max_pixels=32 * 32 * 768, whole_clip=True)


def video_numbers(config: dict, qwen3: bool) -> VideoProcessorNumbers:
    """The video processor a video_preprocessor_config.json (or, where a folder has none, its
    preprocessor_config.json) describes, as transformers reads it: its ``size`` dict, then
    ``min_pixels`` / ``max_pixels`` over it."""
    base = QWEN3_VIDEO if qwen3 else QWEN2_VIDEO
    defaults = {key: getattr(base, key) for key in ("patch_size", "merge_size", "temporal_patch_size", "min_pixels", "max_pixels")}
    values = processor_numbers(config, defaults, "video_preprocessor_config.json")
    return VideoProcessorNumbers(**values, whole_clip=qwen3)


def clip_resize(frames: int, height: int, width: int, temporal: int, factor: int, min_pixels: int,
                max_pixels: int) -> tuple[int, int]:
    """(height, width) of Qwen3-VL's video ``smart_resize`` (transformers, rewritten): sides
    multiples of ``factor``, frames x height x width within [min_pixels, max_pixels]."""
    if frames < temporal:
        raise ValueError(_("a video of {frames} frame(s) is shorter than one temporal patch").format(frames=frames))
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise ValueError(_("the video's aspect ratio is above 200, which the video processor refuses"))
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(frames / temporal) * temporal
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def video_grid(info: VideoInfo, numbers: VideoProcessorNumbers, settings: VideoSettings = VideoSettings()) -> tuple[int, int, int]:
    """The video's grid (t, h, w) in patches, as the video processor's video_grid_thw gives it."""
    frames = info.sampled_frames(settings.video_fps, settings.video_maxlen)
    width, height = regularized_size(info.width, info.height, settings.video_max_pixels, settings.video_min_pixels)
    factor = numbers.patch_size * numbers.merge_size
    if numbers.whole_clip:
        h, w = clip_resize(frames, height, width, numbers.temporal_patch_size, factor, numbers.min_pixels, numbers.max_pixels)
    else:
        h, w = smart_resize(height, width, factor, numbers.min_pixels, numbers.max_pixels)
    return math.ceil(frames / numbers.temporal_patch_size), h // numbers.patch_size, w // numbers.patch_size


def video_tokens(info: VideoInfo, numbers: VideoProcessorNumbers, settings: VideoSettings = VideoSettings()) -> int:
    """How many ``<|video_pad|>`` tokens the video expands to in the text."""
    t, h, w = video_grid(info, numbers, settings)
    return t * h * w // numbers.merge_size ** 2


def video_timestamps(info: VideoInfo, numbers: VideoProcessorNumbers, settings: VideoSettings = VideoSettings()) -> list[float]:
    """Qwen3-VL's seconds per temporal patch (transformers' ``_calculate_timestamps`` over
    LLaMA-Factory's frame positions): the mean time of the patch's first and last frame."""
    merge, fps = numbers.merge_size, settings.video_fps  # LLaMA-Factory passes the video processor's merge_size
    # its frame positions (index / average_fps * video_fps) over video_fps, in that float order
    times = [i / info.average_fps * fps / fps for i in info.sample_indices(fps, settings.video_maxlen)]
    if len(times) % merge:
        times.extend(times[-1] for _ in range(merge - len(times) % merge))
    return [(times[i] + times[i + merge - 1]) / 2 for i in range(0, len(times), merge)]


def qwen3_video_text(info: VideoInfo, numbers: VideoProcessorNumbers, settings: VideoSettings = VideoSettings(),
                     start: str = "<|vision_start|>", end: str = "<|vision_end|>", pad: str = "<|video_pad|>") -> str:
    """What LLaMA-Factory's Qwen3VLPlugin writes for one ``<video>``: per temporal patch its
    timestamp with one decimal, then the patch's tokens between vision_start and vision_end."""
    t, h, w = video_grid(info, numbers, settings)
    per_patch = h * w // numbers.merge_size ** 2
    stamps = video_timestamps(info, numbers, settings)
    return "".join(f"<{stamps[i]:.1f} seconds>{start}{pad * per_patch}{end}" for i in range(t))
