"""GPU sampling through NVML (package nvidia-ml-py), with a CPU/RAM fallback through psutil.

No torch here: the dashboard samples GPUs in a worker while a rank may be stuck in a CUDA
call, and `ftui` must start fast on a login node. NVML calls can take milliseconds each,
so callers on the UI side run :func:`sample` in a worker thread, never on the UI thread.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from typing import Any

import psutil

from ftui.i18n import _

try:  # nvidia-ml-py installs the module `pynvml`
    import pynvml
except ImportError:  # pragma: no cover - it is a dependency, but keep the app up without it
    pynvml = None

_lock = threading.RLock()
_state = {"initialised": False, "ok": False}
# The machine's GPUs, read from NVML once per process: which GPUs a machine has does not change
# under a running app, while NVML answers in milliseconds per call (seconds on a GPU in a bad
# state) and the launch form checks the GPUs on every keystroke. Live figures (utilization,
# memory) are never cached.
_inventory: dict[str, Any] = {}


def _init() -> bool:
    with _lock:
        if not _state["initialised"]:
            ok = False
            if pynvml is not None:
                try:
                    pynvml.nvmlInit()
                    ok = True
                except Exception:  # NVMLError: no driver, no GPU, no permission
                    ok = False
            _state["ok"] = ok
            _state["initialised"] = True  # after ok: inventory_read reads them without the lock
        return _state["ok"]


@dataclass
class GpuSample:
    index: int  # the GPU's cuda:N in a run started from here (its place among the visible GPUs)
    name: str
    util_percent: float
    mem_used: int
    mem_total: int
    power_w: float | None
    temperature_c: float | None
    processes: dict[int, int] = field(default_factory=dict)  # pid -> bytes used
    nvml_index: int | None = None  # the physical GPU as nvidia-smi numbers it (for MIG: its parent)

    @property
    def label(self) -> str:
        return gpu_label(self.index, self.nvml_index)


def gpu_label(cuda_index: int, nvml_index: int | None) -> str:
    """A run's GPU number, with nvidia-smi's where CUDA_VISIBLE_DEVICES makes them differ."""
    if nvml_index is None or nvml_index == cuda_index:
        return str(cuda_index)
    return f"{cuda_index} (nvidia-smi {nvml_index})"


@dataclass
class HostSample:
    cpu_percent: float
    ram_used: int
    ram_total: int


@dataclass(frozen=True)
class VisibleGpu:
    """A GPU (or MIG instance) that a CUDA program started from here can use."""

    cuda_index: int  # cuda:N inside that program: the place in CUDA_VISIBLE_DEVICES
    nvml_index: int  # nvidia-smi's number of the physical GPU
    uuid: str
    handle: Any  # NVML handle of what the program uses (the MIG instance for MIG)
    physical: Any  # NVML handle of the physical GPU (compute capability, power, temperature)

    @property
    def label(self) -> str:
        where = f"nvidia-smi GPU {self.nvml_index}" + (", MIG" if self.uuid.startswith("MIG-") else "")
        return f"cuda:{self.cuda_index} ({name_of(self.handle)}, {where})"


def parse_visible_devices(value: str | None) -> list[int] | list[str] | None:
    """CUDA_VISIBLE_DEVICES as CUDA reads it (the rules torch.cuda._parse_visible_devices copies):
    None when unset (every GPU); ordinals, or UUID prefixes (``GPU-...`` / ``MIG-...``). The
    list ends at the first entry CUDA would not accept; a repeated entry hides every GPU; an
    empty string hides them all."""
    if value is None:
        return None
    entries = [e.strip() for e in value.split(",")]
    for prefix in ("GPU-", "MIG-"):
        if value.strip().startswith(prefix):
            uuids: list[str] = []
            for e in entries:
                if not e.startswith(prefix):
                    break
                if e in uuids:
                    return []
                uuids.append(e)
            return uuids
    ordinals: list[int] = []
    for e in entries:
        digits = re.match(r"[+]?\d+", e)  # like strtoul: "1gpu" is 1; "-1", "" or "x" end the list
        if digits is None:
            break
        n = int(digits.group())
        if n in ordinals:
            return []
        ordinals.append(n)
    return ordinals


def _uuid(handle: Any) -> str:
    u = pynvml.nvmlDeviceGetUUID(handle)
    return u.decode() if isinstance(u, bytes) else str(u)


def _physical() -> list[tuple[int, Any, str]]:
    """(nvml index, handle, UUID) of every GPU of the machine, read once ([] without NVML),
    with what the checks ask of them beside (their compute capabilities, their MIG instances):
    once this has run, those checks make no NVML call."""
    if not _init():
        return []
    with _lock:
        if "physical" not in _inventory:
            try:
                handles = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
            except Exception:
                handles = []
            _inventory["capabilities"] = {i: _opt(_capability, h) for i, h in handles}
            _inventory["migs"] = _mig_instances(handles)
            _inventory["physical"] = [(i, h, _opt(_uuid, h) or "") for i, h in handles]  # last: inventory_read() looks for it
        return _inventory["physical"]


def _capability(handle: Any) -> tuple[int, int]:
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    return int(major), int(minor)


def _all_migs() -> list[tuple[int, Any, Any, str]]:
    """Every MIG instance of the machine (see _mig_instances), read once."""
    _physical()
    return _inventory.get("migs", [])


def inventory_read() -> bool:
    """Whether the machine's GPUs were read already (or NVML is known to be absent), so that
    the checks that ask about them answer at once, without NVML: the app reads them in a
    worker first and validates after. It takes no lock: the UI thread asks it while a worker
    holds the lock through a slow nvmlInit."""
    return _state["initialised"] and (not _state["ok"] or "physical" in _inventory)


def _mig_instances(physical: list[tuple[int, Any]]) -> list[tuple[int, Any, Any, str]]:
    """(nvml index of the parent, parent handle, MIG handle, MIG UUID) of every MIG instance."""
    out = []
    for i, h in physical:
        try:
            slots = pynvml.nvmlDeviceGetMaxMigDeviceCount(h)
        except Exception:  # not MIG-capable, or MIG off
            continue
        for j in range(slots):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
                out.append((i, h, mig, _uuid(mig)))
            except Exception:  # an empty slot
                continue
    return out


def _match_prefix(wanted: str, uuids: list[str]) -> int | None:
    """The one UUID that starts with ``wanted`` (CUDA accepts unambiguous prefixes)."""
    hits = [k for k, u in enumerate(uuids) if u.startswith(wanted)]
    return hits[0] if len(hits) == 1 else None


def visible_gpus(picked: str | None = None) -> list[VisibleGpu]:
    """The GPUs a program started from here sees, in its cuda:N order; [] without NVML.
    ``picked``: a run's own CUDA_VISIBLE_DEVICES (its config's ``gpus``), which replaces the
    environment's; None: the environment's (unset there: every GPU).

    NVML numbers every GPU of the machine in PCI bus order; CUDA numbers only those that
    CUDA_VISIBLE_DEVICES names, in the order it names them. Ordinals in CUDA_VISIBLE_DEVICES
    mean NVML's numbers when CUDA_DEVICE_ORDER=PCI_BUS_ID, which ftui sets (unless the user
    chose otherwise) for the processes it starts."""
    return gpus_named(os.environ.get("CUDA_VISIBLE_DEVICES") if picked is None else picked)


def gpus_named(devices: str | None) -> list[VisibleGpu]:
    """The GPUs CUDA_VISIBLE_DEVICES=``devices`` leaves visible (None: every GPU of the machine)."""
    physical = _physical()
    if not physical:
        return []
    wanted = parse_visible_devices(devices)
    chosen: list[tuple[int, Any, Any, str]] = []  # (nvml index, handle, physical handle, uuid)
    if wanted is None or (wanted and isinstance(wanted[0], int)):
        for n in wanted if wanted is not None else range(len(physical)):
            if n >= len(physical):  # CUDA stops at the first ordinal past the last GPU
                break
            i, h, u = physical[n]
            chosen.append((i, h, h, u))
    elif wanted:
        if str(wanted[0]).startswith("MIG-"):
            candidates = [(i, mig, parent, u) for i, parent, mig, u in _all_migs()]
        else:
            candidates = [(i, h, h, u) for i, h, u in physical]
        taken: list[int] = []
        for w in wanted:
            k = _match_prefix(str(w), [c[3] for c in candidates])
            if k is None:  # unknown or ambiguous: CUDA ignores it and everything after it
                break
            if k in taken:  # two prefixes of one GPU: CUDA shows none
                return []
            taken.append(k)
        chosen = [candidates[k] for k in taken]
    return [VisibleGpu(n, i, u, h, p) for n, (i, h, p, u) in enumerate(chosen)]


def name_of(handle: Any) -> str:
    try:
        name = pynvml.nvmlDeviceGetName(handle)
    except Exception:
        return _("unknown GPU")
    return name.decode() if isinstance(name, bytes) else str(name)


def gpu_count(picked: str | None = None) -> int:
    """How many GPUs a run started from here can use (its ``gpus``, else CUDA_VISIBLE_DEVICES)."""
    return len(visible_gpus(picked))


def machine_gpus() -> list[tuple[str, str]]:
    """(what a run's ``gpus`` names it by, a description) of every GPU of the machine, in
    nvidia-smi's order (MIG instances by UUID), for the launch form to offer."""
    out = []
    for g in gpus_named(None):
        mem = _opt(pynvml.nvmlDeviceGetMemoryInfo, g.handle)
        free = _(", {free} of {total} GiB free").format(free=f"{(mem.total - mem.used) / (1 << 30):.0f}",
                                                          total=f"{mem.total / (1 << 30):.0f}") if mem is not None else ""
        out.append((str(g.nvml_index), f"{name_of(g.handle)}{free}"))
        for i, _parent, mig, uuid in [m for m in _all_migs() if m[0] == g.nvml_index]:
            out.append((uuid, _("MIG of GPU {index}: {name}").format(index=i, name=name_of(mig))))
    return out


def gpu_names() -> list[str]:
    return [name_of(g.handle) for g in visible_gpus()]


def device_choices() -> list[tuple[str, str]]:
    """(label, torch device) of each visible GPU, for a chat worker started from here."""
    return [(f"GPU {gpu_label(g.cuda_index, g.nvml_index)}", f"cuda:{g.cuda_index}") for g in visible_gpus()]


def visibility_note() -> str | None:
    """What CUDA_VISIBLE_DEVICES leaves visible, for the launch form; None when it is unset."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None or not _init():
        return None
    total = _opt(pynvml.nvmlDeviceGetCount)
    return _("CUDA_VISIBLE_DEVICES={value}: {count} of {total} GPUs visible").format(
        value=repr(value), count=gpu_count(), total=total if total is not None else "?")


def compute_capabilities(count: int | None = None, picked: str | None = None) -> list[tuple[VisibleGpu, tuple[int, int]]]:
    """(GPU, compute capability) of the first ``count`` visible GPUs (all by default): the
    ones a run of ``count`` processes per node uses (``picked``: its ``gpus``). GPUs NVML
    cannot tell are left out."""
    out = []
    for g in visible_gpus(picked)[:count]:  # read with the inventory (_physical)
        cap = _inventory.get("capabilities", {}).get(g.nvml_index)
        if cap is not None:
            out.append((g, cap))
    return out


def first_pre_ampere(count: int | None = None, picked: str | None = None) -> tuple[str, int, int] | None:
    """The first of the first ``count`` visible GPUs with compute capability below 8.0 (V100,
    T4: bf16 only emulated, no FlashAttention-2), as (label, major, minor); None if none is."""
    for g, (major, minor) in compute_capabilities(count, picked):
        if major < 8:
            return g.label, major, minor
    return None


def bf16_unsupported_reason(count: int | None = None, picked: str | None = None) -> str | None:
    """Why bf16 cannot run on the first ``count`` visible GPUs (compute capability below 8.0:
    V100, T4 emulate it, many times slower), else None."""
    old = first_pre_ampere(count, picked)
    if old is None:
        return None
    label, major, minor = old
    return _("{gpu} has compute capability {major}.{minor}; bf16 needs 8.0 (Ampere) or newer").format(gpu=label, major=major, minor=minor)


def _opt(fn, *args):
    try:
        return fn(*args)
    except Exception:
        return None


def sample_gpus(picked: str | None = None) -> list[GpuSample]:
    """One reading of every GPU a run started from here can use (``picked``: the run's own
    CUDA_VISIBLE_DEVICES); [] when NVML is unavailable."""
    out: list[GpuSample] = []
    for g in visible_gpus(picked):
        try:
            mem = pynvml.nvmlDeviceGetMemoryInfo(g.handle)
        except Exception:
            continue
        util = _opt(pynvml.nvmlDeviceGetUtilizationRates, g.handle)
        power = _opt(pynvml.nvmlDeviceGetPowerUsage, g.physical)
        temp = _opt(pynvml.nvmlDeviceGetTemperature, g.physical, pynvml.NVML_TEMPERATURE_GPU)
        procs = _opt(pynvml.nvmlDeviceGetComputeRunningProcesses, g.handle) or []
        out.append(
            GpuSample(
                index=g.cuda_index,
                name=name_of(g.handle),
                util_percent=float(util.gpu) if util is not None else 0.0,
                mem_used=int(mem.used),
                mem_total=int(mem.total),
                power_w=power / 1000.0 if power is not None else None,
                temperature_c=float(temp) if temp is not None else None,
                processes={p.pid: int(p.usedGpuMemory or 0) for p in procs},
                nvml_index=g.nvml_index,
            )
        )
    return out


def sample_host() -> HostSample:
    vm = psutil.virtual_memory()
    return HostSample(cpu_percent=psutil.cpu_percent(interval=None), ram_used=int(vm.total - vm.available), ram_total=int(vm.total))
