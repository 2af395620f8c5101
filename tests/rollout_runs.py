"""GRPO run directories written by hand for the rollout browser's tests: events.jsonl with
the step figures a grpo run writes (interface 5's names) and rollouts.jsonl as its rank 0
writes it (ftui.rundir.rollouts.RolloutWriter)."""

from __future__ import annotations

import math
from pathlib import Path

from ftui.rundir.rollouts import RolloutWriter
from tests.fixtures_runs import write_run

HOSTILE_MARKUP = "[bold red]x[/] and [link=http://evil]y[/link]"
HOSTILE_ESCAPE = "\x1b[31mred\x1b[0m \x1b]52;c;ZXZpbA==\x07 \r\u202e"
LONG_COMPLETION = "9" * 100_000 + " THE-END"


def grpo_figures(step: int) -> dict:
    reward = round(1 - math.exp(-step / 20), 6)
    return {"reward": reward, "reward_std": 0.3, "reward_accuracy": reward, "reward_format": 0.5,
            "completion_length": 12.5, "clipped_ratio": 0.25, "frac_reward_zero_std": 0.5,
            "kl": 0.0012, "entropy": 1.25, "clip_ratio": 0.0}


def rollout(step: int, group: int, sample: int, completion: str, reward: float | None, **kw) -> dict:
    row = {"step": step, "generation": step - 1, "group": group, "sample": sample, "prompt": f"What is {group} + {sample}?",
           "completion": completion, "reference": str(group + sample),
           "rewards": {"accuracy": reward, "format": 0.5}, "reward": None if reward is None else reward + 0.5,
           "advantage": 0.0 if reward is None else reward - 0.5, "length": len(completion.split()), "truncated": False}
    row.update(kw)
    return row


ROWS = [
    rollout(1, 0, 0, "The answer is 0", 1.0),
    rollout(1, 0, 1, "I think 7", 0.0),
    rollout(2, 1, 0, "Answer: " + HOSTILE_MARKUP, 0.0),
    rollout(2, 1, 1, "escape " + HOSTILE_ESCAPE, None),
    rollout(3, 0, 0, LONG_COMPLETION, 0.0, truncated=True, length=256),
    rollout(3, 0, 1, "The answer is 1", 1.0),
]


def write_grpo_run(root: Path, name: str = "qwen-grpo-20231114-221320", rows: list[dict] = ROWS, steps: int = 3, **kw) -> Path:
    run = write_run(root, name, steps=steps, max_steps=100, step_extras=grpo_figures, **kw)
    (run / "config.yaml").write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: grpo\ndataset: gsm8k\n")
    with RolloutWriter(run) as writer:
        writer.write(rows)
    return run
