"""What the dashboard knows about one run, folded from its events, and the view it renders.

``RunState`` is mutated only by the tailing worker thread; after each batch of events it
produces an immutable ``RunView`` that the UI thread renders. Folding a million events
therefore never blocks the UI, and the UI never sees a half-updated state. Plots get a
downsampled series (at most a few thousand points), never the raw million.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ftui.rundir.event_reader import StepColumns
from ftui.rundir.events import START_EVENTS, TRAIN_JOB, extra_figures
from ftui.rundir.fold import EtaWindow, RunFold, extend_finite
from ftui.rundir.summary import END_STATUSES, RunSummary
from ftui.stages import plotted_first


def downsample(xs: Sequence[float], ys: Sequence[float], max_points: int) -> tuple[list[float], list[float]]:
    """Bucket means, keeping the first and last points exactly (a loss curve keeps its shape)."""
    n = len(xs)
    if n <= max_points:
        return list(xs), list(ys)
    size = n / max_points
    out_x, out_y = [], []
    for b in range(max_points):
        lo, hi = int(b * size), max(int((b + 1) * size), int(b * size) + 1)
        chunk = ys[lo:hi]
        out_x.append(xs[hi - 1])
        out_y.append(sum(chunk) / len(chunk))
    out_x[0], out_y[0] = xs[0], ys[0]
    out_x[-1], out_y[-1] = xs[-1], ys[-1]
    return out_x, out_y


def ema(values: Sequence[float], weight: float = 0.8) -> list[float]:
    """TensorBoard-style exponential smoothing with debiasing."""
    out, last, count = [], 0.0, 0
    for v in values:
        if not math.isfinite(v):
            out.append(v)
            continue
        count += 1
        last = last * weight + (1 - weight) * v
        out.append(last / (1 - weight**count))
    return out


def truncate_after(steps: array, values: array, step: int) -> None:
    """Drops the points after ``step`` (a resume redoes them)."""
    keep = bisect_right(steps, step)
    del steps[keep:]
    del values[keep:]


MAX_FIGURE_SERIES = 16  # extra figures followed over a run: a run directory is untrusted
EVAL_PREFIX = "eval_"  # an eval event's eval_NAME is the eval point of the step figure NAME (as eval_loss of loss)
Points = dict[str, tuple[array, array]]  # a figure's name -> its (steps, values)


def figure_name(eval_name: str) -> str:
    """The figure an eval event's extra figure belongs to: eval_rewards_margin -> rewards_margin."""
    return eval_name[len(EVAL_PREFIX):] if eval_name.startswith(EVAL_PREFIX) and len(eval_name) > len(EVAL_PREFIX) else eval_name


def ordered_figures(names: Sequence[str]) -> list[str]:
    """Figure names with those the stages plot first (their descriptions' plotted_first:
    rewards_margin and rewards_accuracy for dpo, kto and rm) first (an eval's eval_NAME sorts
    as NAME), else as given: any other extra figure follows, so a stage needs no code in the
    app to get its figures plotted."""
    rank = {n: i for i, n in enumerate(plotted_first())}
    return sorted(names, key=lambda n: rank.get(figure_name(n), len(rank)))


def add_figures(points: Points, step: int, figures: tuple[tuple[str, int | float], ...], eval_event: bool = False) -> None:
    """Appends one event's extra figures (events.extra_figures) to their series; a name beyond
    the first MAX_FIGURE_SERIES seen is not followed."""
    for name, value in figures:
        name = figure_name(name) if eval_event else name
        if name not in points:
            if len(points) >= MAX_FIGURE_SERIES:
                continue
            points[name] = (array("l"), array("d"))
        steps, values = points[name]
        steps.append(step)
        values.append(float(value))


def join_points(history: Points, later: Points) -> Points:
    """Each figure's points of an earlier stretch of the run, then those of a later one."""
    names = list(dict.fromkeys([*history, *later]))[:MAX_FIGURE_SERIES]
    empty = (array("l"), array("d"))
    return {n: (history.get(n, empty)[0] + later.get(n, empty)[0], history.get(n, empty)[1] + later.get(n, empty)[1])
            for n in names}


