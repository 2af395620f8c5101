"""Vision-language models on the torch side: which family a loaded model belongs to, what
trains in it, where its decoder layers and vision blocks are, and its M-RoPE positions.

What trains is LLaMA-Factory 0.9.5's rule (``model/adapter.py``, ``model/model_utils/visual.py``
and ``misc.py``), re-written: ``freeze_vision_tower`` (default true),
``freeze_multi_modal_projector`` (default true) and ``freeze_language_model`` (default false)
name the parts that never train (``forbidden_keys``: module keys matched as substrings of a
parameter's name, as LLaMA-Factory matches them); ``lora_target: all`` is every linear layer
outside those parts and the projector, so the language model's only unless the vision tower is
unfrozen, and the ``lora_conflict_keys`` (the patch embedding's convolution) are never targets.
The family table (module keys per family) is ``ftui.presets.vision_families``, torch-free.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from ftui.i18n import _
from ftui.presets.vision_families import VisionFamily, vision_family


def base_of(model: nn.Module) -> nn.Module:
    """The transformers model under a peft wrapper (the model itself otherwise)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def family_of(model: nn.Module) -> VisionFamily | None:
    """The vision family of a loaded model (its config's model_type), None for a text model."""
    return vision_family(getattr(getattr(base_of(model), "config", None), "model_type", None))


def freeze_flags(cfg: Any) -> tuple[bool, bool, bool]:
    """(freeze_vision_tower, freeze_multi_modal_projector, freeze_language_model), with
    LLaMA-Factory's defaults where the config has no such key."""
    return (bool(getattr(cfg, "freeze_vision_tower", True)), bool(getattr(cfg, "freeze_multi_modal_projector", True)),
            bool(getattr(cfg, "freeze_language_model", False)))


def forbidden_keys(family: VisionFamily, cfg: Any) -> set[str]:
    """The module keys whose parameters never train (LLaMA-Factory's get_forbidden_modules)."""
    vision, projector, language = freeze_flags(cfg)
    keys: set[str] = set()
    if vision:
        keys.update(family.vision_model_keys)
    if projector:
        keys.update(family.projector_keys)
    if language:
        keys.update(family.language_model_keys)
    return keys


def _named(name: str, keys: set[str] | tuple[str, ...]) -> bool:
    return any(key in name for key in keys)


def mark_full(model: nn.Module, family: VisionFamily, cfg: Any) -> None:
    """full: every parameter trains but those of the frozen parts."""
    forbidden = forbidden_keys(family, cfg)
    for name, param in model.named_parameters():
        param.requires_grad_(not _named(name, forbidden))


def text_layer_count(model: nn.Module) -> int:
    config = base_of(model).config
    return int(getattr(getattr(config, "text_config", config), "num_hidden_layers", 0) or 0)


def mark_freeze(model: nn.Module, family: VisionFamily, cfg: Any) -> None:
    """freeze: the parameters of the last ``freeze_trainable_layers`` layers train, found as
    LLaMA-Factory finds them (``.{index}.`` in the name, the language model's layer count; a
    vision block or projector part of the same index trains too where it is not frozen), plus
    the projector when ``freeze_multi_modal_projector`` is false."""
    layers = text_layer_count(model)
    n = cfg.freeze_trainable_layers
    if n > layers:
        raise ValueError(_("freeze_trainable_layers={n} but the model has {layers} layers").format(n=n, layers=layers))
    trainable = [f".{i}." for i in range(max(0, layers - n), layers)]
    if not freeze_flags(cfg)[1]:
        trainable.extend(family.projector_keys)
    forbidden = forbidden_keys(family, cfg)
    for name, param in model.named_parameters():
        param.requires_grad_(_named(name, trainable) and not _named(name, forbidden))


def linear_names(model: nn.Module, family: VisionFamily, cfg: Any) -> set[str]:
    """``lora_target: all`` as LLaMA-Factory's find_all_linear_modules: the last name part of
    every linear layer outside the output head, the projector and (when frozen) the vision tower."""
    forbidden = {"lm_head", *family.projector_keys}
    if freeze_flags(cfg)[0]:
        forbidden.update(family.vision_model_keys)
    return {name.split(".")[-1] for name, module in model.named_modules()
            if not _named(name, forbidden) and isinstance(module, nn.Linear)}


def lora_target_modules(model: nn.Module, family: VisionFamily, cfg: Any) -> list[str]:
    """The full names of the modules LoRA wraps (LLaMA-Factory's patch_target_modules): every
    module whose name holds one of the targets and none of the frozen parts' keys nor the
    family's lora_conflict_keys. Raises ValueError when that leaves none."""
    names = [t.strip() for t in cfg.lora_target.split(",") if t.strip()]
    targets = linear_names(model, family, cfg) if names == ["all"] else set(names)
    forbidden = forbidden_keys(family, cfg) | set(family.lora_conflict_keys)
    modules = [name for name, _module in model.named_modules() if _named(name, targets) and not _named(name, forbidden)]
    if not modules:
        raise ValueError(_("lora_target {target} names no module of this {family} model outside its frozen parts "
                           "(freeze_vision_tower, freeze_multi_modal_projector, freeze_language_model); "
                           "name the language model's linear layers, or use all").format(
            target=cfg.lora_target, family=family.name))
    return modules


def _longest_list_under(model: nn.Module, keys: tuple[str, ...]) -> nn.ModuleList | None:
    best: nn.ModuleList | None = None
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and _named(name, keys) and (best is None or len(module) > len(best)):
            best = module
    return best


def language_layers(model: nn.Module, family: VisionFamily) -> nn.ModuleList | None:
    """The language model's decoder layers (a vision tower's blocks can outnumber them:
    Qwen2-VL 7B has 32 vision blocks and 28 decoder layers)."""
    return _longest_list_under(model, family.language_model_keys)


def vision_blocks(model: nn.Module) -> nn.ModuleList | None:
    """The vision tower's stack of blocks (FSDP's wrap units beside the decoder layers), None
    for a text model."""
    family = family_of(model)
    if family is None:
        return None
    keys = tuple(k for k in family.vision_model_keys if k.endswith("blocks")) or family.vision_model_keys
    return _longest_list_under(model, keys)


RopeIndex = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def rope_index(model: nn.Module) -> RopeIndex | None:
    """The model's own M-RoPE position function (``get_rope_index``: the ``model.`` module's
    in transformers 5, the top's in older ones), as LLaMA-Factory's collator finds it."""
    base = base_of(model)
    for owner in (base, getattr(base, "model", None)):
        if owner is not None and hasattr(owner, "get_rope_index"):
            return owner.get_rope_index
    return None
