"""The Export screen of one run (issue 17): a standalone model directory (and a GGUF file)
from the run's final/ or a checkpoint, as ``ftui export`` makes it.

The form says, before anything starts, what the export needs (host memory and disk, from the
model's config.json) and why the out dir cannot take it (inside a run, not empty without
force, or with force not an earlier ftui export: ``ftui.safety.export_out``); these are file reads, done in a thread worker. Start prepares the job (RUN/export/ID,
``ftui.jobs.export``) and starts it detached: it is followed with the runs' own
``RunFollower`` (``JobScreen``), stopped with ``stop_run``, and outlives the screen and the
app. At its end the screen shows the files it wrote and the commands that use them, as text
to select and copy. Everything read from a job directory is untrusted: shown through Rich
Text, control characters as escapes, never as markup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Checkbox, DataTable, Input, ProgressBar, Select, Static, TextArea
from textual.worker import get_current_worker

from ftui.i18n import N_, _
from ftui.jobs.export import DEFAULT_SHARD_SIZE, DTYPES, GGUF_TYPES, default_out_dir
from ftui.rundir.formats import fmt_bytes
from ftui.rundir.follower import summarize_run
from ftui.rundir.summary import RunSummary
from ftui.tui.footer import FittingFooter
from ftui.safety.text import visible
from ftui.tui.relabel import relabel, relabel_options, word
from ftui.tui.screens.chat import source_choices
from ftui.tui.screens.jobscreen import JobScreen, field_row
from ftui.tui.widgets import STATUS_STYLE, status_label
from ftui.tui.ui_thread import to_ui

NO_GGUF = "none"
GGUF_CHOICES = ((NO_GGUF, NO_GGUF),) + tuple((t, t) for t in GGUF_TYPES)
PHASES = {"load": N_("loading the model"), "merge": N_("merging the adapter"), "save": N_("saving the shards"),
          "gguf": N_("writing the GGUF file")}
JOBS_REFRESH_S = 5.0  # an export started from a shell shows up, a live one's status moves
NO_OUT_DIR = N_("out dir: give the directory to write the model to")  # an empty field would mean the current directory
EXPORT_COLUMNS = {"status": N_("status"), "source": N_("source"), "format": N_("format"), "out": N_("out"), "job": N_("job")}
MAX_LISTED = 200  # files listed at the end, at most


NOTHING_TRAINED = N_("nothing trained yet")


def export_choices(found: tuple[bool, list[int]] | None) -> list[tuple[str, str]]:
    """final/ (when there is one), then each complete checkpoint, newest first: the chat
    screen's sources without the untrained base; a run with neither has the one empty choice
    (value "": no source), as has one not read yet."""
    return source_choices(found, base=False) or [(_(NOTHING_TRAINED), "")]


def source_which(value: Any) -> str | None:
    """A source choice as ``prepare_export`` takes it: "final", a step ("400") or None (none)."""
    if not isinstance(value, str) or not value:
        return None
    return value.removeprefix("step-") if value.startswith("step-") else value


def assess(run_dir: Path, which: str | None, out: str, dtype: str, shard: str, gguf: str | None, force: bool,
           runs_root: Path | None) -> Text:
    """What the form's export needs and what stands in its way, as the form shows it (file
    reads: call it from a worker). The same checks ``prepare_export`` makes at Start."""
    from ftui.config.problems import ConfigError
    from ftui.config.load import read_run_config
    from ftui.jobs.export import ExportError, export_needs, out_dir_problem, parse_shard_size, resources_problem, source_problem
    from ftui.rundir.paths import CONFIG_FILE

    problems: list[str] = []

    def note(problem: str | None) -> None:
        if problem:
            problems.append(problem)

    note(source_problem(run_dir, which))
    try:
        parse_shard_size(shard)
    except ExportError as err:
        note(str(err))
    out_path = Path(out.strip()).expanduser() if out.strip() else None
    note(out_dir_problem(out_path, force, runs_root) if out_path else _(NO_OUT_DIR))
    text = Text()
    try:
        cfg = read_run_config(run_dir / CONFIG_FILE)  # its schema only: a GPU run exports on any machine
        needs = export_needs(run_dir, cfg, which, dtype, gguf)
    except (ExportError, ConfigError, OSError) as err:
        note(str(err))
    else:
        text.append(_("needs") + "  ", style="dim")
        text.append(needs.describe())
        note(resources_problem(needs, out_path) if out_path else None)
    for problem in problems:
        text.append(("\n" if text else "") + visible(problem), style="red")
    if not problems:
        text.append("\n" + _("ready: F5 starts the export"), style="green")
    return text


def export_result(event: dict[str, Any], spec: dict[str, Any], listing: list[tuple[str, int]] | None) -> dict[str, Any]:
    """What an ended export wrote, from its ``export`` event; without one (a runner that
    wrote none), from job.json and the out dir's files. Only well-typed fields are taken."""
    from ftui.safety.export_out import usage_commands

    def strings(value: Any) -> list[str] | None:
        return [str(v) for v in value] if isinstance(value, list) and all(isinstance(v, str) for v in value) else None

    out = event.get("out") if isinstance(event.get("out"), str) else spec.get("out") if isinstance(spec.get("out"), str) else None
    gguf = event.get("gguf") if isinstance(event.get("gguf"), str) else None
    files = strings(event.get("files"))
    size = event.get("bytes") if type(event.get("bytes")) is int else None
    if files is None and listing is not None:
        files, size = [name for name, _size in listing], sum(n for _name, n in listing)
    commands = strings(event.get("commands")) or (usage_commands(Path(out), gguf) if out else [])
    return {"out": out, "files": files or [], "bytes": size, "gguf": gguf, "commands": commands}


