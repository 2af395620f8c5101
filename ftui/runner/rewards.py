"""Reward functions for the stages that learn from rewards (grpo): each scores every
completion; a user's function is called with TRL's signature.

(A minimal version written by grpo-core: exact-match ``accuracy`` and a user's
``file.py:function``; the rewards helper owns this module.)"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any, Callable

import torch

from ftui.i18n import _
from ftui.stages.reward_options import reward_entries, reward_weight_values


class RewardError(Exception):
    """A reward function failed; the message names it and the record."""


def accuracy(prompts: list[str], completions: list[str], reference: list[Any], **_columns: Any) -> list[float | None]:
    """1 when the completion, stripped, is the dataset's answer, else 0."""
    return [None if ref is None else float(c.strip() == str(ref).strip()) for c, ref in zip(completions, reference)]


BUILT_INS: dict[str, Callable[..., list]] = {"accuracy": accuracy}


def user_function(entry: str) -> Callable[..., list]:
    path, _sep, name = entry.rpartition(":")
    spec = importlib.util.spec_from_file_location(f"ftui_reward_{Path(path).stem}", path)
    if not path or not Path(path).is_file() or spec is None or spec.loader is None:
        raise RewardError(_("reward_funcs: no file {path}").format(path=path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    func = getattr(module, name, None)
    if not callable(func):
        raise RewardError(_("reward_funcs: {path} has no function {name}").format(path=path, name=name))
    return func


class Rewards:
    def __init__(self, entries: list[str], weights: list[float]):
        self.funcs = [BUILT_INS[e] if e in BUILT_INS else user_function(e) for e in entries]
        names: list[str] = []
        for e in entries:
            base = e if e in BUILT_INS else e.rpartition(":")[2]
            names.append(base if base not in names else f"{base}_{len(names) + 1}")
        self.names = names
        self.weights = weights or [1.0] * len(entries)

    def __call__(self, prompts: list[str], completions: list[str], completion_ids: list[list[int]],
                 records: list[dict]) -> torch.Tensor:
        columns = {k: [r.get(k) for r in records] for k in records[0]} if records else {}
        out = torch.full((len(completions), len(self.funcs)), math.nan)
        for j, (func, name) in enumerate(zip(self.funcs, self.names)):
            try:
                values = func(prompts=prompts, completions=completions, completion_ids=completion_ids, **columns)
            except Exception as err:  # noqa: BLE001 (a user's function: any error is theirs, said with its name)
                raise RewardError(_("reward function {name} raised {error}").format(name=name, error=repr(err))) from None
            if not isinstance(values, (list, tuple)) or len(values) != len(completions):
                raise RewardError(_("reward function {name} returned {got}, not one number per completion ({n})").format(
                    name=name, got=type(values).__name__, n=len(completions)))
            for i, v in enumerate(values):
                if v is None:
                    continue
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise RewardError(_("reward function {name} returned {value!r} for record {record}: not a number").format(
                        name=name, value=v, record=records[i].get("record")))
                out[i, j] = float(v)
        return out


def load_rewards(cfg: Any, tokenizer: Any, device: Any) -> Rewards:
    return Rewards(reward_entries(getattr(cfg, "reward_funcs", "accuracy")),
                   reward_weight_values(getattr(cfg, "reward_weights", "")))
