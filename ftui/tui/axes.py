"""The loss plot's axes, computed here rather than left to plotext: whole-number step ticks,
a y range that a single point or two close points cannot blow up into a cliff, and y labels
with one precision for the whole axis. Pure functions (no Textual), so they are unit-tested."""

from __future__ import annotations

import math
from typing import Iterable

MIN_REL_SPAN = 0.1  # the y axis spans at least 10% of the largest |value|: +0.02 on 2.5 is no cliff
MIN_ABS_SPAN = 1e-3  # ... and at least this, for values at or near zero
PAD = 0.05  # share of the data's span left free above and below


def nice_step(span: float, count: int) -> float:
    """The tick spacing (1, 2 or 5 times a power of ten) that gives about ``count`` ticks over ``span``."""
    raw = span / max(count, 1)
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5, 10):
        if mult * power >= raw * 0.999:
            return mult * power
    return 10 * power


def step_ticks(lo: float, hi: float, count: int = 5) -> list[int]:
    """Whole-number step ticks within [lo, hi] (steps are counted, never 30.5)."""
    first, last = math.ceil(lo), math.floor(hi)
    if last <= first:
        return [first] if first <= hi else [round(lo)]
    step = max(1, round(nice_step(last - first, count)))
    start = math.ceil(first / step) * step
    return list(range(start, last + 1, step)) or [first]


def step_range(xs: Iterable[float]) -> tuple[float, float]:
    """The x range: the steps drawn, widened around a single step so it sits mid-axis."""
    xs = list(xs)
    lo, hi = min(xs), max(xs)
    return (lo - 1, hi + 1) if hi == lo else (lo, hi)


def value_range(values: Iterable[float]) -> tuple[float, float] | None:
    """The y range for ``values`` (None when none is finite): the data plus a margin, and at
    least MIN_REL_SPAN of the values' size, so one point or two close ones stay in proportion.
    A range of non-negative values (a loss) does not dip below zero for the margin's sake."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    lo, hi = min(finite), max(finite)
    span = hi - lo
    least = max(MIN_REL_SPAN * max(abs(lo), abs(hi)), MIN_ABS_SPAN)
    if span < least:
        mid = (lo + hi) / 2
        lo, hi = mid - least / 2, mid + least / 2
    else:
        lo, hi = lo - PAD * span, hi + PAD * span
    if min(finite) >= 0 > lo:
        lo, hi = 0.0, hi - lo
    return lo, hi


def value_ticks(lo: float, hi: float, count: int = 5) -> tuple[list[float], list[str]]:
    """Ticks inside [lo, hi] and their labels, all with the same number of decimals (as many
    as the spacing needs, at least one: a loss reads 2.0, not 2)."""
    step = nice_step(hi - lo, count)
    decimals = max(1, -math.floor(math.log10(step) + 1e-9))
    first = math.ceil(lo / step - 1e-9)
    ticks = []
    k = first
    while k * step <= hi + step * 1e-9:
        ticks.append(round(k * step, decimals + 1))
        k += 1
    return ticks, [f"{t:.{decimals}f}" for t in ticks]
