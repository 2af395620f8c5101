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

from ftui.i18n import LANGUAGES, N_, _, current_language, set_language
from ftui.safety.text import visible
from ftui.tui.screens.launch import LaunchScreen
from ftui.tui.screens.modals import Confirm


class FtuiApp(App):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses may live anywhere
    TITLE = "ftui"
    # ctrl+t: the language (English / 中文); not in the footer (it stays as it was at 80 columns),
    # the command palette lists it; priority: an Input's own keys do not take it (tmux passes it on).
    BINDINGS = [Binding("ctrl+q", "quit", N_("Quit"), priority=True),
                Binding("ctrl+t", "switch_language", N_("Language"), show=False, priority=True)]

    def __init__(
        self,
        runs_root: str | Path,
        attach: Path | None = None,
        initial_config: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.time,
        sampler: Callable[[], tuple] | None = None,
        offer_live: bool = True,
        render_examples: bool = True,
        rollouts: dict[str, str] | None = None,
    ):
        super().__init__()
        self.runs_root = Path(runs_root)
        self.attach_to = attach
        self.rollouts_first = rollouts  # ftui rollouts RUN: the rollout browser (its search and sort) over the run's dashboard
        self.initial_config = initial_config
        self.clock = clock
        self.sampler = sampler
        self.offer_live = offer_live
        self.render_examples = render_examples  # the form's first example, rendered by a child process
        self.launch_screen: LaunchScreen | None = None

    def notify(self, message: str, *, title: str = "", severity: Any = "information", timeout: float | None = None,
               markup: bool = True) -> None:
        """Every notification (a screen's or a widget's notify comes here): its control
        characters shown as escapes, whatever it quotes (a failure reason, a run's name, an
        error's path); Textual passes them to the terminal. Markup is each caller's: untrusted
        text goes with markup=False or escaped."""
        super().notify(visible(message), title=visible(title), severity=severity, timeout=timeout, markup=markup)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the app in the terminal, after textual-image asked the terminal which graphics it
        draws (the launch form's image preview): it cannot ask once Textual owns the terminal."""
        from ftui.tui.screens.launch_media import probe_terminal

        probe_terminal()
        return super().run(*args, **kwargs)

    def on_mount(self) -> None:
        if self.attach_to is not None:  # the launch form is built only if the user goes there
            self.open_dashboard(self.attach_to)
            if self.rollouts_first is not None:
                self.open_rollouts(self.attach_to, **self.rollouts_first)
            return
        self.action_show_launch()
        if self.offer_live:
            self.find_live_run()

    @work(thread=True, group="live")
    def find_live_run(self) -> None:
        from ftui.rundir.listing import list_runs, RunsRootError

        try:
            live = [r for r in list_runs(self.runs_root) if r.live]
        except RunsRootError:
            return  # the runs screen says why it cannot list them
        if live:
            self.call_from_thread(self._offer, live[0])

    def _offer(self, run) -> None:
        from ftui.tui.widgets import status_label  # not on the first frame's path

        def answered(yes: bool | None) -> None:
            if yes:
                self.open_dashboard(run.path)

        question = _("Run {run} is {status} (step {step}/{max_steps}). Attach to it?").format(
            run=run.run_id, status=status_label(run.status), step=run.step, max_steps=run.max_steps or "?")
        self.push_screen(Confirm(question, yes=_("Attach")), answered)

    def open_dashboard(self, run_dir: Path) -> None:
        from ftui.tui.screens.dashboard import DashboardScreen  # not on the first frame's path

        self.push_screen(DashboardScreen(Path(run_dir), clock=self.clock, sampler=self.sampler))

    def open_evalpredict(self, run_dir: Path) -> None:
        """The Evaluate & Predict screen of a run (its dashboard's, and the runs screen's, key e)."""
        from ftui.tui.screens.evalpredict import EvalPredictScreen

        self.push_screen(EvalPredictScreen(Path(run_dir)))

    def open_rollouts(self, run_dir: Path, query: str = "", sort: str = "newest") -> None:
        """The rollout browser of a grpo or ppo run (its dashboard's, and the runs screen's, key g)."""
        from ftui.tui.screens.rollouts import RolloutsScreen

        self.push_screen(RolloutsScreen(Path(run_dir), query=query, sort=sort))

    def open_export(self, run_dir: Path) -> None:
        """The Export screen of a run (its dashboard's, and the runs screen's, key x)."""
        from ftui.tui.screens.export import ExportScreen

        self.push_screen(ExportScreen(Path(run_dir)))

    def open_serve(self, run_dir: Path) -> None:
        """The Serve API screen of a run (its dashboard's, and the runs screen's, key a)."""
        from ftui.tui.screens.serve import ServeScreen

        self.push_screen(ServeScreen(Path(run_dir)))

    def resume_run(self, run_dir: Path, allow_changed: bool = False, checkpoint: str | None = None,
                   overrides: dict[str, Any] | None = None) -> None:
        """Resumes a stopped, failed or died run (from ``checkpoint``, else its newest complete
        one; its config with ``overrides``), with the rules and refusals of ``ftui train
        --resume`` (the same operation, ftui.ops): a refusal is said in a notification and the
        app stays; a resume that would continue with another base model or other data asks
        first, naming the changes (the CLI's --allow-changed). Then the run's dashboard follows
        the resumed job. The dashboard's and the runs screen's key R, the palette and the launch
        form (a config with resume_from_checkpoint) come here."""
        from ftui.ops.resume import ResumeRequest

        self._resume_in_worker(ResumeRequest(run=str(run_dir), checkpoint=checkpoint, overrides=dict(overrides or {}),
                                             allow_changed=allow_changed))

    def resume_from_config(self, cfg: Any) -> None:
        """A config whose resume_from_checkpoint names a run (LLaMA-Factory's way to resume):
        that run goes on from that checkpoint with the keys this config sets differently, as
        ``ftui train CONFIG.yaml`` does."""
        self._resume_config_in_worker(cfg)

    @work(thread=True, group="resume")
    def _resume_config_in_worker(self, cfg: Any) -> None:
        from ftui.ops.resume import resume_target_request

        run_dir, checkpoint, changed = resume_target_request(cfg)
        self.call_from_thread(self.resume_run, run_dir, False, str(checkpoint) if checkpoint else None, changed)

    @work(thread=True, group="resume", exclusive=True)
    def _resume_in_worker(self, request: Any) -> None:
        """The checks read the run's files and the datasets (their sha256): off the UI thread."""
        from ftui.ops.errors import ChangesNeedConsent, OpError
        from ftui.ops.start import resume

        try:
            started = resume(request)
        except ChangesNeedConsent as refused:
            self.call_from_thread(self._ask_to_resume_with_changes, request, refused.changes)
        except OpError as refused:
            said = [n.text for n in refused.notices] + [refused.message]
            self.call_from_thread(self.notify, "\n".join(said), title=_("not resumed"), severity="error", timeout=20, markup=False)
        except OSError as err:
            self.call_from_thread(self.notify, _("cannot resume: {error}").format(error=err), severity="error", markup=False)
        else:
            self.call_from_thread(self._resumed, started)

    def _ask_to_resume_with_changes(self, request: Any, changes: list[str]) -> None:
        from dataclasses import replace

        def answered(yes: bool | None) -> None:
            if yes:
                self._resume_in_worker(replace(request, allow_changed=True))

        question = _("Resuming {run} would continue its checkpoint with another base model or other data:\n{changes}\n"
                     "Resume anyway? (Or start a new run for them.)").format(run=Path(request.run).name, changes="\n".join(changes))
        self.push_screen(Confirm(question, yes=_("Resume anyway"), danger=True), answered)

    def _resumed(self, started: Any) -> None:
        from ftui.tui.screens.dashboard import DashboardScreen

        said = [_("run {run} resumed from {checkpoint}").format(run=started.run_dir.name, checkpoint=started.resumed_from.name)]
        said += [n.text for n in started.notices]
        self.notify("\n".join(said), severity="warning" if started.notices else "information", markup=False)
        screen = self.screen
        if isinstance(screen, DashboardScreen) and screen.run_dir.resolve() == started.run_dir.resolve():
            screen.follow_resumed()  # the dashboard reads the new job's events as they come
        else:
            self.open_dashboard(started.run_dir)

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

    async def action_switch_language(self) -> None:
        """English <-> 中文 at once (key ctrl+t, the palette): every screen of the stack is
        recomposed in the new language, each keeping what it holds (the form's fields, the
        run a dashboard follows, a conversation, the runs' selection). Jobs started from now
        on speak it too (FTUI_LANG)."""
        await self.switch_language("en" if current_language() == "zh" else "zh")

    async def switch_language(self, lang: str) -> None:
        set_language(lang)
        for screen in list(self.screen_stack):
            await screen.recompose()
        self.refresh_bindings()
        self.notify(_("Language: {language}").format(language=LANGUAGES[current_language()]))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        from ftui.tui.screens.dashboard import DashboardScreen
        from ftui.tui.screens.runs import RunsScreen

        yield from super().get_system_commands(screen)
        yield SystemCommand(_("Language: English / 中文"), _("Switch the interface's language (ctrl+t); what you typed stays"),
                            self.action_switch_language)
        yield SystemCommand(_("Runs"), _("List every run under the runs root; Enter attaches"), self.action_show_runs)
        yield SystemCommand(_("New run"), _("Open the launch form"), self.action_show_launch)
        if isinstance(screen, LaunchScreen):
            yield SystemCommand(_("Demo preset"), _("Fill the form with the built-in demo"), screen.action_demo)
            yield SystemCommand(_("Start"), _("Start the run in the form"), screen.action_start)
            yield SystemCommand(_("Load YAML"), _("Load a config (LLaMA-Factory's keys work)"), screen.action_load)
            yield SystemCommand(_("Save YAML"), _("Save the form as a config file"), screen.action_save)
            yield SystemCommand(_("Show command"), _("ftui train on the saved YAML, and the launch command"), screen.action_command)
        if isinstance(screen, DashboardScreen):
            yield SystemCommand(_("Stop run"), _("Ask the run to stop (again: kill)"), screen.action_stop)
            yield SystemCommand(_("Resume run"), _("Continue this stopped, failed or died run from its newest checkpoint (R)"),
                                screen.action_resume)
            yield SystemCommand(_("Toggle smoothing"), _("Smooth the loss curve"), screen.action_smoothing)
            yield SystemCommand(_("Toggle window"), _("Whole run or the last steps"), screen.action_window)
            yield SystemCommand(_("Toggle log scale"), _("The plot's y axis on a log scale"), screen.action_log_scale)
            yield SystemCommand(_("Loss / learning rate"), _("Plot the loss or the learning rate"), screen.action_lr)
            yield SystemCommand(_("Chat"), _("Talk to this run's model (final/ or a checkpoint)"), screen.action_chat)
            yield SystemCommand(_("Evaluate & Predict"), _("Score this run on a dataset, browse and compare its predictions"),
                                screen.action_evalpredict)
            yield SystemCommand(_("Export model"), _("This run's model as a standalone directory (merged, safetensors; GGUF)"),
                                screen.action_export)
            yield SystemCommand(_("Serve API"), _("This run's model as an OpenAI-compatible API (a job until stopped) (a)"),
                                screen.action_serve)
            if screen.rollouts_offered:
                yield SystemCommand(_("Rollouts"), _("Browse this run's completions and their rewards (g)"), screen.action_rollouts)
        if isinstance(screen, RunsScreen):
            yield SystemCommand(_("Overlay loss curves"), _("Plot the marked runs together"), screen.action_overlay)
            yield SystemCommand(_("Delete run"), _("Delete the highlighted run's directory (asks first; never a live run)"), screen.action_delete)
            if screen.current_run() is not None:
                yield SystemCommand(_("Resume run"), _("Continue the highlighted stopped, failed or died run from its newest checkpoint (R)"),
                                    screen.action_resume)
                yield SystemCommand(_("Evaluate & Predict"), _("Score the highlighted run on a dataset, browse and compare its predictions"),
                                    screen.action_evalpredict)
                yield SystemCommand(_("Export model"), _("The highlighted run's model as a standalone directory (merged, safetensors; GGUF)"),
                                    screen.action_export)
                yield SystemCommand(_("Serve API"), _("The highlighted run's model as an OpenAI-compatible API (a job until stopped) (a)"),
                                    screen.action_serve)
                yield SystemCommand(_("Rollouts"), _("Browse the highlighted grpo or ppo run's completions and their rewards (g)"),
                                    screen.action_rollouts)
