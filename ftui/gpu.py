"""GPU sampling through NVML (package nvidia-ml-py), with a CPU/RAM fallback through psutil.

No torch here: the dashboard samples GPUs in a worker while a rank may be stuck in a CUDA
call, and `ftui` must start fast on a login node. NVML calls can take milliseconds each,
so callers on the UI side run :func:`sample` in a worker thread, never on the UI thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import psutil

try:  # nvidia-ml-py installs the module `pynvml`
    import pynvml
except ImportError:  # pragma: no cover - it is a dependency, but keep the app up without it
    pynvml = None

_lock = threading.Lock()
_state = {"initialised": False, "ok": False}


def _init() -> bool:
    with _lock:
        if not _state["initialised"]:
            _state["initialised"] = True
            if pynvml is not None:
                try:
                    pynvml.nvmlInit()
                    _state["ok"] = True
                except Exception:  # NVMLError: no driver, no GPU, no permission
                    _state["ok"] = False
        return _state["ok"]


@dataclass
class GpuSample:
    index: int
    name: str
    util_percent: float
    mem_used: int
    mem_total: int
    power_w: float | None
    temperature_c: float | None
    processes: dict[int, int] = field(default_factory=dict)  # pid -> bytes used


@dataclass
class HostSample:
    cpu_percent: float
    ram_used: int
    ram_total: int


def gpu_count() -> int:
    if not _init():
        return 0
    try:
        return pynvml.nvmlDeviceGetCount()
    except Exception:
        return 0


def gpu_names() -> list[str]:
    if not _init():
        return []
    names = []
    for i in range(gpu_count()):
        try:
            name = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            names.append(name.decode() if isinstance(name, bytes) else str(name))
        except Exception:
            names.append("unknown GPU")
    return names


def bf16_unsupported_reason() -> str | None:
    """Why bf16 cannot run on the GPUs NVML sees (compute capability below 8.0), else None."""
    if not _init():
        return None
    for i in range(gpu_count()):
        try:
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(i))
        except Exception:
            continue
        if major < 8:
            return f"GPU {i} has compute capability {major}.{minor}; bf16 needs 8.0 (Ampere) or newer"
    return None


def _opt(fn, *args):
    try:
        return fn(*args)
    except Exception:
        return None


def sample_gpus() -> list[GpuSample]:
    """One reading of every GPU; an empty list when NVML is unavailable."""
    out: list[GpuSample] = []
    if not _init():
        return out
    for i in range(gpu_count()):
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        except Exception:
            continue
        util = _opt(pynvml.nvmlDeviceGetUtilizationRates, h)
        power = _opt(pynvml.nvmlDeviceGetPowerUsage, h)
        temp = _opt(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU)
        procs = _opt(pynvml.nvmlDeviceGetComputeRunningProcesses, h) or []
        out.append(
            GpuSample(
                index=i,
                name=name.decode() if isinstance(name, bytes) else str(name),
                util_percent=float(util.gpu) if util is not None else 0.0,
                mem_used=int(mem.used),
                mem_total=int(mem.total),
                power_w=power / 1000.0 if power is not None else None,
                temperature_c=float(temp) if temp is not None else None,
                processes={p.pid: int(p.usedGpuMemory or 0) for p in procs},
            )
        )
    return out


def sample_host() -> HostSample:
    vm = psutil.virtual_memory()
    return HostSample(cpu_percent=psutil.cpu_percent(interval=None), ram_used=int(vm.total - vm.available), ram_total=int(vm.total))
