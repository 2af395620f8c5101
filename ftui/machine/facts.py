"""What this machine has, read once per check: its GPUs (for a run's ``gpus`` pick), the
optional packages ftui can use and torch's version.

The config's preflight (``ftui.config.preflight``) compares a config with one snapshot of
these facts, so the launch form and ``ftui train`` judge a config against the same facts, and
every check of one validation sees the same machine (NVML is asked once, not per rule). No
torch here: the package list and torch's version come from import metadata, the GPUs from
NVML (``ftui.machine.gpu``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

# The optional packages a check may ask about (import names): each is an extra of ftui's
# (pyproject's optional-dependencies) or a package a setting names
OPTIONAL_PACKAGES = ("bitsandbytes", "liger_kernel", "deepspeed", "gguf", "tensorboard", "wandb", "nltk", "jieba",
                     "rouge_chinese", "modelscope")

# Whether the checks that ask about this machine (its GPUs, bitsandbytes, liger-kernel) apply:
# off while `ftui plan --gpu-memory` plans for GPUs elsewhere (from a login node or a laptop).
_THIS_MACHINE: ContextVar[bool] = ContextVar("ftui_checks_this_machine", default=True)


@contextmanager
def for_another_machine() -> Iterator[None]:
    """Facts gathered within describe a machine with the GPUs a config asks for: what only this
    machine's GPUs and packages decide is not checked."""
    token = _THIS_MACHINE.set(False)
    try:
        yield
    finally:
        _THIS_MACHINE.reset(token)


@dataclass(frozen=True)
class MachineFacts:
    """One reading of the machine, for one config's ``gpus`` pick and process count.

    ``this_machine`` False: the config runs elsewhere (``ftui plan --gpu-memory``); the GPU
    facts then say a GPU is there and nothing of this machine's GPUs is known."""

    this_machine: bool
    picked: str | None  # the config's gpus (None: CUDA_VISIBLE_DEVICES, else every GPU)
    machine_gpus: int  # every GPU NVML sees on the machine
    visible_gpus: int  # the GPUs a run with ``picked`` can use
    pre_ampere: tuple[str, int, int] | None  # the first of this node's ranks' GPUs below compute capability 8.0
    packages: frozenset[str]  # the OPTIONAL_PACKAGES installed here
    torch_version: tuple[int, int] | None  # (major, minor), None without torch

    @classmethod
    def gather(cls, picked: str | None = None, nproc: int = 1) -> "MachineFacts":
        """The facts for a run with ``gpus: picked`` and ``nproc`` processes on this node (NVML,
        the import system and torch's metadata, each asked once)."""
        packages = frozenset(p for p in OPTIONAL_PACKAGES if _installed(p))
        if not _THIS_MACHINE.get():
            return cls(False, picked, 0, 0, None, packages, None)
        from ftui.machine.gpu import first_pre_ampere, gpus_named, visible_gpus

        machine = len(gpus_named(None))
        visible = len(visible_gpus(picked)) if machine else 0
        old = first_pre_ampere(nproc, picked) if visible else None
        return cls(True, picked, machine, visible, old, packages, installed_torch())

    @classmethod
    def without_gpu(cls, packages: frozenset[str] | None = None, torch_version: tuple[int, int] | None = None) -> "MachineFacts":
        """A machine with no GPU (a login node, a laptop), for reasoning about one directly."""
        found = frozenset(p for p in OPTIONAL_PACKAGES if _installed(p)) if packages is None else packages
        return cls(True, None, 0, 0, None, found, torch_version if torch_version is not None else installed_torch())

    @property
    def gpu_present(self) -> bool:
        """Whether a run with this pick has a GPU (assumed so for another machine)."""
        return not self.this_machine or self.visible_gpus > 0

    def has(self, package: str) -> bool:
        """Whether an optional package (its import name) is installed here."""
        return package in self.packages


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken parent package, or a module without a spec
        return False


def installed_torch() -> tuple[int, int] | None:
    """torch's (major, minor) from its package metadata, None when it is not installed here."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None
