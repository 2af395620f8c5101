"""Model families: which chat template and which LoRA target modules suit a model.

Recognised from the model's ``config.json`` ``model_type`` (read as plain JSON, so no
transformers import is needed on the dashboard side) or, for a hub name that is not on
disk, from the name itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ftui.presets.vision_families import VISION_FAMILIES, VisionFamily, vision_family
from ftui.safety.bounded_input import load_json

ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Family:
    name: str
    model_types: tuple[str, ...]
    template: str  # a name from ftui.presets.templates, or "tokenizer" for the model's own
    lora_targets: tuple[str, ...]
    name_pattern: str  # matched against a hub name when no config.json is readable
    decoder_layer_path: str = "model.layers"
    vision: bool = False  # a vision-language model (ftui.presets.vision_families): the form shows its image keys


FAMILIES: tuple[Family, ...] = (
    Family("llama", ("llama",), "llama3", ATTN + MLP, r"llama"),
    Family("qwen2", ("qwen2", "qwen2_moe"), "qwen", ATTN + MLP, r"qwen-?2|qwen1\.5"),
    Family("qwen3", ("qwen3", "qwen3_moe"), "qwen3", ATTN + MLP, r"qwen-?3"),
    Family("mistral", ("mistral", "mixtral"), "mistral", ATTN + MLP, r"mistral|mixtral"),
    Family("gemma", ("gemma", "gemma2", "gemma3_text"), "gemma", ATTN + MLP, r"gemma"),
    Family("phi3", ("phi3",), "phi", ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"), r"phi-?3"),
    Family("gpt2", ("gpt2",), "chatml", ("c_attn", "c_proj", "c_fc"), r"gpt2", "transformer.h"),
)


# model types whose attention flash_attn fa2 (ftui.runner.attention) runs: decoders whose layers
# hand their attention function query, key and value alone and pass transformers' sequence-length
# keyword arguments through untouched (hybrid linear-attention and vision-language models take
# them for themselves; gemma2's soft-capping and gpt-oss's sinks are not in torch's kernel)
FA2_MODEL_TYPES = ("llama", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "mistral", "mixtral", "gemma", "gemma3_text", "phi3")


# causal language models whose transformers classes have no SDPA attention (transformers 5.24:
# ``_supports_sdpa = False``; soft-capped logits, attention sinks, windows or compressed
# attention SDPA does not compute): transformers loads them with eager attention where none is
# named (flash_attn auto) and refuses SDPA named. At load, ftui.runner.model asks the class itself.
NO_SDPA_MODEL_TYPES = ("gemma2", "vaultgemma", "gpt_oss", "granite_swa", "granitemoe_swa", "mimo_v2_flash", "flint", "hy_v4",
                       "deepseek_v4", "inkling2_text", "inkling2_loop_text", "bloom", "gpt_neo", "gpt_neox_japanese", "mpt", "xglm")


def runs_sdpa(model: dict) -> bool:
    """Whether PyTorch's SDPA runs this model's attention (its config.json as a dict; by model
    type, NO_SDPA_MODEL_TYPES)."""
    return model.get("model_type") not in NO_SDPA_MODEL_TYPES


def family_for_model_type(model_type: str | None) -> Family | None:
    for fam in FAMILIES:
        if model_type in fam.model_types:
            return fam
    return None


def read_model_type(model_name_or_path: str) -> str | None:
    """The ``model_type`` from a local model directory's config.json, if there is one."""
    cfg = Path(model_name_or_path).expanduser() / "config.json"
    try:
        return load_json(cfg.read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def vision_as_family(vision: VisionFamily, name: str = "") -> Family:
    """A vision-language family as the form fills it: LLaMA-Factory's template, and LoRA on
    ``all``, which ftui (as LLaMA-Factory) narrows to the language model's linear layers while
    the vision tower is frozen (ftui.runner.vlm). Qwen3-VL's Instruct models take
    ``qwen3_vl_nothink`` and its Thinking ones ``qwen3_vl`` (LLaMA-Factory's model list): told
    by the name, as config.json says qwen3_vl for both."""
    template = vision.template
    if template == "qwen3_vl" and "thinking" not in name.lower():
        template = "qwen3_vl_nothink"
    return Family(vision.name, vision.model_types, template, ("all",), vision.name_pattern, "model.language_model.layers",
                  vision=True)


def detect_family(model_name_or_path: str) -> Family | None:
    """The family of a model given as a local path or a hub name (None when unknown). A
    vision-language model is told apart first: Qwen2-VL's hub name also reads as Qwen2's."""
    model_type = read_model_type(model_name_or_path)
    vision = vision_family(model_type)
    if vision is not None:
        return vision_as_family(vision, model_name_or_path)
    fam = family_for_model_type(model_type)
    if fam is not None:
        return fam
    lowered = model_name_or_path.lower()
    for vf in VISION_FAMILIES:
        if model_type is None and vf.name_pattern and re.search(vf.name_pattern, lowered):
            return vision_as_family(vf, model_name_or_path)
    for fam in FAMILIES:
        if re.search(fam.name_pattern, lowered):
            return fam
    return None
