"""Metrics from the loop's own counters: tokens, throughput, MFU, memory.

Counters stay on the device between logging steps and are read in one batch when a
``step`` event is written, so a step has no host sync beyond what the metrics need.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator
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


# Dense FP32 (CUDA cores, no tensor cores) peak: what an fp32 run reaches with TF32 off.
PEAK_FP32_FLOPS = (
    ("H200", 67e12), ("GH200", 67e12), ("H100 PCIe", 51e12), ("H100 NVL", 60e12), ("H100", 67e12), ("H800", 67e12),
    ("H20", 44e12), ("B200", 80e12), ("A100", 19.5e12), ("A800", 19.5e12), ("L40S", 91.6e12), ("L40", 90.5e12),
    ("L4", 30.3e12), ("A10G", 31.2e12), ("A10", 31.2e12), ("A6000", 38.7e12), ("RTX 6000 Ada", 91.1e12),
    ("4090", 82.6e12), ("3090", 35.6e12), ("V100", 15.7e12),
)


def _lookup(table: tuple[tuple[str, float], ...], name: str) -> float | None:
    for key, flops in table:
        if key in name:
            return flops
    return None


def matmul_mode(precision: str, tf32: bool, capability: tuple[int, int]) -> str:
    """What the matrix products of a run compute in: bf16/fp16 tensor cores, TF32 tensor
    cores (fp32 runs on Ampere and later, unless turned off) or plain fp32."""
    if precision in ("bf16", "fp16"):
        return precision
    return "tf32" if tf32 and capability >= (8, 0) else "fp32"


def peak_flops(device: torch.device, mode: str = "bf16") -> float | None:
    """The device's dense peak for the run's matmul mode, so MFU is taken against what the
    arithmetic can reach: TF32 runs at half the bf16 rate on every tensor-core generation
    since Ampere; plain fp32 at the CUDA-core rate."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    if mode == "fp32":
        return _lookup(PEAK_FP32_FLOPS, name)
    bf16 = _lookup(PEAK_BF16_FLOPS, name)
    if bf16 is None:
        return None
    return bf16 / 2 if mode == "tf32" else bf16


def set_matmul_precision(mode: str) -> None:
    """TF32 on (or off) for cuBLAS and cuDNN in this process. torch leaves cuBLAS TF32 off by
    default, so an fp32 run would otherwise compute at the plain fp32 rate."""
    allow = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow


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
    sums: torch.Tensor | None = None  # [loss sum, the stage's figure sums..., tokens, labelled tokens, loss tokens]
    data_wait: float = 0.0  # seconds the loop waited for the next micro batch

    def add(self, sums: torch.Tensor, counts: torch.Tensor) -> None:
        """sums: this rank's loss sum (then the stage's figure sums); counts: the step's global counts."""
        row = torch.cat([sums.detach().float().reshape(-1), counts.float()])
        self.sums = row if self.sums is None else self.sums + row
        self.steps += 1

    def reset(self) -> None:
        self.steps = 0
        self.sums = None
        self.data_wait = 0.0
        self.started = time.perf_counter()

    @contextlib.contextmanager
    def excluded(self) -> Iterator[None]:
        """Time spent inside (eval, checkpoints) is left out of the window's elapsed time.
        The queued training work is waited for first, so it stays inside the window."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        began = time.perf_counter()
        try:
            yield
        finally:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.started += time.perf_counter() - began
