"""Helpers of the ppo tests: an rm run to score with (made by hand as ftui writes one, random
weights) and a tiny ppo config over the sums data."""

from __future__ import annotations

from pathlib import Path

from conftest import tiny_config
from test_grpo_train import sums_data
from test_rewards import make_rm_run


def ppo_config(tmp_path: Path, **overrides):
    rm_run = tmp_path / "rm-run"
    if not rm_run.exists():
        make_rm_run(tmp_path)
    over = dict(stage="ppo", dataset=str(sums_data(tmp_path)), max_samples=None, cutoff_len=32, reward_model=str(rm_run),
                reward_model_type="full", per_device_train_batch_size=4, max_new_tokens=6, ppo_epochs=2, max_steps=6,
                logging_steps=1, learning_rate=5e-3)
    return tiny_config(tmp_path, **(over | overrides))
