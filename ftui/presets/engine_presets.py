"""Engine presets: one readable JSON file per engine in ``ftui/presets/engines/``.

Each file has an ``ftui`` section (what it is, when to use it, which backend runs it). The
DeepSpeed presets are otherwise ordinary DeepSpeed configs, with ``"auto"`` where the value
comes from the RunConfig (micro batch, accumulation, clipping, precision), as in
LLaMA-Factory's and transformers' DeepSpeed files; a user can copy one, edit it and pass it
as ``deepspeed: path.json``. No torch here: the form and ``ftui presets`` read these too.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ftui.safety.bounded_input import load_json
from ftui.i18n import N_, _
from ftui.rundir.paths import ENGINE_PRESETS_DIR

PRESET_DIR = ENGINE_PRESETS_DIR

# The order `ftui presets` and the form list them: from least to most memory-saving.
PRESET_NAMES = (
    "single", "ddp", "fsdp", "fsdp_offload", "zero0", "zero1", "zero2", "zero2_offload", "zero3", "zero3_offload",
)
# What to try next when a preset runs out of memory (used in out-of-memory hints).
MORE_MEMORY_SAVING = {
    "single": "zero3_offload", "ddp": "zero2", "zero0": "zero2", "zero1": "zero2", "zero2": "zero3",
    "fsdp": "fsdp_offload", "zero2_offload": "zero3_offload", "zero3": "zero3_offload",
}
# pure_bf16 is refused under DeepSpeed (its optimizer keeps fp32 master weights): the torch
# engines' own next step instead
MORE_MEMORY_SAVING_PURE_BF16 = {"single": "fsdp_offload", "ddp": "fsdp", "fsdp": "fsdp_offload"}


def more_memory_saving(engine: str, pure_bf16: bool = False) -> str | None:
    """The preset that saves more GPU memory than ``engine`` (None: none does), one that can
    run the config's precision."""
    return (MORE_MEMORY_SAVING_PURE_BF16 if pure_bf16 else MORE_MEMORY_SAVING).get(engine)


