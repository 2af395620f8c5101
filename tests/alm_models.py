"""A tiny Qwen2-Audio model for the tests, built offline like the vision-language ones
(tests/vlm_models.py): a config with random weights, the tests' families tokenizer with
Qwen2-Audio's three audio tokens, Whisper's feature extractor settings (128 mel bins, 16 kHz,
30 s windows, as Qwen2-Audio-7B's preprocessor_config.json) and the processor_config.json
naming Qwen2AudioProcessor (LLaMA-Factory's ``load_tokenizer`` builds it from the folder).

    audio_dir(tmp_path)  ->  a folder Qwen2AudioForConditionalGeneration and ftui load
"""

from __future__ import annotations

import json
from pathlib import Path

from vlm_models import TEXT, TOKENIZER

AUDIO_TOKENS = ["<|audio_bos|>", "<|AUDIO|>", "<|audio_eos|>"]  # Qwen2-Audio's, bos / audio / eos
FEATURES = {"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128, "sampling_rate": 16000,
            "hop_length": 160, "chunk_length": 30, "n_fft": 400, "n_samples": 480000, "nb_max_frames": 3000,
            "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
            "processor_class": "Qwen2AudioProcessor"}
PROCESSOR = {"processor_class": "Qwen2AudioProcessor", "audio_token": "<|AUDIO|>", "audio_bos_token": "<|audio_bos|>",
             "audio_eos_token": "<|audio_eos|>"}
ENCODER = {"d_model": 32, "encoder_layers": 2, "encoder_attention_heads": 2, "encoder_ffn_dim": 64,
           "num_mel_bins": 128, "max_source_positions": 1500}


def audio_dir(root: Path, seed: int = 0) -> Path:
    """A tiny Qwen2-Audio folder under ``root`` (made once per root)."""
    import torch
    import transformers
    from transformers import AutoTokenizer

    out = Path(root) / "tiny-qwen2_audio"
    if (out / "config.json").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER))
    tok.add_special_tokens({"additional_special_tokens": AUDIO_TOKENS})
    tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"
    tok.save_pretrained(str(out))
    vocab = (len(tok) + 63) // 64 * 64
    text = dict(TEXT, model_type="qwen2", vocab_size=vocab, head_dim=TEXT["hidden_size"] // TEXT["num_attention_heads"])
    config = transformers.Qwen2AudioConfig(audio_config=ENCODER, text_config=text,
                                           audio_token_index=tok.convert_tokens_to_ids("<|AUDIO|>"), tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.Qwen2AudioForConditionalGeneration(config)
    model.save_pretrained(str(out))
    (out / "preprocessor_config.json").write_text(json.dumps(FEATURES, indent=1))
    (out / "processor_config.json").write_text(json.dumps(PROCESSOR, indent=1))
    return out
