"""The loss plot's axes, computed here rather than left to plotext: whole-number step ticks,
a y range that a single point or two close points cannot blow up into a cliff, y labels with
one precision for the whole axis (a learning rate's sharing one power of ten), and a log
scale ticked at 1, 2, 5 times powers of ten. Pure functions (no Textual), so they are
unit-tested."""

from __future__ import annotations

import math
from typing import Iterable

MIN_REL_SPAN = 0.1  # the y axis spans at least 10% of the largest |value|: +0.02 on 2.5 is no cliff
MIN_ABS_SPAN = 1e-3  # ... and at least this, for values at or near zero (a loss)
LR_MIN_ABS_SPAN = 1e-12  # a learning rate of 1e-5 needs its own floor: 1e-3 would flatten it
PAD = 0.05  # share of the data's span left free above and below
SMALL = 1e-2  # a linear axis whose values all lie below this labels them as 0.5e-4 .. 2.0e-4
LOG_MIN_SPAN = 0.1  # a log axis spans at least this many decades (a factor of 1.26)
# Mantissas of log ticks, tried in turn until one gives at least 3 ticks in the range: powers
# of ten over several decades, more of them within one.
LOG_MANTISSAS = ((1,), (1, 3), (1, 2, 5), (1, 2, 3, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9))


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


def value_range(values: Iterable[float], min_abs: float = MIN_ABS_SPAN) -> tuple[float, float] | None:
    """The y range for ``values`` (None when none is finite): the data plus a margin, and at
    least MIN_REL_SPAN of the values' size, so one point or two close ones stay in proportion.
    A range of non-negative values (a loss) does not dip below zero for the margin's sake."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    lo, hi = min(finite), max(finite)
    span = hi - lo
    least = max(MIN_REL_SPAN * max(abs(lo), abs(hi)), min_abs)
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
    as the spacing needs, at least one: a loss reads 2.0, not 2). Values that all lie below
    SMALL (a learning rate) share one power of ten: 0.8e-4, 1.0e-4, not 0.00008."""
    step = nice_step(hi - lo, count)
    decimals = _decimals(step)
    first = math.ceil(lo / step - 1e-9)
    ticks = []
    k = first
    while k * step <= hi + step * 1e-9:
        ticks.append(round(k * step, decimals + 1))
        k += 1
    top = max((abs(t) for t in ticks), default=0.0)
    if 0 < top < SMALL:
        power = math.floor(math.log10(top))
        scale = 10.0**power
        places = _decimals(step / scale)
        return ticks, [f"{t / scale:.{places}f}e{power}" for t in ticks]
    return ticks, [f"{t:.{decimals}f}" for t in ticks]


def _decimals(step: float) -> int:
    """The decimals a tick spacing needs, at least one."""
    return max(1, -math.floor(math.log10(step) + 1e-9))


def log_range(values: Iterable[float]) -> tuple[float, float] | None:
    """The y range of a log axis in decades (log10 units), or None when no value is positive
    and finite (zero and below have no place on it): the values plus a margin, at least
    LOG_MIN_SPAN decades so one point or two close ones stay in proportion."""
    logs = [math.log10(v) for v in values if v > 0 and math.isfinite(v)]
    if not logs:
        return None
    lo, hi = min(logs), max(logs)
    span = hi - lo
    if span < LOG_MIN_SPAN:
        mid = (lo + hi) / 2
        return mid - LOG_MIN_SPAN / 2, mid + LOG_MIN_SPAN / 2
    return lo - PAD * span, hi + PAD * span


def log_ticks(lo: float, hi: float, count: int = 5) -> tuple[list[float], list[str]]:
    """Ticks of a log axis spanning decades ``lo`` to ``hi``, as (positions in decades,
    labels): powers of ten over several decades, 1, 2, 5 times them (or more) within one.
    A span too narrow for any of these falls back to linear ticks placed on the log axis."""
    values: list[float] = []
    for mantissas in LOG_MANTISSAS:
        values = [m * 10.0**k for k in range(math.floor(lo), math.ceil(hi) + 1) for m in mantissas
                  if lo - 1e-9 <= k + math.log10(m) <= hi + 1e-9]
        if len(values) >= 3:
            break
    if len(values) < 2:
        ticks, labels = value_ticks(10.0**lo, 10.0**hi, count)
        return [math.log10(t) for t in ticks if t > 0], [label for t, label in zip(ticks, labels) if t > 0]
    values = values[:: math.ceil(len(values) / (count + 1))]  # many decades: every other power or so
    if all(1e-3 <= v < 1e5 for v in values):
        labels = [f"{v:g}" for v in values]  # 0.5, 1, 2
    else:
        labels = [_power_label(v) for v in values]  # 1e-5, 2e-5
    return [math.log10(v) for v in values], labels


def _power_label(value: float) -> str:
    mantissa, _, power = f"{value:.0e}".partition("e")
    return f"{mantissa}e{int(power)}"
