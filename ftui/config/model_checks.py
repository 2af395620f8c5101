"""The checks of a config against its model: the files a run loads (config.json, weights, a
tokenizer, the hub cache), the sizes and positions in config.json, a multimodal or
pre-quantized model, the attention kernel the model needs, and LoRA's targets against the
modules the model has.

They read the model's config.json once per validation (``read_model``; ftui.config.preflight
hands the dict to each check) and no torch: the module names come from the model type.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ftui.config.problems import FieldProblem
from ftui.config.remote_code_checks import moss_vl_problems
from ftui.config.schema import RunConfig, comma_items
from ftui.i18n import _
from ftui.presets.families import FA2_MODEL_TYPES, runs_sdpa
from ftui.rundir.paths import resolve_model_path


def read_model(model_name_or_path: str) -> dict[str, Any] | None:
    """The model's config.json as a dict (a local folder, the demo or the hub cache: no
    network), None when it is not here (a hub model the run downloads)."""
    from ftui.plan.planner import read_model_config

    try:
        return read_model_config(model_name_or_path)
    except ValueError:
        return None


def model_checks(cfg: RunConfig, model: dict[str, Any] | None) -> list[FieldProblem]:
    """Every check of ``cfg`` against its model (``model``: its config.json, read once)."""
    out = model_problems(cfg)
    out += model_size_problems(cfg, model)
    out += cutoff_problems(cfg, model)
    out += moss_vl_problems(cfg, model) or multimodal_model_problems(cfg, model)  # MOSS-VL: refused naming its remote code
    out += attention_model_problems(cfg, model)
    out += padding_free_model_problems(cfg, model)
    out += lora_target_problems(cfg, model)
    return out


_EMBED_HEAD = ("embed_tokens", "lm_head")
_LLAMA_LIKE = _EMBED_HEAD + ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# The modules LoRA can adapt (linear layers and the embeddings) of the architectures whose
# layout is known without loading them, by config.json's model_type (transformers' classes).
# A model type not here is not checked (its modules are known only once it loads).
LORA_MODULES: dict[str, tuple[str, ...]] = {
    **{t: _LLAMA_LIKE for t in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text")},
    "phi3": _EMBED_HEAD + ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"),
    "gpt2": ("wte", "wpe", "c_attn", "c_proj", "c_fc", "lm_head"),
}


def model_module_names(model: dict[str, Any]) -> tuple[str, ...] | None:
    """The names of the modules LoRA can adapt in a model (its config.json), None when its
    architecture is not one whose layout is known."""
    return LORA_MODULES.get(str(model.get("model_type")))


def lora_target_problems(cfg: RunConfig, model: dict[str, Any] | None) -> list[FieldProblem]:
    """lora_target names the model does not have: peft would match none of them (or silently
    fewer than meant) after the data were prepared. Each name is compared by its last part,
    as peft matches a module's name."""
    if cfg.finetuning_type != "lora" or cfg.lora_target == "all" or model is None:
        return []
    names = model_module_names(model)
    if names is None:
        return []
    unknown = [t for t in comma_items(cfg.lora_target) if t.rsplit(".", 1)[-1] not in names]
    if not unknown:
        return []
    return [FieldProblem("lora_target", cfg.lora_target,
                         _("this {model_type} model has no module named {names}; the modules LoRA can adapt in it are: {modules} "
                           "(or use all)").format(model_type=model.get("model_type"), names=", ".join(unknown), modules=", ".join(names)))]


