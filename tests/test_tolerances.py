"""tests/tolerances.close, the comparison the chunked-loss, preference and fa2 tests share: it
holds where one CPU's summation order leaves 0 and another's a residue of rounding, and
still tells a real difference apart."""

from __future__ import annotations

import torch

from tests.tolerances import FP32_FLOOR, LOGP_SUM_FLOOR, close


def test_a_rounding_residue_against_an_exact_zero_is_close():
    # the AMD EPYC failure: the value-head bias gradient of a reward model, 0.0 through SDPA and
    # 2**-24 through fa2 (each pair adds +g and -g; another summation order leaves half an ulp of 1)
    assert close(torch.tensor([5.9605e-08]), torch.tensor([0.0]), 1e-4)
    assert close(torch.tensor([0.0]), torch.tensor([-5.9605e-08]), 1e-5)


def test_summing_terms_that_cancel_in_another_order_stays_close():
    """Terms of order 1 that cancel in arithmetic (each pair's +g and -g): one summation order
    gives exactly 0, another 2**-24, the figure the AMD EPYC machine showed."""
    terms = torch.tensor([0.25, 0.1, 0.7, -0.25, -0.1, -0.7], dtype=torch.float32)

    def summed(order):
        total = torch.zeros(1)
        for i in order:
            total += terms[i]
        return total

    exact, residue = summed((3, 2, 0, 1, 4, 5)), summed((0, 4, 2, 1, 3, 5))
    assert exact.item() == 0.0 and residue.item() == 2 ** -24  # the case the floor is for
    assert close(exact, residue, 1e-5) and close(residue, exact, 1e-5)


def test_a_real_difference_is_not_close():
    assert not close(torch.tensor([1.001]), torch.tensor([1.0]), 1e-4)  # relative, above the floor
    assert not close(torch.tensor([10 * FP32_FLOOR]), torch.tensor([0.0]), 1e-4)  # against 0: the floor
    assert not close(torch.tensor([0.0, 0.5]), torch.tensor([0.01, 0.5]), 1e-3)  # relative to the tensor's largest
    assert close(torch.tensor([0.0, 0.5]), torch.tensor([1e-5, 0.5]), 1e-4)


def test_a_sum_of_log_probabilities_in_another_order_moves_by_ulps_of_the_sum():
    """Why the preference figures' floor is LOGP_SUM_FLOOR and not 2e-5: 40 tokens'
    log-probabilities summed one after the other, and in 8 lanes then across (a SIMD
    reduction), differ by 3 ulps of the sum near -240, 4.6e-5; a reward or KL figure, a
    difference of such sums, carries it whole."""
    lp = -10 * torch.rand(40, generator=torch.Generator().manual_seed(9))

    def summed(values):  # one fp32 addition at a time: the same on every CPU
        total = torch.zeros(())
        for x in values:
            total = total + x
        return total

    one_by_one = summed(lp)
    in_lanes = summed([summed(lp[lane::8]) for lane in range(8)])
    apart = (one_by_one - in_lanes).abs().item()
    assert 2e-5 < apart <= LOGP_SUM_FLOOR / 2