@lru_cache(maxsize=None)
def _read(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(_("{path}: expected a JSON object").format(path=path))
    return data


def preset_path(name: str) -> Path:
    return PRESET_DIR / f"{name}.json"


def load_preset(name: str) -> dict[str, Any]:
    """The preset file as a fresh dict (callers may change it)."""
    return copy.deepcopy(_read(str(preset_path(name))))


@dataclass(frozen=True)
class EngineSpec:
    """What an engine is, read from its preset file's ``ftui`` section (or a user's DeepSpeed
    file): every decision that depends on the engine asks this, never the engine's name."""

    name: str
    backend: str  # "torch" or "deepspeed": which library runs it
    strategy: str  # "single", "ddp", "fsdp" or "deepspeed": the runner's engine class
    min_processes: int = 1  # sharding presets are pointless (refused) with one process
    zero_stage: int | None = None  # DeepSpeed's ZeRO stage
    host_optimizer: bool = False  # the optimizer steps on the CPU (FSDP CPU offload, ZeRO optimizer offload)

    @property
    def deepspeed(self) -> bool:
        return self.backend == "deepspeed"

    @property
    def fsdp(self) -> bool:
        return self.strategy == "fsdp"

    @property
    def shards_parameters(self) -> bool:
        """Each rank holds only a shard of the weights (FSDP, ZeRO-3): the model is built on
        the CPU and sharded from there, and cannot be quantized (QLoRA)."""
        return self.fsdp or self.zero_stage == 3


def spec_from(name: str, data: dict[str, Any]) -> EngineSpec:
    meta = data.get("ftui") or {}
    zero = data.get("zero_optimization") or {}
    deepspeed = meta.get("backend", "deepspeed") == "deepspeed"
    offload = (zero.get("offload_optimizer") or {}).get("device") in ("cpu", "nvme") or bool((data.get("fsdp") or {}).get("cpu_offload"))
    return EngineSpec(
        name=name, backend="deepspeed" if deepspeed else "torch",
        strategy="deepspeed" if deepspeed else meta.get("strategy", "single"),
        min_processes=int(meta.get("min_processes", 1)),
        zero_stage=int(zero.get("stage", 0)) if deepspeed else None, host_optimizer=offload,
    )


def engine_spec(name: str) -> EngineSpec:
    """The spec of a shipped preset."""
    return spec_from(name, _read(str(preset_path(name))))


def is_deepspeed(name: str) -> bool:
    return engine_spec(name).deepspeed


# Presets that shard across processes and are pointless (refused) with one process.
NEEDS_SEVERAL = tuple(n for n in PRESET_NAMES if engine_spec(n).min_processes > 1)


# The presets' "description" and "when" texts as the JSON files hold them, marked here so that
# the catalog extracts them (a test checks that they equal the files'); describe() translates them.
PRESET_TEXTS = {
    'ddp': (N_("DistributedDataParallel: a full copy of the model per GPU, gradients averaged"),
        N_("the single preset fits one GPU and you have several: fastest multi-GPU engine, nothing is sharded")),
    'fsdp': (N_("FSDP2 (fully_shard per decoder layer): parameters, gradients and optimizer states sharded over the GPUs"),
        N_("full fine-tuning of a model that does not fit one GPU (e.g. 7-13B on 8x80 GB); needs 2+ processes")),
    'fsdp_offload': (N_("FSDP2 with CPUOffloadPolicy: shards live in host memory, the optimizer steps on the CPU"),
        N_("fsdp still runs out of GPU memory and the host has RAM to spare; slower (PCIe traffic every step)")),
    'single': (N_("one process on one device: the simplest"),
        N_("the model, its gradients and AdamW states fit one GPU (LoRA of a 7B model on a 24 GB GPU, full fine-tuning up to about 1B)")),
    'zero0': (N_("DeepSpeed without ZeRO: data parallel like ddp, DeepSpeed's loss scaling and engine"),
        N_("you want DeepSpeed's engine (or its JSON) but nothing sharded; otherwise prefer ddp")),
    'zero1': (N_("DeepSpeed ZeRO-1: optimizer states sharded over the GPUs"),
        N_("ddp almost fits: AdamW's two fp32 states (8 bytes per trainable parameter) are the largest item; needs 2+ processes")),
    'zero2': (N_("DeepSpeed ZeRO-2: optimizer states and gradients sharded"),
        N_("full fine-tuning of 1-7B models on several GPUs: little extra communication over ddp; needs 2+ processes")),
    'zero2_offload': (N_("DeepSpeed ZeRO-2 with the optimizer (states and step) offloaded to host memory"),
        N_("zero2 runs out of GPU memory and the host has about 12 bytes of RAM per trainable parameter; slower optimizer step")),
    'zero3': (N_("DeepSpeed ZeRO-3: parameters, gradients and optimizer states sharded"),
        N_("the model itself does not fit one GPU (full fine-tuning of 7B+): memory per GPU falls with the GPU count; needs 2+ processes")),
    'zero3_offload': (N_("DeepSpeed ZeRO-3 with parameters and optimizer offloaded to host memory"),
        N_("the largest model for the GPUs you have (e.g. full fine-tuning of 7B on one 24 GB GPU), when speed matters less than fitting")),
}


def describe(name: str) -> tuple[str, str]:
    """(what it is, when to use it) for one preset, in the current language."""
    meta = _read(str(preset_path(name)))["ftui"]
    what, when = meta["description"], meta["when"]  # English as in the file; PRESET_TEXTS marks them for the catalog
    return _(what), _(when)


MAX_DEEPSPEED_BYTES = 1 << 20


def read_user_deepspeed(path: str) -> dict[str, Any]:
    """A user's DeepSpeed JSON (LLaMA-Factory's ``deepspeed:`` key); raises ValueError with
    a message a user can act on."""
    from ftui.rundir.run_files import read_at, UnreadableFile

    p = Path(path).expanduser()
    try:
        raw = read_at(p, 0, MAX_DEEPSPEED_BYTES + 1)
    except UnreadableFile as err:
        raise ValueError(_("cannot read the DeepSpeed config: {error}").format(error=err)) from None
    if raw is None:
        raise ValueError(_("cannot read the DeepSpeed config: {error}").format(error=_("no such file")))
    if len(raw) > MAX_DEEPSPEED_BYTES:
        raise ValueError(_("the DeepSpeed config is over {size} KiB; a DeepSpeed JSON is a few hundred bytes").format(
            size=MAX_DEEPSPEED_BYTES >> 10))
    try:
        data = load_json(raw.decode("utf-8", errors="replace"))
    except ValueError as err:  # json.JSONDecodeError, or nested past the stack (JSONTooDeep)
        raise ValueError(_("the DeepSpeed config is not valid JSON: {error}").format(error=err)) from None
    if not isinstance(data, dict):
        raise ValueError(_("the DeepSpeed config must be a JSON object"))
    stage = (data.get("zero_optimization") or {}).get("stage", 0)
    if stage not in (0, 1, 2, 3):
        raise ValueError(_("zero_optimization.stage must be 0-3, not {stage}").format(stage=repr(stage)))
    return data


def fill_deepspeed(ds: dict[str, Any], *, micro_batch: int, accumulation: int, world_size: int, max_grad_norm: float,
                   precision: str, hidden_size: int | None = None) -> dict[str, Any]:
    """Replaces every ``"auto"`` with the RunConfig's value (as transformers' HfDeepSpeedConfig
    does), drops ftui's own section, and turns precision on or off to match the run."""
    out = copy.deepcopy(ds)
    out.pop("ftui", None)
    values = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": accumulation,
        "train_batch_size": micro_batch * accumulation * world_size,
        "gradient_clipping": max_grad_norm,
    }
    for key, value in values.items():
        if out.get(key, "auto") == "auto":
            out[key] = value
    for key in ("bf16", "fp16"):
        section = out.setdefault(key, {})
        if section.get("enabled", "auto") == "auto":
            section["enabled"] = precision == key
    zero = out.setdefault("zero_optimization", {"stage": 0})
    h = hidden_size or 1024
    zero_auto = {
        "reduce_bucket_size": h * h,
        "stage3_prefetch_bucket_size": int(0.9 * h * h),
        "stage3_param_persistence_threshold": 10 * h,
    }
    for key, value in zero_auto.items():
        if zero.get(key) == "auto":
            zero[key] = value
    for section in ("optimizer", "scheduler"):
        for k, v in list((out.get(section) or {}).get("params", {}).items()):
            if v == "auto":
                out[section]["params"].pop(k)  # filled from the RunConfig by the runner
    return out


def deepspeed_precision(ds: dict[str, Any]) -> str | None:
    """The precision a (filled or user) DeepSpeed config asks for, if it fixes one."""
    for key in ("bf16", "fp16"):
        if (ds.get(key) or {}).get("enabled") is True:
            return key
    return None
