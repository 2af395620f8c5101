"""Metrics from the loop's own counters: tokens, throughput, MFU, memory.

Counters stay on the device between logging steps and are read in one batch when a
``step`` event is written, so a step has no host sync beyond what the metrics need.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import psutil
import torch

# Dense (no sparsity) bf16 tensor-core peak per GPU, FLOP/s. MFU is reported against this
# for every precision, as is usual; unknown devices (and CPUs) report no MFU.
PEAK_BF16_FLOPS = (
    ("H200", 989e12), ("GH200", 989e12), ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12),
    ("H800", 989e12), ("H20", 148e12), ("B200", 2250e12), ("B100", 1750e12), ("A100", 312e12),
    ("A800", 312e12), ("L40S", 362e12), ("L40", 181e12), ("L4", 121e12), ("A10G", 70e12), ("A10", 125e12),
    ("A6000", 155e12), ("RTX 6000 Ada", 364e12), ("4090", 165e12), ("3090", 71e12), ("V100", 125e12),
)


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, flops in PEAK_BF16_FLOPS:
        if key in name:
            return flops
    return None


def memory_row(device: torch.device) -> torch.Tensor:
    """[allocated, reserved, peak] bytes of this rank: CUDA allocator, or process RSS on CPU."""
    if device.type == "cuda":
        vals = [torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device), torch.cuda.max_memory_allocated(device)]
    else:
        info = psutil.Process(os.getpid()).memory_info()
        peak = _peak_rss()
        vals = [info.rss, info.vms, max(peak, info.rss)]
    return torch.tensor(vals, dtype=torch.float64 if device.type == "cpu" else torch.int64, device=device)


def _peak_rss() -> int:
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    except Exception:
        return 0


@dataclass
class Window:
    """Counters since the previous step event, kept on the device until it is written."""

    device: torch.device
    steps: int = 0
    started: float = field(default_factory=time.perf_counter)
    sums: torch.Tensor | None = None  # [loss_sum, tokens, trainable_tokens]

    def add(self, loss_sum: torch.Tensor, counts: torch.Tensor) -> None:
        """loss_sum: this rank's summed token losses; counts: global [tokens, trainable]."""
        row = torch.cat([loss_sum.detach().float().reshape(1), counts.float()])
        self.sums = row if self.sums is None else self.sums + row
        self.steps += 1

    def reset(self) -> None:
        self.steps = 0
        self.sums = None
        self.started = time.perf_counter()
