"""Training stages, the torch half: what differs between SFT, pre-training and the preference
stages (dpo, kto, rm) when they run.

Each stage is described once, torch-free, in ``ftui/stages/`` (its data, options, figures,
the planner's terms); the module of the same name here implements it with a :class:`Stage`
subclass of that ``name`` (or the description's ``runner`` names "module:Class"). Adding a
stage is those two modules; the loop, the engines, events, checkpoints and the dashboard need
no change (see docs/architecture.md).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from ftui.config.schema import RunConfig
from ftui.runner.data import TokenizedData
from ftui.runner.stages.base import BatchSource, DatasetBatches, GeneratedBatches, MicroLoss, Stage
from ftui.stages import describe, descriptions

__all__ = ["BatchSource", "DatasetBatches", "GeneratedBatches", "MicroLoss", "Stage", "stages", "stage_class", "make_stage",
           "build_datasets"]


def stages() -> dict[str, type[Stage]]:
    """The registry: every described stage's name (ftui.stages, in its order) -> the Stage
    subclass that implements it. Imports them all (the check that both sides hold the same
    stages); a job imports only its own, through :func:`make_stage`."""
    return {name: stage_class(name) for name in descriptions()}


def stage_class(name: str) -> type[Stage]:
    """The Stage subclass that implements the description of ``name``: the one its ``runner``
    names, else the subclass with that ``name`` in ``ftui.runner.stages.NAME``."""
    description = describe(name)
    if description.runner:
        module, _sep, attr = description.runner.partition(":")
        return getattr(importlib.import_module(module), attr)
    module = importlib.import_module(f"{__name__}.{name}")
    found = [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, Stage) and c.name == name]
    if len(found) != 1:
        raise LookupError(f"{module.__name__} defines {len(found)} Stage subclasses named {name!r}; one implements the stage")
    return found[0]


def make_stage(cfg: RunConfig, tokenizer: Any) -> Stage:
    return stage_class(cfg.stage)(cfg, tokenizer)


def build_datasets(cfg: RunConfig, tokenizer: Any, progress: Callable[[int, int], None] | None = None) -> TokenizedData:
    """The config's datasets, encoded by its stage (what the runner trains on)."""
    return make_stage(cfg, tokenizer).build_data(progress)
