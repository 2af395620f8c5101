"""The toy task of stage grpo, shared by its test (tests/test_grpo_toy.py) and its benchmark
(bench/grpo_toy.py): the demo's tiny model learns to add two one-digit numbers from a
verifiable reward (1 for the sum, 0 otherwise; a user's reward file).

A model with random weights almost never writes a digit, so no reward could be reached: it is
first fine-tuned (sft) for a few steps on the sums, stopped well before it knows them (about
half its answers right), then trained with grpo, which has to raise the share of right answers."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import steps_of, tiny_config, train_sync

SUM_REWARD = '''
def score(completions, reference, **columns):
    """1 when the answer is the sum, else 0."""
    return [float(c.strip() == r) for c, r in zip(completions, reference)]
'''
SFT_STEPS, GRPO_STEPS, WINDOW = 70, 250, 10  # WINDOW: logging_steps


def sums_file(folder: Path) -> Path:
    rows = [{"instruction": f"{a}+{b}=", "input": "", "output": str(a + b)} for a in range(5) for b in range(5)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sums.json").write_text(json.dumps(rows))
    return folder / "sums.json"


def train_toy(folder: Path, grpo_steps: int = GRPO_STEPS) -> tuple[list[dict], Path]:
    """(the grpo run's step events, its run folder), after the brief sft."""
    data = sums_file(folder)
    sft = tiny_config(folder / "sft", dataset=str(data), max_samples=None, max_steps=SFT_STEPS, learning_rate=1e-3,
                      per_device_train_batch_size=25, cutoff_len=32, run_name="sft", logging_steps=10)
    run, _events, proc = train_sync(sft)
    assert proc.returncode == 0, (run / "train.log").read_text()[-3000:]
    (folder / "rewards.py").write_text(SUM_REWARD)
    cfg = tiny_config(folder / "grpo", stage="grpo", model_name_or_path=str(run / "final"), model_init="pretrained",
                      dataset=str(data), max_samples=None, num_generations=8, per_device_train_batch_size=32,
                      max_completion_length=3, max_steps=grpo_steps, reward_funcs=f"{folder / 'rewards.py'}:score",
                      learning_rate=3e-4, cutoff_len=32, logging_steps=WINDOW, run_name="grpo", save_steps=100000)
    run, events, proc = train_sync(cfg, timeout=900)
    assert proc.returncode == 0, (run / "train.log").read_text()[-3000:]
    return steps_of(events), run


def mean_reward(steps: list[dict]) -> float:
    """The mean reward per step over step events (each covers window_steps steps)."""
    return sum(s["reward"] * s["window_steps"] for s in steps) / sum(s["window_steps"] for s in steps)
