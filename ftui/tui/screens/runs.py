"""The runs screen: every run under the runs root; Enter attaches, Space marks runs whose
loss curves are overlaid below the table (f: an extra figure of theirs instead, such as a
preference run's rewards_margin), d deletes a run that no job runs (after a yes), R resumes a
stopped, failed or died run (the app's resume, ftui.ops), g opens a grpo or ppo run's rollout browser,
a its Serve API screen."""

from __future__ import annotations

import time
from pathlib import Path

from rich.cells import cell_len
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Static
from textual.worker import get_current_worker

from ftui.i18n import N_, _
from ftui.rundir.delete import delete_plan, Deleted, DeletePlan
from ftui.rundir.follower import RunFollower
from ftui.rundir.listing import LIST_COLUMNS as COLUMNS, list_row, list_runs, RunsRootError
from ftui.rundir.summary import RunSummary
from ftui.safety.text import visible
from ftui.tui.footer import FittingFooter
from ftui.tui.screens.modals import Confirm
from ftui.tui.state import RunState, RunView, ordered_figures
from ftui.tui.widgets import STATUS_STYLE, LossPlot, slurm_words, status_label
from ftui.tui.ui_thread import to_ui

REFRESH_S = 2.0
# The order the table's columns give way in on a narrow terminal: the run, its state, progress,
# method and engine first (80 columns keep them all); the duration, then the start time last
# (the line below the table shows both for the highlighted run, and its whole model path).
PRIORITY = ("run", "status", "step", "loss", "method", "engine", "model", "duration", "started")
# The two long columns shrink to these widths, an ellipsis marking the cut (the run id keeps its
# head, which `ftui attach PREFIX` takes, and its timestamp; the model path its tail), and share
# what room is left, the run id first. While one is cut below COMFORT, the start time and then
# the duration give way to it (the line below the table shows both).
SHRINK_MIN = {"run": 18, "model": 9}
COMFORT = {"run": 30, "model": 24}
GIVE_WAY = ("started", "duration")
CELL_PAD = 2  # DataTable's cell padding, both sides
MARK_WIDTH = 1 + CELL_PAD
OVERLAY_POINTS = 1000  # per run and curve
# The columns' headings (the keys stay `ftui runs`' own); widths are counted in cells: a CJK
# character takes two.
HEADINGS = {"run": N_("run"), "status": N_("status"), "model": N_("model"), "method": N_("method"), "engine": N_("engine"),
            "step": N_("step"), "loss": N_("loss"), "started": N_("started"), "duration": N_("duration")}


def heading(key: str) -> str:
    return _(HEADINGS[key]) if key in HEADINGS else key


def fit_columns(widths: dict[str, int], available: int) -> dict[str, int]:
    """Which columns fit in ``available`` cells, and their widths (see PRIORITY, SHRINK_MIN,
    COMFORT and GIVE_WAY)."""
    left_out: set[str] = set()
    while True:
        fitted = _fit(widths, available, left_out)
        cut = any(fitted[key] < min(widths[key], COMFORT[key]) for key in COMFORT if key in fitted)
        spare = [key for key in GIVE_WAY if key in fitted]
        if not cut or not spare:
            return fitted
        left_out.add(spare[0])


def _fit(widths: dict[str, int], available: int, left_out: set[str]) -> dict[str, int]:
    """By PRIORITY, each column that fits is shown (a narrow one may still fit after a wide one
    did not), the long ones at their SHRINK_MIN; then those grow into the room left."""
    chosen: dict[str, int] = {}
    used = MARK_WIDTH
    for key in PRIORITY:
        need = min(widths[key], SHRINK_MIN.get(key, widths[key]))
        if key not in left_out and used + need + CELL_PAD <= available:
            chosen[key] = need
            used += need + CELL_PAD
    for key in SHRINK_MIN:
        if key in chosen:
            grow = max(0, min(widths[key] - chosen[key], available - used))
            chosen[key] += grow
            used += grow
    return {key: chosen[key] for key in COLUMNS if key in chosen}


def head_cells(text: str, width: int) -> str:
    """The longest start of ``text`` that takes at most ``width`` cells (a CJK character takes two)."""
    while cell_len(text) > width:
        text = text[:-1]
    return text


