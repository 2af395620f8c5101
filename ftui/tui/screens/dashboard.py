"""The dashboard of one run: header, loss plot, figures, GPU panel, log tail, Stop.
A run whose step events carry extra figures (a preference stage's rewards) gets plots of
them beside the loss: one at 80x24, two on a taller terminal; key f cycles which.

Two thread workers feed it: one tails events.jsonl (through ``RunFollower``, the one reader
and end rule of every view of a run) and train.log by byte offset and folds events into a
RunState off the UI thread, the other samples NVML (or CPU/RAM) while the run lives. Both hand
results to the UI thread with ``call_from_thread``; the UI thread only renders. The whole
view is rebuilt from the run directory, so attaching to a live or finished run is the same.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.worker import get_current_worker

from ftui.rundir.event_reader import EventReader
from ftui.rundir.paths import EVENTS_FILE
from ftui.machine.gpu import sample_gpus, sample_host
from ftui.i18n import N_, _
from ftui.rundir.follower import RunFollower
from ftui.rundir.launch_record import read_launch_info, run_cuda_devices
from ftui.rundir.log_tail import LogTailer
from ftui.rundir.paths import LOG_FILE
from ftui.rundir.slurm_state import slurm_scheduler
from ftui.rundir.summary import RunSummary
from ftui.safety.text import visible
from ftui.tui.screens.modals import Confirm
from ftui.tui.state import RunState, RunView, ordered_figures
from ftui.tui.footer import FittingFooter
from ftui.tui.widgets import FAILED_ENDS, EndBanner, FigurePlot, Figures, GpuPanel, LogTail, LossPlot, RunHeader, status_label
from ftui.tui.ui_thread import to_ui

POLL_S = 1.0  # the header shows whole seconds; new events show within a second
PLOT_EVERY_S = 1.0
GPU_POLL_S = 2.0
CHUNK = 8 << 20  # bytes of events folded per UI update when catching up on a long run
BIG_FILE = 32 << 20  # above this, attach shows head and tail first and reads the rest after
HEAD_BYTES = 1 << 20
TAIL_BYTES = 8 << 20
FIGURE_PLOTS = 2  # at most, stacked beside the loss plot ...
FIXED_ROWS = 11  # ... each given MIN_FIGURE_ROWS of the rows the header, the bottom panels and the footer leave
MIN_FIGURE_ROWS = 10


def launch_nodes(launch: dict) -> list[str]:
    """The nodes launch.json names (a Slurm run's node 0 writes them at each start of the job)."""
    nodes = launch.get("nodes")
    return [n for n in nodes[:4096] if isinstance(n, str)] if isinstance(nodes, list) else []


def slurm_changed(view: RunView | None, summary: RunSummary) -> bool:
    """Whether what Slurm says of the run (its status, why and until when it waits, its nodes)
    moved on since ``view`` without an event saying so."""
    return view is not None and (view.status, view.slurm_state, view.queue_reason, view.queue_start, view.nodes) != (
        summary.status, summary.slurm_state, summary.queue_reason, summary.queue_start, tuple(summary.nodes))


class DashboardScreen(Screen):
    BINDINGS = [
        Binding("s", "stop", N_("Stop")),
        Binding("R", "resume", N_("Resume")),  # in the footer once the run stopped, failed or died (RESUMABLE), in Stop's place
        Binding("m", "smoothing", N_("Smoothing")),
        Binding("l", "log_scale", N_("Log y")),
        Binding("v", "lr", N_("Loss/LR")),
        Binding("w", "window", N_("Last N / all")),
        Binding("f", "figure", N_("Figure")),
        Binding("escape", "back", N_("Back")),
        Binding("r", "runs", N_("Runs")),
        Binding("c", "chat", N_("Chat")),
        Binding("e", "evalpredict", N_("Eval/Predict")),  # in the footer once the run has ended (ENDED_KEYS)
        Binding("x", "export", N_("Export")),
        Binding("g", "rollouts", N_("Rollouts")),  # only for a run with rollouts (a grpo or ppo stage)
        Binding("a", "serve", N_("Serve API"), show=False),  # not in the footer (80 columns are full); the palette lists it
    ]
    # Keys that leave a narrow footer first (80 columns): Stop, Back and Quit stay.
    # Rollouts (a grpo or ppo run's) gives way last: reading them is what such a run's dashboard is for.
    FOOTER_DROP_FIRST = ("window", "figure", "smoothing", "chat", "runs", "lr", "log_scale", "export", "evalpredict", "rollouts")
    # Shown in the footer only once the run has ended, in Stop's place (their keys work throughout:
    # a live run's checkpoints can be scored or exported too, the palette lists them).
    ENDED_KEYS = frozenset({"evalpredict", "export"})
    RESUMABLE = ("stopped", "failed", "died", "cancelled")  # the ends `ftui train --resume` continues (a completed run: with --set)
    # Keys that act on what a run has trained: a queued Slurm run has nothing yet (they say so)
    NEED_TRAINING = frozenset({"chat", "evalpredict", "export", "serve", "rollouts"})

    def __init__(self, run_dir: Path, clock: Callable[[], float] = time.time, sampler=None):
        super().__init__()
        self.run_dir = Path(run_dir)
        self.clock = clock
        self.sampler = sampler or (lambda: (sample_gpus(run_cuda_devices(self.run_dir)), sample_host()))  # the run's own GPUs
        self.view: RunView | None = None
        self.stop_requests = 0
        self._ended_seen_live = False
        self._gpu: tuple = ([], None)
        self._plotted = 0.0
        self._plot_due = False
        self.figure_offset = 0  # which of the run's extra figures the first figure plot shows (key f)
        self.rollouts_offered = False  # the run writes rollouts (key g): known once check_rollouts has looked
        # launch.json's Slurm record (issue 45): the run's GPUs are on compute nodes, which NVML
        # here does not see; set by the tail worker before its first view
        self.scheduler: dict | None = None

    def compose(self) -> ComposeResult:
        yield RunHeader(id="run-header")
        yield EndBanner(id="end-banner")
        with Horizontal(id="top"):
            yield LossPlot(id="loss-plot")
            with Vertical(id="figure-plots"):  # shown once a step event carries extra figures
                for i in range(FIGURE_PLOTS):
                    yield FigurePlot(id=f"figure-plot-{i}")
            yield Figures(id="figures")
        with Horizontal(id="bottom"):
            yield GpuPanel(id="gpu-panel")
            yield LogTail(id="log-tail", max_lines=2000, wrap=False, highlight=False, markup=False)
        footer = FittingFooter(self.FOOTER_DROP_FIRST)
        footer.hidden = self.ENDED_KEYS  # until the run is known to have ended
        yield footer

    def on_mount(self) -> None:
        self.query_one(EndBanner).display = False
        self.query_one("#figure-plots").display = False
        self._set_titles()
        self.tail_run()  # the device sampler starts with the first view of a live run (show)
        self.check_rollouts()
        self.set_interval(PLOT_EVERY_S, self._flush_plot)

    def _set_titles(self) -> None:
        self.query_one("#gpu-panel").border_title = _("devices")
        self.query_one("#log-tail").border_title = "train.log"
        self.query_one("#figures").border_title = _("now")

    async def recompose(self) -> None:
        """The language changed: the panels are drawn again from the last view, in place (the
        run followed, its log tail, the plot settings and the workers all stay)."""
        self._set_titles()
        if self.view is not None and not self._widgets_gone():
            self.query_one(RunHeader).show(self.view)
            self.query_one(EndBanner).show(self.view)
            self.query_one(Figures).show(self.view)
            self.show_devices(*self._gpu)
            self._draw_plots(self.view)
        self.query_one(FittingFooter).retranslate()

    # --- workers (never touch widgets directly: they post to the UI thread)
    @work(thread=True, exclusive=True, group="tail")
    def tail_run(self) -> None:
        worker = get_current_worker()
        launch = read_launch_info(self.run_dir)
        self.scheduler = slurm_scheduler(launch)
        summary = RunSummary(run_id=self.run_dir.name, path=self.run_dir)
        summary.take_launch(launch)
        state = RunState(summary, clock=self.clock)
        events = RunFollower(self.run_dir, state.summary, state.apply, chunk=CHUNK, compact=True)
        # A long run: show its head (run_start) and its tail at once, then read the stretch
        # between in the background and splice it in front.
        history = events.start_at_tail(HEAD_BYTES, TAIL_BYTES, above=BIG_FILE)
        if history is not None:
            state.loading = 0.0
        log = LogTailer(self.run_dir / LOG_FILE)
        first = True
        last_view: RunView | None = None
        while not worker.is_cancelled:
            batch = events.poll()  # folds into state and settles the end (died, unreadable)
            lines = log.read_new()
            if not launch:
                launch = read_launch_info(self.run_dir)
                self.scheduler = slurm_scheduler(launch)
                if launch and state.summary.started is None:
                    state.summary.take_launch(launch)
            if self.scheduler is not None and state.summary.live:  # node 0 writes the nodes of each life of the job
                state.summary.nodes = launch_nodes(read_launch_info(self.run_dir)) or state.summary.nodes
            if batch or lines or first or state.summary.live:
                fresh = batch or first or state.loading is not None or slurm_changed(last_view, state.summary)
                view = state.view() if fresh else replace(last_view, elapsed=state.view_elapsed())
                last_view = view
                to_ui(self, self.show, view, lines, first)
            first = False
            if history is not None:
                self._read_history(state, history, worker)
                history = None
                # The next polls of a live run build on this view, not on the one from before
                # the history (which would show the plot without it until the next event).
                last_view = state.view()
                to_ui(self, self.show, last_view, [], False)
                continue
            if events.catching_up:
                continue  # no sleep
            time.sleep(POLL_S)

    def _read_history(self, state: RunState, span: tuple[int, int], worker) -> None:
        start, end = span
        reader = EventReader(self.run_dir / EVENTS_FILE, offset=start)
        past = RunState(RunSummary(run_id=state.summary.run_id, path=self.run_dir))
        while reader.offset < end and not worker.is_cancelled:
            past.apply([e for e in reader.read_new(min(CHUNK, end - reader.offset), compact=True)
                        if not (isinstance(e, dict) and e["event"] in ("run_start", "run_end"))])
            state.loading = (reader.offset - start) / max(1, end - start)
            if time.monotonic() % 1 < 0.1:
                to_ui(self, self.show, state.view(), [], False)
        state.prepend(past)

    @work(thread=True, exclusive=True, group="devices")
    def sample_devices(self) -> None:
        """Samples the machine's devices while the run lives (``_follow_liveness`` starts and
        cancels it): an ended run's dashboard shows its peaks, not the machine's load now."""
        worker = get_current_worker()
        while not worker.is_cancelled:
            gpus, host = self.sampler()
            to_ui(self, self.show_devices, gpus, host)
            time.sleep(GPU_POLL_S)

    # --- rendering (UI thread)
    def _widgets_gone(self) -> bool:
        """The screen is being taken down (the app quits, the user left): a worker's last
        result finds its widgets gone and has nothing to draw."""
        return not self.is_attached or not self.query(RunHeader)

    def show(self, view: RunView, lines: list[str], initial: bool) -> None:
        if self._widgets_gone():
            return
        previous = self.view
        was_live = previous is not None and not previous.ended
        self.view = view
        self.query_one(RunHeader).show(view)  # elapsed and ETA move every poll
        changed = previous is None or (previous.step, previous.status, previous.loading, len(previous.evals[0])) != (
            view.step, view.status, view.loading, len(view.evals[0]))
        if previous is None or previous.ended != view.ended:
            self._follow_liveness(view.ended)
        elif previous.status != view.status:  # queued -> starting: the devices panel and the keys follow
            self.show_devices(*self._gpu)
            self.refresh_bindings()
        if changed:
            self.query_one(EndBanner).show(view)
            self.query_one(Figures).show(view)
            if previous is None or (previous.rank_peaks, previous.ended, previous.rank_mem, previous.nodes) != (
                    view.rank_peaks, view.ended, view.rank_mem, view.nodes):
                self.show_devices(*self._gpu)
            # The plot is the costly part: redraw it at most once a second while steps stream in.
            now = time.monotonic()
            if view.ended or view.loading is None and now - self._plotted >= PLOT_EVERY_S or previous is None:
                self._plotted = now
                self._draw_plots(view)
            else:
                self._plot_due = True
        if lines:
            self.query_one(LogTail).add_lines(lines)
        if view.ended and was_live and not self._ended_seen_live:
            self._ended_seen_live = True
            self.app.bell()
            severity = "error" if view.status in FAILED_ENDS else "warning" if view.status == "stopped" else "information"
            detail = f"\n{view.error}" if view.error else ""
            hint = "\n" + _("hint") + f": {view.hint}" if view.hint else ""
            self.notify(visible(f"{view.run_id}: {status_label(view.status)}. {view.reason or ''}{detail}{hint}"), title=_("run ended"),
                        severity=severity, timeout=30, markup=False)

    def _flush_plot(self) -> None:
        if self._plot_due and self.view is not None and time.monotonic() - self._plotted >= PLOT_EVERY_S:
            self._plot_due = False
            self._plotted = time.monotonic()
            self._draw_plots(self.view)

    def _draw_plots(self, view: RunView) -> None:
        self.query_one("#loss-plot", LossPlot).show(view)
        self._show_figures(view)

    def _show_figures(self, view: RunView) -> None:
        """The figure plots: none for a run without extra figures (sft, pt: the loss plot keeps
        its room), else as many as the terminal's height gives room for, from figure_offset on."""
        names = ordered_figures(view.figure_names)
        box = self.query_one("#figure-plots")
        if box.display != bool(names):
            box.display = bool(names)
            self.refresh_bindings()  # f is offered only with figures to cycle
        if not names:
            return
        room = max(1, (self.size.height - FIXED_ROWS) // MIN_FIGURE_ROWS)
        for i, plot in enumerate(self.query(FigurePlot)):
            shown = i < min(len(names), room)
            if plot.display != shown:
                plot.display = shown
            if shown:
                plot.metric = names[(self.figure_offset + i) % len(names)]
                plot.show(view)

    def on_resize(self, _event) -> None:
        if self.view is not None and not self._widgets_gone():
            self._show_figures(self.view)

    def _follow_liveness(self, ended: bool) -> None:
        """A run that ends stops the device sampler and hides Stop; one that lives again (a
        resume) starts them again."""
        if ended:
            self.workers.cancel_group(self, "devices")
        elif self.scheduler is None:  # a Slurm run's GPUs are not this machine's: nothing to sample
            self.sample_devices()
        self.query_one(FittingFooter).hide(frozenset() if ended else self.ENDED_KEYS)
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":  # nothing to stop once the run has ended: not offered in the footer
            return self.view is None or not self.view.ended
        if action == "resume":  # offered once the run has stopped, failed or died
            return self.view is not None and self.view.ended and self.view.status in self.RESUMABLE
        if action == "figure":  # nothing to cycle without extra figures (sft, pt)
            return self.view is not None and bool(self.view.figure_names)
        if action == "rollouts":  # an sft or dpo run has none to browse
            return self.rollouts_offered
        if action in self.NEED_TRAINING and self.queued:  # shown disabled: nothing trained yet
            return None
        return True

    @property
    def queued(self) -> bool:
        """A Slurm run Slurm has not started: no rank, no checkpoint, no weights yet."""
        return self.view is not None and self.view.status == "queued"

    @work(thread=True, group="rollouts")
    def check_rollouts(self) -> None:
        """Whether the run has rollouts to browse (its files and its config.yaml: off the UI thread)."""
        from ftui.rundir.rollouts import writes_rollouts

        if writes_rollouts(self.run_dir):
            to_ui(self, self._offer_rollouts)

    def _offer_rollouts(self) -> None:
        self.rollouts_offered = True
        self.refresh_bindings()

    def show_devices(self, gpus, host) -> None:
        if self._widgets_gone():
            return
        ended = self.view is not None and self.view.ended
        self._gpu = ([], None) if ended else (gpus, host)  # a sample that was on its way when the run ended
        if self.scheduler is not None and self.view is not None:
            self.query_one(GpuPanel).show_nodes(self.view)
            return
        self.query_one(GpuPanel).show(*self._gpu, self.view.rank_peaks if self.view else (), ended=ended)

    # --- actions
    def action_smoothing(self) -> None:
        self._toggle_plot("smoothing", figures=True)

    def action_window(self) -> None:
        self._toggle_plot("recent_only", figures=True)

    def action_figure(self) -> None:
        """The figure plots move on to the run's next extra figures."""
        if self.view is not None and self.view.figure_names:
            self.figure_offset = (self.figure_offset + 1) % len(self.view.figure_names)
            self._show_figures(self.view)

    def action_log_scale(self) -> None:
        self._toggle_plot("log_scale")

    def action_lr(self) -> None:
        self._toggle_plot("metric", ("loss", "lr"))

    def _toggle_plot(self, setting: str, values: tuple = (False, True), figures: bool = False) -> None:
        """Flips one of the loss plot's settings (``figures``: the figure plots' too) and draws
        them again from the last view (the window and the metric change which curves they draw)."""
        plot = self.query_one("#loss-plot", LossPlot)
        value = values[1] if getattr(plot, setting) == values[0] else values[0]
        for each in [plot, *(self.query(FigurePlot) if figures else ())]:
            setattr(each, setting, value)
        if self.view is not None:
            self._draw_plots(self.view)
        else:
            plot.redraw()

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.app.action_show_launch()  # attached directly: open the form on top

    def action_runs(self) -> None:
        self.app.action_show_runs()

    def action_chat(self) -> None:
        from ftui.tui.screens.chat import ChatScreen

        self.app.push_screen(ChatScreen(self.run_dir))

    def action_evalpredict(self) -> None:
        self.app.open_evalpredict(self.run_dir)

    def action_export(self) -> None:
        self.app.open_export(self.run_dir)

    def action_rollouts(self) -> None:
        self.app.open_rollouts(self.run_dir)

    def action_serve(self) -> None:
        self.app.open_serve(self.run_dir)

    def action_stop(self) -> None:
        if self.view is not None and self.view.ended:  # the footer hides Stop then; a stray call says why
            self.notify(_("the run has already ended"), severity="warning")
            return
        force = self.stop_requests > 0
        if self.queued:  # Slurm has not started it: cancelling loses nothing
            question = _("Cancel the queued Slurm job {job}? It has not started: the run reads stopped.").format(job=self.view.slurm_job)
        elif self.scheduler is not None and force:
            question = _("Cancel the Slurm job now (scancel)? The ranks are killed without saving.")
        else:
            question = (
                _("Kill the run now? The ranks are killed without saving.") if force
                else _("Stop the run? The ranks finish the current step and stop.")
            )

        def answered(yes: bool | None) -> None:
            if yes:
                self.stop_requests += 1
                self.send_stop(force)

        self.app.push_screen(Confirm(question, yes=_("Kill") if force and not self.queued else _("Stop"), danger=force), answered)

    def action_resume(self) -> None:
        """Resumes the run (ftui.ops, the rules of ``ftui train --resume``); this dashboard
        then follows the resumed job."""
        if self.view is None or not self.view.ended:  # a stray call (the palette) on a live run says why
            self.notify(_("the run is still running: nothing to resume"), severity="warning")
            return
        self.app.resume_run(self.run_dir)

    def follow_resumed(self) -> None:
        """The run was resumed from here: its new job's end is announced again, and Stop means
        a stop again (not a kill)."""
        self._ended_seen_live = False
        self.stop_requests = 0

    @work(thread=True, group="control")
    def send_stop(self, force: bool) -> None:
        from ftui.ops.control import stop
        from ftui.ops.errors import StopFailed

        try:
            result = stop(self.run_dir, force=force)
        except StopFailed as e:  # a Slurm run whose scancel failed: said, the app stays up
            result = str(e)
        word = _("kill") if force else _("stop")  # outside the f-string: extraction cannot see into one
        self.app.call_from_thread(self.notify, visible(f"{word}: {result}"), markup=False)

