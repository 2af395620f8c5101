"""FSDP2: ``fully_shard`` on every decoder layer and on the root, behind the Engine interface.
A vision-language model's vision blocks are units too (``wrap_units``), so its vision tower is
sharded and gathered a block at a time like the language model.

Each rank holds 1/N of every parameter, gradient and optimizer state (as DTensor shards);
a layer's full weights are all-gathered for its forward and backward and freed again
(reshard after forward). Mixed precision is FSDP's ``MixedPrecisionPolicy`` (bf16 compute,
fp32 gradient reduction, fp32 master shards), not autocast; with ``pure_bf16`` the shards
themselves are bf16. ``fsdp_offload`` adds
``CPUOffloadPolicy``: shards and the optimizer step live in host memory.

Not through transformers.Trainer or accelerate: on a machine without a GPU both silently
fall back to DDP, and a user would get an engine they did not ask for.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from ftui.presets.engine_presets import load_preset
from ftui.runner.engines.base import Engine
from ftui.runner.model import decoder_layers, trained_dtype
from ftui.runner.vlm import vision_blocks


def wrap_units(model: nn.Module) -> list[nn.Module]:
    """The modules ``fully_shard`` makes units of, before the root: a vision-language model's
    vision blocks (in forward order: the tower runs first), then the decoder layers."""
    blocks = vision_blocks(model)
    return [*(blocks if blocks is not None else []), *decoder_layers(model)]


class FSDPEngine(Engine):
    def __init__(self, cfg, info, device):
        super().__init__(cfg, info, device)
        self.settings = load_preset(cfg.engine).get("fsdp", {})
        # fp16 keeps the base class's GradScaler: it works on FSDP2's DTensor gradients, and
        # found_inf is agreed between the ranks in sync_found_inf.

    @property
    def dp_size(self) -> int:
        return self.info.world_size  # gradients are reduce-scattered as a mean over ranks

    def load_device(self) -> torch.device:
        """The CPU: ``fully_shard`` moves one layer at a time to the GPU and keeps only this
        rank's shard there (or, with offload, keeps the shards on the host), so the GPU never
        holds the whole model, which is what FSDP exists for."""
        return torch.device("cpu")

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        mesh = init_device_mesh(self.device.type, (self.info.world_size,))
        # bf16 or fp16 compute over fp32 master shards, gradients reduced in fp32; pure_bf16:
        # bf16 shards gathered and reduced in bf16, but LoRA's fp32 adapters (cast to bf16 for
        # compute like the base) have their gradients reduced in fp32, as under DDP
        if self.cfg.pure_bf16:
            fp32_trained = trained_dtype(model) == torch.float32
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32 if fp32_trained else None)
        elif self.half:
            mp = MixedPrecisionPolicy(param_dtype=self.half, reduce_dtype=torch.float32)
        else:
            mp = MixedPrecisionPolicy()
        offload = CPUOffloadPolicy(pin_memory=self.device.type == "cuda") if self.settings.get("cpu_offload") else OffloadPolicy()
        kwargs = dict(mesh=mesh, mp_policy=mp, offload_policy=offload)
        reshard = bool(self.settings.get("reshard_after_forward", True))
        for layer in wrap_units(model):
            fully_shard(layer, reshard_after_forward=reshard, **kwargs)
        fully_shard(model, reshard_after_forward=False, **kwargs)  # the root's params are needed right after forward
        return model

    def prepare_frozen(self, model: nn.Module) -> nn.Module:
        """Sharded like the policy (each rank holds 1/N; layers gathered for their forward),
        with the same mixed-precision policy, so the reference computes as the policy does."""
        model.requires_grad_(False).eval()
        return self.wrap(model)

    def autocast(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()  # MixedPrecisionPolicy casts the gathered parameters

    def accumulating(self, last: bool) -> contextlib.AbstractContextManager:
        # Gradients are reduce-scattered after every micro batch, also with accumulation:
        # skipping the sync (set_requires_gradient_sync(False)) makes FSDP2 keep full,
        # unsharded fp32 gradients on every rank until the last micro batch, 4 bytes per
        # parameter per GPU, which defeats the sharding the planner counts on.
        return contextlib.nullcontext()

    def clip(self) -> torch.Tensor:
        norm = super().clip()
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        return norm.to(self.device)  # CPU offload computes it on the host; the metrics live on the device

    def sync_found_inf(self, optimizer: torch.optim.Optimizer) -> None:
        """Each rank unscales only its own gradient shards, so an inf in one shard is seen by
        one rank: agree (max over ranks) so that every rank skips the step together."""
        if self.info.world_size == 1:
            return
        import torch.distributed as dist

        # GradScaler keeps the per-device flags in its per-optimizer state (no public accessor).
        state = self.scaler._per_optimizer_states[id(optimizer)]
        for flag in state["found_inf_per_device"].values():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        sd = get_model_state_dict(self.model, options=self._state_options(full=True))  # all-gathers every shard
        return sd if self.info.is_main else None
