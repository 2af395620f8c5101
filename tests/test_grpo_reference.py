"""ftui's GRPO loss, gradients and advantages against values TRL 1.16 itself produced on the same batch
(tests/data/trl_grpo: make_reference.py made them; TRL is not a dependency). Single process, one micro
batch, GA 1: ftui's loop divides the micro batch's total by its units, so TRL's loss = total / units."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from ftui.runner.grpo_loss import group_advantages, grpo_loss

DATA = Path(__file__).parent / "data" / "trl_grpo"
LOSSES = json.loads((DATA / "losses.json").read_text())
ADVANTAGES = json.loads((DATA / "advantages.json").read_text())
FIGURES = {"kl": "kl", "clip_ratio": "clip_ratio/region_mean", "clip_ratio_low": "clip_ratio/low_mean",
           "clip_ratio_high": "clip_ratio/high_mean"}


def _t(name: str) -> torch.Tensor:
    return torch.tensor(LOSSES[name], dtype=torch.float64)


def _case_id(case: dict) -> str:
    old = "old" if case["old_logps_given"] else "onpolicy"
    return (f"{case['loss_type']}-beta{case['beta']}-{old}" + (f"-delta{case['delta']}" if case["delta"] else "")
            + ("-biascorrected" if case["use_bias_correction_kl"] else ""))


def _ftui_loss(case: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """(logits leaf, total, units, figures) of ftui's grpo_loss on the stored batch."""
    logits = _t("logits").requires_grad_(True)
    ids = torch.tensor(LOSSES["completion_ids"])
    logps = torch.log_softmax(logits / LOSSES["temperature"], -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    total, units, figures = grpo_loss(
        logps, _t("old_logps") if case["old_logps_given"] else None, _t("ref_logps") if case["beta"] else None,
        _t("advantages"), _t("mask"), loss_type=case["loss_type"], beta=case["beta"], epsilon=LOSSES["epsilon"],
        epsilon_high=LOSSES["epsilon_high"], max_completion_length=LOSSES["max_completion_length"],
        delta=case["delta"], bias_correction_kl=case["use_bias_correction_kl"])
    return logits, total, units, figures


@pytest.mark.parametrize("case", LOSSES["cases"], ids=_case_id)
def test_loss_and_logit_gradients_match_trl(case):
    logits, total, units, _ = _ftui_loss(case)
    loss = total / units
    loss.backward()
    assert loss.item() == pytest.approx(case["loss"], rel=1e-5, abs=1e-6)
    torch.testing.assert_close(logits.grad, torch.tensor(case["grad_logits"], dtype=torch.float64),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", LOSSES["cases"], ids=_case_id)
def test_kl_and_clip_figures_match_trl_metrics(case):
    """The loop divides a figure by the window's loss units; TRL logs token means (masked, over the
    batch) for every loss_type, so figure / units must be that mean whatever the units are."""
    _, _, units, figures = _ftui_loss(case)
    expected = {ours: case["metrics"][theirs] for ours, theirs in FIGURES.items() if theirs in case["metrics"]}
    assert set(figures) == set(expected)  # kl only when beta != 0
    for name, value in expected.items():
        assert (figures[name] / units).item() == pytest.approx(value, rel=1e-5, abs=1e-6), name


def test_reference_batch_exercises_clipping_and_a_masked_row():
    """The stored batch is a real test: some tokens clipped either side, a truncated row masked out."""
    clipped = [c["metrics"] for c in LOSSES["cases"] if c["old_logps_given"] and not c["delta"]]
    assert all(0 < m["clip_ratio/low_mean"] and 0 < m["clip_ratio/high_mean"] for m in clipped)
    assert any(sum(row) == 0 for row in LOSSES["mask"])
    assert LOSSES["max_completion_length"] > len(LOSSES["mask"][0])  # dr_grpo's divisor is not the padded length


def _nan(rows):
    return torch.tensor([[math.nan if x is None else x for x in row] for row in rows], dtype=torch.float64)


@pytest.mark.parametrize("case", ADVANTAGES["cases"],
                         ids=lambda c: f"{c['scale_rewards']}-g{c['group']}-w{c['weights'][1]}-p{c['processes']}")
def test_advantages_match_trl(case):
    """Advantages from TRL's own _generate_and_score_completions (with 2 processes, the ranks' slices of
    groups that straddle them, in order); per-row rewards and zero_std from the transcription."""
    per_func = _nan(case["rewards_per_func"]).float()  # float32, as the reward functions' rows come
    advantages, rewards, zero_std = group_advantages(per_func, torch.tensor(case["weights"]), case["group"],
                                                     case["scale_rewards"])
    torch.testing.assert_close(advantages.double(), torch.tensor(case["advantages"], dtype=torch.float64),
                               rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rewards.double(), torch.tensor(case["rewards"], dtype=torch.float64),
                               rtol=1e-5, atol=1e-6)
    assert zero_std.tolist() == case["zero_std"]
    scored = ~torch.isnan(per_func).all(dim=1)  # TRL's logged reward leaves the all-None row out
    assert rewards[scored].mean().item() == pytest.approx(case["reward"], rel=1e-5)
    assert zero_std.float().mean().item() == pytest.approx(case["frac_reward_zero_std"], abs=1e-6)


def test_advantage_cases_cover_the_edge_rows():
    group = next(c for c in ADVANTAGES["cases"] if c["scale_rewards"] == "group" and c["group"] == 3)
    assert group["zero_std"][3:6] == [True] * 3 and group["advantages"][3:6] == [0.0] * 3  # equal rewards
    assert group["rewards_per_func"][7] == [None, None] and group["advantages"][7] == 0.0  # every function None


def test_unknown_loss_type_and_scale_are_refused_by_name():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="loss_type"):
        grpo_loss(x, None, None, torch.zeros(1), torch.ones(1, 2), loss_type="ppo", beta=0.0, epsilon=0.2,
                  epsilon_high=0.2, max_completion_length=2)
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(torch.zeros(2, 1), torch.ones(1), 2, "median")
