"""The issue's toy task: grpo raises the share of right sums of a tiny model (tests/grpo_toy.py)."""

from __future__ import annotations

from grpo_toy import mean_reward, train_toy
from ftui.rundir.rollouts import read_rollouts


# about 70 s on one CPU core (a brief sft, then 250 grpo steps); not marked slow: the "Done when"
# test runs in every CI run (the project's rule for those)
def test_grpo_learns_to_add_two_digits_from_a_verifiable_reward(tmp_path):
    steps, run = train_toy(tmp_path)
    first, last = mean_reward(steps[:3]), mean_reward(steps[-3:])  # steps 1-30 against the last 30
    assert last > first + 0.2 and last > 0.7, [round(s["reward"], 3) for s in steps]
    assert steps[-1]["entropy"] < steps[0]["entropy"]  # surer of its answers
    right = [r for r in read_rollouts(run) if r["reward"] == 1.0]
    assert right and all(r["completion"].strip() == r["reference"] for r in right)
