"""GRPO's maths (ftui.runner.grpo_loss) on small cases checked by hand: advantages per group,
batch or none, with a row no function scored; each loss type's sum and units, the clipping and
the k3 KL term. (TRL-produced values: tests/data/trl_grpo, the references helper's.)"""

from __future__ import annotations

import math

import pytest
import torch

from ftui.runner.grpo_loss import group_advantages, grpo_loss

NAN = float("nan")


def test_group_advantages_scale_by_each_groups_unbiased_std():
    rewards = torch.tensor([[1.0], [0.0], [1.0], [3.0], [3.0], [3.0]])
    adv, total, zero = group_advantages(rewards, torch.ones(1), 3, "group")
    std = math.sqrt(1 / 3)  # 1, 0, 1: mean 2/3, unbiased variance 1/3
    want = [(1 - 2 / 3) / (std + 1e-4), (0 - 2 / 3) / (std + 1e-4), (1 - 2 / 3) / (std + 1e-4), 0, 0, 0]
    assert adv.tolist() == pytest.approx(want, abs=1e-5)
    assert total.tolist() == [1, 0, 1, 3, 3, 3]
    assert zero.tolist() == [False] * 3 + [True] * 3


def test_batch_scaling_uses_the_whole_generations_std_and_none_leaves_the_difference():
    rewards = torch.tensor([[1.0], [0.0], [2.0], [4.0]])
    batch_std = torch.tensor([1.0, 0.0, 2.0, 4.0]).std().item()
    adv, _, zero = group_advantages(rewards, torch.ones(1), 2, "batch")
    assert adv.tolist() == pytest.approx([0.5 / (batch_std + 1e-4), -0.5 / (batch_std + 1e-4),
                                          -1 / (batch_std + 1e-4), 1 / (batch_std + 1e-4)], abs=1e-5)
    assert not zero.any()
    adv, _, _ = group_advantages(rewards, torch.ones(1), 2, "none")
    assert adv.tolist() == pytest.approx([0.5, -0.5, -1, 1])


def test_weights_sum_the_functions_and_an_unscored_row_gets_no_advantage_nor_a_place_in_its_group():
    rewards = torch.tensor([[1.0, NAN], [0.0, 1.0], [NAN, NAN], [2.0, 0.0]])
    adv, total, _ = group_advantages(rewards, torch.tensor([1.0, 0.5]), 4, "none")
    assert total.tolist() == [1.0, 0.5, 0.0, 2.0]  # nansum of weighted scores
    mean = (1.0 + 0.5 + 2.0) / 3  # the unscored row is left out of the mean
    assert adv.tolist() == pytest.approx([1.0 - mean, 0.5 - mean, 0.0, 2.0 - mean])


def loss(logps, old=None, ref=None, adv=(1.0, -2.0), mask=None, **kw):
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]) if mask is None else mask
    args = dict(loss_type="dapo", beta=0.0, epsilon=0.2, epsilon_high=0.2, max_completion_length=4) | kw
    return grpo_loss(logps, old, ref, torch.tensor(adv), mask, **args)


@pytest.mark.parametrize("loss_type, total, units", [
    ("dapo", -(1.0 * 3 - 2.0 * 1), 4),      # sum of -A over the 4 tokens; units: tokens
    ("grpo", -(1.0 - 2.0), 2),              # each row's token mean of -A; units: rows
    ("dr_grpo", -(3.0 - 2.0) / 4, 2),       # token sum / max_completion_length; units: rows
    ("bnpo", -(3.0 - 2.0) / 4, 1),          # the micro batch's token mean; one unit
])
def test_on_policy_each_loss_type_is_minus_the_advantage_in_its_units(loss_type, total, units):
    logps = torch.log(torch.full((2, 3), 0.5)).requires_grad_()
    got, n, figures = loss(logps, loss_type=loss_type)
    assert got.item() == pytest.approx(total) and n.item() == units
    assert "kl" not in figures and figures["clip_ratio"].item() == 0
    got.backward()  # ratio 1: the gradient is -A on each counted token (scaled as the loss)
    if loss_type == "dapo":
        assert logps.grad.tolist() == [[-1.0, -1.0, -1.0], [2.0, 0.0, 0.0]]


