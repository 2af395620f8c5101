"""What the screens that start and follow a run's jobs share (Evaluate & Predict, Export):
following one job directory with the runs' own ``RunFollower`` in a thread worker, Stop
(asks first; again: kill) through ``stop_run``, and the start / stop keys offered as the job's
state allows. A job is a detached process laid out as a run directory; it outlives the screen.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import Button, DataTable, Label, Select, Static
from textual.worker import get_current_worker

from ftui.i18n import N_, _
from ftui.safety.text import visible
from ftui.rundir.fold import RunFold
from ftui.rundir.follower import RunFollower
from ftui.rundir.summary import RunSummary
from ftui.tui.footer import FittingFooter
from ftui.tui.relabel import offer, relabel
from ftui.tui.screens.modals import Confirm
from ftui.tui.ui_thread import to_ui

POLL_S = 0.5


def field_row(prefix: str, key: str, label: str, control: Any, classes: str = "") -> Horizontal:
    """One line of a job form: its label (marked with N_: shown translated, ``PREFIX-label-KEY``)
    and its control (``PREFIX-row-KEY``)."""
    return Horizontal(Label(_(label), classes="job-label", id=f"{prefix}-label-{key}"), control,
                      classes=f"field {classes}".strip(), id=f"{prefix}-row-{key}")


class JobScreen(Screen):
    """A screen showing one job at a time (``job_dir``, started here or opened from its list).

    Subclasses say how a job looks (:meth:`show_job`), what to read once it has ended
    (:meth:`read_job_results`, in the worker), how to list the run's jobs (``list_jobs``),
    which button starts one (``START_BUTTON``) and what Stop asks (``STOP_QUESTIONS``).
    The model-source select (``SOURCE_SELECT``) is filled by a worker (:meth:`find_sources`)
    with the choices :meth:`source_choices` makes of the run's final/ and checkpoints."""

    START_BUTTON = ""
    SOURCE_SELECT = ""
    STOP_QUESTIONS = (N_("Stop the job?"), N_("Kill the job now?"))  # first press, then again (kill)
    WORDS: dict[str, str] = {}  # selector -> its word (N_): relabelled when the language changes
    TITLES: dict[str, str] = {}  # selector -> its border title (N_)

    def __init__(self, run_dir: Path):
        super().__init__()
        self.run_dir = Path(run_dir)
        self.jobs: list[Path] = []  # the run's jobs as listed, oldest first
        self.job_dir: Path | None = None
        self.summary: RunSummary | None = None
        self.stop_requests = 0
        self.found: tuple[bool, list[int]] | None = None  # the run's final/ and checkpoints, once a worker has read them

    async def recompose(self) -> None:
        """The language changed: the screen's words are relabelled in place (the form's fields,
        the job followed and the lists stay); the job and the lists are shown again."""
        relabel(self, self.WORDS, self.TITLES)
        self.relabel_more()
        if self.job_dir is not None:
            self.follow(self.job_dir)
        self.list_jobs()
        self.query_one(FittingFooter).retranslate()

    def relabel_more(self) -> None:
        """What a subclass relabels beyond WORDS and TITLES (its tables' headings)."""

    # --- the model sources
    @work(thread=True, group="sources")
    def find_sources(self) -> None:
        """The run's final/ and checkpoints, listed off the UI thread (a run on a hung network
        mount must not freeze the app), offered in the source select."""
        from ftui.tui.screens.chat import read_sources

        found = read_sources(self.run_dir)
        to_ui(self, self._offer_sources, found)

    def _offer_sources(self, found: tuple[bool, list[int]]) -> None:
        self.found = found
        offer(self.query_one(self.SOURCE_SELECT, Select), self.source_choices(found))
        self.sources_offered()

    def source_choices(self, found: tuple[bool, list[int]] | None) -> list[tuple[str, str]]:
        """The source select's choices (label, value) for what find_sources found (None: not yet)."""
        raise NotImplementedError

    def sources_offered(self) -> None:
        """Called once the run's sources are in the select."""

    # --- hooks
    def read_job_results(self, job_dir: Path) -> Any:
        """What an ended job left (a thread worker calls it: file reads)."""
        return None

    def show_job(self, job_dir: Path, summary: RunSummary, latest: dict[str, dict[str, Any]], results: Any) -> None:
        """Renders the job (UI thread). ``latest``: the last event of each kind, progress
        events merged; ``results``: read_job_results' once the job has ended, else None."""

    def list_jobs(self) -> None:
        """Refreshes the run's jobs list (a worker)."""

    def fill_jobs_table(self, table: DataTable, rows: list[tuple[Path, list[Text]]]) -> None:
        """Refills the earlier-jobs table with (job dir, cells) rows, ``self.jobs`` in the same
        order, the cursor staying on the row it was on (or the last one)."""
        cursor = table.cursor_row
        table.clear()
        self.jobs = [job_dir for job_dir, _cells in rows]
        for job_dir, cells in rows:
            table.add_row(*cells, key=str(job_dir))
        if rows:
            table.move_cursor(row=min(max(cursor, 0), len(rows) - 1))

    # --- workers
    @work(thread=True, exclusive=True, group="follow")
    def follow(self, job_dir: Path) -> None:
        """Follows one job as the dashboard follows a run, to its end."""
        worker = get_current_worker()
        summary = RunSummary(run_id=job_dir.name, path=job_dir)
        run_fold = RunFold(summary)  # the one fold every reader of a run shares
        latest: dict[str, dict[str, Any]] = {}

        def fold(events: list[Any]) -> None:
            for event in events:
                run_fold.apply(event)
                latest.setdefault(event["event"], {}).update(event)

        follower = RunFollower(job_dir, summary, fold)
        while not worker.is_cancelled:
            follower.poll()
            ended = summary.has_ended
            results = self.read_job_results(job_dir) if ended else None
            to_ui(self, self._show_followed, job_dir, summary, {k: dict(v) for k, v in latest.items()}, results)
            if ended:
                self.list_jobs()
                return
            time.sleep(POLL_S)

    def _show_followed(self, job_dir: Path, summary: RunSummary, latest: dict[str, dict[str, Any]], results: Any) -> None:
        if job_dir != self.job_dir:
            return  # a job the user has left for another
        self.summary = summary
        self.show_job(job_dir, summary, latest, results)
        self.refresh_bindings()

    @work(thread=True, group="control")
    def send_stop(self, job_dir: Path, force: bool) -> None:
        from ftui.ops.control import stop as stop_run

        result = stop_run(job_dir, force=force)
        word = _("kill") if force else _("stop")  # outside the f-string: extraction cannot see into one
        self.app.call_from_thread(self.notify, visible(f"{word}: {result}"), markup=False)

    # --- UI thread
    def show(self, selector: str, content: Text) -> None:
        for widget in self.query(selector).results(Static):
            widget.update(content)

    def open_job(self, job_dir: Path) -> None:
        """Shows ``job_dir`` and follows it."""
        self.job_dir, self.summary, self.stop_requests = job_dir, None, 0
        self.follow(job_dir)
        self.list_jobs()

    @property
    def job_live(self) -> bool:
        return self.summary is not None and not self.summary.has_ended

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return self.job_dir is not None and (self.summary is None or self.job_live)
        if action == "start":
            return not self.job_live
        return True

    def may_start(self) -> bool:
        """False (and why, when the user can act on it) while a job of this screen runs or
        a start is under way (the start key pressed twice), or before the run's sources are read."""
        if self.query_one(self.START_BUTTON, Button).disabled and self.summary is None:
            return False
        if self.found is None:
            from ftui.tui.screens.chat import READING_SOURCES

            self.notify(_(READING_SOURCES), severity="warning")
            return False
        if self.job_live:
            self.notify(_("a job of this screen is still running: stop it or wait for it"), severity="warning")
            return False
        return True

    def start_failed(self, message: str) -> None:
        self.notify(visible(message), severity="error", markup=False, timeout=15)
        if self.is_attached:
            self.query_one(self.START_BUTTON, Button).disabled = False

    def action_stop(self) -> None:
        job_dir = self.job_dir
        if job_dir is None or (self.summary is not None and self.summary.has_ended):
            self.notify(_("no job running here to stop"), severity="warning")
            return
        force = self.stop_requests > 0

        def answered(yes: bool | None) -> None:
            if yes:
                self.stop_requests += 1
                self.send_stop(job_dir, force)

        self.app.push_screen(Confirm(_(self.STOP_QUESTIONS[force]), yes=_("Kill") if force else _("Stop"), danger=force), answered)

    def action_back(self) -> None:
        self.app.pop_screen()
