"""Engines: how the one training loop runs on one device or many.

``make_engine`` picks the class from the preset's own metadata (``RunConfig.engine_spec``:
the ``ftui`` section of ``ftui/presets/engines/<name>.json``, or a user's DeepSpeed file),
never from the engine's name. Adding an engine: a preset JSON with its ``strategy``, a
module here with an ``Engine`` subclass, and one line in ``ENGINE_CLASSES``.
"""

from __future__ import annotations

import importlib

import torch

from ftui.config.schema import RunConfig
from ftui.runner.engines.base import DistInfo, Engine, StepOutcome, build_optimizer, pick_device

__all__ = ["DistInfo", "Engine", "StepOutcome", "build_optimizer", "make_engine", "pick_device"]

# strategy -> "module:class"; imported only when used (DeepSpeed is heavy and optional)
ENGINE_CLASSES = {
    "single": "ftui.runner.engines.base:Engine",
    "ddp": "ftui.runner.engines.ddp:DDPEngine",
    "fsdp": "ftui.runner.engines.fsdp:FSDPEngine",
    "deepspeed": "ftui.runner.engines.deepspeed:DeepSpeedEngine",
}


def make_engine(cfg: RunConfig, info: DistInfo, device: torch.device) -> Engine:
    """The engine the config's preset (or DeepSpeed file) describes."""
    module, _, name = ENGINE_CLASSES[cfg.engine_spec.strategy].partition(":")
    return getattr(importlib.import_module(module), name)(cfg, info, device)
