"""Tiny vision-language models for the tests, built offline: a config with random weights, the
tests' families tokenizer with the family's vision tokens, and the family's image processor
config. No download; the same folders feed LLaMA-Factory when its reference encodings are
made (tests/data/llamafactory_vlm/make_reference.py).

    vlm_dir("qwen2_vl", tmp_path)   ->  a folder AutoModelForImageTextToText and ftui load

The image processors are saved with their usual type names; on a machine without torchvision
transformers falls back to the PIL implementation of the same processor (the path CI takes).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOKENIZER = HERE / "data" / "families_tokenizer"

# Qwen's vision tokens, in the order Qwen2-VL's tokenizer has them.
QWEN_VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]

# family -> (config class name, vision config, image processor config, LLaMA-Factory template)
FAMILIES: dict[str, dict] = {
    "qwen2_vl": {
        "config": "Qwen2VLConfig",
        "vision": {"depth": 2, "embed_dim": 32, "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2,
                   "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3},
        "processor": {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14, "merge_size": 2,
                      "temporal_patch_size": 2, "min_pixels": 3136, "max_pixels": 12845056,
                      "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
                      "do_resize": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True,
                      "rescale_factor": 0.00392156862745098, "resample": 3},
        "template": "qwen2_vl",
    },
    "qwen2_5_vl": {
        "config": "Qwen2_5_VLConfig",
        "vision": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64,
                   "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3,
                   "window_size": 112, "fullatt_block_indexes": [1]},
        "processor": None,  # Qwen2-VL's
        "template": "qwen2_vl",
    },
    "qwen3_vl": {
        "config": "Qwen3VLConfig",
        "vision": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64,
                   "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3,
                   "num_position_embeddings": 64, "deepstack_visual_indexes": [0]},
        "processor": {"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "merge_size": 2,
                      "temporal_patch_size": 2, "min_pixels": 4096, "max_pixels": 16777216,
                      "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
                      "do_resize": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True,
                      "rescale_factor": 0.00392156862745098, "resample": 3},
        "template": "qwen3_vl_nothink",
    },
}
TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 4096, "tie_word_embeddings": False}


def write_tokenizer(out: Path) -> dict[str, int]:
    """The families tokenizer plus Qwen's vision tokens (eos <|im_end|>, pad <|endoftext|>, as
    Qwen2-VL-Instruct); returns the vision tokens' ids."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER))
    tok.add_special_tokens({"additional_special_tokens": QWEN_VISION_TOKENS})
    tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"
    tok.save_pretrained(str(out))
    return {t: tok.convert_tokens_to_ids(t) for t in QWEN_VISION_TOKENS} | {"vocab": len(tok)}


def vlm_dir(family: str, root: Path, seed: int = 0) -> Path:
    """A tiny ``family`` model folder under ``root`` (made once per root)."""
    import torch
    import transformers

    out = Path(root) / f"tiny-{family}"
    if (out / "config.json").is_file():
        return out
    spec = FAMILIES[family]
    out.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(out)
    vocab = (ids["vocab"] + 63) // 64 * 64
    head_dim = TEXT["hidden_size"] // TEXT["num_attention_heads"]
    text = dict(TEXT, vocab_size=vocab, head_dim=head_dim,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3],
                                 **({"mrope_interleaved": True} if family == "qwen3_vl" else {})})
    vision = dict(spec["vision"])
    if family == "qwen2_vl":
        vision["hidden_size"] = TEXT["hidden_size"]
    config = getattr(transformers, spec["config"])(
        text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.AutoModelForImageTextToText.from_config(config)
    model.save_pretrained(str(out))
    processor = spec["processor"] or FAMILIES["qwen2_vl"]["processor"]
    (out / "preprocessor_config.json").write_text(json.dumps(processor, indent=1))
    return out


def copy_family(family: str, src_root: Path, dst: Path) -> Path:
    """A copy of a built family folder (tests that write into it)."""
    src = vlm_dir(family, src_root)
    shutil.copytree(src, dst)
    return dst
