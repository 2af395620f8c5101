"""The one fold of a run's events into what its readers show: the run's summary (status, job,
step, loss curve), its ETA window and the data preparation line.

``ftui train``'s display, ``ftui watch`` and the dashboard's state each fold a run's events
through :class:`RunFold` and only render differently, so they cannot disagree about a run's
step, its ETA or whether it is still preparing its data. Events come as dicts or, from a
compact read, as :class:`StepColumns` (runs of step lines). No torch here.
"""

from __future__ import annotations

import collections
import math
from array import array
from typing import Any, Sequence

from ftui.rundir.event_reader import StepColumns
from ftui.rundir.events import START_EVENTS
from ftui.rundir.formats import fmt_prepare, has_counts
from ftui.rundir.summary import RunSummary


class EtaWindow:
    """Seconds per step over the last ``size`` step events: robust to resumes and warm-up.
    The window is long (50 events) so an eval or a checkpoint save does not swing the ETA,
    and the start event is its first point, so the first step event already gives an ETA
    (with logging_steps 10 the second one may be minutes away)."""

    def __init__(self, size: int = 50):
        self.points: collections.deque[tuple[float, int]] = collections.deque(maxlen=size)

    def start(self, event: dict) -> None:
        """A start event: the loop begins at its step (0, or the resumed checkpoint's)."""
        t, step = event.get("t"), event.get("resumed_from_step") or 0
        if isinstance(t, (int, float)) and isinstance(step, int) and not isinstance(step, bool):
            self.points.clear()
            self.points.append((float(t), step))

    def add(self, t: float, step: int) -> None:
        if self.points and step <= self.points[-1][1]:
            self.points.clear()  # a resume restarted the count
        self.points.append((t, step))

    def eta(self, step: int, max_steps: int | None) -> float | None:
        if not max_steps or len(self.points) < 2:
            return None
        (t0, s0), (t1, s1) = self.points[0], self.points[-1]
        if s1 <= s0 or t1 <= t0:
            return None
        return (max_steps - step) * (t1 - t0) / (s1 - s0)


def extend_finite(steps: array, values: array, new_steps: Sequence[int], new_values: Sequence[float]) -> None:
    """Appends a run of (step, value) pairs, leaving out the NaNs (null or absent values)."""
    if math.isnan(sum(new_values)):
        pairs = [(s, v) for s, v in zip(new_steps, new_values) if not math.isnan(v)]
        steps.extend(array("l", (p[0] for p in pairs)))
        values.extend(array("d", (p[1] for p in pairs)))
    else:
        steps.extend(new_steps)
        values.extend(new_values)


class RunFold:
    """Folds a run's events, in file order, into ``summary`` (``RunSummary.apply``), the ETA
    window (from the start event on, over steps or, for a job, the examples answered) and
    ``preparing`` (the last ``prepare`` line until the job starts)."""

    def __init__(self, summary: RunSummary, eta: EtaWindow | None = None):
        self.summary = summary
        self.eta = eta or EtaWindow()
        self.preparing: str | None = None

    def apply(self, event: dict[str, Any] | StepColumns) -> None:
        summary, eta = self.summary, self.eta
        if type(event) is StepColumns:  # the fast path for catching up on long runs
            extend_finite(summary.loss_steps, summary.loss_values, event.step, event.loss)
            summary.step = event.step[-1]
            summary.note_time(event.t[-1])
            for t, s in zip(event.t[-eta.points.maxlen:], event.step[-eta.points.maxlen:]):
                eta.add(t, s)
            return
        summary.apply(event)
        kind = event["event"]
        if kind == "prepare":
            self.preparing = fmt_prepare(event)
        elif kind in START_EVENTS or kind in ("step", "run_end"):
            self.preparing = None
        if kind in START_EVENTS:
            eta.start(event)
        elif kind == "step":
            eta.add(event["t"], event["step"])
        elif kind == "progress" and has_counts(event) and "phase" not in event:  # a job's examples answered
            eta.add(event["t"], event["done"])

    def apply_all(self, events: list[Any]) -> None:
        for event in events:
            self.apply(event)

    def eta_s(self) -> float | None:
        """Seconds left at the pace of the window (the run's steps, a job's examples)."""
        return self.eta.eta(self.summary.step, self.summary.max_steps)
