"""Will it fit: the planner's verdict for a config on its GPUs (``plan``), the estimate
(``ftui.plan.planner``) against the smallest GPU's memory, and the changes that would make it fit
(``what_fits``), for the launch form and ``ftui plan``. No torch here; NVML is read (in
``ftui.machine.gpu``) only when the caller gives no GPU size.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from ftui.i18n import _
from ftui.plan.model_shape import ModelShape, read_model_config
from ftui.plan.planner import Estimate, estimate_for, gib
from ftui.plan.vision_activations import image_load
from ftui.presets.engine_presets import NEEDS_SEVERAL, more_memory_saving


@dataclass
class Verdict:
    estimate: Estimate
    gpu_bytes: int | None  # the smallest GPU's memory; None: no GPU known
    suggestions: list[str]

    @property
    def fits(self) -> bool | None:
        return None if self.gpu_bytes is None else self.estimate.needed <= self.gpu_bytes

    def short(self, unit: str = "GPU") -> tuple[str, str]:
        """Two short lines for the launch form: the split, and the verdict with the best fix."""
        e = self.estimate
        split = _("~{total}/{unit}: weights {weights} · grads {gradients} · optimizer {optimizer} · activations {activations}").format(
            total=gib(e.total), unit=unit, weights=gib(e.weights), gradients=gib(e.gradients), optimizer=gib(e.optimizer),
            activations=gib(e.activations))
        if e.host_bytes:
            split += " · " + _("host {size}").format(size=gib(e.host_bytes))
        if self.fits is None:
            return split, ""
        needs = _("needs ~{size} incl. {overhead}").format(size=gib(e.needed), overhead=e.overhead.brief())
        gpus = gib(self.gpu_bytes or 0)
        if self.fits:
            return split, _("fits {size} GPUs ({needs})").format(size=gpus, needs=needs)
        fix = (_("; try {change} (ftui plan lists more)").format(change=self.suggestions[0]) if self.suggestions
               else _("; more or larger GPUs needed"))
        return split, _("does NOT fit {size} GPUs ({needs})").format(size=gpus, needs=needs) + fix

    def summary(self) -> str:
        e = self.estimate
        head = _("about {size} per GPU ({split})").format(size=gib(e.total), split=e.split())
        if e.host_bytes:
            head += _("; {size} per process in host memory (offload)").format(size=gib(e.host_bytes))
        if self.fits is None:
            return head + _("; no GPU seen: nothing to compare with")
        needs = _("needs ~{size} with {overhead}").format(size=gib(e.needed), overhead=e.overhead.describe())
        gpus = gib(self.gpu_bytes or 0)
        if self.fits:
            return head + _("; fits {size} GPUs ({needs})").format(size=gpus, needs=needs)
        tail = (_("; try {changes}").format(changes=_("; or ").join(self.suggestions)) if self.suggestions
                else _("; nothing ftui offers makes it fit: use more or larger GPUs"))
        return head + _("; does NOT fit {size} GPUs ({needs})").format(size=gpus, needs=needs) + tail


def what_fits(cfg: Any, shape: ModelShape, gpu_bytes: int, limit: int = 3, compute_major: int | None = None,
              images: Any = None) -> list[str]:
    """Changes that make the run fit, least disruptive first: every combination of a more
    memory-saving engine, a smaller micro batch (same effective batch), gradient
    checkpointing, LoRA/QLoRA and, where attention is eager (``flash_attn: disabled``), SDPA
    is estimated (a few hundred estimates, microseconds each)
    and ranked by how much it changes the run. ``images``: a vision-language run's example
    (``ftui.plan.vision_activations.image_load``, read once by the caller; None: read here)."""
    if images is None and shape.vision.depth:
        images = image_load(cfg, shape.vision)
    engines: list[tuple[str | None, int]] = [(None, 0)]
    engine, seen = (None if cfg.deepspeed else cfg.engine), set()
    pure = bool(getattr(cfg, "pure_bf16", False))
    while more_memory_saving(engine, pure) not in (None, *seen):
        engine = more_memory_saving(engine, pure)
        seen.add(engine)
        if not (engine in NEEDS_SEVERAL and cfg.world_size == 1):
            engines.append((engine, len(engines)))
    batches = [(cfg.per_device_train_batch_size, 0)]
    while batches[-1][0] > 1:
        batches.append((batches[-1][0] // 2, len(batches)))
    ckpts = [(cfg.gradient_checkpointing, 0)] + ([(True, 1)] if not cfg.gradient_checkpointing else [])
    methods = [(cfg.method, 0)]
    if cfg.method == "full":
        methods.append(("lora", 3))
    if cfg.method in ("full", "lora") and cfg.precision != "fp32":
        methods.append(("qlora", 4))
    # eager attention (flash_attn: disabled) keeps every layer's softmax; SDPA computes the same
    # (where it can compute this model's attention at all)
    attentions = [(cfg.flash_attn, 0)] + ([("auto", 1)] if cfg.flash_attn == "disabled" and shape.sdpa else [])
    found: list[tuple[int, bool, float, str]] = []
    for (eng, c1), (mb, c2), (ck, c3), (method, c4), (attn, c5) in itertools.product(engines, batches, ckpts, methods, attentions):
        cost = c1 + c2 + c3 + c4 + c5
        if cost == 0:
            continue
        over: dict[str, Any] = {"per_device_train_batch_size": mb, "gradient_checkpointing": ck, "method": method,
                                "flash_attn": attn, "images": images}
        if eng:
            over["engine"] = eng
        e = estimate_for(cfg, shape, compute_major, **over)
        if e.needed > gpu_bytes:
            continue
        parts = []
        if attn != cfg.flash_attn:
            parts.append("flash_attn: auto")  # key names and values: not translated
        if eng:
            parts.append(f"engine {eng}")
        if mb != cfg.per_device_train_batch_size:
            accum = cfg.gradient_accumulation_steps * cfg.per_device_train_batch_size // mb
            parts.append(_("per_device_train_batch_size {micro_batch} with gradient_accumulation_steps {accumulation}").format(
                micro_batch=mb, accumulation=accum))
        if ck and not cfg.gradient_checkpointing:
            parts.append("gradient_checkpointing: true")
        if method != cfg.method:
            parts.append("finetuning_type lora" if method == "lora" else "QLoRA (finetuning_type lora, quantization_bit 4)")
        # at equal cost, SDPA for eager attention first: the same result, no slower
        found.append((cost, attn == cfg.flash_attn, e.total, " + ".join(parts) + f" (~{gib(e.total)})"))
    found.sort()
    return [text for _cost, _same_attention, _total, text in found[:limit]]


def plan(cfg: Any, gpu_bytes: int | None = None, compute_major: int | None = None) -> Verdict:
    """The estimate for ``cfg`` and, against ``gpu_bytes`` (default: the smallest of the GPUs
    its processes use: its ``gpus``, else the first CUDA_VISIBLE_DEVICES leaves), whether it fits and what would. ``compute_major`` (default: the
    oldest of those GPUs, from NVML) sizes NCCL's buffers. Raises UnknownModel when
    config.json is missing."""
    shape = ModelShape.from_config(read_model_config(cfg.model_name_or_path))
    if getattr(cfg, "device", "auto") != "cpu":  # a CPU run is not compared with GPUs
        from ftui.machine.gpu import compute_capabilities, sample_gpus

        picked = getattr(cfg, "gpus", None)  # the run's own GPUs, else those CUDA_VISIBLE_DEVICES leaves
        if gpu_bytes is None:
            totals = [g.mem_total for g in sample_gpus(picked)[:cfg.nproc_per_node]]
            gpu_bytes = min(totals) if totals else None
        if compute_major is None:
            majors = [major for _gpu, (major, _minor) in compute_capabilities(cfg.nproc_per_node, picked)]
            compute_major = min(majors) if majors else None
    images = image_load(cfg, shape.vision) if shape.vision.depth else None  # the dataset's first images, read once
    e = estimate_for(cfg, shape, compute_major, images=images)
    suggestions = (what_fits(cfg, shape, gpu_bytes, compute_major=compute_major, images=images)
                   if gpu_bytes is not None and e.needed > gpu_bytes else [])
    return Verdict(e, gpu_bytes, suggestions)
