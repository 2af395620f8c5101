"""Dashboard widgets. They render a ``RunView`` or a GPU sample; they never read files.

All text that comes from a run (model names, log lines, error messages) is untrusted: it
is put into ``rich.text.Text`` objects or escaped, never parsed as markup, and its control
characters are shown as escapes (``ftui.safety.text.visible``): Textual passes ESC through.
"""

from __future__ import annotations

import math
import re
import time

from rich.cells import cell_len
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import RichLog, Static
from textual_plotext import PlotextPlot

from ftui.rundir.events import TRAIN_JOB
from ftui.rundir.formats import fmt_bytes, fmt_duration, fmt_figure, fmt_num
from ftui.machine.gpu import GpuSample, HostSample
from ftui.i18n import N_, _
from ftui.safety.text import visible
from ftui.tui.axes import LR_MIN_ABS_SPAN, MIN_ABS_SPAN, log_range, log_ticks, step_range, step_ticks, value_range, value_ticks
from ftui.rundir.summary import RunSummary
from ftui.tui.state import RunView, ema, ordered_figures

STATUS_STYLE = {
    "starting": "bold cyan", "running": "bold green", "completed": "bold blue",
    "stopped": "bold yellow", "failed": "bold red", "died": "bold red", "unreadable": "bold red",
    "queued": "bold magenta", "cancelled": "bold red",
}
# A run's status as the screens show it (the word itself stays the key of STATUS_STYLE, of
# events.jsonl and of `ftui runs`' output, which scripts read).
STATUS_LABELS = {
    "starting": N_("starting"), "running": N_("running"), "completed": N_("completed"), "stopped": N_("stopped"),
    "failed": N_("failed"), "died": N_("died"), "unreadable": N_("unreadable"), "stopping": N_("stopping"),
    "queued": N_("queued"), "cancelled": N_("cancelled"),
}
FAILED_ENDS = ("failed", "died", "unreadable", "cancelled")  # ends shown as failures (red, with the hint)
LEVEL_LABELS = {"info": N_("info"), "warning": N_("warning"), "error": N_("error")}  # a log event's level
ERROR_LINE = re.compile(r"(Traceback|Error\b|Exception\b|error:|CUDA out of memory|FAILED|Killed)", re.I)


def status_label(status: str) -> str:
    """A run's (or a job's) status in the interface's language; one ftui does not know as it is."""
    return _(STATUS_LABELS[status]) if status in STATUS_LABELS else status


class RunHeader(Static):
    """One line: run name, status, elapsed and ETA."""

    def show(self, view: RunView) -> None:
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(visible(view.run_id, one_line=True), style="bold")
        line.append(" │ ")
        line.append(status_label(view.status), style=STATUS_STYLE.get(view.status, "bold"))
        if view.slurm_job:
            line.append(" │ " + slurm_words(view), style="yellow" if view.status == "queued" else "")
        line.append(" │ " + _("elapsed {duration}").format(duration=fmt_duration(view.elapsed)))
        if not view.ended and view.status != "queued":  # a queued run has no steps to time yet
            line.append(" │ " + _("ETA {duration}").format(duration=fmt_duration(view.eta)))
        if view.loading is not None:
            line.append(" │ " + _("reading history {percent}%").format(percent=f"{100 * view.loading:.0f}"), style="yellow")
        if view.preparing and not view.ended:
            line.append(" │ " + visible(view.preparing, one_line=True), style="yellow")
        if view.model:  # a job (ftui attach RUN/predict/ID) has no method or engine: its kind says what it does
            what = view.method if view.job == TRAIN_JOB else view.job
            parts = (view.model, what, view.engine, view.precision, f"{view.world_size}×" if view.world_size else None)
            line.append(visible(" │ " + " · ".join(str(p) for p in parts if p is not None), one_line=True), style="dim")
        self.update(line)


def slurm_words(view: "RunView | RunSummary") -> str:
    """A Slurm run's job, and while it is queued Slurm's reason and estimated start: "Slurm
    job 12: Resources, start ~11-14 23:00" (Slurm's text is untrusted: shown, never markup)."""
    words = _("Slurm job {job}").format(job=view.slurm_job)
    if view.status != "queued":
        return words
    why = [visible(view.queue_reason, one_line=True)[:80]] if view.queue_reason else []
    if view.queue_start is not None:
        why.append(_("start ~{when}").format(when=time.strftime("%m-%d %H:%M", time.localtime(view.queue_start))))
    return words + (": " + ", ".join(why) if why else "")