def result_text(result: dict[str, Any]) -> str:
    """The end view's copyable text: the commands first, then the files (plain text: a
    TextArea shows it literally; control characters as escapes)."""
    lines = ["# " + _("use it")] + [visible(c, one_line=True) for c in result["commands"]]
    if result["files"]:
        size = f", {fmt_bytes(result['bytes'])}" if result["bytes"] is not None else ""
        files = _("in {out}: {count} files").format(out=visible(str(result["out"]), one_line=True), count=len(result["files"]))
        lines += ["", f"# {files}{size}"]
        lines += [visible(name, one_line=True) for name in result["files"][:MAX_LISTED]]
        if len(result["files"]) > MAX_LISTED:
            lines.append(_("... and {count} more").format(count=len(result["files"]) - MAX_LISTED))
    return "\n".join(lines)


class ExportScreen(JobScreen):
    BINDINGS = [
        # priority: the result box (a TextArea) has F6 / F7 of its own (select line / all)
        Binding("f5", "start", N_("Start"), priority=True),
        Binding("f6", "stop", N_("Stop"), priority=True),
        Binding("f7", "copy_commands", N_("Copy commands"), priority=True),
        Binding("escape", "back", N_("Back")),
    ]
    START_BUTTON = "#xp-start"
    SOURCE_SELECT = "#xp-source"
    STOP_QUESTIONS = (N_("Stop the export? Nothing is written to the out dir."),
                      N_("Kill the export now? The out dir stays as it was; a hidden partial copy may be left beside it (the next export there removes it)."))
    WORDS = {"#xp-start": N_("Start"), "#xp-stop": N_("Stop"), "#xp-copy": N_("Copy commands"), "#xp-label-source": N_("source"),
             "#xp-label-out": N_("out dir"), "#xp-label-dtype": N_("dtype"), "#xp-label-shard": N_("max shard size"),
             "#xp-label-gguf": N_("GGUF"), "#xp-label-force": N_("replace"), "#xp-force": N_("old ftui export")}
    # the force box's tooltip: --force's rule, as ftui export --help says it
    FORCE_RULE = N_("Replace an earlier ftui export at the out dir, once the new export is complete: only a directory holding "
                    "nothing but what that export wrote, or an empty one. Anything else is refused (the form says what is there), "
                    "and a symbolic link is never followed.")
    TITLES = {"#xp-form": N_("new export"), "#xp-jobs": N_("exports: Enter opens")}

    def __init__(self, run_dir: Path):
        super().__init__(run_dir)
        self.auto_out = ""  # the out dir the screen proposed: a source change replaces it unless the user edited it
        self.commands: list[str] = []  # the open job's, once it has ended

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="xp-title")
        words = self.WORDS
        sources = export_choices(self.found)
        self.auto_out = str(default_out_dir(self.run_dir, source_which(sources[0][1])))
        with Horizontal(id="xp-body"):
            with VerticalScroll(id="xp-form"):
                yield field_row("xp", "source", words["#xp-label-source"],
                                Select(sources, value=sources[0][1], allow_blank=False, id="xp-source", compact=True))
                yield field_row("xp", "out", words["#xp-label-out"], Input(self.auto_out, id="xp-out", compact=True))
                yield field_row("xp", "dtype", words["#xp-label-dtype"], Select(((d, d) for d in DTYPES), value="bf16", allow_blank=False,
                                                                               id="xp-dtype", compact=True))
                yield field_row("xp", "shard", words["#xp-label-shard"], Input(DEFAULT_SHARD_SIZE, id="xp-shard", compact=True))
                yield field_row("xp", "gguf", words["#xp-label-gguf"],
                                Select(GGUF_CHOICES, value=NO_GGUF, allow_blank=False, id="xp-gguf", compact=True))
                force = Checkbox(word(words, "#xp-force"), id="xp-force", compact=True)
                force.tooltip = _(self.FORCE_RULE)
                yield field_row("xp", "force", words["#xp-label-force"], force)
                yield Static(Text(_("reading the model's size..."), style="dim"), id="xp-needs")
            with Vertical(id="xp-side"):
                yield DataTable(id="xp-jobs", cursor_type="row", zebra_stripes=True)
                yield Static("", id="xp-job")
                yield ProgressBar(id="xp-progress", show_eta=False)
                yield Static(Text(_("F5 starts an export; Enter on one in the list opens it"), style="dim"), id="xp-status")
                yield TextArea(id="xp-result", read_only=True, compact=True)
        with Horizontal(id="xp-bar"):
            yield Button(_("Start"), id="xp-start", variant="success", compact=True)
            yield Button(_("Stop"), id="xp-stop", variant="error", compact=True, disabled=True)
            yield Button(_("Copy commands"), id="xp-copy", compact=True, disabled=True)
        yield FittingFooter()

    def _title(self) -> Text:
        return Text(_("Export") + f" · {self.run_dir.name}", style="bold")

    def _add_job_columns(self) -> None:
        jobs = self.query_one("#xp-jobs", DataTable)
        jobs.clear(columns=True)
        for key, heading in EXPORT_COLUMNS.items():
            jobs.add_column(_(heading), key=key)

    def source_choices(self, found: tuple[bool, list[int]] | None) -> list[tuple[str, str]]:
        return export_choices(found)

    def sources_offered(self) -> None:
        self._assess()  # the select's Changed proposes the out dir and assesses again, when the choice moved

    def relabel_more(self) -> None:
        self.query_one("#xp-title", Static).update(self._title())
        self.query_one("#xp-force", Checkbox).label = word(self.WORDS, "#xp-force")
        self.query_one("#xp-force", Checkbox).tooltip = _(self.FORCE_RULE)
        relabel_options(self.query_one("#xp-source", Select), export_choices(self.found))
        self._add_job_columns()  # list_jobs fills it again
        self._assess()

    def on_mount(self) -> None:
        relabel(self, {}, self.TITLES)
        self._add_job_columns()
        self.query_one("#xp-progress").display = False
        self.query_one("#xp-result").display = False
        self.find_sources()
        self.list_jobs()
        self.set_interval(JOBS_REFRESH_S, self.list_jobs)

    # --- the form
    def form_values(self) -> dict[str, Any]:
        gguf = self.query_one("#xp-gguf", Select).value
        return {
            "which": source_which(self.query_one("#xp-source", Select).value),
            "out": self.query_one("#xp-out", Input).value,
            "dtype": str(self.query_one("#xp-dtype", Select).value),
            "shard": self.query_one("#xp-shard", Input).value.strip(),
            "gguf": None if gguf == NO_GGUF else str(gguf),
            "force": self.query_one("#xp-force", Checkbox).value,
        }

    @on(Select.Changed, "#xp-source")
    def _source_changed(self, event: Select.Changed) -> None:
        out = self.query_one("#xp-out", Input)
        if out.value == self.auto_out:  # not edited: follow the source (RUN-final, RUN-step-N)
            self.auto_out = str(default_out_dir(self.run_dir, source_which(event.value)))
            out.value = self.auto_out
        self._assess()

    @on(Input.Changed, "#xp-out, #xp-shard")
    @on(Select.Changed, "#xp-dtype, #xp-gguf")
    @on(Checkbox.Changed, "#xp-force")
    def _assess(self, _event: Any = None) -> None:
        self.assess_form(**self.form_values())

    # --- workers
    @work(thread=True, exclusive=True, group="needs")
    def assess_form(self, **values: Any) -> None:
        try:
            text = assess(self.run_dir, runs_root=getattr(self.app, "runs_root", None), **values)
        except Exception as err:  # noqa: BLE001 - advice only: a surprise in a run's files must not end the app (Start checks again)
            text = Text(_("cannot tell what the export needs: {error}").format(error=visible(str(err))), style="red")
        if not get_current_worker().is_cancelled:
            to_ui(self, self.show, "#xp-needs", text)

    @work(thread=True, exclusive=True, group="jobs")
    def list_jobs(self) -> None:
        from ftui.jobs.export import list_exports
        from ftui.jobs.offline import read_job_spec

        rows = [(job_dir, read_job_spec(job_dir), summarize_run(job_dir)) for job_dir in list_exports(self.run_dir)]
        to_ui(self, self._show_jobs, rows)

    def _show_jobs(self, rows: list[tuple[Path, dict[str, Any], RunSummary]]) -> None:
        self.fill_jobs_table(self.query_one("#xp-jobs", DataTable),
                             [(job_dir, self._job_cells(job_dir, spec, summary)) for job_dir, spec, summary in rows])

    def _job_cells(self, job_dir: Path, spec: dict[str, Any], summary: RunSummary) -> list[Text]:
        fmt = str(spec.get("dtype", "?")) + (f" + gguf {spec['gguf']}" if spec.get("gguf") else "")
        cells = [Text(status_label(summary.status), style=STATUS_STYLE.get(summary.status, ""))]
        source = str(spec.get("source_label", "?")).removeprefix(f"{self.run_dir.name} ")
        return cells + [Text(visible(str(v), one_line=True)) for v in (source, fmt, spec.get("out", "?"), job_dir.name)]

    @work(thread=True, exclusive=True, group="start")
    def start(self, which: str | None, out: str, dtype: str, shard: str, gguf: str | None, force: bool) -> None:
        """Prepares the job's directory and starts it detached: the operations ``ftui export``
        calls (ftui.ops.jobs), their refusal shown here."""
        from ftui.ops import jobs
        from ftui.ops.errors import OpError

        if not out.strip():
            to_ui(self, self.start_failed, _("export not started: {error}").format(error=_(NO_OUT_DIR)))
            return
        try:
            prepared = jobs.prepare_export(self.run_dir, which=which, out=Path(out.strip()).expanduser(), dtype=dtype,
                                           max_shard_size=shard, gguf=gguf, force=force,
                                           runs_root=getattr(self.app, "runs_root", None))
            jobs.start_export(prepared)
        except (OpError, ValueError) as err:
            to_ui(self, self.start_failed, _("export not started: {error}").format(error=err))
            return
        swept = jobs.sweep_beside_out(prepared)  # what killed exports left beside it
        if swept:
            self.app.call_from_thread(self.notify, swept, markup=False)
        job_dir = prepared.job_dir
        to_ui(self, self.open_job, job_dir)

    def read_job_results(self, job_dir: Path) -> dict[str, Any]:
        """job.json, and the out dir's files (for a job that wrote no export event)."""
        from ftui.jobs.offline import read_job_spec

        spec = read_job_spec(job_dir)
        listing = None
        if isinstance(spec.get("out"), str):
            try:
                listing = sorted((p.name, p.stat().st_size) for p in Path(spec["out"]).iterdir()
                                 if p.is_file() and not p.name.startswith(".ftui-"))[:MAX_LISTED]  # not ftui's markers
            except OSError:
                listing = None
        from ftui.jobs.export import leftover_note

        return {"spec": spec, "listing": listing, "leftover": leftover_note(job_dir)}  # a killed job's temporary directory

    # --- rendering (UI thread)
    def start_failed(self, message: str) -> None:
        super().start_failed(message)
        self.show("#xp-status", Text(message, style="red"))

    def open_job(self, job_dir: Path) -> None:
        """Shows ``job_dir`` (started here or picked in the list) and follows it."""
        self.commands = []
        self.query_one("#xp-result").display = False
        self.query_one("#xp-copy", Button).disabled = True
        self.show("#xp-status", Text(_("reading the job..."), style="dim"))
        super().open_job(job_dir)

    def show_job(self, job_dir: Path, summary: RunSummary, latest: dict[str, dict[str, Any]], results: dict[str, Any] | None) -> None:
        title = Text(_("export") + f" {job_dir.name}  ", style="bold")
        title.append(status_label(summary.status), style=STATUS_STYLE.get(summary.status, ""))
        self.show("#xp-job", title)
        progress = latest.get("progress", {})
        done, total, phase = progress.get("done"), progress.get("total"), progress.get("phase")
        counted = type(done) is int and type(total) is int and total > 0
        bar = self.query_one("#xp-progress", ProgressBar)
        bar.display = counted and not summary.has_ended
        if counted:
            bar.update(total=total, progress=min(done, total))
        status = Text()
        if not summary.has_ended and (phase or counted):
            status.append((_(PHASES[phase]) if phase in PHASES else visible(str(phase), one_line=True)) if phase else _("working"))
            if counted:
                status.append(f"  {done} / {total}")
        message = latest.get("log", {}).get("message")
        if not summary.has_ended and isinstance(message, str):
            status.append(("\n" if status else "") + visible(message, one_line=True), style="dim")
        if summary.has_ended:
            self._show_end(summary, latest.get("export", {}), results, status)
        self.show("#xp-status", status)
        self.query_one("#xp-stop", Button).disabled = summary.has_ended
        self.query_one("#xp-start", Button).disabled = not summary.has_ended

    def _show_end(self, summary: RunSummary, event: dict[str, Any], results: dict[str, Any] | None, status: Text) -> None:
        if summary.reason:
            status.append(visible(summary.reason), style="dim")
        for extra, style in ((summary.hint, "yellow"), (summary.error_detail, "red")):
            if extra:
                status.append(("\n" if status else "") + visible(extra), style=style)
        if results and results.get("leftover"):
            status.append(("\n" if status else "") + visible(results["leftover"]), style="yellow")
        if summary.status != "completed" or results is None:
            return
        result = export_result(event, results["spec"], results["listing"])
        self.commands = result["commands"]
        size = f", {fmt_bytes(result['bytes'])}" if result["bytes"] is not None else ""
        status.append(("\n" if status else "") + _("{count} files{size}; to use them (F7 copies the commands):").format(
            count=len(result["files"]), size=size))
        box = self.query_one("#xp-result", TextArea)
        box.load_text(result_text(result))
        box.display = True
        self.query_one("#xp-copy", Button).disabled = not self.commands

    # --- actions
    def on_button_pressed(self, event: Button.Pressed) -> None:
        action = {"xp-start": self.action_start, "xp-stop": self.action_stop, "xp-copy": self.action_copy_commands}.get(event.button.id or "")
        if action is not None:
            action()

    def action_start(self) -> None:
        if not self.may_start():
            return
        self.query_one("#xp-start", Button).disabled = True
        self.show("#xp-status", Text(_("starting the export..."), style="dim"))
        self.start(**self.form_values())

    def action_copy_commands(self) -> None:
        if not self.commands:
            self.notify(_("no commands yet: they come when an export has completed"), severity="warning")
            return
        self.app.copy_to_clipboard("\n".join(self.commands))
        self.notify(_("the commands are copied (your terminal must allow it: OSC 52); they are also in the box to select"))

    @on(DataTable.RowSelected, "#xp-jobs")
    def _job_selected(self, _event: DataTable.RowSelected) -> None:
        table = self.query_one("#xp-jobs", DataTable)
        if 0 <= table.cursor_row < len(self.jobs):
            self.open_job(self.jobs[table.cursor_row])
