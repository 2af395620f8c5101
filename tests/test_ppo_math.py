"""ftui's PPO maths (ftui/runner/ppo_math.py) against values TRL 0.9.6 itself computed
(tests/data/trl096_ppo: what LLaMA-Factory 0.9.5's PPO runs; TRL is not a dependency)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ftui.runner import ppo_math
from ftui.runner.ppo_math import AdaptiveKLController, RunningMoments

REF = json.loads((Path(__file__).parent / "data" / "trl096_ppo" / "ppo.json").read_text())
TOL = dict(rtol=1e-5, atol=1e-6)


def _t(value) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float64)


def _close(actual: torch.Tensor, expected) -> None:
    torch.testing.assert_close(actual, _t(expected), **TOL)


MASK = _t(REF["mask"])


@pytest.mark.parametrize("case", REF["rewards"], ids=lambda c: f"kl_coef{c['kl_coef']}")
def test_token_rewards_put_the_score_at_the_last_token_beside_the_kl_penalty(case):
    rewards, non_score, kls = ppo_math.token_rewards(_t(REF["scores"]), _t(REF["logps"]), _t(REF["ref_logps"]), MASK,
                                                     case["kl_coef"])
    _close(rewards, case["rewards"])
    _close(non_score, case["non_score_rewards"])
    _close(kls, case["kls"])
    assert ppo_math.sequence_kl(kls, MASK).item() == pytest.approx(case["sequence_kl"], rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("shift", [True, False])
def test_whiten_with_and_without_the_mean_shift(shift):
    whitened = ppo_math.whiten(_t(REF["whiten"]["values"]), MASK, shift_mean=shift)
    _close(whitened, REF["whiten"]["shifted" if shift else "unshifted"])


@pytest.mark.parametrize("case", REF["gae"], ids=lambda c: f"whiten_rewards={c['whiten_rewards']}")
def test_gae_advantages_and_returns(case):
    rewards = _t(REF["rewards"][0]["rewards"])
    values, advantages, returns = ppo_math.gae(_t(REF["values"]), rewards, MASK, gamma=REF["gamma"], lam=REF["lam"],
                                               whiten_rewards=case["whiten_rewards"])
    _close(values, case["values"])
    _close(advantages, case["advantages"])
    _close(returns, case["returns"])


@pytest.mark.parametrize("case", REF["losses"], ids=lambda c: c["name"])
def test_clipped_policy_and_value_losses_and_their_gradients(case):
    gae = REF["gae"][0]
    logps = _t(case["new_logps"]).requires_grad_(True)
    vpreds = _t(case["vpreds"]).requires_grad_(True)
    pg, vf, figures = ppo_math.ppo_losses(_t(REF["logps"]), _t(gae["values"]), vpreds, logps, MASK,
                                          _t(gae["advantages"]), _t(gae["returns"]))
    (pg + vf).backward()
    assert pg.item() == pytest.approx(case["pg_loss"], rel=1e-5, abs=1e-6)
    assert vf.item() == pytest.approx(case["vf_loss"], rel=1e-5, abs=1e-6)
    _close(logps.grad, case["grad_new_logps"])
    _close(vpreds.grad, case["grad_vpreds"])
    for name in ("clipfrac", "vf_clipfrac", "approxkl", "policykl"):
        assert figures[name] == pytest.approx(case[name], rel=1e-5, abs=1e-6), name
    skipped = case["name"] == "skipped"
    assert figures["skipped"] == float(skipped)
    assert (figures["ratio"] > REF["ratio_threshold"]) == skipped
    if not skipped:
        assert case["clipfrac"] > 0 and case["vf_clipfrac"] > 0  # the reference clips, both losses
        assert figures["ratio"] == pytest.approx(case["ratio"], rel=1e-5)


def test_adaptive_kl_controller_follows_trl_step_by_step():
    ref = REF["kl_controller"]
    ctl = AdaptiveKLController(value=ref["init"], target=ref["target"], horizon=ref["horizon"])
    for update in ref["updates"]:
        ctl.update(update["current"], ref["n_steps"])
        assert ctl.value == pytest.approx(update["value"], rel=1e-12)


def test_running_score_normalisation_over_three_batches():
    running = RunningMoments()
    for step in REF["score_norm"]:
        scores = torch.tensor(step["scores"])  # float32, as the scores reach TRL's step
        before = RunningMoments(running.mean, running.var, running.std, running.count)
        batch_mean, batch_std = before.update(scores)
        assert (batch_mean, batch_std) == pytest.approx((step["batch_mean"], step["batch_std"]), rel=1e-6)
        normalised = running.normalise(scores)
        torch.testing.assert_close(normalised, torch.tensor(step["normalised"]), rtol=1e-5, atol=1e-6)
        assert float(running.mean) == pytest.approx(step["running_mean"], rel=1e-6)
        assert float(running.std) == pytest.approx(step["running_std"], rel=1e-6)
        assert float(running.var) == pytest.approx(step["running_var"], rel=1e-6)


def test_whitening_one_token_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="per_device_train_batch_size"):
        ppo_math.whiten(torch.ones(1, 3), torch.tensor([[1.0, 0.0, 0.0]]))
