"""The engine interface, and the single-device engine every other engine refines.

The loop in ``ftui.runner.loop`` calls only this interface and never branches on the engine:

    engine.prepare(model)                      wrap the model, build the optimizer
    with engine.accumulating(last):            no gradient sync except on the last micro batch
        with engine.autocast():  loss = ...    mixed precision forward
        engine.backward(loss)
    outcome = engine.step()                    clip, (unscale), optimizer step, zero grads

    engine.save_state(dir) / load_state(dir)   resumable state (collective)
    engine.full_state_dict()                   full weights on rank 0 for final/ (collective)

DDP (``ddp``), FSDP2 (``fsdp``) and DeepSpeed (``deepspeed``) refine this base class; the
package's ``make_engine`` picks one from the preset's own metadata (``EngineSpec.strategy``).
Mixed precision for single and DDP is ``torch.autocast`` over fp32 master weights; fp16 adds
``torch.amp.GradScaler``; ``pure_bf16`` trains bf16 weights without autocast. The torch engines checkpoint through torch.distributed.checkpoint
(DCP), which writes each rank's shard and reshards on load; DeepSpeed uses its own format.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.rundir.paths import STATE_DIR

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @classmethod
    def from_env(cls) -> "DistInfo":
        return cls(
            rank=int(os.environ.get("RANK", 0)),
            world_size=int(os.environ.get("WORLD_SIZE", 1)),
            local_rank=int(os.environ.get("LOCAL_RANK", 0)),
            local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
        )

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@dataclass
class StepOutcome:
    grad_norm: torch.Tensor | None  # on device, read with the other metrics; None: the engine does not compute it
    skipped: bool  # fp16 overflow: the optimizer step was not taken
    loss_scale: float | None


def pick_device(cfg: RunConfig, info: DistInfo) -> torch.device:
    want = cfg.device
    if want == "cuda" or (want == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError(_("device is cuda but torch sees no CUDA GPU; set device: cpu or auto"))
        torch.cuda.set_device(info.local_rank)
        return torch.device("cuda", info.local_rank)
    return torch.device("cpu")


def param_groups(model: nn.Module, cfg: RunConfig) -> list[dict[str, Any]]:
    """The trainable parameters in optimizer groups: weight decay for matrices only (never
    biases, norms or other 1-D vectors); with LoRA+ (``loraplus_lr_ratio``), as LLaMA-Factory
    groups them: the B matrices and the 1-D trainables (DoRA's magnitudes, biases) at
    learning_rate x ratio, LoRA embedding B matrices at loraplus_lr_embedding, the rest (the A
    matrices) at learning_rate. The first group always has the base learning rate (the one
    `step` events report). Empty groups are left out."""
    base, ratio = cfg.learning_rate, cfg.loraplus_lr_ratio
    groups: dict[str, dict[str, Any]] = {}

    def put(name: str, p: nn.Parameter, lr: float, decay: bool) -> None:
        key = f"{name}-{'decay' if decay else 'nodecay'}"
        groups.setdefault(key, {"params": [], "lr": lr, "weight_decay": cfg.weight_decay if decay else 0.0})["params"].append(p)

    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        decay = not (p.ndim < 2 or "norm" in name.lower())
        if ratio is None:
            put("base", p, base, decay)
        elif "lora_embedding_B" in name:
            put("embedding", p, cfg.loraplus_lr_embedding, decay)
        elif "lora_B" in name or p.ndim == 1:
            put("loraplus", p, base * ratio, decay)
        else:
            put("base", p, base, decay)
    order = ["base-decay", "base-nodecay", "loraplus-decay", "loraplus-nodecay", "embedding-decay", "embedding-nodecay"]
    return [groups[k] for k in order if k in groups]


def build_optimizer(model: nn.Module, cfg: RunConfig, device: torch.device) -> torch.optim.Optimizer:
    """The config's ``optim`` over ``param_groups``: torch's AdamW (``adamw_torch_fused``: one
    fused kernel per group where the parameters allow it, on CUDA and the CPU; ``adamw_torch``:
    the multi-tensor path), or bitsandbytes' 8-bit / paged AdamW (validation allows those only
    with bitsandbytes and a CUDA GPU)."""
    groups = param_groups(model, cfg)
    kwargs: dict[str, Any] = dict(lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_epsilon)
    if cfg.optim in BNB_OPTIMIZER_CLASSES:
        import bitsandbytes as bnb

        return getattr(bnb.optim, BNB_OPTIMIZER_CLASSES[cfg.optim])(groups, **kwargs)
    params = [p for g in groups for p in g["params"]]
    plain = all(type(p.data) is torch.Tensor for p in params)  # not FSDP's DTensor shards on CPU
    fusable = all(p.device.type == device.type for p in params) and (device.type == "cuda" or (device.type == "cpu" and plain))
    if cfg.optim == "adamw_torch_fused" and fusable:
        kwargs["fused"] = True  # one kernel per group (CUDA, and CPU since torch 2.4); not with offloaded shards
    else:
        kwargs["foreach"] = True
    return torch.optim.AdamW(groups, **kwargs)


# LLaMA-Factory / transformers' optim names -> bitsandbytes.optim classes
BNB_OPTIMIZER_CLASSES = {
    "adamw_bnb_8bit": "AdamW8bit", "adamw_8bit": "AdamW8bit", "paged_adamw_8bit": "PagedAdamW8bit",
    "paged_adamw_32bit": "PagedAdamW32bit", "paged_adamw": "PagedAdamW",
}


class Engine:
    """Single device: the base strategy, which DDP, FSDP and DeepSpeed refine."""

    def __init__(self, cfg: RunConfig, info: DistInfo, device: torch.device):
        self.name = cfg.engine_name
        self.cfg = cfg
        self.info = info
        self.device = device
        # pure_bf16: the weights are bf16 themselves (ftui.runner.model.base_dtype), so there is
        # nothing for autocast to do and no fp32 master copy (LLaMA-Factory's pure_bf16)
        self.half = None if cfg.pure_bf16 else HALF.get(cfg.precision)
        self.scaler = torch.amp.GradScaler(device.type) if cfg.precision == "fp16" else None
        self.model: nn.Module | None = None
        self.module: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None

    @property
    def dp_size(self) -> int:
        """How many ranks average their gradients (the loss is scaled up by this)."""
        return 1

    def load_device(self) -> torch.device:
        """Where the model is built before ``prepare``: the training device, for engines that
        keep a whole replica there anyway. Sharding engines load on the CPU (see overrides)."""
        return self.device

    def prepare(self, model: nn.Module) -> None:
        self.module = model
        self.model = self.wrap(model)
        self.optimizer = build_optimizer(model, self.cfg, self.device)

    def wrap(self, model: nn.Module) -> nn.Module:
        return model

    def prepare_frozen(self, model: nn.Module) -> nn.Module:
        """A frozen model beside the trained one (a preference stage's reference): placed as
        this engine places the policy, without gradients or optimizer state. Single and DDP
        keep a whole copy on the device (nothing to synchronise: it never learns)."""
        return model.requires_grad_(False).eval().to(self.device)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.half is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.half)

    def accumulating(self, last: bool) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()

    def trainable_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def clip(self) -> torch.Tensor:
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else float("inf")
        return torch.nn.utils.clip_grad_norm_(self.trainable_parameters(), max_norm, foreach=True)

    def step(self) -> StepOutcome:
        opt = self.optimizer
        if self.scaler is None:
            norm = self.clip()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return StepOutcome(norm.detach(), False, None)
        self.scaler.unscale_(opt)
        self.sync_found_inf(opt)
        norm = self.clip()
        before = self.scaler.get_scale()
        self.scaler.step(opt)  # skipped when a gradient is inf/NaN
        self.scaler.update()
        after = self.scaler.get_scale()
        opt.zero_grad(set_to_none=True)
        return StepOutcome(norm.detach(), after < before, after)

    def sync_found_inf(self, optimizer: torch.optim.Optimizer) -> None:
        """fp16: make every rank agree on an overflow (sharded engines; DDP's gradients are
        all-reduced already, so each rank sees the same infs)."""

    def unwrap(self) -> nn.Module:
        return self.module

    def torch_optimizer(self) -> torch.optim.Optimizer:
        """The torch optimizer whose param_groups hold the learning rate (for the scheduler);
        DeepSpeed wraps it in its own classes, which the scheduler does not accept."""
        inner = self.optimizer
        while not isinstance(inner, torch.optim.Optimizer) and hasattr(inner, "optimizer"):
            inner = inner.optimizer
        return inner

    def all_reduce_sum(self, t: torch.Tensor) -> torch.Tensor:
        if self.info.world_size > 1:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def gather_rows(self, row: torch.Tensor) -> list[list[float]]:
        """Every rank's copy of a small 1-D tensor, as lists (for per-rank memory)."""
        if self.info.world_size == 1:
            return [row.tolist()]
        out = [torch.zeros_like(row) for _rank in range(self.info.world_size)]
        dist.all_gather(out, row)
        return [t.tolist() for t in out]

    def engagement(self) -> dict[str, Any]:
        """What this rank holds: proof that the engine engaged (parameter elements, optimizer bytes)."""
        params = sum(local_numel(p) for p in self.module.parameters())
        return {"param_elements": params, "optimizer_bytes": optimizer_state_bytes(self.torch_optimizer())}

    # --- Checkpoints (torch.distributed.checkpoint for single, DDP and FSDP)

    def _state_options(self, full: bool = False) -> Any:
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        # Frozen weights come from the base model on resume: an adapter checkpoint stays small.
        return StateDictOptions(ignore_frozen_params=not full, full_state_dict=full, cpu_offload=full, strict=False)

    def save_state(self, directory: Path) -> None:
        """Model (or adapter) and optimizer, each rank writing its own part (collective)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=self._state_options())
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(directory / STATE_DIR))

    def load_state(self, directory: Path) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_sd, optim_sd = get_state_dict(self.model, self.optimizer, options=self._state_options())
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=str(directory / STATE_DIR))
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"],
                       options=self._state_options())

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        """Every weight, unsharded, on rank 0 (None elsewhere), for final/; None also means
        "the module's own state_dict is complete" (single, DDP). Collective for sharded engines."""
        return None


def local_numel(p: torch.Tensor) -> int:
    """Elements this rank really holds: a DTensor's (FSDP) or DeepSpeed ZeRO-3's local shard."""
    if hasattr(p, "ds_tensor"):
        return p.ds_tensor.numel()
    if hasattr(p, "to_local"):
        return p.to_local().numel()
    return p.numel()


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of optimizer state (AdamW's moments) on this rank; DTensor states count their shard."""
    total = 0
    for state in optimizer.state.values():
        for v in state.values():
            if torch.is_tensor(v) and v.dim() > 0:  # moments; not the scalar step count
                v = v.to_local() if hasattr(v, "to_local") else v
                total += v.numel() * v.element_size()
    return total
