"""Tiny vision-language models for the tests, built offline: a config with random weights, the
tests' families tokenizer with the family's vision tokens, and the family's image processor
config (the Qwen families' video_preprocessor_config.json too; plus, for LLaVA, Gemma 3 and InternVL, the processor_config.json of its Processor: the
numbers LLaMA-Factory's plugins read from the processor, such as image_seq_length). No download; the same folders feed LLaMA-Factory when its reference encodings are
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
# The other families (build_other): LLaVA-1.5, Gemma 3 and InternVL 3, each a
# 56 x 56 image of 14-pixel patches in a two-block vision tower.
FAMILIES.update({
    "llava": {"template": "llava"},
    "gemma3": {"template": "gemma3"},
    "internvl": {"template": "intern_vl"},
})

QWEN_FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
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
    if family not in QWEN_FAMILIES:
        return build_other(family, out, seed)
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
    (out / "video_preprocessor_config.json").write_text(json.dumps(video_processor(family), indent=1))
    return out


def video_processor(family: str) -> dict:
    """The family's video_preprocessor_config.json, as its releases have one: the video processor
    class, the image processor's patch numbers, mean and std, and pixel bounds small enough for
    the tiny towers (Qwen3-VL's bound the whole clip: frames x height x width)."""
    image = FAMILIES[family]["processor"] or FAMILIES["qwen2_vl"]["processor"]
    kind = "Qwen3VLVideoProcessor" if family == "qwen3_vl" else "Qwen2VLVideoProcessor"
    size = {"shortest_edge": 4096, "longest_edge": 4096 * 1024} if family == "qwen3_vl" else {"shortest_edge": 3136, "longest_edge": 3136 * 256}
    keys = ("patch_size", "merge_size", "temporal_patch_size", "image_mean", "image_std", "do_resize", "do_rescale",
            "do_normalize", "do_convert_rgb", "rescale_factor", "resample")
    return {"video_processor_type": kind, "size": size, **{k: image[k] for k in keys}}


CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}
SIDE, PATCH = 56, 14  # the tiny towers' image side and patch size: 4 x 4 patches
# family -> (vision tokens, bos, eos, pad, the tokenizer's named extra tokens)
OTHER_TOKENS = {
    "llava": (["<image>"], None, "<|endoftext|>", "<|endoftext|>", {}),
    "gemma3": (["<start_of_image>", "<end_of_image>", "<image_soft_token>"], "<bos>", "<eos>", "<pad>",
               {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}),
    "internvl": (["<img>", "</img>", "<IMG_CONTEXT>"], None, "<|im_end|>", "<|endoftext|>",
                 {"start_image_token": "<img>", "end_image_token": "</img>", "context_image_token": "<IMG_CONTEXT>"}),
}


def write_other_tokenizer(family: str, out: Path) -> dict[str, int]:
    """The families tokenizer with ``family``'s vision tokens, BOS / EOS / PAD and the named
    tokens its transformers Processor reads (``tokenizer.boi_token`` ...); returns their ids."""
    from transformers import AutoTokenizer

    tokens, bos, eos, pad, named = OTHER_TOKENS[family]
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER))
    tok.add_special_tokens({"additional_special_tokens": tokens})
    tok.bos_token, tok.eos_token, tok.pad_token = bos, eos, pad
    tok.save_pretrained(str(out))
    if named:
        path = out / "tokenizer_config.json"
        config = json.loads(path.read_text())
        config["extra_special_tokens"] = named
        path.write_text(json.dumps(config, indent=1))
    return {t: tok.convert_tokens_to_ids(t) for t in tokens} | {"vocab": len(tok)}


