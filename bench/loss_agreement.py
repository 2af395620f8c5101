"""Whether two trainers' loss curves agree within run-to-run noise when they see the examples in
different orders (bench/vs_llamafactory.py: ftui against LLaMA-Factory on the same YAML).

The two sides' step i need not hold the same examples (their packing makes different rows;
their samplers need not draw the same order), so the curves are not compared step for step.
What does not depend on the order is compared instead: a repetition's **epoch mean**, the mean of its per-step losses over the one epoch
(every example is trained on once whatever the order; the order moves this mean by noise only).
A side's figure is the mean of its repetitions' epoch means.

The noise, two estimates; the larger counts:

- **between repetitions**: the repetitions of a side differ in their seed, hence their data
  order; the sample variance of their epoch means around the side's own mean, pooled over both
  sides, is the order's effect. As the standard error of the difference of the two sides'
  means: ``s_pooled * sqrt(1/R_a + 1/R_b)``. Needs two repetitions on at least one side.
- **per step**: the step-to-step scatter of one repetition's losses, from successive
  differences (von Neumann's estimator, ``std(L[i+1] - L[i]) / sqrt(2)``, which the falling
  trend of the curve hardly touches, unlike the plain standard deviation); ``sigma / sqrt(n)``
  is the standard error of that repetition's epoch mean, a side's is
  ``sqrt(mean(se_r**2) / R)``, and the difference's ``sqrt(se_a**2 + se_b**2)``.

The noise is never taken below ``RESOLUTION`` (1e-4): LLaMA-Factory's trainer logs its losses
rounded to 4 decimals. Verdict: ``agree`` when ``|mean_a - mean_b| <= K * noise`` (``K`` = 3),
else ``differ``, or ``undetermined`` where no scatter could be measured (curves of fewer than 3
steps whose repetitions have the same epoch means: one batch holds every example); ``z`` is the
difference in units of the noise. The mean loss over each fifth of the epoch is
reported beside it, per side, to read the curves' shape (not part of the verdict), and where a
repetition's two curves have the same number of steps, the largest difference step for step
(``stepwise_max_abs_diff``): ftui draws LLaMA-Factory's order when its batches are the same
(padded: the same seeded sampler over the same examples), and then the curves match step for
step to float rounding; packed rows differ, and so do those curves.
"""

from __future__ import annotations

import math
from statistics import fmean, stdev
from typing import Any

K = 3.0
WINDOWS = 5
# the losses' own resolution: LLaMA-Factory's trainer (transformers' Trainer) logs each loss rounded to
# 4 decimals, so two identical curves differ by up to 5e-5 a step; no noise estimate goes below this
RESOLUTION = 1e-4


def epoch_mean(losses: list[float]) -> float:
    return fmean(losses)


def step_sigma(losses: list[float]) -> float:
    """The per-step scatter of one curve around its trend: std of successive differences / sqrt(2)."""
    if len(losses) < 3:
        return 0.0
    return stdev([b - a for a, b in zip(losses, losses[1:])]) / math.sqrt(2)


def window_means(losses: list[float], windows: int = WINDOWS) -> list[float]:
    """Mean loss over each of ``windows`` consecutive, (nearly) equal shares of the epoch: step i
    (0-based, of n) falls in window ``i * windows // n``, so sides with different step counts
    (packing differs) are cut at the same fractions of their epoch."""
    n = len(losses)
    buckets: list[list[float]] = [[] for _ in range(min(windows, n))]
    for i, loss in enumerate(losses):
        buckets[i * len(buckets) // n].append(loss)
    return [fmean(b) for b in buckets]


def side_figures(reps: list[list[float]]) -> dict[str, Any]:
    means = [epoch_mean(r) for r in reps]
    se_steps = [step_sigma(r) / math.sqrt(len(r)) for r in reps]
    windows = [window_means(r) for r in reps]
    return {"epoch_mean": fmean(means), "rep_epoch_means": means, "steps": [len(r) for r in reps],
            "per_step_se": math.sqrt(fmean([s * s for s in se_steps]) / len(reps)),
            "window_means": [fmean(col) for col in zip(*windows)] if len({len(w) for w in windows}) == 1 else windows[0]}


def between_reps_se(a_means: list[float], b_means: list[float]) -> float | None:
    """Standard error of the difference of the two sides' means from the repetitions' spread
    (pooled over both sides); None with one repetition on each side."""
    dof = (len(a_means) - 1) + (len(b_means) - 1)
    if dof <= 0:
        return None
    ss = sum((x - fmean(a_means)) ** 2 for x in a_means) + sum((x - fmean(b_means)) ** 2 for x in b_means)
    return math.sqrt(ss / dof) * math.sqrt(1 / len(a_means) + 1 / len(b_means))


def stepwise_max_abs_diff(a_reps: list[list[float]], b_reps: list[list[float]]) -> float | None:
    """The largest |a[i] - b[i]| over the repetitions run on both sides (paired by position),
    None unless every pair has the same number of steps."""
    pairs = list(zip(a_reps, b_reps))
    if not pairs or any(len(a) != len(b) for a, b in pairs):
        return None
    return max(abs(x - y) for a, b in pairs for x, y in zip(a, b))


def agreement(a_reps: list[list[float]], b_reps: list[list[float]], k: float = K) -> dict[str, Any]:
    """The comparison above, for side a's and side b's repetitions (each a list of per-step losses;
    the r-th of each side run with the same seed)."""
    a_reps, b_reps = [r for r in a_reps if r], [r for r in b_reps if r]
    if not a_reps or not b_reps:
        return {"verdict": "no losses on one side"}
    a, b = side_figures(a_reps), side_figures(b_reps)
    between = between_reps_se(a["rep_epoch_means"], b["rep_epoch_means"])
    per_step = math.sqrt(a["per_step_se"] ** 2 + b["per_step_se"] ** 2)
    measured = max(per_step, between or 0.0)
    noise = max(measured, RESOLUTION)
    diff = a["epoch_mean"] - b["epoch_mean"]
    z = abs(diff) / noise
    # no scatter to measure (fewer than 3 steps a curve, repetitions with the same batches): a
    # difference beyond the losses' resolution cannot be told from noise
    verdict = "agree" if z <= k else "differ" if measured > 0 else "undetermined"
    return {"a": a, "b": b, "difference": diff, "between_reps_se": between, "per_step_se": per_step, "noise": noise,
            "k": k, "z": z, "verdict": verdict, "stepwise_max_abs_diff": stepwise_max_abs_diff(a_reps, b_reps)}