def model_problems(cfg: RunConfig) -> list[FieldProblem]:
    """What the run would load and cannot: a local folder without config.json, weights (unless
    model_init is random) or a tokenizer; a hub model missing from the cache under
    HF_HUB_OFFLINE; USE_MODELSCOPE_HUB=1 without the modelscope package; a config.json that is not
    JSON. From file names and that small file only (no torch, no network): the form runs it per keystroke."""
    from ftui.plan.model_files import (cached_for_run, has_tokenizer, has_weights, hub_cache_dir, hub_offline, is_folder, looks_like_path,
                                  modelscope_missing, use_modelscope)

    name = cfg.model_name_or_path
    resolved = resolve_model_path(name)
    folder = Path(resolved).expanduser() if is_folder(resolved) else None
    problem = None
    if folder is not None:
        if not (folder / "config.json").is_file():
            problem = (_("this folder has no config.json (it holds a LoRA adapter: give its base model, base_model_name_or_path "
                         "in adapter_config.json); give the model's folder, the one with config.json")
                       if (folder / "adapter_config.json").is_file() else
                       _("this folder has no config.json; give the model's folder, the one with config.json"))
        elif (malformed := _malformed_config(folder)) is not None:
            problem = malformed
        elif cfg.model_init == "pretrained" and not has_weights(folder):
            problem = _("no weights found in this folder (no *.safetensors, *.bin or sharded *.index.json); put the "
                        "weights beside config.json, or set model_init: random to build the model from config.json "
                        "with random weights")
        elif not has_tokenizer(folder):
            problem = _("no tokenizer in this folder (tokenizer.json, tokenizer_config.json, tokenizer.model, "
                        "vocab.json...); copy the tokenizer files of the model this config.json belongs to")
    elif looks_like_path(name):
        problem = _("no such model directory; give a local directory with config.json or a hub name like Qwen/Qwen2.5-0.5B")
    elif use_modelscope():
        problem = modelscope_missing()  # its own cache: the run looks there (HF_HUB_OFFLINE: only there)
    elif hub_offline() and not cached_for_run(name, cfg.model_init == "random"):
        problem = _("HF_HUB_OFFLINE is set and this hub model is not (completely) in the hub cache ({cache}); "
                    "give a local folder, download it first, or unset HF_HUB_OFFLINE").format(cache=hub_cache_dir())
    return [FieldProblem("model_name_or_path", name, problem)] if problem else []


def _malformed_config(folder: Path) -> str | None:
    """A folder's config.json that is not a JSON object (ftui.plan.model_json names it): said
    here, where the run would fail on it only once it loads."""
    from ftui.plan.model_json import ModelJSONError, read_json_object

    try:
        read_json_object(folder / "config.json")
    except ModelJSONError as err:
        return _("{error}; give the model's folder with its own config.json").format(error=err)
    return None


def model_size_problems(cfg: RunConfig, model: dict[str, Any] | None) -> list[FieldProblem]:
    """The sizes in the model's config.json (on disk or in the hub cache) that are not positive
    whole numbers (ftui.plan.model_sizes): refused by name before the planner or a run computes with
    them. A hub model not here yet is checked by transformers as it loads."""
    from ftui.plan.model_sizes import size_problems

    if model is None:
        return []
    return [FieldProblem("model_name_or_path", cfg.model_name_or_path, problem) for problem in size_problems(model)]


def cutoff_problems(cfg: RunConfig, model: dict[str, Any] | None) -> list[FieldProblem]:
    """cutoff_len beyond the positions of a model with learned absolute positions (GPT-2's
    n_positions table): past them it has no position to look up and fails, so it is refused.
    A RoPE model computes every position and only meets ones it was not trained on
    (cutoff_warnings), which LLaMA-Factory trains: it is a warning there."""
    found = _beyond_positions(cfg, model)
    if found is None or uses_rope(model or {}):
        return []
    most, why, _scaled = found
    return [FieldProblem("cutoff_len", cfg.cutoff_len,
                         _("cutoff_len {cutoff_len} is above {why}, a table of learned positions with no entry past "
                           "them: lower cutoff_len to {most} or less").format(cutoff_len=cfg.cutoff_len, why=why, most=most))]


def cutoff_warnings(cfg: RunConfig, model: dict[str, Any] | None) -> list[str]:
    """cutoff_len beyond a RoPE model's positions (max_position_embeddings, stretched by its
    rope_scaling where it has one): it trains, as in LLaMA-Factory, but on positions the model
    never saw, so the rope-scaling advice comes with it."""
    found = _beyond_positions(cfg, model)
    if found is None or not uses_rope(model or {}):
        return []
    most, why, scaled = found
    stretch = (_("raise the factor of its rope_scaling in the model's config.json") if scaled else
               _("set rope scaling in the model's config.json, e.g. {example}").format(
                   example=f'"rope_scaling": {{"rope_type": "linear", "factor": {float(math.ceil(cfg.cutoff_len / most))}}}'))
    return [_("cutoff_len {cutoff_len} is above {why}: the model meets positions it was not trained on (quality may drop); "
              "lower cutoff_len to {most} or less, or {stretch}").format(cutoff_len=cfg.cutoff_len, why=why, most=most, stretch=stretch)]


def _beyond_positions(cfg: RunConfig, model: dict[str, Any] | None) -> tuple[int, str, bool] | None:
    """The model's position limit when cutoff_len goes past it, else None."""
    if model is None:  # not here yet (a hub model the run downloads): nothing to compare with
        return None
    limit = position_limit(model)
    if limit is None or cfg.cutoff_len <= limit[0]:
        return None
    return limit


