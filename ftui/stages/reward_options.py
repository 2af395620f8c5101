"""The reward options of the stages that learn from rewards (grpo, ppo): which reward functions
score a completion, their weights, and the built-ins' own keys. Defined once and listed by each
stage's description; torch-free, so the launch form and the config checks read them too.

``reward_funcs`` is a comma-separated list (a YAML list is accepted too) of entries, each one of:

- a built-in: ``accuracy`` (the answer against the record's reference through math-verify, TRL's
  ``accuracy_reward``), ``exact`` (the stripped text equal to the reference), ``format`` (the
  completion matches ``format_pattern`` whole), ``think_format`` (TRL's ``think_format_reward``),
  ``length`` (DAPO's soft overlong punishment over the completion's tokens);
- a user's function ``FILE.py:FUNCTION`` (the path relative to the current directory, as
  ``dataset_dir`` and ``deepspeed`` are read);
- an ftui ``rm`` run's directory: its reward model scores prompt + completion.

The names match TRL's GRPOConfig (``reward_weights``) and TRL's reward helpers
(``soft_punish_cache``) where they have one.
"""

from __future__ import annotations

from typing import Any

from ftui.i18n import N_
from ftui.stages.description import StageOption

BUILTIN_REWARDS = ("accuracy", "exact", "format", "think_format", "length")
# Needs the record's reference answer (alpaca's output, sharegpt's last assistant turn)
NEEDS_REFERENCE = ("accuracy", "exact")
# Needs the math-verify package (pip install 'ftui[rl]')
NEEDS_MATH_VERIFY = ("accuracy",)
RL_EXTRA_INSTALL = "pip install 'ftui[rl]'"
# open-r1's / TRL's think-then-answer format: <think>...</think> then <answer>...</answer>
DEFAULT_FORMAT_PATTERN = r"<think>.*?</think>\s*<answer>.*?</answer>"

REWARD_OPTIONS: tuple[StageOption, ...] = (
    StageOption("reward_funcs", N_("reward functions"),
                N_("comma-separated: accuracy, exact, format, think_format, length, FILE.py:FUNCTION (a function of "
                   "yours) or an rm run's directory"), "accuracy", str),
    StageOption("reward_weights", N_("reward weights"),
                N_("comma-separated numbers, one per reward function (empty: all 1)"), "", str),
    StageOption("format_pattern", N_("format reward pattern"),
                N_("format: a regular expression the whole completion must match (dot matches newlines)"),
                DEFAULT_FORMAT_PATTERN, str),
    StageOption("soft_punish_cache", N_("length: soft punishment tokens"),
                N_("length: the last tokens before max_completion_length over which the reward falls from 0 to -1 "
                   "(DAPO's overlong buffer)"), 64, int, ge=1),
)
REWARD_KEYS = tuple(o.key for o in REWARD_OPTIONS)


def reward_entries(value: Any) -> list[str]:
    """The entries of ``reward_funcs``: comma-separated text or a YAML list, stripped, empty ones
    dropped (the config checks refuse an empty list)."""
    items = value if isinstance(value, (list, tuple)) else str(value or "").split(",")
    return [str(item).strip() for item in items if str(item).strip()]


def reward_weight_values(value: Any) -> list[float]:
    """The numbers of ``reward_weights`` (comma-separated text or a YAML list); empty: [] (all
    1). ValueError names the entry that is not a finite number."""
    import math

    items = value if isinstance(value, (list, tuple)) else str(value if value is not None else "").split(",")
    out = []
    for item in items:
        text = str(item).strip()
        if not text and not isinstance(value, (list, tuple)):
            continue
        try:
            number = float(text)
        except ValueError:
            raise ValueError(text) from None
        if not math.isfinite(number) or isinstance(item, bool):
            raise ValueError(text)
        out.append(number)
    return out


def entry_kind(entry: str) -> str:
    """What an entry of ``reward_funcs`` is: "builtin", "function" (FILE.py:FUNCTION, or one
    that looks meant as one: a colon or a .py file) or "rm" (anything else: a run directory)."""
    if entry in BUILTIN_REWARDS:
        return "builtin"
    if ":" in entry or entry.endswith(".py"):
        return "function"
    return "rm"


def split_function_entry(entry: str) -> tuple[str, str]:
    """(file, function) of a ``FILE.py:FUNCTION`` entry."""
    path, _sep, name = entry.rpartition(":")
    return path, name.strip()
