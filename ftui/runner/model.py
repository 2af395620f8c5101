"""Model and tokenizer: load, apply the fine-tuning method, count parameters.

Full, LoRA (peft), QLoRA (peft + bitsandbytes, CUDA only) and freeze (only the last N
decoder layers train). Trainable parameters are fp32 master weights (but with ``pure_bf16``,
where full and freeze train bf16 weights; LoRA's adapters stay fp32, as peft keeps them);
with LoRA or QLoRA in bf16/fp16 the frozen base is loaded in that half type to save memory,
as LLaMA-Factory does. ``model_init: random`` builds the architecture from its config with
random weights (the demo, benchmarks, tests), and saves that base so adapters stay loadable.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ftui.data.chat_template import fix_tokenizer, to_jinja
from ftui.config.schema import RunConfig
from ftui.config.model_checks import fa2_model_problem, sdpa_refusal
from ftui.i18n import _
from ftui.runner.attention import attn_implementation
from ftui.runner.hub import model_source
from ftui.runner.vlm import family_of, language_layers, lora_target_modules, mark_freeze, mark_full
from ftui.presets.templates import TEMPLATES
from ftui.presets.vision_families import vision_family



def load_tokenizer(cfg: RunConfig) -> Any:
    """The model's tokenizer, fixed up for the config's template as LLaMA-Factory does (its stop
    words become special tokens, EOS the first of them where the template says so)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_source(cfg.model_name_or_path), trust_remote_code=cfg.trust_remote_code)
    if cfg.template:
        fix_tokenizer(tok, TEMPLATES[cfg.template])
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def template_name_for(cfg: RunConfig, tokenizer: Any) -> str | None:
    """The named template a run encodes with: the config's; None for the tokenizer's own chat
    template; ``default`` for a tokenizer that has none."""
    if cfg.template:
        return cfg.template
    return None if getattr(tokenizer, "chat_template", None) else "default"


def chat_template_for(cfg: RunConfig, tokenizer: Any) -> str:
    """The Jinja chat template final/ ships for chat: the run's named template written as
    Jinja, else the tokenizer's own."""
    name = template_name_for(cfg, tokenizer)
    if name is None:
        return tokenizer.chat_template
    return to_jinja(TEMPLATES[name], tokenizer.bos_token, tokenizer.eos_token)


def grow_embeddings(model: nn.Module, tokenizer: Any) -> int:
    """Makes room in the embeddings for tokens the template added to the tokenizer (rows padded
    to a multiple of 64, as LLaMA-Factory resizes); returns how many rows were added."""
    rows = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) <= rows:
        return 0
    model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)
    return model.get_input_embeddings().weight.shape[0] - rows


def base_dtype(cfg: RunConfig) -> torch.dtype:
    """The dtype weights are loaded in: half for a frozen LoRA base, and half under DeepSpeed,
    which casts the module to bf16/fp16 anyway (its fp32 master copy lives in the optimizer),
    so an fp32 copy would only double the loading memory. FSDP, single and DDP keep fp32
    master weights in the module, except with ``pure_bf16``: the weights themselves are bf16
    and train as such (LLaMA-Factory's pure_bf16 leaves them in the load dtype)."""
    if cfg.pure_bf16:
        return torch.bfloat16
    half = torch.bfloat16 if cfg.precision == "bf16" else torch.float16
    if cfg.precision != "fp32" and (cfg.method in ("lora", "qlora") or cfg.uses_deepspeed):
        return half
    return torch.float32


def compute_dtype(cfg: RunConfig) -> torch.dtype:
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision, torch.float32)


