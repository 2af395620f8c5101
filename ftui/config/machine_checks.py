"""The checks of a config against this machine: its GPUs (how many a run's pick has, which
compute bf16 and FlashAttention-2), the optional packages a setting needs (bitsandbytes,
liger-kernel, DeepSpeed, tensorboard, wandb) and torch's version.

Each takes the one snapshot of the machine a validation reads (ftui.machine.facts), never
NVML or the import system itself, so every check of one validation sees the same machine and
the launch form and ``ftui train`` see the same facts. A run's own saved config is never
checked here: chat, predict, eval and export read it with its schema alone, on any machine.
"""

from __future__ import annotations

import importlib.util

from ftui.config.problems import FieldProblem
from ftui.config.schema import BNB_OPTIMIZERS, RunConfig
from ftui.i18n import _
from ftui.machine.facts import MachineFacts
from ftui.machine.gpu_picks import GPU_LIST
from ftui.presets.engine_presets import engine_spec

# the first torch with torch.nn.attention.varlen (FlashAttention-2 over cumulative sequence lengths)
VARLEN_TORCH = (2, 10)
DEEPSPEED_HINT = "pip install 'ftui[deepspeed]'"


def quantization_problems(cfg: RunConfig, facts: MachineFacts) -> list[FieldProblem]:
    """QLoRA (quantization_bit with lora) needs bitsandbytes and a CUDA GPU here."""
    if cfg.quantization_bit is None or cfg.finetuning_type != "lora":
        return []
    reason = qlora_unavailable_reason(facts)
    if not reason:
        return []
    return [FieldProblem("quantization_bit", cfg.quantization_bit, _("QLoRA is not possible here: {reason}; use finetuning_type lora without quantization_bit").format(reason=reason))]


def qlora_unavailable_reason(facts: MachineFacts) -> str | None:
    """Why QLoRA cannot run on this machine (None when bitsandbytes and a CUDA GPU are there)."""
    if not facts.this_machine:
        return None
    if not facts.has("bitsandbytes"):
        return _("bitsandbytes is not installed (pip install 'ftui[qlora]')")
    if facts.visible_gpus == 0:
        return _("no CUDA GPU was found")
    return None


def deepspeed_problems(cfg: RunConfig, facts: MachineFacts) -> list[FieldProblem]:
    """A DeepSpeed engine (a zero* preset or a user's DeepSpeed JSON) without the deepspeed
    package: refused before the run, with the extra to install (at step 0 it would fail with a
    bare ModuleNotFoundError)."""
    if not cfg.uses_deepspeed or not facts.this_machine or facts.has("deepspeed"):
        return []
    field, value = ("deepspeed", cfg.deepspeed) if cfg.deepspeed else ("engine", cfg.engine)
    return [FieldProblem(field, value, _("the {engine} engine runs on DeepSpeed, which is not installed: {hint}, or use engine "
                                         "single, ddp or fsdp").format(engine=cfg.engine_name, hint=DEEPSPEED_HINT))]


def gpu_pick_problems(cfg: RunConfig, facts: MachineFacts) -> list[FieldProblem]:
    """``gpus``: written as CUDA_VISIBLE_DEVICES takes it (CUDA silently drops what follows a
    bad entry, and hides every GPU when one is named twice), each GPU on this machine when
    NVML can tell, and one GPU per process of this node."""
    if cfg.gpus is None:
        return []
    if cfg.device == "cpu":
        return [FieldProblem("gpus", cfg.gpus, _("a CPU run (device: cpu) uses no GPU; leave gpus empty or set device: auto"))]
    if not GPU_LIST.fullmatch(cfg.gpus):
        return [FieldProblem("gpus", cfg.gpus, _("expected nvidia-smi's GPU numbers separated by commas (0,1) or GPU-/MIG- UUID prefixes"))]
    entries = cfg.gpus.split(",")
    twice = sorted({e for e in entries if entries.count(e) > 1})
    if twice:
        return [FieldProblem("gpus", cfg.gpus, _("GPU {gpu} is named twice (CUDA would then show no GPU at all)").format(gpu=twice[0]))]
    out = []
    machine = facts.machine_gpus if facts.this_machine else 0
    found = facts.visible_gpus if machine else 0  # the snapshot is taken for this pick (MachineFacts.gather)
    if machine and found < len(entries):
        numbers = f"0-{machine - 1}" if machine > 1 else "0"
        out.append(FieldProblem("gpus", cfg.gpus, _("GPU {gpu} is not on this machine (nvidia-smi numbers its {n} GPU(s) {numbers})").format(
            gpu=entries[found], n=machine, numbers=numbers)))
    if cfg.nproc_per_node > len(entries):
        out.append(FieldProblem("nproc_per_node", cfg.nproc_per_node,
                                _("{n} processes need a GPU each, but gpus picks {picked} ({gpus}): lower nproc_per_node to "
                                  "{picked} or pick more GPUs").format(n=cfg.nproc_per_node, picked=len(entries), gpus=cfg.gpus)))
    return out