def test_a_ratio_past_the_clip_gives_no_gradient_and_is_counted():
    logps = torch.zeros((2, 3), requires_grad=True)
    old = torch.full((2, 3), -math.log(1.5))  # ratio 1.5
    total, _n, figures = loss(logps, old)
    # row 0 (A = 1 > 0): clipped at 1.2, no gradient; row 1 (A = -2): min(-1.5*-2, -1.2*-2) -> unclipped 3
    assert total.item() == pytest.approx(-(1.2 * 3) + 1.5 * 2)
    total.backward()
    assert logps.grad[0].tolist() == [0.0, 0.0, 0.0] and logps.grad[1, 0].item() == pytest.approx(2 * 1.5)
    assert figures["clip_ratio_high"].item() == 3 and figures["clip_ratio_low"].item() == 0
    assert figures["clip_ratio"].item() == 3


def test_epsilon_high_widens_the_upper_clip_only():
    old = torch.full((2, 3), -math.log(1.25))
    total, _n, figures = loss(torch.zeros((2, 3)), old, epsilon_high=0.28)
    assert total.item() == pytest.approx(-(1.25 * 3) + 1.25 * 2) and figures["clip_ratio"].item() == 0


def test_the_kl_term_is_k3_to_the_reference_weighted_by_beta():
    logps = torch.zeros((2, 3))
    ref = torch.full((2, 3), 0.5)
    total, _n, figures = loss(logps, None, ref, adv=(0.0, 0.0), beta=0.1)
    k3 = math.exp(0.5) - 0.5 - 1
    assert figures["kl"].item() == pytest.approx(4 * k3)
    assert total.item() == pytest.approx(0.1 * 4 * k3)


# TRL 1.16's GRPOTrainer._compute_loss on one fixed off-policy micro batch (B 4, T 5, vocab 11,
# temperature 0.7, epsilon 0.2 / 0.28, max_completion_length 6, use_bias_correction_kl False,
# one process, no accumulation): its loss and the norm of the logits' gradient, printed by the
# research script /work/notes/issue43_ref/grpo_ref_loss.py (TRL run on a stub trainer).
TRL_116 = {
    ("grpo", 0.0): (0.3325120440385866, 0.29430167475083296), ("grpo", 0.04): (0.4620631634264477, 0.3258079080035633),
    ("bnpo", 0.0): (0.30622795826926147, 0.26244927473451163), ("bnpo", 0.04): (0.4572960199107486, 0.311424606788911),
    ("dr_grpo", 0.0): (0.17863297565706918, 0.15309541026179846),
    ("dr_grpo", 0.04): (0.26675601161460333, 0.18166435396019806),
    ("dapo", 0.0): (0.30622795826926147, 0.26244927473451163), ("dapo", 0.04): (0.4572960199107486, 0.311424606788911),
}


@pytest.mark.parametrize("loss_type, beta", sorted(TRL_116))
def test_the_loss_and_its_gradient_equal_trls_on_the_same_batch(loss_type, beta):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 5, 11, dtype=torch.float64, generator=gen).requires_grad_()
    ids = torch.randint(0, 11, (4, 5), generator=gen)
    mask = torch.tensor([[1] * 5, [1] * 3 + [0] * 2, [1] * 4 + [0], [1] * 2 + [0] * 3], dtype=torch.float64)
    old = torch.randn(4, 5, dtype=torch.float64, generator=gen) * 0.1 - 2.0
    ref = torch.randn(4, 5, dtype=torch.float64, generator=gen) * 0.1 - 2.0
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0], dtype=torch.float64)
    advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    logps = torch.log_softmax(logits / 0.7, -1).gather(-1, ids[..., None]).squeeze(-1)
    total, units, figures = grpo_loss(logps, old, ref, advantages, mask, loss_type=loss_type, beta=beta, epsilon=0.2,
                                      epsilon_high=0.28, max_completion_length=6)
    loss = total / units  # one micro batch, one process: the loop's division
    loss.backward()
    want_loss, want_norm = TRL_116[(loss_type, beta)]
    assert loss.item() == pytest.approx(want_loss, rel=1e-9) and logits.grad.norm().item() == pytest.approx(want_norm, rel=1e-9)
    if loss_type in ("dapo", "bnpo"):  # TRL's clip_ratio/region_mean: a token mean, as these units are
        assert (figures["clip_ratio"] / units).item() == pytest.approx(0.4285714328289032, rel=1e-6)
