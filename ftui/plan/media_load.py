"""A vision-language or audio run's example in the planner: what its first records carry (each
image's size, each video's and audio's header), and what a video or an audio brings to the
language model's rows and to the tower (``ftui.plan.vision_activations`` adds them up). No
torch: the headers are read with PIL and PyAV, nothing is decoded.

- **A video** (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) becomes the grid (t, h, w) its header and the
  run's video keys give (``ftui.data.video_tokens``, LLaMA-Factory's sampling and the video
  processor's resize, with the model's video_preprocessor_config.json): ``t*h*w`` patches go
  through the vision tower, as an image's do (its frames are the pixel rows of
  ``pixel_values_videos``, the image's kernel wide), and ``t*h*w / merge²`` tokens go into
  the language model's rows.
- **An audio** (Qwen2-Audio) becomes ``audio_tokens`` of its length at 16 kHz in the rows; its
  tower always reads 30 s of features (LLaMA-Factory pads every audio to Whisper's 3,000 mel
  frames), so it runs ``AUDIO_POSITIONS`` positions per audio, whatever its length, and its
  input is ``mels x 3000`` fp32 values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FIRST_RECORDS = 16  # the records whose media are read for the plan
AUDIO_RATE = 16000  # Qwen2-Audio's feature extractor's rate
AUDIO_FRAMES = 3000  # Whisper's 30 s window of mel frames, every audio padded to it
AUDIO_POSITIONS = AUDIO_FRAMES // 2  # after the encoder's stride-2 convolution: what its blocks run over


@dataclass(frozen=True)
class RecordMedia:
    """One record's media as the plan reads them: image sizes (width, height), video and audio
    headers (ftui.data.video_files.VideoInfo, ftui.data.audio_files.AudioInfo)."""

    images: list[tuple[int, int]] = field(default_factory=list)
    videos: list[Any] = field(default_factory=list)
    audios: list[Any] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.images or self.videos or self.audios)


def first_records_media(cfg: Any, limit: int = FIRST_RECORDS) -> list[RecordMedia] | None:
    """Each of the first records' media over the run's datasets (headers only); None where the
    data cannot be read here (a hub dataset, another machine, a bad file, no PyAV: the config's
    checks say why). A dpo pair's record ends with its prompt: its images are the pair's."""
    from ftui.data.dataset_files import read_records
    from ftui.data.media import record_media
    from ftui.data.media_files import image_header
    from ftui.data.preference_media import preference_images
    from ftui.data.registry import resolve_datasets
    from ftui.stages import PAIRS, describe

    kind = describe(getattr(cfg, "stage", "sft")).data
    out = []
    try:
        specs = resolve_datasets(cfg.dataset, cfg.dataset_dir)
        if not specs:
            return None
        for spec in specs:
            for index, record in enumerate(read_records(spec, limit=limit)):
                if kind == PAIRS:  # images only: videos and audios train with sft alone (ftui.data.media)
                    paths, videos, audios = preference_images(record, spec, index, kind), [], []
                else:
                    media = record_media(record, spec, index)
                    paths, videos, audios = media["images"], media["videos"], media["audios"]
                out.append(RecordMedia([(i.width, i.height) for i in (image_header(p, spec, index) for p in paths)],
                                       [_video(p, spec, index) for p in videos], [_audio(p, spec, index) for p in audios]))
    except Exception:  # noqa: BLE001 - a plan from what can be read; every error is the checks' to report
        return None
    return out


def _video(path: str, spec: Any, index: int) -> Any:
    from ftui.data.video_files import video_header

    return video_header(path, spec, index)


def _audio(path: str, spec: Any, index: int) -> Any:
    from ftui.data.audio_files import audio_info

    return audio_info(path, spec, index)


def video_settings(cfg: Any) -> Any:
    """The run's video keys (LLaMA-Factory's names; its defaults where the config has none)."""
    from ftui.data.video_tokens import VideoSettings

    d = VideoSettings()
    return VideoSettings(float(getattr(cfg, "video_fps", None) or d.video_fps), int(getattr(cfg, "video_maxlen", None) or d.video_maxlen),
                         int(getattr(cfg, "video_max_pixels", None) or d.video_max_pixels),
                         int(getattr(cfg, "video_min_pixels", None) or d.video_min_pixels))


def video_processor_numbers(model_name_or_path: str, family: str) -> Any:
    """The model's video processor numbers: its video_preprocessor_config.json, else its
    preprocessor_config.json (as transformers reads a folder without the first), else the
    family's class defaults; a malformed file plans with the defaults (preflight names it)."""
    from ftui.data.video_tokens import QWEN2_VIDEO, QWEN3_VIDEO, video_numbers
    from ftui.plan.model_json import find_model_json

    qwen3 = family == "qwen3_vl"
    try:
        found = (find_model_json(model_name_or_path, "video_preprocessor_config.json")
                 or find_model_json(model_name_or_path, "preprocessor_config.json"))
        return video_numbers(found[1], qwen3) if found else (QWEN3_VIDEO if qwen3 else QWEN2_VIDEO)
    except ValueError:
        return QWEN3_VIDEO if qwen3 else QWEN2_VIDEO


def videos_load(videos: list[Any], numbers: Any, settings: Any) -> tuple[int, int, int]:
    """(tokens, patches, attended) of a record's videos: each one's grid t*h*w patches, / merge²
    tokens; the tower's attention runs over each temporal patch's h*w patches (its cu_seqlens),
    so t*(h*w)² patch pairs."""
    from ftui.data.video_tokens import video_grid

    grids = [video_grid(info, numbers, settings) for info in videos]
    patches = [t * h * w for t, h, w in grids]
    return (sum(p // numbers.merge_size ** 2 for p in patches), sum(patches), sum(t * (h * w) ** 2 for t, h, w in grids))


def audios_tokens(audios: list[Any]) -> int:
    """The <|AUDIO|> tokens of a record's audios (their lengths at 16 kHz)."""
    from ftui.data.audio_files import audio_tokens

    return sum(audio_tokens(info.samples_at(AUDIO_RATE)) for info in audios)


def model_video_numbers(model_name_or_path: str) -> Any:
    """The video processor numbers of a model whose family reads videos (its config.json's
    model_type: the Qwen-VL families), None for any other model or one whose config.json is
    not there or malformed (preflight names it)."""
    from ftui.plan.model_json import find_model_json
    from ftui.presets.vision_families import vision_family

    try:
        found = find_model_json(model_name_or_path, "config.json")
    except ValueError:
        return None
    family = vision_family(found[1].get("model_type")) if found else None
    if family is None or "videos" not in family.media:
        return None
    return video_processor_numbers(model_name_or_path, family.name)
