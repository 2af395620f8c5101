"""A record's audio files checked before training, and what an audio costs in tokens, with
no torch: the launch form, preflight and the runner's encoding share it.

Checks (``audio_info``): the file opens as a media container with an audio stream (PyAV:
FFmpeg, which LLaMA-Factory 0.9.5's ``torchaudio.load`` decodes through too), its first
frames decode, and its duration is known; a missing file, a file that is not audio (a text
file, an image) and one FFmpeg cannot decode are named with their record. Local files only,
opened without network options: nothing here waits on anything but the disk.

Tokens (``audio_tokens``): LLaMA-Factory's Qwen2AudioPlugin gives an audio of n samples at
16 kHz (Whisper's feature extractor: 30 s windows, a hop of 160 samples) f = min(ceil(n / 160),
3000) feature frames, then (f - 1) // 2 + 1 after the encoder's stride-2 convolution, and
(that - 2) // 2 + 1 audio tokens after its pooling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ftui.data.media_files import MediaFileError, where
from ftui.data.records import DatasetSpec
from ftui.i18n import _

HOP, MAX_FRAMES = 160, 3000  # Whisper's feature extractor (Qwen2-Audio's): 10 ms hops, 30 s windows


class AudioFileError(MediaFileError):
    """An audio file FFmpeg cannot read (the runner adds the record where it knows it)."""

    def __init__(self, path: str, problem: str):
        super().__init__(_("the audio file {path} cannot be read ({problem}); replace the file or drop its record").format(
            path=path, problem=problem))
        self.path, self.problem = path, problem


def import_av() -> Any:
    """PyAV, or an error naming its install."""
    try:
        import av
    except ImportError:
        raise MediaFileError(_("reading audio files needs PyAV, which is not installed: pip install 'ftui[vision]'")) from None
    return av


@dataclass(frozen=True)
class AudioInfo:
    path: str
    sample_rate: int
    channels: int
    duration_s: float

    def samples_at(self, rate: int) -> int:
        """Its length at ``rate`` Hz (what resampling gives, within a sample)."""
        return math.ceil(self.duration_s * rate)


def probe_audio(path: str) -> AudioInfo:
    """The file's rate, channels and duration, its first frame decoded; raises AudioFileError."""
    av = import_av()
    try:
        with av.open(path) as container:
            stream = next((s for s in container.streams if s.type == "audio"), None)
            if stream is None:
                raise AudioFileError(path, _("no audio stream: not an audio file"))
            rate = int(stream.codec_context.sample_rate or 0)
            if rate <= 0:
                raise AudioFileError(path, _("no sampling rate"))
            channels = int(stream.codec_context.channels or 0)
            next(iter(container.decode(stream)), None)  # the first frame decodes
            if stream.duration is not None and stream.time_base is not None:
                duration = float(stream.duration * stream.time_base)
            elif container.duration is not None:
                duration = container.duration / 1_000_000
            else:
                raise AudioFileError(path, _("unknown duration"))
    except AudioFileError:
        raise
    except (av.error.FFmpegError, OSError, ValueError, StopIteration) as err:
        raise AudioFileError(path, f"{type(err).__name__}: {err}") from None
    return AudioInfo(path, rate, channels, duration)


def audio_info(path: str, spec: DatasetSpec, index: int) -> AudioInfo:
    """``probe_audio`` with the dataset and record named in its error."""
    try:
        return probe_audio(path)
    except AudioFileError as err:
        raise MediaFileError(where(spec, index, path) + ": " + _(
            "cannot be read as audio ({problem}); replace the file or drop the record").format(problem=err.problem)) from None


def audio_tokens(samples: int) -> int:
    """The <|AUDIO|> tokens of an audio of ``samples`` samples at 16 kHz (module doc)."""
    frames = min(math.ceil(samples / HOP), MAX_FRAMES)
    after_conv = (frames - 1) // 2 + 1
    return (after_conv - 2) // 2 + 1


def verify_audio(path: str, spec: DatasetSpec, index: int) -> AudioInfo:
    """``audio_info``, then every frame decoded (a file cut short or corrupt past its first
    frame is named too): preflight's check of the first records."""
    info = audio_info(path, spec, index)
    av = import_av()
    try:
        with av.open(path) as container:
            stream = next(s for s in container.streams if s.type == "audio")
            for _frame in container.decode(stream):
                pass
    except (av.error.FFmpegError, OSError, ValueError) as err:
        raise MediaFileError(where(spec, index, path) + ": " + _(
            "cannot be read as audio ({problem}); replace the file or drop the record").format(
            problem=f"{type(err).__name__}: {err}")) from None
    return info