def other_config(family: str, ids: dict[str, int]):
    """The tiny model's config: a two-layer language model over a two-block vision tower."""
    import transformers

    vocab = (ids["vocab"] + 63) // 64 * 64
    text = dict(TEXT, vocab_size=vocab, head_dim=TEXT["hidden_size"] // TEXT["num_attention_heads"])
    vision = dict(TINY_VISION, image_size=SIDE, patch_size=PATCH)
    if family == "llava":
        return transformers.LlavaConfig(
            text_config=dict(text, model_type="llama"), vision_config=dict(vision, model_type="clip_vision_model"),
            image_token_id=ids["<image>"], vision_feature_select_strategy="default", vision_feature_layer=-2,
            tie_word_embeddings=False)
    if family == "gemma3":
        return transformers.Gemma3Config(
            text_config=dict(text, model_type="gemma3_text", sliding_window=64, layer_types=["sliding_attention", "full_attention"]),
            vision_config=dict(vision, model_type="siglip_vision_model", vision_use_head=False), mm_tokens_per_image=4,
            boi_token_id=ids["<start_of_image>"], eoi_token_id=ids["<end_of_image>"], image_token_id=ids["<image_soft_token>"],
            tie_word_embeddings=False)
    return transformers.InternVLConfig(
        text_config=dict(text, model_type="qwen2"), vision_config=dict(vision, image_size=[SIDE, SIDE], patch_size=[PATCH, PATCH]),
        image_token_id=ids["<IMG_CONTEXT>"], downsample_ratio=0.5, vision_feature_layer=-1, tie_word_embeddings=False)


# family -> (preprocessor_config.json, processor_config.json): the image processor's settings,
# and the Processor's numbers LLaMA-Factory reads (tokens per image)
OTHER_PROCESSORS = {
    "llava": ({"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": SIDE},
               "crop_size": {"height": SIDE, "width": SIDE}, "do_center_crop": True, "do_resize": True, "do_rescale": True,
               "do_normalize": True, "do_convert_rgb": True, "image_mean": CLIP_MEAN, "image_std": CLIP_STD, "resample": 3,
               "rescale_factor": 0.00392156862745098},
              {"processor_class": "LlavaProcessor", "patch_size": PATCH, "vision_feature_select_strategy": "default",
               "num_additional_image_tokens": 1, "image_token": "<image>"}),
    "gemma3": ({"image_processor_type": "Gemma3ImageProcessor", "size": {"height": SIDE, "width": SIDE}, "do_resize": True,
                "do_rescale": True, "do_normalize": True, "do_convert_rgb": True, "image_mean": [0.5, 0.5, 0.5],
                "image_std": [0.5, 0.5, 0.5], "resample": 2, "rescale_factor": 0.00392156862745098, "do_pan_and_scan": False},
               {"processor_class": "Gemma3Processor", "image_seq_length": 4}),
    "internvl": ({"image_processor_type": "GotOcr2ImageProcessor", "size": {"height": SIDE, "width": SIDE}, "do_resize": True,
                  "do_rescale": True, "do_normalize": True, "do_convert_rgb": True, "image_mean": IMAGENET_MEAN,
                  "image_std": IMAGENET_STD, "resample": 3, "rescale_factor": 0.00392156862745098, "crop_to_patches": False,
                  "min_patches": 1, "max_patches": 12},
                 {"processor_class": "InternVLProcessor", "image_seq_length": 4}),
}


def build_other(family: str, out: Path, seed: int = 0) -> Path:
    """A tiny LLaVA-1.5, Gemma 3 or InternVL folder (see vlm_dir)."""
    import torch
    import transformers

    out.mkdir(parents=True, exist_ok=True)
    ids = write_other_tokenizer(family, out)
    torch.manual_seed(seed)
    model = transformers.AutoModelForImageTextToText.from_config(other_config(family, ids))
    if family == "gemma3":  # transformers starts its projection at zero: no image would reach the text, no gradient the tower
        torch.nn.init.normal_(model.model.multi_modal_projector.mm_input_projection_weight, std=0.02)
    model.save_pretrained(str(out))
    image, processor = OTHER_PROCESSORS[family]
    (out / "preprocessor_config.json").write_text(json.dumps(image, indent=1))
    (out / "processor_config.json").write_text(json.dumps(processor, indent=1))
    return out


def copy_family(family: str, src_root: Path, dst: Path) -> Path:
    """A copy of a built family folder (tests that write into it)."""
    src = vlm_dir(family, src_root)
    shutil.copytree(src, dst)
    return dst


def loaded_models(root: Path):
    """family -> (model folder, loaded model), each built and loaded once under ``root``: the
    getter a test module's ``models`` fixture returns."""
    import transformers

    cache: dict[str, tuple[Path, object]] = {}

    def get(family: str):
        if family not in cache:
            path = vlm_dir(family, root)
            cache[family] = (path, transformers.AutoModelForImageTextToText.from_pretrained(str(path)))
        return cache[family]

    return get
