"""The ftui Textual app: launch form, dashboards, runs list. No torch is imported here.

Quitting the app (or losing the terminal) never stops a run: runs live in their own
process session and the app only reads their directories.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Iterable

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from ftui.i18n import N_
from ftui.tui.screens.launch import LaunchScreen
from ftui.tui.screens.modals import Confirm


class FtuiApp(App):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses may live anywhere
    TITLE = "ftui"
    BINDINGS = [Binding("ctrl+q", "quit", N_("Quit"), priority=True)]

    def __init__(
        self,
        runs_root: str | Path,
        attach: Path | None = None,
        initial_config: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
        sampler: Callable[[], tuple] | None = None,
        offer_live: bool = True,
        render_examples: bool = True,
    ):
        super().__init__()
        self.runs_root = Path(runs_root)
        self.attach_to = attach
        self.initial_config = initial_config
        self.clock = clock
        self.sampler = sampler
        self.offer_live = offer_live
        self.render_examples = render_examples  # the form's first example, rendered by a child process
        self.launch_screen: LaunchScreen | None = None

    def on_mount(self) -> None:
        if self.attach_to is not None:  # the launch form is built only if the user goes there
            self.open_dashboard(self.attach_to)
            return
        self.action_show_launch()
        if self.offer_live:
            self.find_live_run()

    @work(thread=True, group="live")
    def find_live_run(self) -> None:
        from ftui.runs import RunsRootError, list_runs

        try:
            live = [r for r in list_runs(self.runs_root) if r.live]
        except RunsRootError:
            return  # the runs screen says why it cannot list them
        if live:
            self.call_from_thread(self._offer, live[0])

    def _offer(self, run) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                self.open_dashboard(run.path)

        self.push_screen(Confirm(f"Run {run.run_id} is {run.status} (step {run.step}/{run.max_steps or '?'}). Attach to it?", yes="Attach"), answered)

    def open_dashboard(self, run_dir: Path) -> None:
        from ftui.tui.screens.dashboard import DashboardScreen  # not on the first frame's path

        self.push_screen(DashboardScreen(Path(run_dir), clock=self.clock, sampler=self.sampler))

    def open_evalpredict(self, run_dir: Path) -> None:
        """The Evaluate & Predict screen of a run (its dashboard's, and the runs screen's, key e)."""
        from ftui.tui.screens.evalpredict import EvalPredictScreen

        self.push_screen(EvalPredictScreen(Path(run_dir)))

    def open_export(self, run_dir: Path) -> None:
        """The Export screen of a run (its dashboard's, and the runs screen's, key x)."""
        from ftui.tui.screens.export import ExportScreen

        self.push_screen(ExportScreen(Path(run_dir)))

    def action_show_launch(self) -> None:
        if self.launch_screen is None or self.launch_screen not in self.screen_stack:
            self.launch_screen = LaunchScreen(self.initial_config, str(self.runs_root))
            self.push_screen(self.launch_screen)
            return
        while self.screen is not self.launch_screen:
            self.pop_screen()

    def action_show_runs(self) -> None:
        from ftui.tui.screens.runs import RunsScreen

        if isinstance(self.screen, RunsScreen):
            return
        self.push_screen(RunsScreen(self.runs_root))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        from ftui.tui.screens.dashboard import DashboardScreen
        from ftui.tui.screens.runs import RunsScreen

        yield from super().get_system_commands(screen)
        yield SystemCommand("Runs", "List every run under the runs root; Enter attaches", self.action_show_runs)
        yield SystemCommand("New run", "Open the launch form", self.action_show_launch)
        if isinstance(screen, LaunchScreen):
            yield SystemCommand("Demo preset", "Fill the form with the built-in demo", screen.action_demo)
            yield SystemCommand("Start", "Start the run in the form", screen.action_start)
            yield SystemCommand("Load YAML", "Load a config (LLaMA-Factory's keys work)", screen.action_load)
            yield SystemCommand("Save YAML", "Save the form as a config file", screen.action_save)
            yield SystemCommand("Show command", "ftui train on the saved YAML, and the launch command", screen.action_command)
        if isinstance(screen, DashboardScreen):
            yield SystemCommand("Stop run", "Ask the run to stop (again: kill)", screen.action_stop)
            yield SystemCommand("Toggle smoothing", "Smooth the loss curve", screen.action_smoothing)
            yield SystemCommand("Toggle window", "Whole run or the last steps", screen.action_window)
            yield SystemCommand("Toggle log scale", "The plot's y axis on a log scale", screen.action_log_scale)
            yield SystemCommand("Loss / learning rate", "Plot the loss or the learning rate", screen.action_lr)
            yield SystemCommand("Chat", "Talk to this run's model (final/ or a checkpoint)", screen.action_chat)
            yield SystemCommand("Evaluate & Predict", "Score this run on a dataset, browse and compare its predictions",
                                screen.action_evalpredict)
            yield SystemCommand("Export model", "This run's model as a standalone directory (merged, safetensors; GGUF)",
                                screen.action_export)
        if isinstance(screen, RunsScreen):
            yield SystemCommand("Overlay loss curves", "Plot the marked runs together", screen.action_overlay)
            yield SystemCommand("Delete run", "Delete the highlighted run's directory (asks first; never a live run)", screen.action_delete)
            if screen.current_run() is not None:
                yield SystemCommand("Evaluate & Predict", "Score the highlighted run on a dataset, browse and compare its predictions",
                                    screen.action_evalpredict)
                yield SystemCommand("Export model", "The highlighted run's model as a standalone directory (merged, safetensors; GGUF)",
                                    screen.action_export)
