"""DeepSpeed ZeRO-0/1/2/3 (with optimizer / parameter offload) behind the Engine interface.

The config is a preset from ``ftui/presets/engines/zero*.json`` or the user's own JSON
(``deepspeed: path``), with ``"auto"`` filled from the RunConfig. ftui's loop owns gradient
accumulation (it divides each micro batch's loss by the step's global token count), so the
engine runs with ``managed_gradient_accumulation: false``: ``backward`` only accumulates and
``step`` is the boundary that reduces, clips and updates. DeepSpeed's own precision handling
(bf16 / fp16 modules with fp32 master partitions and dynamic loss scaling) replaces autocast.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ftui.i18n import _
from ftui.rundir.paths import DEEPSPEED_TAG
from ftui.presets.engine_presets import fill_deepspeed, load_preset, read_user_deepspeed
from ftui.runner.engines.base import Engine, StepOutcome, build_optimizer, param_groups



def load_deepspeed(device: torch.device) -> Any:
    """deepspeed, set up for this device. On a CPU, DeepSpeed's communication backend would
    JIT-compile its shared-memory all-reduce op (``deepspeed_shm_comm``: about 30 s with a C++
    compiler the first time, per venv; a failure without one), which only its inference
    all-reduce uses: ftui's training never calls it, so the op is marked unavailable and
    torch.distributed (gloo) does the collectives, as it does on every other path."""
    import deepspeed

    if device.type == "cpu":
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    return deepspeed


class DeepSpeedEngine(Engine):
    def __init__(self, cfg, info, device):
        super().__init__(cfg, info, device)
        self.half = None  # DeepSpeed casts the module itself
        self.scaler = None
        source = read_user_deepspeed(cfg.deepspeed) if cfg.deepspeed else load_preset(cfg.engine)
        self.ds_config: dict[str, Any] = {}
        self._source = source

    @property
    def dp_size(self) -> int:
        return self.info.world_size  # ZeRO averages gradients over the data-parallel ranks

    @property
    def stage(self) -> int:
        return int((self.ds_config or self._source).get("zero_optimization", {}).get("stage", 0))

    def load_device(self) -> torch.device:
        """ZeRO-3 partitions from a CPU model (``partition_parameters`` below), one parameter
        at a time, so the GPU never holds the whole model; stages 0-2 keep a full replica
        on the GPU anyway."""
        return torch.device("cpu") if self.stage == 3 else self.device

    def partition_parameters(self, model: nn.Module, ds: dict[str, Any]) -> None:
        """ZeRO-3: split a model built on the CPU into this rank's partitions before
        ``deepspeed.initialize``, which would otherwise move the whole model to the GPU
        first (it skips that only for parameters zero.Init has already partitioned)."""
        deepspeed = load_deepspeed(self.device)

        if self.stage != 3 or any(hasattr(p, "ds_id") for p in model.parameters()):
            return
        # DeepSpeed's comm layer over the process group ftui already joined (without it,
        # zero.Init reads a world size of 1); deepspeed.initialize reuses it.
        deepspeed.init_distributed(auto_mpi_discovery=False, verbose=False)
        # Constructing Init with module= converts the existing parameters (no context needed).
        deepspeed.zero.Init(module=model, config_dict_or_path=ds, dtype=next(model.parameters()).dtype)

    def prepare(self, model: nn.Module) -> None:
        deepspeed = load_deepspeed(self.device)

        cfg = self.cfg
        ds = fill_deepspeed(
            self._source, micro_batch=cfg.per_device_train_batch_size, accumulation=cfg.gradient_accumulation_steps,
            world_size=self.info.world_size, max_grad_norm=cfg.max_grad_norm, precision=cfg.precision,
            hidden_size=getattr(getattr(model, "config", None), "hidden_size", None),
        )
        ds["managed_gradient_accumulation"] = False
        zero = ds.get("zero_optimization", {})
        offload_opt = (zero.get("offload_optimizer") or {}).get("device") in ("cpu", "nvme")
        kwargs: dict[str, Any] = {}
        if "optimizer" in ds:  # the user's file names an optimizer: DeepSpeed builds it
            ds["optimizer"].setdefault("params", {}).update(
                {k: v for k, v in {"lr": cfg.learning_rate, "betas": [cfg.adam_beta1, cfg.adam_beta2],
                                   "eps": cfg.adam_epsilon, "weight_decay": cfg.weight_decay}.items()
                 if k not in ds["optimizer"]["params"]})
            kwargs["model_parameters"] = param_groups(model, cfg)  # LoRA+'s learning rates ride on the groups
        elif offload_opt and self.device.type == "cuda":
            from deepspeed.ops.adam import DeepSpeedCPUAdam  # the offloaded step runs on the CPU

            print("[ftui] " + _("loading DeepSpeed's CPU Adam for the offloaded optimizer step (DeepSpeed compiles it the first "
                                "time on a machine: about 3 minutes, then cached in ~/.cache/torch_extensions)"),
                  file=sys.stderr, flush=True)

            groups = build_optimizer(model, cfg, torch.device("cpu")).param_groups
            kwargs["optimizer"] = DeepSpeedCPUAdam(groups, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                                                   eps=cfg.adam_epsilon, adamw_mode=True)
        else:
            kwargs["optimizer"] = build_optimizer(model, cfg, self.device)
            # On a CPU-only run "offload to CPU" moves nothing; torch's AdamW is the right optimizer.
            ds["zero_force_ds_cpu_optimizer"] = False
        ds.pop("scheduler", None)  # ftui schedules the learning rate (lr_scheduler_type)
        self.ds_config = ds
        self.module = model
        self.partition_parameters(model, ds)
        engine, optimizer, _loader, _scheduler = deepspeed.initialize(model=model, config=ds, **kwargs)
        self.model = engine
        self.optimizer = optimizer

    def prepare_frozen(self, model: nn.Module) -> nn.Module:
        """ZeRO-3: partitioned over the ranks like the policy, through a DeepSpeed engine with
        no optimizer (TRL's prepare_deepspeed does the same); ZeRO-0/1/2 replicate the policy's
        weights anyway, so a whole copy on the device in the policy's precision (DeepSpeed
        casts the trained module to bf16 / fp16 itself)."""
        deepspeed = load_deepspeed(self.device)

        model.requires_grad_(False).eval()
        if self.stage != 3:
            half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.cfg.precision)
            return model.to(self.device, dtype=half) if half is not None else model.to(self.device)
        ds = {k: v for k, v in self.ds_config.items() if k not in ("optimizer", "scheduler", "zero_force_ds_cpu_optimizer")}
        ds["zero_optimization"] = {k: v for k, v in ds.get("zero_optimization", {}).items() if k != "offload_optimizer"}
        self.partition_parameters(model, ds)
        engine, *_rest = deepspeed.initialize(model=model, config=ds)
        engine.eval()
        return engine

    def autocast(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def accumulating(self, last: bool) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()  # unmanaged accumulation: nothing is reduced before step()

    def backward(self, loss: torch.Tensor) -> None:
        self.model.backward(loss, scale_wrt_gas=False)

    def step(self) -> StepOutcome:
        self.model.step()
        norm = self.model.get_global_grad_norm()  # None under ZeRO-0 in fp32: DeepSpeed clips without keeping it
        norm_t = None if norm is None else (norm.detach().float() if torch.is_tensor(norm) else torch.tensor(float(norm))).to(self.device)
        scale = None
        if self.cfg.precision == "fp16":
            scale = float(getattr(self.model.optimizer, "cur_scale", getattr(self.model.optimizer, "loss_scale", 0.0)))
        return StepOutcome(norm_t, not self.model.was_step_applied(), scale)

    def unwrap(self) -> nn.Module:
        return self.model.module

    def engagement(self) -> dict[str, Any]:
        out = super().engagement()
        out["zero_stage"] = self.stage
        return out

    # --- Checkpoints: DeepSpeed's own (each rank writes its partitions)

    def save_state(self, directory: Path) -> None:
        self.model.save_checkpoint(str(directory), tag=DEEPSPEED_TAG, client_state={}, save_latest=False,
                                   exclude_frozen_parameters=self.cfg.finetuning_type != "full")

    def load_state(self, directory: Path) -> None:
        path, _client_state = self.model.load_checkpoint(str(directory), tag=DEEPSPEED_TAG, load_module_strict=False,
                                             load_optimizer_states=True, load_lr_scheduler_states=False)
        if path is None:
            raise FileNotFoundError(_("no DeepSpeed checkpoint in {path}").format(path=directory))

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        if self.stage == 3:  # gathers the partitions layer by layer onto rank 0 (collective)
            sd = self.model._zero3_consolidated_16bit_state_dict()
        else:
            sd = {k: v.detach().cpu() for k, v in self.model.module.state_dict().items()}
        return sd if self.info.is_main else None