def runs_without_gpu(cfg: RunConfig, facts: MachineFacts) -> bool:
    """device cpu, or auto on a machine whose NVML sees no GPU (among ``gpus``)."""
    return cfg.device == "cpu" or (cfg.device == "auto" and not facts.gpu_present)


def device_problems(cfg: RunConfig, facts: MachineFacts) -> list[FieldProblem]:
    """device cuda without a GPU, fp16 without one, bf16 on GPUs that only emulate it, and
    Liger's GPU kernels (on the CPU, or not installed)."""
    out: list[FieldProblem] = []
    if cfg.device == "cuda" and not facts.gpu_present:
        out.append(FieldProblem("device", cfg.device, _("no CUDA GPU was found on this machine (NVML sees none); use device: auto "
                                                        "(the CPU when there is no GPU) or cpu")))
    elif cfg.precision == "fp16" and runs_without_gpu(cfg, facts):
        out.append(FieldProblem("fp16", True, _("fp16 needs a CUDA GPU and none was found; for a CPU run use bf16 (CPU autocast "
                                                "supports it) or fp32") if cfg.device == "auto" else
                                _("fp16 needs a CUDA GPU; for a CPU run use bf16 (CPU autocast supports it) or fp32")))
    old = facts.pre_ampere  # among the GPUs this node's ranks use; no GPU seen: None (a CPU run does bf16 through autocast)
    if cfg.precision == "bf16" and cfg.device != "cpu" and old is not None:
        reason = _("{gpu} has compute capability {major}.{minor}; bf16 needs 8.0 (Ampere) or newer").format(gpu=old[0], major=old[1], minor=old[2])
        out.append(FieldProblem("pure_bf16" if cfg.pure_bf16 and not cfg.bf16 else "bf16", True, _("{reason} (older GPUs only emulate it, many times slower); "
                                                "use fp16 (with loss scaling) or fp32, or other GPUs (gpus)").format(reason=reason)))
    if cfg.enable_liger_kernel:
        if cfg.device == "cpu":
            out.append(FieldProblem("enable_liger_kernel", True, _("Liger's kernels are Triton GPU kernels; turn it off for a CPU run")))
        elif facts.this_machine and not facts.has("liger_kernel"):
            out.append(FieldProblem("enable_liger_kernel", True, _("liger-kernel is not installed: pip install liger-kernel, or turn it off")))
    return out


def flash_attn_problems(cfg: RunConfig, facts: MachineFacts) -> list[FieldProblem]:
    """flash_attn fa2 needs what torch's varlen FlashAttention-2 kernel needs: a CUDA GPU of
    compute capability 8.0 or newer, half-precision attention and torch >= 2.10 (read from its
    metadata: no torch import here); fa3 (the flash-attn 3 package in LLaMA-Factory) is not one
    ftui has. The model itself is checked by attention_model_problems, beside the other checks of its config."""
    if cfg.flash_attn == "fa3":
        return [FieldProblem("flash_attn", "fa3", _("ftui has no FlashAttention-3 kernel (LLaMA-Factory's fa3 needs the flash-attn 3 package); "
                                                    "use fa2 (torch's built-in FlashAttention-2) or sdpa"))]
    if cfg.flash_attn != "fa2":
        return []
    if runs_without_gpu(cfg, facts):
        return [FieldProblem("flash_attn", "fa2", _("FlashAttention-2 runs on CUDA GPUs only and none is used here; use flash_attn: auto (SDPA) for a CPU run"))]
    if cfg.precision == "fp32":
        return [FieldProblem("flash_attn", "fa2", _("FlashAttention-2 computes in bf16 or fp16; turn on bf16 (or pure_bf16, fp16), or use flash_attn: auto for an fp32 run"))]
    old = facts.pre_ampere  # among the GPUs this node's ranks use
    if old is not None:
        return [FieldProblem("flash_attn", "fa2", _("{gpu} has compute capability {major}.{minor}; FlashAttention-2 needs 8.0 (Ampere) "
                                                    "or newer; use flash_attn: auto (SDPA)").format(gpu=old[0], major=old[1], minor=old[2]))]
    installed = facts.torch_version if facts.this_machine else None
    if installed is not None and installed < VARLEN_TORCH:
        return [FieldProblem("flash_attn", "fa2", _("fa2 uses torch's varlen FlashAttention-2 kernel, which needs torch >= 2.10 (installed: {version}); "
                                                    "upgrade torch, or use flash_attn: auto").format(version=".".join(map(str, installed))))]
    return []