# model types whose positions are rotary (RoPE) although their config.json may name no rope key
ROPE_MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
                    "phi", "phi3", "gpt_neox", "gptj", "falcon", "stablelm", "olmo", "olmo2", "cohere", "starcoder2",
                    "deepseek_v2", "deepseek_v3", "internlm2", "baichuan", "chatglm", "glm", "glm4", "granite", "exaone",
                    "codegen", "persimmon", "mistral3", "ministral", "smollm3", "hunyuan_v1_dense", "seed_oss")


def uses_rope(model: dict[str, Any]) -> bool:
    """Whether a model's positions are rotary (computed for any position) rather than a table
    of learned positions: a rope or rotary key in its config.json, or a RoPE model type."""
    if "max_position_embeddings" not in model and isinstance(model.get("text_config"), dict):
        model = model["text_config"]
    if any(str(k).startswith(("rope", "rotary", "partial_rotary")) for k in model):
        return True
    return model.get("model_type") in ROPE_MODEL_TYPES


def fitting_cutoff_len(model_name_or_path: str, wanted: int) -> int:
    """``wanted``, lowered to the positions the model allows (cutoff_problems' limit): the
    cutoff_len for a model scored outside a run (ftui predict / eval --model), whose user set
    none, so that the default (2048) does not refuse a model made for fewer."""
    from ftui.plan.planner import read_model_config

    try:
        limit = position_limit(read_model_config(model_name_or_path))
    except ValueError:
        return wanted
    return min(wanted, limit[0]) if limit is not None else wanted


# config.json keys of vision / audio towers: a multimodal model
MULTIMODAL_CONFIG_KEYS = ("vision_config", "audio_config", "visual", "vision_tower", "mm_vision_tower", "speech_config")


def multimodal_model_problems(cfg: RunConfig, model: dict[str, Any] | None) -> list[FieldProblem]:
    """A model with a vision or audio tower that is not a vision-language family ftui trains
    (ftui.presets.vision_families: Qwen2-VL, Qwen2.5-VL, Qwen3-VL): refused instead of
    half-trained; a vision-language template for a text-only model
    (ftui.config.media_checks); a pre-quantized model."""
    from ftui.config.media_checks import FAMILY_NAMES, freeze_problems, template_model_problems
    from ftui.presets.vision_families import vision_family

    if model is None:
        return []
    quant = model.get("quantization_config")
    method = str(quant.get("quant_method", "")) if isinstance(quant, dict) else ""
    if method and method != "bitsandbytes":
        return [FieldProblem("model_name_or_path", cfg.model_name_or_path,
                             _("a model quantized with {method} (its config.json's quantization_config): not supported, ftui "
                               "trains LoRA over full-precision or bitsandbytes (quantization_bit) weights; use the unquantized "
                               "model").format(method=f"{method:.40}"))]
    found = next((k for k in MULTIMODAL_CONFIG_KEYS if k in model), None)
    if found is None or vision_family(model.get("model_type")) is not None:
        from ftui.config.audio_checks import audio_template_problems
        return template_model_problems(cfg, model) + freeze_problems(cfg, model) + audio_template_problems(cfg, model)
    return [FieldProblem("model_name_or_path", cfg.model_name_or_path,
                         _("a multimodal model (model_type {model_type}; its config.json has {key}) of a family ftui does not "
                           "train yet: ftui trains text-only language models and the vision-language families {families}; use "
                           "one of those, or the text-only variant of the model").format(
                             model_type=f"{model.get('model_type', '?')!s:.40}", key=found, families=FAMILY_NAMES))]


def position_limit(model: dict[str, Any]) -> tuple[int, str, bool] | None:
    """The longest sequence a model's config.json allows, how it says so, and whether rope
    scaling already stretches it; None when it sets no limit (no max_position_embeddings, or
    dynamic rope scaling, which stretches as far as needed)."""
    if "max_position_embeddings" not in model and isinstance(model.get("text_config"), dict):
        model = model["text_config"]  # a multimodal model's language part
    positions = model.get("max_position_embeddings") or model.get("n_positions")
    if not isinstance(positions, int) or isinstance(positions, bool) or positions <= 0:
        return None
    why = _("the model's max_position_embeddings {positions}").format(positions=positions)
    scaling = model.get("rope_scaling") or model.get("rope_parameters")  # transformers 5 names it rope_parameters
    kind = (scaling.get("rope_type") or scaling.get("type")) if isinstance(scaling, dict) else None
    if kind in (None, "default"):
        return positions, why, False
    factor, original = scaling.get("factor"), scaling.get("original_max_position_embeddings") or positions
    if (kind == "dynamic" or isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor)
            or factor <= 0 or isinstance(original, bool) or not isinstance(original, int) or original <= 0):
        return None  # no limit to compare with (a factor of 1e999 reads as infinity: int() of it would raise)
    stretched = max(positions, int(factor * original))
    why = _("the {stretched} positions of the model's config.json ({kind} rope_scaling, factor {factor} x {original})").format(
        stretched=stretched, kind=kind, factor=f"{factor:g}", original=original)
    return stretched, why, True


