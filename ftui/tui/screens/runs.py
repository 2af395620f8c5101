"""The runs screen: every run under the runs root; Enter attaches, Space marks runs whose
loss curves are overlaid below the table."""

from __future__ import annotations

import time
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual.worker import get_current_worker

from ftui.follow import fmt_duration
from ftui.runs import RunsRootError, RunSummary, list_runs, summarize_run
from ftui.tui.state import downsample
from ftui.tui.widgets import STATUS_STYLE, LossPlot

REFRESH_S = 2.0
# The table's columns in the order shown, and the order they give way in on a narrow terminal
# (80 columns): the run, its state and progress first; the model path takes what is left
# (its tail, at least MODEL_MIN_WIDTH characters); the duration, then the start time (the run
# id holds it too) last.
COLUMNS = ("run", "status", "model", "method", "engine", "step", "loss", "started", "duration")
PRIORITY = ("run", "status", "step", "loss", "model", "method", "engine", "duration", "started")
MODEL_MIN_WIDTH = 12
CELL_PAD = 2  # DataTable's cell padding, both sides
MARK_WIDTH = 1 + CELL_PAD


def fit_columns(widths: dict[str, int], available: int) -> dict[str, int]:
    """Which columns fit in ``available`` cells, and their widths: by PRIORITY, each one that
    fits is shown (a narrow one may still fit after a wide one did not); the model column
    shrinks to MODEL_MIN_WIDTH and then gets whatever room is left."""
    chosen: dict[str, int] = {}
    used = MARK_WIDTH
    for key in PRIORITY:
        need = min(widths[key], MODEL_MIN_WIDTH) if key == "model" else widths[key]
        if used + need + CELL_PAD <= available:
            chosen[key] = need
            used += need + CELL_PAD
    if "model" in chosen:
        chosen["model"] = min(widths["model"], chosen["model"] + available - used)
    return {key: chosen[key] for key in COLUMNS if key in chosen}


def keep_tail(text: str, width: int) -> str:
    """``text`` cut to ``width`` from the left: a model path's last part names the model."""
    return text if len(text) <= width else "…" + text[len(text) - width + 1:]


class RunsScreen(Screen):
    BINDINGS = [
        Binding("enter", "attach", "Attach", priority=True),
        Binding("space", "mark", "Mark"),
        Binding("o", "overlay", "Overlay marked"),
        Binding("escape", "back", "Back"),
        Binding("n", "new", "New run"),
    ]

    def __init__(self, root: str | Path):
        super().__init__()
        self.root = Path(root)
        self.runs: list[RunSummary] = []
        self.marked: set[str] = set()
        self.shown_columns: dict[str, int] = {}

    def compose(self) -> ComposeResult:
        yield Static(Text(f"runs in {self.root}", style="bold"), id="runs-title")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield LossPlot(id="overlay")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#overlay").display = False
        self.refresh_runs()

    def on_resize(self, _event) -> None:
        self.show_runs(self.runs)

    def set_columns(self, rows: list[dict[str, str]]) -> dict[str, int]:
        """Fits the columns to the table's width; rebuilds them when the choice changes."""
        table = self.query_one(DataTable)
        widths = {key: max([len(key), *(len(row[key]) for row in rows)]) for key in COLUMNS}
        available = (table.size.width or self.app.size.width) - 2  # room for the scrollbar
        fitted = fit_columns(widths, available)
        if fitted != self.shown_columns:
            table.clear(columns=True)
            table.add_column("", key="mark", width=1)
            for key, width in fitted.items():
                table.add_column(key, key=key, width=width)
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
            self.app.call_from_thread(self.show_runs, runs, problem)
            time.sleep(REFRESH_S)

    def show_runs(self, runs: list[RunSummary], problem: str | None = None) -> None:
        self.runs = runs
        title = Text(f"runs in {self.root}", style="bold")
        if problem is not None:
            title.append(f"  {problem}", style="bold red")
        self.query_one("#runs-title", Static).update(title)
        table = self.query_one(DataTable)
        cursor = table.cursor_row
        rows = [self.cells(r) for r in runs]
        fitted = self.set_columns(rows)
        table.clear()
        for r, row in zip(runs, rows):
            if r.status != "unreadable":  # a reason reads from its start (DataTable cuts its end)
                row["model"] = keep_tail(row["model"], fitted.get("model", 0))
            styles = {"status": STATUS_STYLE.get(r.status, "")}
            table.add_row("●" if r.run_id in self.marked else " ",
                          *(Text(row[key], style=styles.get(key, "")) for key in fitted), key=r.run_id)
        if runs:
            table.move_cursor(row=min(max(cursor, 0), len(runs) - 1))

    @staticmethod
    def cells(r: RunSummary) -> dict[str, str]:
        """A run's row as text, every column (which of them fit is decided after)."""
        return {
            "run": r.run_id, "status": r.status,
            "model": str(r.reason if r.status == "unreadable" else r.model or "-"),
            "method": r.method or "-", "engine": r.engine or "-", "step": f"{r.step}/{r.max_steps or '?'}",
            "loss": f"{r.last_loss:.4f}" if r.last_loss is not None else "-",
            "started": time.strftime("%m-%d %H:%M", time.localtime(r.started)) if r.started else "-",
            "duration": fmt_duration(r.duration),
        }

    def _current(self) -> RunSummary | None:
        table = self.query_one(DataTable)
        if not self.runs or table.cursor_row < 0 or table.cursor_row >= len(self.runs):
            return None
        return self.runs[table.cursor_row]

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
        reads the chosen runs whole (off the UI thread: a long run takes a while)."""
        curves = []
        for r in chosen:
            full = summarize_run(r.path, full=True)
            curves.append((r.run_id, downsample(full.loss_steps, full.loss_values, 1000)))
        self.app.call_from_thread(self._show_curves, curves)

    def _show_curves(self, curves: list) -> None:
        plot = self.query_one(LossPlot)
        plot.display = bool(curves)
        plot.show_many(curves)

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
        else:
            self.app.action_show_launch()

    def action_new(self) -> None:
        self.app.action_show_launch()
