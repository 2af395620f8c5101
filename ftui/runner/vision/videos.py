"""A run's videos, as LLaMA-Factory 0.9.5's Qwen2-VL / Qwen3-VL plugins read them
(``mm_plugin.py``: ``Qwen2VLPlugin._regularize_videos`` and ``_get_mm_inputs``,
``Qwen3VLPlugin._get_mm_inputs``): PyAV decodes the first video stream from its start, the
frames at LLaMA-Factory's sample indices are kept (``VideoInfo.sample_indices``), the last one
repeated to make an odd count even, each frame regularised under video_max_pixels /
video_min_pixels like an image; then transformers' video processor (``AutoVideoProcessor``,
which needs torchvision) makes ``pixel_values_videos`` and ``video_grid_thw``. Qwen2.5-VL's
model also reads ``second_per_grid_ts`` (temporal_patch_size over the sampled frames per
second); Qwen3-VL's processor gets the frames' metadata and samples nothing itself.

An example keeps its videos as paths and grids (``ftui.runner.vision.batch_images``): the grid
comes from the header (``ftui.data.video_tokens``, LLaMA-Factory's own shortcut), the frames
are decoded per micro batch in the collator, and the grid they give is checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ftui.data.records import DataFormatError
from ftui.data.video_files import VideoInfo, pyav
from ftui.data.video_tokens import VideoProcessorNumbers, VideoSettings, qwen3_video_text, video_grid
from ftui.i18n import _
from ftui.runner.vision.images import regularize_qwen

Grid = tuple[int, int, int]
NO_TORCHVISION = _("videos need transformers' video processors, which need torchvision: install ftui[vision] "
                   "(pip install 'ftui[vision]', with the torchvision build that matches your torch)")


def video_settings(cfg: Any) -> VideoSettings:
    """A run's video keys (LLaMA-Factory's video_fps, video_maxlen, video_max_pixels, video_min_pixels)."""
    default = VideoSettings()
    return VideoSettings(float(getattr(cfg, "video_fps", default.video_fps)), int(getattr(cfg, "video_maxlen", default.video_maxlen)),
                         int(getattr(cfg, "video_max_pixels", default.video_max_pixels)),
                         int(getattr(cfg, "video_min_pixels", default.video_min_pixels)))


def load_video_processor(model_dir: str) -> Any:
    """The model folder's video processor; a DataFormatError saying to install ftui[vision]
    where torchvision is missing."""
    try:
        import torchvision  # noqa: F401
        from transformers import AutoVideoProcessor
    except ImportError:
        raise DataFormatError(NO_TORCHVISION) from None
    try:
        return AutoVideoProcessor.from_pretrained(model_dir)
    except ImportError:
        raise DataFormatError(NO_TORCHVISION) from None
    except (OSError, ValueError, KeyError) as err:
        if "torchvision" in str(err):
            raise DataFormatError(NO_TORCHVISION) from None
        raise DataFormatError(_("the model {model} has no video processor ftui can load ({error}); a Qwen-VL model folder "
                                "needs its video_preprocessor_config.json or preprocessor_config.json").format(
            model=model_dir, error=err)) from None


def processor_numbers(video_processor: Any, qwen3: bool) -> VideoProcessorNumbers:
    """The loaded video processor's grid numbers (its ``size``: shortest_edge / longest_edge)."""
    size = getattr(video_processor, "size", None) or {}
    get = size.get if isinstance(size, dict) else (lambda key: getattr(size, key, None))
    return VideoProcessorNumbers(int(video_processor.patch_size), int(video_processor.merge_size),
                                 int(video_processor.temporal_patch_size), int(get("shortest_edge")),
                                 int(get("longest_edge")), whole_clip=qwen3)


def decode_frames(info: VideoInfo, settings: VideoSettings) -> list[Any]:
    """The video's sampled frames as regularised PIL images, LLaMA-Factory's way (module doc)."""
    av = pyav()
    wanted = set(info.sample_indices(settings.video_fps, settings.video_maxlen))
    frames = []
    try:
        with av.open(info.path, "r") as container:
            stream = next(s for s in container.streams if s.type == "video")
            container.seek(0)
            for index, frame in enumerate(container.decode(stream)):
                if index in wanted:
                    frames.append(frame.to_image())
    except (av.FFmpegError, OSError, ValueError, StopIteration) as err:
        raise DataFormatError(_("the video {path} could be read when the dataset was encoded but not now ({error}); restore "
                                "the file and start the run again").format(path=info.path, error=f"{type(err).__name__}: {err}")) from None
    if len(frames) % 2:
        frames.append(frames[-1])
    return [regularize_qwen(frame, settings.video_max_pixels, settings.video_min_pixels) for frame in frames]


@dataclass(eq=False)
class VideoReader:
    """What turns video files into the model's tensors, one per run."""

    video_processor: Any
    settings: VideoSettings
    qwen3: bool  # Qwen3-VL: timestamps in the text, the frames' metadata to the processor
    seconds: bool  # Qwen2.5-VL: second_per_grid_ts beside the grids
    numbers: VideoProcessorNumbers = field(init=False)

    def __post_init__(self) -> None:
        self.numbers = processor_numbers(self.video_processor, self.qwen3)

    def grid(self, info: VideoInfo) -> Grid:
        return video_grid(info, self.numbers, self.settings)

    def text(self, info: VideoInfo, bos: str, eos: str, pad: str) -> str:
        """What one ``<video>`` becomes in the text (LLaMA-Factory's process_messages)."""
        if self.qwen3:
            return qwen3_video_text(info, self.numbers, self.settings, bos, eos, pad)
        t, h, w = self.grid(info)
        return bos + pad * (t * h * w // self.numbers.merge_size ** 2) + eos

    def tensors(self, infos: tuple[VideoInfo, ...], grids: tuple[Grid, ...]) -> dict[str, Any]:
        """pixel_values_videos, video_grid_thw (and second_per_grid_ts for Qwen2.5-VL) for one
        example's videos, decoded now; DataFormatError naming a file whose grid changed."""
        import torch

        s = self.settings
        clips = [decode_frames(info, s) for info in infos]
        if self.qwen3:
            metadata = [{"fps": s.video_fps, "duration": info.duration, "total_num_frames": len(frames),
                         "frames_indices": [i / info.average_fps * s.video_fps for i in info.sample_indices(s.video_fps, s.video_maxlen)]}
                        for info, frames in zip(infos, clips)]
            out = self.video_processor(videos=clips, video_metadata=metadata, fps=s.video_fps, return_metadata=True,
                                       do_sample_frames=False, return_tensors="pt")
        else:
            out = self.video_processor(videos=clips, return_tensors="pt")
        tensors = {"pixel_values_videos": out["pixel_values_videos"], "video_grid_thw": out["video_grid_thw"]}
        for info, encoded, now in zip(infos, grids, out["video_grid_thw"].tolist()):
            if tuple(encoded) != tuple(int(x) for x in now):
                raise DataFormatError(_("the video {path} changed since the dataset was encoded: its grid of patches is now "
                                        "{now}, not {encoded}; restore the file, or start the run again").format(
                    path=info.path, now="x".join(map(str, now)), encoded="x".join(map(str, encoded))))
        if self.seconds:
            temporal = self.numbers.temporal_patch_size
            tensors["second_per_grid_ts"] = torch.tensor(
                [temporal / (len(info.sample_indices(s.video_fps, s.video_maxlen)) / info.duration) for info in infos],
                dtype=torch.float32)
        return tensors
