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

    def compose(self) -> ComposeResult:
        yield Static(Text(f"runs in {self.root}", style="bold"), id="runs-title")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield LossPlot(id="overlay")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for col in ("", "run", "status", "model", "method", "engine", "step", "loss", "started", "duration"):
            table.add_column(col, key=col or "mark")
        self.query_one("#overlay").display = False
        self.refresh_runs()

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
        table.clear()
        for r in runs:
            table.add_row(
                "●" if r.run_id in self.marked else " ",
                Text(r.run_id), Text(r.status, style=STATUS_STYLE.get(r.status, "")),
                Text(str(r.reason if r.status == "unreadable" else r.model or "-")),
                r.method or "-", r.engine or "-", f"{r.step}/{r.max_steps or '?'}",
                f"{r.last_loss:.4f}" if r.last_loss is not None else "-",
                time.strftime("%m-%d %H:%M", time.localtime(r.started)) if r.started else "-",
                fmt_duration(r.duration), key=r.run_id,
            )
        if runs:
            table.move_cursor(row=min(max(cursor, 0), len(runs) - 1))

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
