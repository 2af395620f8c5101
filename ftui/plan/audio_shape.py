"""The parameters of Qwen2-Audio's audio tower and projector from its config.json's
``audio_config`` alone (no torch), for the planner's parameter memory (``ftui.plan.
vision_shape``: the tower is the family's "vision" tower, as LLaMA-Factory registers it).

transformers 5's Qwen2AudioEncoder (Whisper's encoder): two 3-wide convolutions over the mel
bins, a position table of ``max_source_positions``, ``encoder_layers`` pre-norm blocks
(attention without a key bias, a two-layer MLP, two LayerNorms) and a final LayerNorm; the
projector is one biased linear layer into the language model. Defaults: Qwen2-Audio-7B's.
tests/test_audio.py checks the count against the model transformers builds.
"""

from __future__ import annotations

from typing import Any

DEFAULTS = {"d_model": 1280, "encoder_layers": 32, "encoder_ffn_dim": 5120, "num_mel_bins": 128, "max_source_positions": 1500,
            "encoder_attention_heads": 20}


def audio_tower_parameters(model: dict[str, Any]) -> dict[str, Any] | None:
    """VisionShape's fields for a Qwen2-Audio config.json, None without an audio_config."""
    audio = model.get("audio_config")
    if not isinstance(audio, dict):
        return None
    a = {**DEFAULTS, **{k: v for k, v in audio.items() if k in DEFAULTS and v is not None}}
    d, ffn, mels = int(a["d_model"]), int(a["encoder_ffn_dim"]), int(a["num_mel_bins"])
    block = (4 * d * d + 3 * d) + 2 * d + (d * ffn + ffn) + (ffn * d + d) + 2 * d
    depth = int(a["encoder_layers"])
    tower = (mels * d * 3 + d) + (d * d * 3 + d) + int(a["max_source_positions"]) * d + depth * block + 2 * d
    text = model.get("text_config") if isinstance(model.get("text_config"), dict) else {}
    hidden = int(text.get("hidden_size") or 4096)
    return {"tower": tower, "projector": d * hidden + hidden, "block": block, "depth": depth, "width": d, "mlp": ffn,
            "heads": int(a["encoder_attention_heads"]), "mels": mels}