def optimizer_problems(cfg: RunConfig, facts: MachineFacts) -> list[FieldProblem]:
    """bitsandbytes' optimizers on a GPU run with an unsharded engine (ftui.config.rules says the
    rest): bitsandbytes and a CUDA GPU must be here."""
    if cfg.optim not in BNB_OPTIMIZERS or cfg.device == "cpu" or cfg.deepspeed or engine_spec(cfg.engine).shards_parameters:
        return []
    reason = qlora_unavailable_reason(facts)
    if not reason:
        return []
    return [FieldProblem("optim", cfg.optim, _("{optim} is not possible here: {reason}; or use adamw_torch / adamw_torch_fused").format(optim=cfg.optim, reason=reason))]


REPORTERS = ("tensorboard", "wandb")  # what report_to can name besides none and all


def reporter_names(report_to: str | list[str] | None) -> list[str]:
    """report_to as a list of names, as LLaMA-Factory (transformers) takes it: a name, names
    separated by commas, or a list; none (or empty) is no reporter, all is every one ftui has
    whose package is installed."""
    items = report_to if isinstance(report_to, list) else str(report_to or "").split(",")
    names = [str(n).strip().lower() for n in items if str(n).strip()]
    if "all" in names:
        names = [n for n in ("tensorboard", "wandb") if importlib.util.find_spec(n) is not None]
    return [n for n in dict.fromkeys(names) if n != "none"]


def report_to_problems(cfg: RunConfig, facts: MachineFacts) -> list[FieldProblem]:
    """report_to names that ftui cannot mirror to, each by name, and tensorboard or wandb without its package."""
    names = reporter_names(cfg.report_to)
    unknown = [n for n in names if n not in REPORTERS]
    if unknown:
        return [FieldProblem("report_to", cfg.report_to, _("ftui cannot report to {names}: it mirrors the figures to tensorboard and wandb "
                                                           "(or none; events.jsonl always has them)").format(names=", ".join(unknown)))]
    for name, other in (("tensorboard", "wandb"), ("wandb", "tensorboard")):  # each needs its package
        if name in names and not facts.has(name):
            return [FieldProblem("report_to", cfg.report_to, _("{name} is not installed: pip install {name} (or pip install "
                                                               "'ftui[{name}]'), or report to {other} or none").format(name=name, other=other))]
    return []


def gpu_run_on_cpu(cfg: RunConfig) -> tuple[RunConfig, str | None]:
    """A run's config as a job (chat, predict, eval, export) runs it on a machine without a GPU,
    and the one line that says so (None when the config asks for no GPU).

    A run trained on a GPU names it (device cuda, gpus) and may compute in fp16, which only a
    GPU computes fast and well: torch has no fast fp16 matrix products on the CPU and ftui's own
    rules refuse fp16 for a CPU run. Its weights (fp32 masters, or half weights cast up exactly)
    run in fp32 instead, the precision fp16 approximates. bf16 is kept: torch computes it on
    every CPU (natively with AVX512-BF16 or AMX, else through fp32), a CPU training run may use
    it, and it is what a bf16 run was trained and evaluated in. The GPU-only kernels (fa2,
    Liger) give way to their CPU forms."""
    if not (cfg.device == "cuda" or cfg.gpus is not None or cfg.fp16 or cfg.flash_attn == "fa2" or cfg.enable_liger_kernel):
        return cfg, None
    cpu = cfg.model_copy(update={"device": "cpu", "gpus": None, "fp16": False, "enable_liger_kernel": False,
                                 "flash_attn": "auto" if cfg.flash_attn == "fa2" else cfg.flash_attn})
    return cpu, _("this run was set up for a GPU (device {device}, {precision}) and this machine has none: it runs on the CPU "
                  "in {cpu_precision}").format(device=cfg.device, precision=cfg.precision_label, cpu_precision=cpu.precision_label)
