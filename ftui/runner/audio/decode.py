"""An audio file as LLaMA-Factory 0.9.5's ``_regularize_audios`` reads it: every sample of its
first audio stream as float32 (what ``torchaudio.load`` gives through FFmpeg), the channels'
mean where it has more than one, resampled to the run's ``audio_sampling_rate`` with
torchaudio's resampler (``ftui.runner.audio.resample``). Decoded with PyAV (FFmpeg, as
torchaudio's torchcodec backend), imported here only: a missing ``av`` names its install.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ftui.data.audio_files import AudioFileError, import_av
from ftui.runner.audio.resample import resample


def decode_audio(path: str) -> tuple[np.ndarray, int]:
    """(float32 [channels, samples], sampling rate) of the file's first audio stream; raises
    AudioFileError naming the file when FFmpeg cannot decode it."""
    av = import_av()
    try:
        with av.open(path) as container:
            stream = next((s for s in container.streams if s.type == "audio"), None)
            if stream is None:
                raise AudioFileError(path, "no audio stream")
            rate = int(stream.codec_context.sample_rate or stream.rate)
            to_float = av.AudioResampler(format="fltp", layout=stream.codec_context.layout, rate=rate)
            chunks = []
            for frame in container.decode(stream):
                for out in to_float.resample(frame):
                    chunks.append(out.to_ndarray())
            for out in to_float.resample(None):
                chunks.append(out.to_ndarray())
    except (av.error.FFmpegError, OSError, ValueError) as err:
        raise AudioFileError(path, f"{type(err).__name__}: {err}") from None
    if not chunks:
        raise AudioFileError(path, "no samples")
    return np.concatenate(chunks, axis=1).astype(np.float32), rate


def regularize_audio(path: str, sampling_rate: int) -> np.ndarray:
    """The file's mono samples at ``sampling_rate`` (float32 [samples]): LLaMA-Factory's
    downmix (the mean of the channels) and resample."""
    wave, rate = decode_audio(path)
    tensor: Any = torch.from_numpy(wave)
    if tensor.shape[0] > 1:
        tensor = tensor.mean(dim=0, keepdim=True)
    if rate != sampling_rate:
        tensor = resample(tensor, rate, sampling_rate)
    return tensor.squeeze(0).numpy()