@dataclass(frozen=True)
class RunView:
    """Everything one frame of the dashboard shows; built off the UI thread."""

    run_id: str
    status: str
    job: str = TRAIN_JOB  # its kind (ftui.rundir.job_kinds): a job directory attached to has no method or engine
    model: str | None = None
    method: str | None = None
    engine: str | None = None
    precision: str | None = None
    world_size: int | None = None
    elapsed: float | None = None
    eta: float | None = None
    step: int = 0
    max_steps: int | None = None
    epoch: float | None = None
    loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None
    tokens_per_s: float | None = None
    avg_tokens_per_s: float | None = None
    total_tokens: int = 0
    mfu: float | None = None
    loss_scale: float | None = None
    eval_loss: float | None = None
    series: tuple[list[float], list[float]] = ((), ())  # downsampled whole run
    recent: tuple[list[float], list[float]] = ((), ())  # raw last N steps
    lr_series: tuple[list[float], list[float]] = ((), ())  # the learning rate, as series and recent are
    lr_recent: tuple[list[float], list[float]] = ((), ())
    evals: tuple[list[float], list[float]] = ((), ())
    rank_peaks: tuple[int, ...] = ()
    rank_mem: tuple[tuple[int, int], ...] = ()  # per rank, (allocated, reserved) bytes at the last step
    # A Slurm run (issue 45): its job, Slurm's state, why it waits and when Slurm expects to
    # start it (queued), and the nodes its ranks run on
    slurm_job: str | None = None
    slurm_state: str | None = None
    queue_reason: str | None = None
    queue_start: float | None = None
    nodes: tuple[str, ...] = ()
    messages: tuple[tuple[str, str], ...] = ()  # (level, text) of log events
    reason: str | None = None
    error: str | None = None
    hint: str | None = None
    loading: float | None = None
    preparing: str | None = None  # "preparing data: N / M records" until the run starts
    # Numbers of the last step / eval event that no row above shows (a new stage's figures),
    # by name: checked by events.extra_figures, still untrusted text.
    extras: tuple[tuple[str, int | float], ...] = ()
    eval_extras: tuple[tuple[str, int | float], ...] = ()
    # The same figures over the run, by figure name (an eval's eval_NAME under NAME), as the
    # loss is: whole run downsampled, the last N steps, and the eval points. Empty for sft and pt.
    figure_series: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    figure_recent: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    figure_evals: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)

    @property
    def figure_names(self) -> list[str]:
        """The extra figures of this run's step events, in the order they appeared (one only
        its eval events carry is shown in the "now" panel, not plotted)."""
        return list(self.figure_series)

    @property
    def ended(self) -> bool:
        return self.status in END_STATUSES


def rank_memory(step: dict[str, Any]) -> tuple[tuple[int, int], ...]:
    """Each rank's (allocated, reserved) bytes as a step event gives them (``mem``, by rank;
    an untrusted file: anything but whole numbers reads as 0)."""
    mem = step.get("mem") if step else None
    if not isinstance(mem, list):
        return ()
    out: dict[int, tuple[int, int]] = {}
    for m in mem[:4096]:
        if isinstance(m, dict) and type(m.get("rank", 0)) is int and 0 <= m.get("rank", 0) < 4096:
            out[m.get("rank", 0)] = tuple(v if type(v) is int and v >= 0 else 0 for v in (m.get("allocated"), m.get("reserved")))
    return tuple(out.get(r, (0, 0)) for r in range(max(out) + 1)) if out else ()


