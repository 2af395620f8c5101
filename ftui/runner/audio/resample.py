"""torchaudio's band-limited resampling (``torchaudio.functional.resample`` with its defaults:
a Hann-windowed sinc of 6 zero crossings, rolloff 0.99), re-written in torch.

Why a port: LLaMA-Factory 0.9.5 resamples every audio file not at ``audio_sampling_rate`` with
torchaudio, and the samples decide the features (and so the loss) of a record. ftui's runner
cannot depend on torchaudio: its wheels are built against one torch release each, and none
pairs with the torch ftui's tests run (2.13); the function itself is plain tensor arithmetic.
tests/test_audio_parity.py checks this port against torchaudio's output stored in
tests/data/llamafactory_vlm/reference_audio.json (48 kHz and 44.1 kHz files to 16 kHz).
"""

from __future__ import annotations

import math

import torch

ZERO_CROSSINGS = 6  # torchaudio's lowpass_filter_width
ROLLOFF = 0.99


def sinc_kernel(orig: int, new: int, dtype: torch.dtype) -> tuple[torch.Tensor, int]:
    """The filter bank ([new, 1, taps]: one phase per output sample of a period) and the
    padding each side, for rates already divided by their gcd."""
    cutoff = min(orig, new) * ROLLOFF
    width = math.ceil(ZERO_CROSSINGS * orig / cutoff)
    offsets = torch.arange(-width, width + orig, dtype=dtype)[None, None] / orig
    times = (torch.arange(0, -new, -1, dtype=dtype)[:, None, None] / new + offsets) * cutoff
    times = times.clamp_(-ZERO_CROSSINGS, ZERO_CROSSINGS)
    window = torch.cos(times * math.pi / ZERO_CROSSINGS / 2) ** 2
    times = times * math.pi
    kernel = torch.where(times == 0, torch.tensor(1.0, dtype=dtype), times.sin() / times)
    return kernel * window * (cutoff / orig), width


def resample(wave: torch.Tensor, orig_rate: int, new_rate: int) -> torch.Tensor:
    """``wave`` (..., samples; floating point) from ``orig_rate`` to ``new_rate`` Hz:
    ceil(samples * new / orig) samples, as torchaudio gives them."""
    if orig_rate == new_rate:
        return wave
    gcd = math.gcd(int(orig_rate), int(new_rate))
    orig, new = int(orig_rate) // gcd, int(new_rate) // gcd
    kernel, width = sinc_kernel(orig, new, wave.dtype)
    shape = wave.shape
    flat = wave.reshape(-1, shape[-1])
    length = flat.shape[-1]
    padded = torch.nn.functional.pad(flat, (width, width + orig))
    out = torch.nn.functional.conv1d(padded[:, None], kernel, stride=orig)
    out = out.transpose(1, 2).reshape(flat.shape[0], -1)
    out = out[..., :math.ceil(new * length / orig)]
    return out.reshape(*shape[:-1], out.shape[-1])
