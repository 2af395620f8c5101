"""A stand-in for pynvml (the module nvidia-ml-py installs), so tests can show ftui machines
with GPUs it does not have: which GPUs exist, their UUIDs, compute capabilities, MIG
instances. ``use_fake_nvml(monkeypatch, [FakeGpu(...), ...])`` puts it behind ftui.machine.gpu."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import ftui.machine.gpu


class FakeNvmlError(Exception):
    pass


@dataclass
class FakeGpu:
    name: str = "NVIDIA A100-SXM4-80GB"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    capability: tuple[int, int] = (8, 0)
    mem_total: int = 80 << 30
    mem_used: int = 1 << 30
    migs: list["FakeGpu"] = field(default_factory=list)  # MIG instances (uuid MIG-...)


class FakeNvml:
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, gpus: list[FakeGpu]):
        self.gpus = gpus

    def nvmlInit(self):
        return None

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        if not 0 <= i < len(self.gpus):
            raise FakeNvmlError("invalid argument")
        return self.gpus[i]

    def nvmlDeviceGetName(self, h):
        return h.name

    def nvmlDeviceGetUUID(self, h):
        return h.uuid

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return h.capability

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=h.mem_used, total=h.mem_total, free=h.mem_total - h.mem_used)

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=50, memory=10)

    def nvmlDeviceGetPowerUsage(self, h):
        return 300_000

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 60

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return []

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        if not h.migs:
            raise FakeNvmlError("not supported")
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):
        if j >= len(h.migs):
            raise FakeNvmlError("not found")
        return h.migs[j]


def use_fake_nvml(monkeypatch, gpus: list[FakeGpu]) -> FakeNvml:
    fake = FakeNvml(gpus)
    monkeypatch.setattr(ftui.machine.gpu, "pynvml", fake)
    monkeypatch.setattr(ftui.machine.gpu, "_state", {"initialised": False, "ok": False})
    monkeypatch.setattr(ftui.machine.gpu, "_inventory", {})
    return fake


def four_gpus(capability: tuple[int, int] = (8, 0)) -> list[FakeGpu]:
    """Four GPUs with distinguishable names and UUIDs GPU-aaaa..., GPU-bbbb..., ..."""
    return [FakeGpu(name=f"GPU model {i}", uuid=f"GPU-{c * 8}-1111", capability=capability, mem_total=(40 + i) << 30)
            for i, c in enumerate("abcd")]
