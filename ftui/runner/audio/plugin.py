"""LLaMA-Factory 0.9.5's ``qwen2_audio`` plugin as ftui's collation asks a plugin
(``ftui.runner.media_batch.media_collation``): the stand-in audio of a batch without any, and
no token-type tensor (Qwen2-Audio's forward reads none) nor M-RoPE. The encoding itself is
``ftui.runner.audio.encode``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ftui.data.audio_files import HOP, audio_tokens

STAND_IN_SAMPLES = 1600  # LLaMA-Factory's fake audio for a batch without any: np.zeros(1600)


@dataclass(frozen=True)
class Qwen2AudioPlugin:
    name: str = "qwen2_audio"
    token_types_key: str | None = None
    typed_token: str = "audio_token_id"  # typed 1 in the (unused) token types
    audio_tokens: tuple[str, str, str] = ("<|audio_bos|>", "<|AUDIO|>", "<|audio_eos|>")  # Qwen2AudioProcessor's defaults

    @staticmethod
    def stand_in(config: Any) -> tuple[tuple[int, ...], dict[str, torch.Tensor] | None]:
        """A micro batch without audios still runs the audio tower (LLaMA-Factory's fake audio
        of 1600 zero samples: under ZeRO-3 / FSDP every rank must gather the tower at every
        forward, ftui.runner.media_batch.stand_in), its tokens hidden by the attention mask.
        Whisper's log-mel features of silence are -1.5 everywhere (log10 of the floor 1e-10,
        clamped, then (x + 4) / 4); 1600 samples are 10 frames and 2 audio tokens."""
        audio = getattr(config, "audio_config", None)
        token = getattr(config, "audio_token_id", None) or getattr(config, "audio_token_index", None)
        if audio is None or token is None:
            return (), None
        width = 2 * int(audio.max_source_positions)
        mask = torch.zeros(1, width, dtype=torch.long)
        mask[0, :-(-STAND_IN_SAMPLES // HOP)] = 1
        features = torch.full((1, int(audio.num_mel_bins), width), -1.5)
        return (int(token),) * audio_tokens(STAND_IN_SAMPLES), {"input_features": features, "feature_attention_mask": mask}


AUDIO_PLUGINS = {"qwen2_audio": Qwen2AudioPlugin()}