def model_config(cfg: RunConfig) -> dict[str, Any]:
    """The model's config.json as a dict (what validation read; a hub model's from the hub cache)."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(model_source(cfg.model_name_or_path), trust_remote_code=cfg.trust_remote_code).to_dict()


def load_model(cfg: RunConfig, device: torch.device, attention: str | None = None) -> nn.Module:
    """The base model on ``device`` (not yet wrapped by an engine), with the attention kernel
    ``flash_attn`` names (``ftui.runner.attention``: transformers' choice for auto, SDPA where
    the model has it), or ``attention`` where the run's batch layout picked one
    (``ftui.runner.batch_layout``: SDPA per example).

    ``device`` is where the engine wants the weights before it wraps them: the GPU for
    single, DDP and ZeRO-0..2; the CPU for FSDP and ZeRO-3, which move only their shards to
    the GPU (see ``Engine.load_device``).

    A vision-language model (its model_type in ``ftui.presets.vision_families``) loads with
    ``AutoModelForImageTextToText``, its vision tower and projector with it, in the same dtype,
    attention and device."""
    from transformers import AutoConfig

    path = model_source(cfg.model_name_or_path)
    dtype = base_dtype(cfg)
    common: dict[str, Any] = dict(trust_remote_code=cfg.trust_remote_code)
    if (implementation := attention or attn_implementation(cfg.flash_attn)) is not None:  # auto names none: a config.json's own choice stands
        common["attn_implementation"] = implementation
    # validation could not read a hub model's config before it was here; at load, the model's class says whether it has SDPA
    config = AutoConfig.from_pretrained(path, trust_remote_code=cfg.trust_remote_code)
    auto = auto_model_class(config)
    if cfg.flash_attn == "fa2" and (reason := fa2_model_problem(config.to_dict())):
        raise ValueError(reason)
    if cfg.flash_attn == "sdpa" and not getattr(auto._model_mapping.get(type(config), None), "_supports_sdpa", True):
        raise ValueError(sdpa_refusal(config.model_type))
    if cfg.model_init == "random":
        torch.manual_seed(cfg.seed)
        model = auto.from_config(config, dtype=dtype, **common)
        return model.to(device)
    kwargs: dict[str, Any] = dict(dtype=dtype, **common)
    if cfg.method == "qlora":
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=cfg.quantization_bit == 4,
            load_in_8bit=cfg.quantization_bit == 8,
            bnb_4bit_quant_type=cfg.quantization_type,
            bnb_4bit_use_double_quant=cfg.double_quantization,
            bnb_4bit_compute_dtype=compute_dtype(cfg),  # fp32 runs compute in fp32 (fp16 would need loss scaling)
        )
        kwargs["device_map"] = {"": device}
        return auto.from_pretrained(path, **kwargs)
    return auto.from_pretrained(path, **kwargs).to(device)


def auto_model_class(config: Any) -> Any:
    """transformers' Auto class a model loads with: image-text-to-text for the vision families
    ftui trains (their ``*ForConditionalGeneration``), causal LM for every other model."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoModelForSeq2SeqLM

    family = vision_family(getattr(config, "model_type", None))
    if family is not None and "audios" in family.media:  # Qwen2-Audio: LLaMA-Factory's loader takes AutoModelForSeq2SeqLM
        return AutoModelForSeq2SeqLM
    return AutoModelForImageTextToText if family else AutoModelForCausalLM


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's stack of decoder layers: a vision-language model's language model's
    layers; otherwise the longest ModuleList in it."""
    family = family_of(model)
    if family is not None and (layers := language_layers(model, family)) is not None:
        return layers
    best: nn.ModuleList | None = None
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and (best is None or len(module) > len(best)):
            best = module
    if best is None:
        raise ValueError(_("cannot find the decoder layers of this model"))
    return best


def apply_method(model: nn.Module, cfg: RunConfig) -> nn.Module:
    """Marks what trains: everything (full), the last N layers (freeze), or LoRA adapters;
    and NEFTune's noise on the embeddings when it is asked for."""
    model = mark_trainable(model, cfg)
    install_neftune(model, cfg.neftune_noise_alpha)
    return model


