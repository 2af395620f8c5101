"""FSDP2: ``fully_shard`` on every decoder layer and on the root, behind the Engine interface.

Each rank holds 1/N of every parameter, gradient and optimizer state (as DTensor shards);
a layer's full weights are all-gathered for its forward and backward and freed again
(reshard after forward). Mixed precision is FSDP's ``MixedPrecisionPolicy`` (bf16 compute,
fp32 gradient reduction, fp32 master shards), not autocast. ``fsdp_offload`` adds
``CPUOffloadPolicy``: shards and the optimizer step live in host memory.

Not through transformers.Trainer or accelerate: on a machine without a GPU both silently
fall back to DDP, and a user would get an engine they did not ask for (DESIGN.md).
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from ftui.presets.engine_presets import load_preset
from ftui.runner.engines import Engine
from ftui.runner.model import decoder_layers


class FSDPEngine(Engine):
    def __init__(self, cfg, info, device):
        super().__init__(cfg, info, device)
        self.settings = load_preset(cfg.engine).get("fsdp", {})
        self.scaler = None  # fp16 is refused for fsdp at validation; bf16 needs no scaler

    @property
    def dp_size(self) -> int:
        return self.info.world_size  # gradients are reduce-scattered as a mean over ranks

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        mesh = init_device_mesh(self.device.type, (self.info.world_size,))
        mp = MixedPrecisionPolicy(param_dtype=self.half, reduce_dtype=torch.float32) if self.half else MixedPrecisionPolicy()
        offload = CPUOffloadPolicy(pin_memory=self.device.type == "cuda") if self.settings.get("cpu_offload") else OffloadPolicy()
        kwargs = dict(mesh=mesh, mp_policy=mp, offload_policy=offload)
        reshard = bool(self.settings.get("reshard_after_forward", True))
        for layer in decoder_layers(model):
            fully_shard(layer, reshard_after_forward=reshard, **kwargs)
        fully_shard(model, reshard_after_forward=False, **kwargs)  # the root's params are needed right after forward
        return model

    def autocast(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()  # MixedPrecisionPolicy casts the gathered parameters

    def accumulating(self, last: bool) -> contextlib.AbstractContextManager:
        self.model.set_requires_gradient_sync(last)  # micro batches before the last keep unreduced grads
        return contextlib.nullcontext()

    def clip(self) -> torch.Tensor:
        norm = super().clip()
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        sd = get_model_state_dict(self.model, options=self._state_options(full=True))  # all-gathers every shard
        return sd if self.info.is_main else None
