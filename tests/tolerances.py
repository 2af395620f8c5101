"""How the tests compare tensors that two code paths (chunked and full logits, fa2 and SDPA,
ftui and LLaMA-Factory) compute with other summation orders, so that they hold on any x86 CPU:
AVX2, AVX-512 or no SIMD kernels at all, Intel or AMD, any number of threads.

A relative tolerance alone fails where a value is 0 on one path: a reward model's value-head
bias gradient sums +g for each pair's chosen row and -g for its rejected row, exactly 0 in
arithmetic; one CPU's summation order gives 0.0 and another's 5.96e-8 (2**-24, half an ulp of
1.0; seen on an AMD EPYC). So every comparison here has an absolute floor as well."""

from __future__ import annotations

import torch

# The absolute floor for fp32 values of order 1 (the gradients, log-probabilities and logits of
# these tests' tiny models: their largest gradients are 0.01 to 5): fp32's ulp of 1.0 is 1.2e-7,
# and a sum of a few dozen such terms in another order moves by a few ulps, so 1e-6 admits what
# is left of terms that cancel (the 5.96e-8 above, with 16x to spare) and is still far below a
# real difference: at rel 1e-4 it is what the relative part allows a tensor whose largest value
# is 0.01, so for every tensor of 0.01 and more the relative tolerance alone decides.
FP32_FLOOR = 1e-6


def close(a: torch.Tensor, b: torch.Tensor, rel: float, abs: float = FP32_FLOOR) -> bool:
    """``max |a - b| <= abs + rel * max |b|``: relative to the tensor's largest value (not
    element by element: an element near 0 carries the rounding of the large ones it came
    from), with ``abs`` for a tensor that is 0, or near it, on one path."""
    a, b = a.float(), b.float()
    return (a - b).abs().max().item() <= abs + rel * b.abs().max().item()


# The absolute floor for the preference stages' losses and figures (rewards, margins, KL, the
# log-probabilities' means): they are made of per-row sums of log-probabilities near -200, where
# fp32's ulp is 1.5e-5, and a difference of two such sums keeps their rounding, not its own: the
# KTO KL figure (2.95) came out 1.53e-5 apart, one ulp of the sums, with chunks and without. Two
# CPUs' summation orders can each be a few ulps off: 1e-4 is about 6 ulps of the sums, still
# under 0.2 % of the smallest figure these tests compare (a margin of 0.05).
LOGP_SUM_FLOOR = 1e-4