def mark_trainable(model: nn.Module, cfg: RunConfig) -> nn.Module:
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    family = family_of(model)
    if cfg.finetuning_type == "full":
        model.requires_grad_(True)
        if family is not None:
            mark_full(model, family, cfg)
        return model
    if cfg.finetuning_type == "freeze" and family is not None:
        mark_freeze(model, family, cfg)
        return model
    if cfg.finetuning_type == "freeze":
        layers = decoder_layers(model)
        if cfg.freeze_trainable_layers > len(layers):
            raise ValueError(_("freeze_trainable_layers={n} but the model has {layers} layers").format(
                n=cfg.freeze_trainable_layers, layers=len(layers)))
        model.requires_grad_(False)
        for layer in list(layers)[-cfg.freeze_trainable_layers :]:
            layer.requires_grad_(True)
        return model
    from peft import get_peft_model

    # Not peft's prepare_model_for_kbit_training for QLoRA: it re-enables gradient
    # checkpointing with reentrant checkpointing and upcasts the embeddings, LM head and norms
    # to fp32 (about 2 GB on an 8B model, which the planner does not count). The base stays
    # frozen in its load dtype, as LLaMA-Factory does; only the adapters are fp32 (below).
    model.requires_grad_(False)
    if cfg.gradient_checkpointing:
        model.enable_input_require_grads()  # checkpointed blocks need an input that requires grad
    targets = lora_target_modules(model, family, cfg) if family is not None else None
    model = get_peft_model(model, lora_config(cfg, targets))
    for p in model.parameters():  # adapters train in fp32 over a half-precision base
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.float()
    return model


def lora_targets(lora_target: str) -> Any:
    """LLaMA-Factory's lora_target as peft's target_modules: "all" is every linear layer but
    the output head (peft's "all-linear", as LLaMA-Factory's find_all_linear_modules);
    otherwise module names, matched as the last part of a module's name, comma separated."""
    names = [t.strip() for t in lora_target.split(",") if t.strip()]
    return "all-linear" if names == ["all"] else names


def lora_config(cfg: RunConfig, target_modules: list[str] | None = None) -> Any:
    """The peft LoraConfig of a run, with LLaMA-Factory's variants: DoRA, rsLoRA, PiSSA's
    initialisation ("pissa" for the exact SVD, "pissa_niter_N" for N fast-SVD iterations) and
    additional_target (modules trained whole and saved beside the adapter). ``target_modules``:
    the modules' full names where the model decides them (a vision-language model's,
    ``ftui.runner.vlm.lora_target_modules``), else ``lora_target``'s."""
    from peft import LoraConfig

    init: Any = True
    if cfg.pissa_init:
        init = "pissa" if cfg.pissa_iter == -1 else f"pissa_niter_{cfg.pissa_iter}"
        # PiSSA's fast SVD is randomised and the base keeps W - (its start): a resume and a
        # checkpoint loaded for chat must rebuild exactly the same start, so seed it here.
        torch.manual_seed(cfg.seed)
    extra = [t.strip() for t in (cfg.additional_target or "").split(",") if t.strip()]
    return LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha or 2 * cfg.lora_rank,
        lora_dropout=cfg.lora_dropout,
        target_modules=target_modules if target_modules is not None else lora_targets(cfg.lora_target),
        use_dora=cfg.use_dora,
        use_rslora=cfg.use_rslora,
        init_lora_weights=init,
        modules_to_save=extra or None,
        task_type="CAUSAL_LM",
    )


def install_neftune(model: nn.Module, alpha: float | None) -> None:
    """NEFTune (Jain et al. 2023, as transformers' Trainer does it): while the model trains,
    the input embeddings get uniform noise in [-m, m], m = alpha / sqrt(L x d) for a batch of
    L positions and hidden size d. In eval mode (evaluation, chat) the hook does nothing."""
    if not alpha:
        return
    embeddings = model.get_input_embeddings()

    def add_noise(module: nn.Module, _inputs: Any, output: torch.Tensor) -> torch.Tensor:
        if not module.training:
            return output
        bound = alpha / math.sqrt(output.size(1) * output.size(2))
        return output + torch.zeros_like(output).uniform_(-bound, bound)

    embeddings.register_forward_hook(add_noise)


