"""How a run lays out its micro batches, and which attention reads them.

A micro batch is either padded rows (each example, or packed row, padded to the longest) or
one padding-free row (``padding_free``: the examples end to end, each with its own positions
and attending to itself alone; ``ftui.runner.data.Collator``). Both give the same losses:
padding-free only leaves out the padding's compute, which in a padded SFT batch of examples of
varied lengths is often a third of it. Where rows hold several examples (padding-free, packed
SFT rows) the attention must keep them apart: torch's FlashAttention-2 varlen kernel with
``flash_attn: fa2``; on the CPU, SDPA over each example alone (``ftui.runner.attention``,
``ftui_sdpa``); elsewhere SDPA with the block-diagonal mask transformers builds from the
position ids.

Decided once at the start of a training run, from the config, the model's config.json, the
stage's description and the device, and written in ``run_start`` (``padding_free`` and why).
``padding_free`` unset is on where it is exact and fast: stages whose rows are independent
token sequences (sft, pt), decoder-only text models with rotary positions
(``ftui.config.model_checks.padding_free_model_problem``), on the CPU or with fa2. On CUDA
without fa2 it stays off by default: SDPA would compute every query of the joined row against
every key through a mask. ``padding_free: true`` turns it on wherever it is exact.

Vision-language models (``ftui.presets.vision_families``) take padded rows: their M-RoPE
positions are computed per row from its images (``ftui.runner.media_batch``), so padding_free
is off for them, and asking for it is refused by name. Packed rows are padded rows too
(``ftui.runner.media_packing``: each example's positions, a block mask between examples),
except for Gemma 3, whose own attention mask (its images attended both ways, its
sliding-window layers) a packed row's mask would replace: packing is refused by name there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ftui.config.media_checks import vision_packing_problem
from ftui.config.model_checks import padding_free_model_problem
from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.presets.vision_families import vision_family
from ftui.runner.attention import attn_implementation
from ftui.stages import describe


@dataclass(frozen=True)
class BatchLayout:
    padding_free: bool
    why: str  # why padding-free is on or off, for run_start
    sequence_lengths: bool  # batches carry their sequences' lengths: attention runs each example alone
    attn_implementation: str | None  # what the model is loaded with (None: the config.json's own choice)


def batch_layout(cfg: RunConfig, model: dict[str, Any], device_type: str) -> BatchLayout:
    """The layout of a training run on ``device_type`` ("cpu", "cuda") for a model whose
    config.json is ``model``. Raises ValueError for ``padding_free: true`` where it would not
    be exact (a hub model, whose config validation could not read)."""
    stage = describe(cfg.stage)
    problem = padding_free_model_problem(model)
    family = vision_family(model.get("model_type"))
    if family is not None:
        return vision_layout(cfg, family.name)
    if cfg.padding_free is False:
        on, why = False, _("padding_free: false")
    elif not stage.padding_free:
        on, why = False, _("stage {stage} reads each row as a whole").format(stage=cfg.stage)
    elif problem is not None:
        if cfg.padding_free:
            raise ValueError(problem)
        on, why = False, problem
    elif cfg.padding_free:
        on, why = True, _("padding_free: true")
    elif cfg.flash_attn == "disabled":
        on, why = False, _("flash_attn disabled: eager attention would compute the whole joined row through a mask; "
                           "padding_free: true turns it on")
    elif device_type != "cpu" and cfg.flash_attn != "fa2":
        on, why = False, _("on a GPU without flash_attn fa2, SDPA would compute the whole joined row through a mask; "
                           "set flash_attn: fa2 (or padding_free: true)")
    else:
        on, why = True, _("on by default: each example attends to itself alone, no padding is computed")
    several = on or bool(cfg.packing and stage.padding_free)  # rows that hold several examples (or running text)
    if cfg.flash_attn == "fa2":
        return BatchLayout(on, why, True, attn_implementation("fa2"))
    per_example = several and device_type == "cpu" and problem is None and cfg.flash_attn in ("auto", "sdpa")
    return BatchLayout(on, why, per_example, attn_implementation(cfg.flash_attn, per_example=per_example))


def vision_layout(cfg: RunConfig, family: str) -> BatchLayout:
    """Padded rows for a vision-language model (packed ones with ``packing``): each row's M-RoPE
    positions follow its own images, which rows laid end to end (padding_free) would mix."""
    if cfg.padding_free:
        raise ValueError(_("padding_free is not supported for {family} vision-language models yet: their M-RoPE positions are "
                           "computed per row from its images; set padding_free false").format(family=family))
    if (cfg.packing or cfg.neat_packing) and (problem := vision_packing_problem(family, cfg)) is not None:
        raise ValueError(problem)
    if "_vl" in family:  # Qwen2-VL, Qwen2.5-VL, Qwen3-VL (Qwen2-Audio has no M-RoPE)
        why = _("{family} is a vision-language model: its M-RoPE positions are computed per padded row").format(family=family)
    else:  # LLaVA, Gemma 3, InternVL: no M-RoPE, but each row's images (and Gemma 3's token types) go with it
        why = _("{family} is a vision-language model: its rows are collated padded, each with its own images").format(family=family)
    return BatchLayout(False, why, False, attn_implementation(cfg.flash_attn))  # fa2 is refused at load (fa2_model_problem)