def examples_kept_apart_gap(model: dict[str, Any]) -> str | None:
    """Whether this model's layers keep the examples of one row apart from transformers'
    sequence-length arguments and restarting position ids (its config.json as a dict), which
    both flash_attn fa2 and padding_free need: None when they do (the decoder-only text models
    with rotary positions of FA2_MODEL_TYPES); "window" for Qwen2-MoE with a sliding window,
    whose layers do not hand it to the attention function (transformers 5.24); "type" for any
    other model type (learned absolute positions, or layers that take those arguments for
    themselves)."""
    model_type = model.get("model_type")
    if model_type == "qwen2_moe" and model.get("use_sliding_window"):
        return "window"
    return None if model_type in FA2_MODEL_TYPES else "type"


def padding_free_model_problem(model: dict[str, Any]) -> str | None:
    """Why this model's batches cannot be laid end to end (its config.json as a dict), None
    when they can: each example must keep its own positions and attend to itself alone
    (``examples_kept_apart_gap``)."""
    gap = examples_kept_apart_gap(model)
    if gap == "window":
        return _("padding_free cannot keep this Qwen2-MoE model's sliding window apart per example (its layers do not pass it to "
                 "the attention); set padding_free false")
    if gap is None:
        return None
    return _("padding_free lays examples end to end for decoder-only text models with rotary positions ({types}); this one is "
             "{model_type}, whose examples would not stay apart; set padding_free false (or empty)").format(
        types=", ".join(FA2_MODEL_TYPES), model_type=model.get("model_type") or "?")


def padding_free_model_problems(cfg: RunConfig, model: dict[str, Any] | None) -> list[FieldProblem]:
    """padding_free: true for a model whose examples would not stay apart in one row (a hub
    model not here yet is checked when it loads, ftui.runner.batch_layout)."""
    if not cfg.padding_free or model is None:
        return []
    reason = padding_free_model_problem(model)
    return [FieldProblem("padding_free", True, reason)] if reason else []


def attention_model_problems(cfg: RunConfig, model: dict[str, Any] | None) -> list[FieldProblem]:
    """flash_attn and the model, read from its config.json on disk or in the hub cache (a hub
    model not here yet is checked when it loads, ftui.runner.model): fa2 needs a model type
    whose attention it runs; sdpa, a model whose attention SDPA computes (auto loads the
    others with eager attention)."""
    if cfg.flash_attn not in ("fa2", "sdpa") or model is None:
        return []
    reason = fa2_model_problem(model) if cfg.flash_attn == "fa2" else None if runs_sdpa(model) else sdpa_refusal(model.get("model_type"))
    return [FieldProblem("flash_attn", cfg.flash_attn, reason)] if reason else []


def sdpa_refusal(model_type: str | None) -> str:
    """flash_attn sdpa for a model whose attention transformers runs without SDPA."""
    return _("flash_attn sdpa: transformers runs the attention of {model_type} models without SDPA (soft-capped logits, "
             "attention sinks or windows it does not compute); use flash_attn: auto (eager attention for this model) "
             "or disabled").format(model_type=model_type or "?")


def fa2_model_problem(model: dict[str, Any]) -> str | None:
    """Why flash_attn fa2 cannot run this model (its config.json as a dict), None when it can
    (``examples_kept_apart_gap``)."""
    gap = examples_kept_apart_gap(model)
    if gap == "window":
        return _("flash_attn fa2 cannot apply this Qwen2-MoE model's sliding window (use_sliding_window: its layers do not pass it "
                 "to the attention kernel); use flash_attn: auto")
    if gap is None:
        return None
    return _("flash_attn fa2 runs the attention of {types} models; this one is {model_type} (its layers take the "
             "sequence lengths themselves or compute what torch's kernel does not); use flash_attn: auto").format(
        types=", ".join(FA2_MODEL_TYPES), model_type=model.get("model_type") or "?")