def fit_wide_lines(plot, width: int):
    """``plot`` (plotext's Text) with each line wider than ``width`` cells taken in: the spaces
    that centre it are shared out again, then it is cut (never wrapped). ASCII plots are as built."""
    if not isinstance(plot, Text) or width <= 0 or plot.cell_len == len(plot.plain):
        return plot
    lines = plot.split("\n", allow_blank=True)
    for i, line in enumerate(lines):
        excess = line.cell_len - width
        if excess > 0:
            lead = len(line.plain) - len(line.plain.lstrip(" "))
            line = line[min(lead, (excess + 1) // 2):]
            line.truncate(width)
            lines[i] = line
    fitted = Text("\n").join(lines)
    fitted.no_wrap = True
    return fitted


class LossPlot(PlotextPlot):
    """Train loss and eval points, or the learning rate (``metric``, key v), over the whole run
    or the last N steps. By default the raw loss is drawn faint with its smoothed curve over it
    (as LLaMA-Factory plots it); ``smoothing`` off (key m) draws the raw loss alone;
    ``log_scale`` (key l) puts the y axis on a log scale, where values of zero and below are
    not drawn. The axes are ftui.tui.axes': whole-number step ticks, a y range in proportion to
    the values, one precision per axis."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.smoothing = True
        self.recent_only = False
        self.log_scale = False
        self.metric = "loss"  # or "lr"
        self.curves: list[tuple[str, tuple[list[float], list[float]]]] = []
        self.evals: tuple[list[float], list[float]] = ((), ())

    def render(self):
        """The plot, its title and axis label lines fitted to the widget: plotext counts a CJK
        character as one cell (it takes two), so a Chinese title's line comes out wider than the
        plot and would wrap, pushing the plot's bottom out of sight."""
        return fit_wide_lines(super().render(), self.size.width)

    def show(self, view: RunView) -> None:
        if self.metric == "lr":
            self.curves = [("lr", view.lr_recent if self.recent_only else view.lr_series)]
            self.evals = ((), ())
        else:
            self.curves = [("train", view.recent if self.recent_only else view.series)]
            self.evals = view.evals
        self.redraw()

    def show_many(self, curves: list[tuple[str, tuple[list[float], list[float]]]], metric: str = "loss") -> None:
        """Several runs' curves of one metric (the loss, or an extra figure by name)."""
        self.curves, self.evals, self.metric = curves, ((), ()), metric
        self.redraw()

    def _metric_label(self) -> str:
        """What is plotted: the loss, the learning rate, or an extra figure by its name
        (events.extra_figures: printable, never markup; plotext draws it as text)."""
        return _("learning rate") if self.metric == "lr" else _("loss") if self.metric == "loss" else self.metric

    def _title(self) -> str:
        single = len(self.curves) == 1
        if self.metric == "lr":
            title = _("learning rate")
        else:
            drawn = (_("raw + smoothed") if single else _("smoothed")) if self.smoothing else _("raw")
            title = f"{self._metric_label()} ({drawn})"
        return title + (" · " + _("log") if self.log_scale else "") + (" · " + _("recent") if self.recent_only else "")

    def _on_axis(self, xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
        """The points as the y axis places them: on a log scale, log10 of the positive ones."""
        if not self.log_scale:
            return xs, ys
        kept = [(x, math.log10(y)) for x, y in zip(xs, ys) if y > 0 and math.isfinite(y)]
        return [p[0] for p in kept], [p[1] for p in kept]

    def redraw(self) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        single = len(self.curves) == 1
        smooth = self.smoothing and self.metric != "lr"  # a learning rate is a schedule: drawn as it is
        plt.title(self._title())
        plt.xlabel(_("step"))
        xs_all: list[float] = []
        ys_all: list[float] = []
        # The legend's words (smoothed, eval) stay in English: plotext gives each character of a
        # label one cell inside the canvas, and a CJK one (two cells) would push its row out of line.
        for label, (xs, ys) in self.curves:
            if not xs:
                continue
            xs, ys = list(xs), list(ys)
            if smooth and single:  # several runs: their smoothed curves alone stay readable
                plt.plot(*self._on_axis(xs, ys), marker="hd", color="gray")
            if smooth:
                plt.plot(*self._on_axis(xs, ema(ys)), label=label if not single else "smoothed", marker="hd")
            else:
                plt.plot(*self._on_axis(xs, ys), label=label if not single else None, marker="hd")
            xs_all += xs
            ys_all += ys
        ex, ey = self.evals
        if ex and xs_all:
            pts = [(x, y) for x, y in zip(ex, ey) if x >= min(xs_all)]
            if pts:
                plt.scatter(*self._on_axis([p[0] for p in pts], [p[1] for p in pts]), label="eval", marker="o")
                ys_all += [p[1] for p in pts]
        if not xs_all:
            plt.title(_("{metric}: waiting for the first step").format(metric=self._metric_label()))
        elif not self.set_axes(xs_all, ys_all):
            plt.title(_("{title}: no value above zero to draw").format(title=self._title()))
        self.refresh()

    def set_axes(self, xs: list[float], ys: list[float]) -> bool:
        """Sets both axes; False when the values leave nothing to draw on the y axis."""
        plt = self.plt
        x_lo, x_hi = step_range(xs)
        plt.xlim(x_lo, x_hi)
        ticks = step_ticks(x_lo, x_hi)
        plt.xticks(ticks, [str(t) for t in ticks])
        if self.log_scale:
            y, ticks_of = log_range(ys), log_ticks
        else:
            y, ticks_of = value_range(ys, LR_MIN_ABS_SPAN if self.metric == "lr" else MIN_ABS_SPAN), value_ticks
        if y is not None:
            plt.ylim(*y)
            plt.yticks(*ticks_of(*y))
        return y is not None


class FigurePlot(LossPlot):
    """One extra figure of a run (a preference stage's rewards_margin, ...) over its steps,
    drawn as the loss is (raw and smoothed, eval points, the last N steps): ``metric`` is
    the figure's name, which the dashboard picks among those the run's events carry."""

    def show(self, view: RunView) -> None:
        name = self.metric
        self.curves = [("train", (view.figure_recent if self.recent_only else view.figure_series).get(name, ((), ())))]
        self.evals = view.figure_evals.get(name, ((), ()))
        self.redraw()

    def _title(self) -> str:
        """As the loss plot's, or the figure's name alone where that does not fit (80x24):
        plotext leaves out a title wider than the plot."""
        title = super()._title()
        return title if cell_len(title) <= self.size.width - 2 else self._metric_label()


class Figures(Static):
    """The current figures of the run, from its latest step event; numbers the schema does
    not name (a new training stage's) follow by their names, so it needs no code here."""

    def show(self, view: RunView) -> None:
        t = Table.grid(padding=(0, 1))
        t.add_column(style="dim", no_wrap=True)
        t.add_column(no_wrap=True)
        t.add_row(_("step"), f"{view.step} / {view.max_steps or '?'}")
        t.add_row(_("epoch"), fmt_num(view.epoch, ".2f"))
        t.add_row(_("loss"), fmt_num(view.loss))
        if view.eval_loss is not None:
            t.add_row(_("eval loss"), fmt_num(view.eval_loss))
        t.add_row(_("lr"), fmt_num(view.lr, ".3e"))
        t.add_row(_("grad norm"), fmt_num(view.grad_norm, ".3f"))
        t.add_row(_("tokens/s"), fmt_num(view.tokens_per_s, ",.0f"))
        t.add_row(_("avg tok/s"), fmt_num(view.avg_tokens_per_s, ",.0f"))
        t.add_row(_("tokens"), f"{view.total_tokens:,}")
        t.add_row(_("MFU"), "-" if view.mfu is None else f"{100 * view.mfu:.1f}%")
        if view.loss_scale is not None:
            t.add_row(_("loss scale"), f"{view.loss_scale:g}")
        parts: list = [t]
        if view.extras or view.eval_extras:  # a new stage's figures, by their names, in a grid of their own:
            figures = Table.grid(padding=(0, 1))  # a long name does not narrow the values above
            rows = [(name, fmt_figure(dict(extras)[name])) for extras in (view.extras, view.eval_extras)
                    for name in ordered_figures([n for n, _value in extras])]  # rewards_margin and accuracy first: in sight at 80x24
            figures.add_column(style="dim")  # the column of names gives way (each cut with an ellipsis) ...
            figures.add_column(no_wrap=True)  # ... the values stay whole
            for name, value in rows:
                figures.add_row(Text(name, overflow="ellipsis", no_wrap=True), value)  # Text: a name is never markup
            parts.append(figures)
        for level, message in view.messages[-2:]:
            shown = _(LEVEL_LABELS[level]) if level in LEVEL_LABELS else level
            parts.append(Text(visible(f"{shown}: {message}"), style="yellow" if level == "warning" else "red" if level == "error" else "dim"))
        self.update(Group(*parts))


class EndBanner(Static):
    """Shown when the run has ended: the status, and for failures the message and the hint."""

    def show(self, view: RunView) -> None:
        if not view.ended or view.status == "completed":  # the header says completed
            self.display = False
            return
        self.display = True
        text = Text()
        text.append(status_label(view.status).upper(), style=STATUS_STYLE.get(view.status, "bold"))
        if view.reason:
            text.append(": " + visible(view.reason))
        if view.error and view.status in ("failed", "died", "cancelled"):
            text.append("\n" + visible(view.error), style="red")
        if view.hint:
            text.append("\n" + _("hint") + ": ", style="bold")
            text.append(visible(view.hint))
        self.update(text)
        self.set_class(view.status in FAILED_ENDS, "-failed")


class GpuPanel(Static):
    """Per GPU: utilization, memory, power, temperature; the run's per-rank peaks; CPU/RAM without GPUs.
    Once the run has ended the machine's live figures say nothing about it: only its peaks."""

    def show(self, gpus: list[GpuSample], host: HostSample | None, rank_peaks: tuple[int, ...], ended: bool = False) -> None:
        t = Table.grid(padding=(0, 1))
        if ended:
            t.add_column(no_wrap=True)
            t.add_row(Text(_("the run has ended: no live figures"), style="dim"))
        elif gpus:
            for col in ("gpu", "util", "memory", "power", "temp"):
                t.add_column(col, no_wrap=True)
            for g in gpus:
                t.add_row(
                    g.label, f"{g.util_percent:3.0f}%", f"{g.mem_used / 2**30:.1f}/{g.mem_total / 2**30:.0f}G",
                    "-" if g.power_w is None else f"{g.power_w:.0f} W",
                    "-" if g.temperature_c is None else f"{g.temperature_c:.0f}°C",
                )
        elif host is not None:
            t.add_column(no_wrap=True)
            t.add_row(Text(_("no GPU seen by NVML"), style="dim"))
            t.add_row(f"CPU {host.cpu_percent:3.0f}%   RAM {fmt_bytes(host.ram_used)}/{fmt_bytes(host.ram_total)}")
        parts: list = [t]
        if rank_peaks:
            peaks = "  ".join(f"r{r} {fmt_bytes(p)}" for r, p in enumerate(rank_peaks))
            parts.append(Text(_("peak per rank: {peaks}").format(peaks=peaks), style="dim"))
        self.update(Group(*parts))

    def show_nodes(self, view: RunView) -> None:
        """A Slurm run's devices: its GPUs are on compute nodes, which NVML on this (login)
        machine does not see, so: where they are, and each rank's memory as its step events
        give it (allocated / reserved at the last step, and the peak)."""
        nodes = [visible(n, one_line=True)[:64] for n in view.nodes[:8]]
        if nodes:
            where = _("GPUs on {nodes} (Slurm job {job})").format(nodes=", ".join(nodes) + (" …" if len(view.nodes) > 8 else ""),
                                                                 job=view.slurm_job)
        elif view.status == "queued":
            where = _("queued: no nodes yet (Slurm job {job})").format(job=view.slurm_job)
        else:
            where = _("GPUs on the job's nodes (Slurm job {job})").format(job=view.slurm_job)
        parts: list = [Text(where, overflow="fold")]
        ranks = max(len(view.rank_mem), len(view.rank_peaks))
        if view.ended:
            parts.append(Text(_("the run has ended: no live figures"), style="dim"))
        elif ranks:
            per_node = view.world_size // len(view.nodes) if view.nodes and view.world_size and view.world_size % len(view.nodes) == 0 else 0
            t = Table.grid(padding=(0, 1))
            for _col in range(4):
                t.add_column(no_wrap=True)
            t.add_row(*(Text(h, style="dim") for h in (_("node"), _("rank"), _("memory"), _("peak"))))
            for r in range(min(ranks, 64)):
                allocated, reserved = view.rank_mem[r] if r < len(view.rank_mem) else (0, 0)
                node = nodes[r // per_node] if per_node and r // per_node < len(nodes) else "?"
                peak = view.rank_peaks[r] if r < len(view.rank_peaks) else 0
                t.add_row(node, f"r{r}", f"{allocated / 2**30:.1f}/{reserved / 2**30:.1f}G", f"{peak / 2**30:.1f}G")
            parts.append(t)
        elif view.status != "queued":
            parts.append(Text(_("memory per rank: with the first step"), style="dim"))
        if view.ended and view.rank_peaks:
            peaks = "  ".join(f"r{r} {fmt_bytes(p)}" for r, p in enumerate(view.rank_peaks))
            parts.append(Text(_("peak per rank: {peaks}").format(peaks=peaks), style="dim"))
        self.update(Group(*parts))


class LogTail(RichLog):
    """The tail of train.log: escaped (Text, never markup; control characters as escapes, so a
    line's ``\r`` or escape sequence shows instead of acting), errors highlighted, scrollable."""

    def add_lines(self, lines: list[str]) -> None:
        for line in lines:
            style = "bold red" if ERROR_LINE.search(line) else None
            self.write(Text(visible(line), style=style or ""))


__all__ = ["status_label", "slurm_words", "RunHeader", "LossPlot", "FigurePlot", "Figures", "EndBanner", "GpuPanel", "LogTail"]