def tail_cells(text: str, width: int) -> str:
    """The longest end of ``text`` that takes at most ``width`` cells."""
    while cell_len(text) > width:
        text = text[1:]
    return text


def keep_tail(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells from the left: a model path's last part names the model."""
    return text if cell_len(text) <= width else "…" + tail_cells(text, width - 1)


def keep_ends(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells in the middle: a run id's head names the run, its tail is
    the time it started."""
    if cell_len(text) <= width:
        return text
    tail = (width - 1) // 2
    return head_cells(text, width - 1 - tail) + "…" + tail_cells(text, tail)


def shown_row(r: RunSummary) -> dict[str, str]:
    """``ftui runs``' cells of a run as the screen shows them: one line each, control characters
    as escapes (a run directory's name, model path and failure reason are untrusted)."""
    return {key: visible(cell, one_line=True) for key, cell in list_row(r).items()}


def detail_line(r: RunSummary) -> Text:
    """The highlighted run in full, whatever columns the table could fit: its id, status and
    why it ended, then its start time and duration (as ``ftui runs`` prints them), method,
    engine and model path (last: a long one wraps)."""
    row = shown_row(r)
    text = Text(row["run"], style="bold")
    text.append(f"  {status_label(r.status)}", style=STATUS_STYLE.get(r.status, ""))
    if r.slurm_job:  # a Slurm run: its job, and while queued why it waits and when Slurm expects to start it
        text.append("  " + slurm_words(r), style="yellow" if r.status == "queued" else "dim")
    if r.has_ended and r.reason:
        text.append("  " + visible(r.reason), style="dim")
    text.append("\n" + _("started {started}  duration {duration}").format(started=row["started"], duration=row["duration"]))
    text.append(f"  {row['method']} · {row['engine']}")
    if r.status != "unreadable":  # an unreadable run's model cell holds the reason
        text.append("  " + _("model {model}").format(model=row["model"]))
    return text


class RunsScreen(Screen):
    BINDINGS = [
        Binding("enter", "attach", N_("Attach"), priority=True),
        Binding("space", "mark", N_("Mark")),
        Binding("o", "overlay", N_("Overlay")),
        Binding("f", "figure", N_("Figure")),
        Binding("escape", "back", N_("Back")),
        Binding("n", "new", N_("New")),
        Binding("d", "delete", N_("Delete")),
        Binding("e", "evalpredict", N_("Eval/Predict"), show=False),  # not in the footer: its snapshots stay; the palette lists it
        Binding("x", "export", N_("Export"), show=False),  # the same
        Binding("R", "resume", N_("Resume"), show=False),  # the same (a run's dashboard shows it in its footer)
        Binding("g", "rollouts", N_("Rollouts"), show=False),  # the same: a grpo or ppo run's rollout browser
        Binding("a", "serve", N_("Serve API"), show=False),  # the same: the highlighted run's model as an API
    ]

    def __init__(self, root: str | Path):
        super().__init__()
        self.root = Path(root)
        self.runs: list[RunSummary] = []
        self.marked: set[str] = set()
        self.shown_columns: dict[str, int] = {}
        self.overlaid: list[RunView] = []  # the runs of the overlay, read whole
        self.overlay_metric = "loss"  # or an extra figure of theirs (key f)
        self.problem: str | None = None  # why the runs root cannot be listed

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="runs-title")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="run-detail")
        yield LossPlot(id="overlay")
        yield FittingFooter()

    def on_mount(self) -> None:
        self.query_one("#overlay").display = False
        self.refresh_runs()

    def on_resize(self, _event) -> None:
        self.show_runs(self.runs)

    def _title(self, problem: str | None = None) -> Text:
        title = Text(_("runs in {root}").format(root=visible(self.root)), style="bold")
        if problem is not None:
            title.append("  " + visible(problem), style="bold red")
        return title

    async def recompose(self) -> None:
        """The language changed: the title, the table's headings and cells, the overlay and
        the footer again, in place (the highlighted run, the marks and the overlay stay)."""
        self.shown_columns = {}  # the headings are rebuilt in the new language
        self.show_runs(self.runs, self.problem)
        if self.overlaid:
            self._draw_overlay()
        self.query_one(FittingFooter).retranslate()

    def set_columns(self, rows: list[dict[str, str]]) -> dict[str, int]:
        """Fits the columns to the table's width; rebuilds them when the choice changes."""
        table = self.query_one(DataTable)
        widths = {key: max([cell_len(heading(key)), *(cell_len(row[key]) for row in rows)]) for key in COLUMNS}
        available = (table.size.width or self.app.size.width) - 2  # room for the scrollbar
        fitted = fit_columns(widths, available)
        if fitted != self.shown_columns:
            table.clear(columns=True)
            table.add_column("", key="mark", width=1)
            for key, width in fitted.items():
                table.add_column(heading(key), key=key, width=width)
            self.shown_columns = fitted
        return fitted

    @work(thread=True, exclusive=True, group="runs")
    def refresh_runs(self) -> None:
        worker = get_current_worker()
        while not worker.is_cancelled:
            try:
                runs, problem = list_runs(self.root), None
            except RunsRootError as err:
                runs, problem = [], str(err)
            to_ui(self, self.show_runs, runs, problem)
            time.sleep(REFRESH_S)

    def show_runs(self, runs: list[RunSummary], problem: str | None = None) -> None:
        self.runs, self.problem = runs, problem
        self.query_one("#runs-title", Static).update(self._title(problem))
        table = self.query_one(DataTable)
        cursor = table.cursor_row
        rows = [shown_row(r) | {"status": status_label(r.status)} for r in runs]
        fitted = self.set_columns(rows)
        table.clear()
        for r, row in zip(runs, rows):
            if r.status != "unreadable":  # a reason reads from its start (DataTable cuts its end)
                row["model"] = keep_tail(row["model"], fitted.get("model", 0))
            row["run"] = keep_ends(row["run"], fitted.get("run", 0))
            styles = {"status": STATUS_STYLE.get(r.status, "")}
            table.add_row("●" if r.run_id in self.marked else " ",
                          *(Text(row[key], style=styles.get(key, "")) for key in fitted), key=r.run_id)
        if runs:
            table.move_cursor(row=min(max(cursor, 0), len(runs) - 1))
        self.show_detail()

    def show_detail(self) -> None:
        run = self._current()
        self.query_one("#run-detail", Static).update(detail_line(run) if run is not None else "")

    @on(DataTable.RowHighlighted)
    def _highlighted(self, _event) -> None:
        self.show_detail()

    def _current(self) -> RunSummary | None:
        table = self.query_one(DataTable)
        if not self.runs or table.cursor_row < 0 or table.cursor_row >= len(self.runs):
            return None
        return self.runs[table.cursor_row]

    def current_run(self) -> RunSummary | None:
        """The highlighted run (None when the list is empty)."""
        return self._current()

    def action_evalpredict(self) -> None:
        run = self._current()
        if run is not None:
            self.app.open_evalpredict(run.path)

    def action_export(self) -> None:
        run = self._current()
        if run is not None:
            self.app.open_export(run.path)

    def action_rollouts(self) -> None:
        run = self._current()
        if run is not None:
            self.app.open_rollouts(run.path)

    def action_serve(self) -> None:
        run = self._current()
        if run is not None:
            self.app.open_serve(run.path)

    def action_resume(self) -> None:
        """Resumes the highlighted run (the app's resume: ftui.ops' rules, a refusal said in a
        notification); its dashboard then follows the resumed job."""
        run = self._current()
        if run is None:
            return
        if run.live:
            self.notify(_("{run} is {status}: nothing to resume (Enter attaches)").format(
                run=visible(run.run_id), status=status_label(run.status)), severity="warning", markup=False)
            return
        self.app.resume_run(run.path)

    def action_attach(self) -> None:
        run = self._current()
        if run is not None:
            self.app.open_dashboard(run.path)

    @on(DataTable.RowSelected)
    def _selected(self, _event) -> None:
        self.action_attach()

    def action_mark(self) -> None:
        run = self._current()
        if run is None:
            return
        self.marked ^= {run.run_id}
        self.show_runs(self.runs)

    def action_overlay(self) -> None:
        chosen = [r for r in self.runs if r.run_id in self.marked] or [r for r in [self._current()] if r]
        self.load_curves(chosen)

    @work(thread=True, exclusive=True, group="overlay")
    def load_curves(self, chosen: list[RunSummary]) -> None:
        """The list holds summaries from the head and tail of each run's events; the overlay
        reads the chosen runs whole (off the UI thread: a long run takes a while), folded as
        the dashboard folds them: the loss and any extra figures over the run."""
        views = []
        for r in chosen:
            state = RunState(RunSummary(run_id=r.run_id, path=r.path), max_points=OVERLAY_POINTS)
            RunFollower(r.path, state.summary, state.apply, compact=True).read()
            views.append(state.view())
        to_ui(self, self._show_curves, views)

    def overlay_metrics(self) -> list[str]:
        """What the overlay can compare: the loss, then the extra figures any of its runs has."""
        return ["loss", *ordered_figures(list(dict.fromkeys(n for v in self.overlaid for n in v.figure_names)))]

    def _show_curves(self, views: list[RunView]) -> None:
        self.overlaid = views
        if self.overlay_metric not in self.overlay_metrics():
            self.overlay_metric = "loss"
        self.refresh_bindings()  # f is offered when there is a figure to compare
        self._draw_overlay()

    def _draw_overlay(self) -> None:
        """The overlay's metric for each of its runs that has it."""
        metric = self.overlay_metric
        curves = [(v.run_id, v.series if metric == "loss" else v.figure_series[metric])
                  for v in self.overlaid if metric == "loss" or metric in v.figure_series]
        plot = self.query_one(LossPlot)
        plot.display = bool(curves)
        plot.show_many(curves, metric)

    def action_figure(self) -> None:
        """The overlay compares the next of its metrics: the loss, then each extra figure."""
        metrics = self.overlay_metrics()
        self.overlay_metric = metrics[(metrics.index(self.overlay_metric) + 1) % len(metrics)]
        self._draw_overlay()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "figure":  # only an overlay with extra figures has something to cycle
            return len(self.overlay_metrics()) > 1
        return True

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.app.action_show_launch()

    def action_new(self) -> None:
        self.app.action_show_launch()

    def action_delete(self) -> None:
        """Asks, then deletes in a worker (checkpoints can be many GB). A live run is refused
        here already; delete_run checks again under the job lock."""
        run = self._current()
        if run is None:
            return
        if run.live:
            self.notify(_("{run} is {status}: stop it first (Enter attaches, then s), then delete it").format(
                run=visible(run.run_id), status=status_label(run.status)),
                        severity="warning", markup=False)
            return
        self.plan_delete(run)

    @work(thread=True, group="delete")
    def plan_delete(self, run: RunSummary) -> None:
        """What the delete removes (a run that is a link loses only the link: delete_plan),
        found off the UI thread; then the question says exactly that."""
        try:
            plan = delete_plan(run.path)
        except OSError as err:
            self.app.call_from_thread(self.notify, _("not deleted: {error}").format(error=err), severity="error", markup=False)
            return
        to_ui(self, self._ask_delete, run, plan)

    def _ask_delete(self, run: RunSummary, plan: DeletePlan) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.delete_in_background(run, plan)

        self.app.push_screen(Confirm(plan.question(), yes=_("Delete"), danger=True), answered)

    @work(thread=True, group="delete")
    def delete_in_background(self, run: RunSummary, plan: DeletePlan) -> None:
        from ftui.ops.control import delete
        from ftui.ops.errors import OpError

        try:
            done = delete(plan)  # refused if the run changed since the question (ftui.ops, as ftui delete)
        except (OpError, OSError) as err:
            self.app.call_from_thread(self.notify, _("not deleted: {error}").format(error=visible(err)), severity="error", markup=False)
            return
        to_ui(self, self._deleted, run, done)

    def _deleted(self, run: RunSummary, done: Deleted) -> None:
        self.marked.discard(run.run_id)
        self.show_runs([r for r in self.runs if r.path != run.path])
        self.notify(_("deleted {run}").format(run=run.run_id) if done.kept is None else done.message(), markup=False)
        if done.leftovers:
            self.notify(done.leftovers, markup=False)