def apply_speedups(model: nn.Module, cfg: RunConfig) -> None:
    """Optional kernels, in place: Liger's Triton kernels (RMSNorm, SwiGLU, RoPE; its fused
    linear cross-entropy is called by ftui's own loss hook, ftui.runner.loss, so the model's
    forward is left alone here) and ``torch.compile`` of
    each decoder layer (layer by layer, so FSDP can still wrap the layers and a graph break
    costs one layer, not the model). Validation refuses both where they cannot run."""
    if cfg.enable_liger_kernel and (family := family_of(model)) is not None:
        raise ValueError(_("enable_liger_kernel is not supported for {family} vision-language models yet (Liger's kernels "
                           "for their vision tower are untested in ftui); turn it off").format(family=family.name))
    if cfg.enable_liger_kernel:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        _apply_liger_kernel_to_instance(model=base, cross_entropy=False, fused_linear_cross_entropy=False)
    if cfg.torch_compile:
        for layer in decoder_layers(model):
            layer.compile()


def trained_dtype(model: nn.Module) -> torch.dtype:
    """The dtype of the parameters that train (bf16 for pure_bf16's full and freeze; LoRA's
    adapters and every other run: fp32); fp32 when none train or they differ."""
    dtypes = {p.dtype for p in model.parameters() if p.requires_grad}
    return dtypes.pop() if len(dtypes) == 1 else torch.float32


def count_params(model: nn.Module) -> tuple[int, int]:
    total = trainable = 0
    for p in model.parameters():
        n = p.numel()
        if hasattr(p, "quant_storage") or p.__class__.__name__ == "Params4bit":
            n *= 2  # bitsandbytes packs two 4-bit values per byte element
        total += n
        if p.requires_grad:
            trainable += n
    return total, trainable


def backward_span(model: nn.Module) -> tuple[int, int]:
    """(parameters the backward pass runs through, decoder layers it runs through).

    Backward stops at the first layer with a trainable parameter: with ``freeze`` only the
    top layers (and the LM head above them) see gradients; with full and LoRA every layer."""
    layers = list(decoder_layers(model))
    first = next((i for i, layer in enumerate(layers) if any(p.requires_grad for p in layer.parameters())), len(layers))
    below = sum(p.numel() for layer in layers[:first] for p in layer.parameters())
    return below, len(layers) - first


def flops_per_token(model_config: Any, total: int, trainable: int, seq_len: int,
                    frozen_below: int = 0, backward_layers: int | None = None) -> float:
    """Training FLOPs per token: 2N forward, 2N input-gradients (only above ``frozen_below``,
    the parameters under the first trainable layer, which backward never reaches),
    2N_trainable weight-gradients, plus attention (PaLM's 12·L·H·T: 4 forward, 8 backward,
    the backward part only for the ``backward_layers`` it runs through). Embedding lookups
    are free. A vision-language model's shape is its language model's (``get_text_config``)."""
    if hasattr(model_config, "get_text_config"):
        model_config = model_config.get_text_config()
    vocab = getattr(model_config, "vocab_size", 0) or 0
    hidden = getattr(model_config, "hidden_size", 0) or 0
    layers = getattr(model_config, "num_hidden_layers", 0) or 0
    bw_layers = layers if backward_layers is None else backward_layers
    embed = vocab * hidden
    tied = getattr(model_config, "tie_word_embeddings", False)
    dense = total - (0 if tied else embed)  # the LM head is a matmul; the input embedding is not
    dense_trainable = min(trainable, dense)
    dense_backward = max(0, dense - frozen_below)
    return (2.0 * dense + 2.0 * dense_backward + 2.0 * dense_trainable
            + 4.0 * layers * hidden * seq_len + 8.0 * bw_layers * hidden * seq_len)
