"""DistributedDataParallel: a full replica per rank, gradients all-reduced (averaged)."""

from __future__ import annotations

import contextlib

from torch import nn

from ftui.runner.engines.base import Engine


class DDPEngine(Engine):
    """DistributedDataParallel: a full replica per rank, gradients all-reduced (averaged)."""

    @property
    def dp_size(self) -> int:
        return self.info.world_size

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.nn.parallel import DistributedDataParallel as DDP

        if self.info.world_size == 1:
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        # Gradients live in DDP's communication buckets instead of beside them: one copy
        # of the gradients fewer (what the planner assumes).
        return DDP(model, device_ids=ids, find_unused_parameters=False, gradient_as_bucket_view=True)

    def accumulating(self, last: bool) -> contextlib.AbstractContextManager:
        if last or not hasattr(self.model, "no_sync"):
            return contextlib.nullcontext()
        return self.model.no_sync()
