"""Training stages: what differs between SFT, pre-training and the preference stages (dpo, kto, rm).

Adding a stage: a module here with a :class:`Stage` subclass, one line in ``STAGES``, and its
name in ``ftui.presets.choices.STAGE_DESCRIPTIONS`` (the config's list); a record reader in ``ftui.data.records`` only
when the stage reads a new data format. The loop, the engines, events, checkpoints and the
dashboard need no change (see docs/architecture.md).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from ftui.config.schema import RunConfig
from ftui.runner.data import TokenizedData
from ftui.runner.stages.base import MicroLoss, Stage

__all__ = ["MicroLoss", "Stage", "STAGES", "make_stage", "build_datasets"]

# stage name -> "module:class", imported when used
STAGES = {
    "sft": "ftui.runner.stages.sft:SFTStage",
    "pt": "ftui.runner.stages.pt:PretrainStage",
    "dpo": "ftui.runner.stages.dpo:DPOStage",
    "kto": "ftui.runner.stages.kto:KTOStage",
    "rm": "ftui.runner.stages.rm:RewardStage",
}


def make_stage(cfg: RunConfig, tokenizer: Any) -> Stage:
    module, _, name = STAGES[cfg.stage].partition(":")
    return getattr(importlib.import_module(module), name)(cfg, tokenizer)


def build_datasets(cfg: RunConfig, tokenizer: Any, progress: Callable[[int, int], None] | None = None) -> TokenizedData:
    """The config's datasets, encoded by its stage (what the runner trains on)."""
    return make_stage(cfg, tokenizer).build_data(progress)