@dataclass
class RunState:
    summary: RunSummary
    clock: Callable[[], float] = time.time
    recent_steps: int = 200
    max_points: int = 2000
    eval_steps: array = field(default_factory=lambda: array("l"))
    eval_values: array = field(default_factory=lambda: array("d"))
    lr_steps: array = field(default_factory=lambda: array("l"))
    lr_values: array = field(default_factory=lambda: array("d"))
    figure_points: Points = field(default_factory=dict)  # step events' extra figures
    eval_figure_points: Points = field(default_factory=dict)  # eval events' extra figures
    last_step: dict[str, Any] = field(default_factory=dict)
    last_eval: dict[str, Any] = field(default_factory=dict)
    rank_peaks: list[int] = field(default_factory=list)
    messages: list[tuple[str, str]] = field(default_factory=list)
    first_step_t: float | None = None
    first_step_tokens: int = 0
    total_tokens: int = 0
    events_seen: int = 0
    loading: float | None = None  # share of the history still being read on attach
    resumed_from: int | None = None  # the last resume's checkpoint step: later history is stale
    fold: RunFold = field(init=False, repr=False)  # the one fold (summary, ETA, preparing) every reader shares

    def __post_init__(self) -> None:
        self.fold = RunFold(self.summary)

    @property
    def eta(self) -> EtaWindow:
        return self.fold.eta

    @property
    def preparing(self) -> str | None:
        return self.fold.preparing

    def apply(self, events: list[Any]) -> None:
        """Folds events (dicts, or StepColumns from a compact read) in file order: the run's
        summary, ETA and preparation through the one fold (``RunFold``), then what only the
        dashboard follows (learning rate, evals, figures, memory peaks, messages)."""
        for e in events:
            self.events_seen += 1
            self.fold.apply(e)
            if type(e) is StepColumns:  # the fast path for catching up on long runs
                self.events_seen += len(e.step) - 1
                extend_finite(self.lr_steps, self.lr_values, e.step, e.lr)
                continue
            kind = e["event"]
            if kind in START_EVENTS and e.get("resumed_from_step") is not None:
                self.resumed_from = int(e["resumed_from_step"])
                truncate_after(self.eval_steps, self.eval_values, self.resumed_from)
                truncate_after(self.lr_steps, self.lr_values, self.resumed_from)
                for steps, values in (*self.figure_points.values(), *self.eval_figure_points.values()):
                    truncate_after(steps, values, self.resumed_from)
                if self.last_eval.get("step", 0) > self.resumed_from:
                    self.last_eval = {}
                self.first_step_t = None  # throughput is measured from the resumed steps on
            if kind == "step":
                self.last_step = e
                if e.get("lr") is not None:
                    self.lr_steps.append(e["step"])
                    self.lr_values.append(e["lr"])
                add_figures(self.figure_points, e["step"], extra_figures(e))
                self.total_tokens = e.get("total_tokens", self.total_tokens + e.get("tokens", 0))
                if self.first_step_t is None or e["step"] <= 1:
                    # Average throughput is measured from the first step event on (after any
                    # resume), so it is not diluted by model loading.
                    self.first_step_t, self.first_step_tokens = e["t"], self.total_tokens
                mem = e.get("mem") or []
                if len(self.rank_peaks) < len(mem):
                    self.rank_peaks += [0] * (len(mem) - len(self.rank_peaks))
                for m in mem:
                    r = m.get("rank", 0)
                    if 0 <= r < len(self.rank_peaks):
                        self.rank_peaks[r] = max(self.rank_peaks[r], int(m.get("peak") or 0))
            elif kind == "eval":
                self.last_eval = e
                if e.get("eval_loss") is not None:
                    self.eval_steps.append(e["step"])
                    self.eval_values.append(e["eval_loss"])
                add_figures(self.eval_figure_points, e["step"], extra_figures(e), eval_event=True)
            elif kind == "log":
                self.messages.append((e.get("level", "info"), str(e.get("message", ""))))
                del self.messages[:-50]

    def prepend(self, history: "RunState") -> None:
        """Puts an earlier stretch of the run (read after this one) in front of it."""
        s, h = self.summary, history.summary
        if self.resumed_from is not None and self.resumed_from < h.step:
            h.truncate_after(self.resumed_from)
            truncate_after(history.eval_steps, history.eval_values, self.resumed_from)
            truncate_after(history.lr_steps, history.lr_values, self.resumed_from)
            for steps, values in (*history.figure_points.values(), *history.eval_figure_points.values()):
                truncate_after(steps, values, self.resumed_from)
        s.loss_steps = h.loss_steps + s.loss_steps
        s.loss_values = h.loss_values + s.loss_values
        self.eval_steps = history.eval_steps + self.eval_steps
        self.eval_values = history.eval_values + self.eval_values
        self.lr_steps = history.lr_steps + self.lr_steps
        self.lr_values = history.lr_values + self.lr_values
        self.figure_points = join_points(history.figure_points, self.figure_points)
        self.eval_figure_points = join_points(history.eval_figure_points, self.eval_figure_points)
        self.messages = (history.messages + self.messages)[-50:]
        if not self.last_eval and (self.resumed_from is None or history.last_eval.get("step", 0) <= self.resumed_from):
            self.last_eval = history.last_eval  # the tail had no eval: the last one is in the history
        self.events_seen += history.events_seen
        if history.first_step_t is not None:
            self.first_step_t, self.first_step_tokens = history.first_step_t, history.first_step_tokens
        for r, peak in enumerate(history.rank_peaks):
            if r < len(self.rank_peaks):
                self.rank_peaks[r] = max(self.rank_peaks[r], peak)
            else:
                self.rank_peaks.append(peak)
        self.loading = None

    def view_elapsed(self) -> float | None:
        return self.summary.duration_at(self.clock())

    def recent_from(self, steps: Sequence[int]) -> int:
        """Where the last ``recent_steps`` steps begin in an ascending list of steps (the `w`
        view): steps, not points, so a run that logs every 10 steps shows 200 steps, not 2,000."""
        return bisect_left(steps, steps[-1] - self.recent_steps + 1) if len(steps) else 0

    def view(self) -> RunView:
        s, st = self.summary, self.last_step
        elapsed = self.view_elapsed()
        avg = None
        if self.first_step_t is not None and st and st["t"] > self.first_step_t:
            avg = (self.total_tokens - self.first_step_tokens) / (st["t"] - self.first_step_t)
        recent_from = self.recent_from(s.loss_steps)
        lr_from = self.recent_from(self.lr_steps)
        return RunView(
            run_id=s.run_id, status=s.status, job=s.job, model=s.model, method=s.method, engine=s.engine,
            precision=s.precision, world_size=s.world_size, elapsed=elapsed,
            eta=None if s.ended is not None or s.status not in ("running",) else self.eta.eta(s.step, s.max_steps),
            step=s.step, max_steps=s.max_steps, epoch=st.get("epoch"), loss=st.get("loss"), lr=st.get("lr"),
            grad_norm=st.get("grad_norm"), tokens_per_s=st.get("tokens_per_s"), avg_tokens_per_s=avg,
            total_tokens=self.total_tokens, mfu=st.get("mfu"), loss_scale=st.get("loss_scale"),
            eval_loss=self.eval_values[-1] if self.eval_values else None,
            series=downsample(s.loss_steps, s.loss_values, self.max_points),
            recent=(list(s.loss_steps[recent_from:]), list(s.loss_values[recent_from:])),
            lr_series=downsample(self.lr_steps, self.lr_values, self.max_points),
            lr_recent=(list(self.lr_steps[lr_from:]), list(self.lr_values[lr_from:])),
            evals=(list(self.eval_steps), list(self.eval_values)),
            rank_peaks=tuple(self.rank_peaks), rank_mem=rank_memory(st),
            slurm_job=s.slurm_job, slurm_state=s.slurm_state, queue_reason=s.queue_reason, queue_start=s.queue_start,
            nodes=tuple(s.nodes), messages=tuple(self.messages[-5:]),
            reason=s.reason, error=s.error, hint=s.hint, loading=self.loading, preparing=self.preparing,
            extras=extra_figures(st) if st else (), eval_extras=extra_figures(self.last_eval) if self.last_eval else (),
            figure_series={n: downsample(xs, ys, self.max_points) for n, (xs, ys) in self.figure_points.items()},
            figure_recent={n: (list(xs[start:]), list(ys[start:])) for n, (xs, ys) in self.figure_points.items()
                           for start in (self.recent_from(xs),)},
            figure_evals={n: (list(xs), list(ys)) for n, (xs, ys) in self.eval_figure_points.items()},
        )
