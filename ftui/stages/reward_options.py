"""The reward keys the stages that learn from rewards share (grpo; ppo later): which
functions score a completion and their weights. Torch-free: the config's checks parse them.

(A minimal version written by grpo-core; the rewards helper owns this module.)"""

from __future__ import annotations

from typing import Any

from ftui.i18n import N_
from ftui.stages.description import StageOption

REWARD_OPTIONS: tuple[StageOption, ...] = (
    StageOption("reward_funcs", N_("reward functions"),
                N_("grpo: comma-separated reward functions: a built-in (accuracy) or a user's file:function"),
                "accuracy", str),
    StageOption("reward_weights", N_("reward weights"),
                N_("grpo: comma-separated weights, one per reward function (empty: all 1)"), "", str),
)


def reward_entries(value: Any) -> list[str]:
    """The reward functions named by ``reward_funcs``: a comma-separated string or a YAML list."""
    items = value if isinstance(value, (list, tuple)) else str(value or "").split(",")
    return [str(item).strip() for item in items if str(item).strip()]


def reward_weight_values(value: Any) -> list[float]:
    """The weights of ``reward_weights`` (ValueError on a non-number); empty: none given."""
    items = value if isinstance(value, (list, tuple)) else str(value or "").split(",")
    return [float(item) for item in items if str(item).strip()]
