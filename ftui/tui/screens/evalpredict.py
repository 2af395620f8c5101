"""The Evaluate & Predict screen of one run (issue 16): a predict or eval job over datasets,
from the run's final/, a checkpoint or its base; its progress (examples done, ETA) and Stop
while it runs; its figures when it is done; the run's earlier jobs to open, browse
(predictions, scored one by one) and compare two by two.

A job is a detached process in RUN/predict/ID or RUN/eval/ID (``ftui.jobs.offline``), laid
out as a run directory: it is followed with the runs' own ``RunFollower`` and stopped with
``stop_run``, and it outlives this screen and the app. Preparing and starting it, reading its
files and following it happen in thread workers; the UI thread only renders.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, DataTable, Input, ProgressBar, Select, Static
from textual.worker import get_current_worker

from ftui.safety.bounded_input import load_yaml
from ftui.i18n import N_, _
from ftui.safety.text import visible
from ftui.rundir.paths import CONFIG_FILE
from ftui.rundir.follower import summarize_run
from ftui.rundir.summary import RunSummary
from ftui.tui.footer import FittingFooter
from ftui.tui.predictions import read_results, result_lines, throughput_line
from ftui.tui.screens.chat import BASE, source_choices
from ftui.tui.relabel import relabel, relabel_options, word
from ftui.tui.screens.jobscreen import JobScreen, field_row
from ftui.tui.widgets import STATUS_STYLE, status_label
from ftui.tui.ui_thread import to_ui

KINDS = ((N_("predict: generate answers, BLEU / ROUGE"), "predict"), (N_("eval: loss and perplexity"), "eval"))
GENERATION_FIELDS = (("max_new_tokens", N_("max new tokens"), int), ("temperature", N_("temperature"), float),
                     ("top_p", N_("top-p"), float), ("batch_size", N_("batch size"), int))
JOB_COLUMNS = {"mark": "", "kind": N_("kind"), "status": N_("status"), "source": N_("source"), "dataset": N_("dataset"),
               "result": N_("result"), "job": N_("job")}  # the id last: it is the least telling
JOBS_REFRESH_S = 5.0  # the jobs list: a job started from a shell shows up, a live one's status moves


def source_args(value: str) -> tuple[str | None, bool]:
    """A model source as the chat screen lists them (``source_choices``: final, step-N, base) as
    ``source_of`` takes it: (checkpoint step, base)."""
    if value == BASE:
        return None, True
    return (value.removeprefix("step-"), False) if value.startswith("step-") else (None, False)


def parse_count(text: str, name: str, optional: bool = False) -> int | None:
    """A whole number of 1 or more from a field (empty: None when ``optional``); ``name``: the
    field's label (marked with N_)."""
    text = text.strip()
    if not text and optional:
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(_("{field}: {value} is not a whole number").format(field=_(name), value=repr(text))) from None
    if value < 1:
        raise ValueError(_("{field} must be 1 or more").format(field=_(name)))
    return value


def parse_generation(values: dict[str, str]) -> dict[str, Any]:
    """The generation fields as the job takes them, checked as ``ftui predict`` checks them."""
    out: dict[str, Any] = {}
    for key, name, kind in GENERATION_FIELDS:
        if kind is int:
            out[key] = parse_count(values[key], name)
            continue
        try:
            out[key] = float(values[key].strip())
        except ValueError:
            raise ValueError(_("{field}: {value} is not a number").format(field=_(name), value=repr(values[key].strip()))) from None
    if out["temperature"] < 0 or not 0 < out["top_p"] <= 1:
        raise ValueError(_("temperature must be 0 or more and top-p in (0, 1]"))
    return out


def eta_text(done: int, total: int | None, per_s: float | None) -> str:
    if not total or not per_s or per_s <= 0 or done >= total:
        return ""
    left = (total - done) / per_s
    return _("ETA {duration}").format(duration=f"{int(left // 3600)}:{int(left % 3600 // 60):02d}:{int(left % 60):02d}")


def job_kind(job_dir: Path) -> str:
    return job_dir.parent.name  # RUN/predict/ID or RUN/eval/ID


class EvalPredictScreen(JobScreen):
    BINDINGS = [
        Binding("f5", "start", N_("Start")),
        Binding("f6", "stop", N_("Stop")),
        Binding("f7", "browse", N_("Predictions")),
        Binding("f8", "compare", N_("Compare")),
        Binding("space", "mark", N_("Mark job"), show=False),
        Binding("escape", "back", N_("Back")),
    ]

    START_BUTTON = "#ep-start"
    SOURCE_SELECT = "#ep-source"
    STOP_QUESTIONS = (N_("Stop the job? The batch under way finishes; its answers so far are kept."),
                      N_("Kill the job now? Its answers so far are kept."))
    WORDS = {"#ep-start": N_("Start"), "#ep-stop": N_("Stop"), "#ep-browse": N_("Predictions"), "#ep-compare": N_("Compare"),
             "#ep-dataset": N_("names or files"), "#ep-max_samples": N_("all"), "#ep-label-kind": N_("job"),
             "#ep-label-source": N_("model"), "#ep-label-dataset": N_("datasets"), "#ep-label-dataset_dir": N_("dataset dir"),
             "#ep-label-max_samples": N_("max samples"), "#ep-label-nproc": N_("processes"),
             **{f"#ep-label-{key}": name for key, name, _kind in GENERATION_FIELDS}}
    TITLES = {"#ep-form": N_("new job"), "#ep-jobs": N_("jobs: Enter opens, Space marks")}

    def __init__(self, run_dir: Path):
        super().__init__(run_dir)
        self.marked: list[Path] = []  # predict jobs marked to compare, oldest mark first
        self.stage = "sft"  # the run's stage: the preview checks the datasets fit it

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="ep-title")
        words = self.WORDS
        with Horizontal(id="ep-body"):
            with VerticalScroll(id="ep-form"):
                yield self._row("kind", words["#ep-label-kind"], Select(self._kinds(), value="predict", allow_blank=False, id="ep-kind",
                                                                        compact=True))
                sources = self.source_choices(self.found)
                yield self._row("source", words["#ep-label-source"],
                                Select(sources, value=sources[0][1], allow_blank=False, id="ep-source", compact=True))
                yield self._row("dataset", words["#ep-label-dataset"],
                                Input(id="ep-dataset", placeholder=word(words, "#ep-dataset"), compact=True))
                yield self._row("dataset_dir", words["#ep-label-dataset_dir"], Input("data", id="ep-dataset_dir", compact=True))
                yield self._row("max_samples", words["#ep-label-max_samples"],
                                Input(id="ep-max_samples", placeholder=word(words, "#ep-max_samples"), compact=True))
                from ftui.jobs.offline import GENERATION_DEFAULTS

                for key, name, _kind in GENERATION_FIELDS:
                    yield self._row(key, name, Input(str(GENERATION_DEFAULTS[key]), id=f"ep-{key}", compact=True), "generation")
                yield self._row("nproc", words["#ep-label-nproc"], Input("1", id="ep-nproc", compact=True))
                yield Static("", id="ep-preview", classes="note")
            with Vertical(id="ep-side"):
                yield DataTable(id="ep-jobs", cursor_type="row", zebra_stripes=True)
                yield Static("", id="ep-job")
                yield ProgressBar(id="ep-progress", show_eta=False)
                yield Static("", id="ep-status")
                yield Static("", id="ep-metrics")
        with Horizontal(id="ep-bar"):
            yield Button(_("Start"), id="ep-start", variant="success", compact=True)
            yield Button(_("Stop"), id="ep-stop", variant="error", compact=True, disabled=True)
            yield Button(_("Predictions"), id="ep-browse", compact=True, disabled=True)
            yield Button(_("Compare"), id="ep-compare", compact=True)
        yield FittingFooter()

    def _title(self) -> Text:
        return Text(_("Evaluate & Predict") + " · " + visible(self.run_dir.name, one_line=True), style="bold")

    @staticmethod
    def _kinds() -> list[tuple[str, str]]:
        return [(_(label), value) for label, value in KINDS]

    def _add_job_columns(self) -> None:
        jobs = self.query_one("#ep-jobs", DataTable)
        jobs.clear(columns=True)
        for key, heading in JOB_COLUMNS.items():
            jobs.add_column(_(heading) if heading else "", key=key)

    def source_choices(self, found: tuple[bool, list[int]] | None) -> list[tuple[str, str]]:
        return source_choices(found)

    def relabel_more(self) -> None:
        self.query_one("#ep-title", Static).update(self._title())
        relabel_options(self.query_one("#ep-kind", Select), self._kinds())
        relabel_options(self.query_one("#ep-source", Select), self.source_choices(self.found))
        self._add_job_columns()  # list_jobs fills it again

    @staticmethod
    def _row(key: str, label: str, control: Any, classes: str = "") -> Horizontal:
        return field_row("ep", key, label, control, classes)

    def on_mount(self) -> None:
        relabel(self, {}, self.TITLES)
        self._add_job_columns()
        self.query_one("#ep-progress").display = False
        self.read_run_defaults()
        self.find_sources()
        self.list_jobs()
        self.set_interval(JOBS_REFRESH_S, self.list_jobs)

    # --- workers
    @work(thread=True, group="defaults")
    def read_run_defaults(self) -> None:
        """The run's own datasets as the form's first guess (its config.yaml, read safely)."""
        try:
            data = load_yaml((self.run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError, yaml.YAMLError):
            data = None
        data = data if isinstance(data, dict) else {}
        dataset = data.get("eval_dataset") or data.get("dataset") or ""
        dataset_dir = data.get("dataset_dir") or "data"
        self.stage = str(data.get("stage") or "sft")
        to_ui(self, self._fill_defaults, ",".join(dataset) if isinstance(dataset, list) else str(dataset), str(dataset_dir))

    def _fill_defaults(self, dataset: str, dataset_dir: str) -> None:
        if not self.query_one("#ep-dataset", Input).value:
            self.query_one("#ep-dataset", Input).value = dataset
            self.query_one("#ep-dataset_dir", Input).value = dataset_dir
        self._preview()

    @work(thread=True, exclusive=True, group="jobs")
    def list_jobs(self) -> None:
        from ftui.jobs.offline import list_jobs, read_job_spec

        rows = []
        for kind in ("predict", "eval"):
            for job_dir in list_jobs(self.run_dir, kind):
                rows.append((job_dir, kind, read_job_spec(job_dir), summarize_run(job_dir), read_results(job_dir, kind)))
        rows.sort(key=lambda r: r[0].name)
        to_ui(self, self._show_jobs, rows)

    def _show_jobs(self, rows: list[tuple[Path, str, dict, RunSummary, dict]]) -> None:
        self.fill_jobs_table(self.query_one("#ep-jobs", DataTable),
                             [(r[0], self._job_cells(*r)) for r in rows])

    def _job_cells(self, job_dir: Path, kind: str, spec: dict, summary: RunSummary, results: dict) -> list[Text]:
        if kind == "predict" and isinstance(results.get("predict_bleu-4"), (int, float)):
            result = f"BLEU-4 {results['predict_bleu-4']:.1f} ROUGE-L {results.get('predict_rouge-l', 0):.1f}"
        elif isinstance(results.get("eval_loss"), (int, float)):
            result = _("loss") + f" {results['eval_loss']:.4f}"
        else:
            result = ""
        return [Text("●" if job_dir in self.marked else " "), Text(kind), Text(status_label(summary.status), style=STATUS_STYLE.get(summary.status, "")),
                *(Text(visible(cell, one_line=True)) for cell in (spec.get("source_label", "?"), spec.get("dataset", "?"), result, job_dir.name))]

    @work(thread=True, exclusive=True, group="preview")
    def preview(self, dataset: str, dataset_dir: str) -> None:
        from ftui.tui.screens.launch_preview import records_preview

        text, _fit = records_preview(dataset, dataset_dir, self.stage)
        if not get_current_worker().is_cancelled:
            to_ui(self, self.show, "#ep-preview", text)

    @work(thread=True, exclusive=True, group="start")
    def start(self, kind: str, source_value: str, dataset: str, dataset_dir: str, max_samples: int | None,
              generation: dict[str, Any], nproc: int) -> None:
        """Prepares the job's directory and starts it detached: the operation ``ftui predict`` /
        ``ftui eval`` call (ftui.ops.jobs.start_offline_job), its refusal shown here."""
        from ftui.data.registry import dataset_path_problem
        from ftui.ops.errors import OpError
        from ftui.ops.jobs import start_offline_job

        problem = dataset_path_problem(dataset, dataset_dir)
        if problem:
            to_ui(self, self.start_failed, problem)
            return
        checkpoint, base = source_args(source_value)
        try:
            started = start_offline_job(kind, run_dir=self.run_dir, checkpoint=checkpoint, base=base, dataset=dataset,
                                        dataset_dir=dataset_dir, max_samples=max_samples,
                                        generation=generation if kind == "predict" else None, nproc=nproc)
        except (OpError, ValueError) as err:
            to_ui(self, self.start_failed, _("{kind} job not started: {error}").format(kind=kind, error=err))
            return
        job_dir = started.job_dir
        to_ui(self, self.open_job, job_dir)

    def read_job_results(self, job_dir: Path) -> dict[str, Any]:
        return read_results(job_dir, job_kind(job_dir))

    # --- rendering (UI thread)
    def open_job(self, job_dir: Path) -> None:
        """Shows ``job_dir`` (started here or picked in the list) and follows it."""
        self.show("#ep-metrics", Text())
        self.show("#ep-status", Text(_("reading the job..."), style="dim"))
        super().open_job(job_dir)

    def show_job(self, job_dir: Path, summary: RunSummary, latest: dict[str, dict[str, Any]], results: dict[str, Any] | None) -> None:
        progress = latest.get("progress", {})
        kind = job_kind(job_dir)
        title = Text(f"{kind} " + visible(job_dir.name, one_line=True) + "  ", style="bold")
        title.append(status_label(summary.status), style=STATUS_STYLE.get(summary.status, ""))
        self.show("#ep-job", title)
        bar = self.query_one("#ep-progress", ProgressBar)
        total = progress.get("total") if isinstance(progress.get("total"), int) else summary.max_steps
        bar.display = kind == "predict"
        if kind == "predict":
            bar.update(total=total or None, progress=summary.step)
        status = Text()
        if kind == "predict":
            status.append(_("{done} / {total} examples").format(done=summary.step, total=total or "?"))
            rate = progress.get("examples_per_s")
            if isinstance(rate, (int, float)) and rate > 0:
                status.append(f"  {rate:.2f}/s  {eta_text(summary.step, total, rate)}")
        if summary.has_ended and summary.reason:
            status.append("\n" + visible(summary.reason), style="dim")
        if summary.error_detail:
            status.append("\n" + visible(summary.error_detail), style="red")
        self.show("#ep-status", status)
        if results is not None:
            self.show("#ep-metrics", self._metrics_text(results))
        self.query_one("#ep-stop", Button).disabled = summary.has_ended
        self.query_one("#ep-start", Button).disabled = not summary.has_ended
        self.query_one("#ep-browse", Button).disabled = kind != "predict" or not summary.has_ended

    @staticmethod
    def _metrics_text(results: dict[str, Any]) -> Text:
        if not results:
            return Text(_("no results file (the job wrote none)"), style="dim")
        text = Text()
        speed = throughput_line(results)
        if speed:
            text.append(_("speed").ljust(32), style="dim")
            text.append(speed + "\n", style="bold")
        for name, value in result_lines(results):
            text.append(f"{name:<32}", style="dim")
            text.append(f"{value}\n")
        return text

    # --- form
    @on(Select.Changed, "#ep-kind")
    def _kind_changed(self, event: Select.Changed) -> None:
        for row in self.query(".generation"):
            row.display = event.value == "predict"

    @on(Input.Changed, "#ep-dataset, #ep-dataset_dir")
    def _preview(self, _event=None) -> None:
        self.preview(self.query_one("#ep-dataset", Input).value, self.query_one("#ep-dataset_dir", Input).value)

    def form_values(self) -> dict[str, Any]:
        """The job the form asks for; ValueError says which field is wrong."""
        kind = str(self.query_one("#ep-kind", Select).value)
        value = {key: self.query_one(f"#ep-{key}", Input).value for key, *_ in GENERATION_FIELDS}
        dataset = self.query_one("#ep-dataset", Input).value.strip()
        if not dataset:
            raise ValueError(_("datasets: name at least one (a dataset_info.json name or a file)"))
        return {
            "kind": kind, "source_value": str(self.query_one("#ep-source", Select).value), "dataset": dataset,
            "dataset_dir": self.query_one("#ep-dataset_dir", Input).value.strip() or "data",
            "max_samples": parse_count(self.query_one("#ep-max_samples", Input).value, self.WORDS["#ep-label-max_samples"], optional=True),
            "generation": parse_generation(value) if kind == "predict" else {},
            "nproc": parse_count(self.query_one("#ep-nproc", Input).value, self.WORDS["#ep-label-nproc"]),
        }

    # --- actions
    def on_button_pressed(self, event: Button.Pressed) -> None:
        action = {"ep-start": self.action_start, "ep-stop": self.action_stop, "ep-browse": self.action_browse,
                  "ep-compare": self.action_compare}.get(event.button.id or "")
        if action is not None:
            action()

    def action_start(self) -> None:
        if not self.may_start():
            return
        try:
            values = self.form_values()
        except ValueError as err:
            self.notify(visible(err), severity="error", markup=False)
            return
        self.query_one("#ep-start", Button).disabled = True
        self.show("#ep-status", Text(_("starting the {kind} job...").format(kind=values["kind"]), style="dim"))
        self.start(**values)

    def _highlighted_job(self) -> Path | None:
        table = self.query_one("#ep-jobs", DataTable)
        return self.jobs[table.cursor_row] if 0 <= table.cursor_row < len(self.jobs) else None

    @on(DataTable.RowSelected, "#ep-jobs")
    def _job_selected(self, event: DataTable.RowSelected) -> None:
        job_dir = self._highlighted_job()
        if job_dir is not None:
            self.open_job(job_dir)

    def action_mark(self) -> None:
        job_dir = self._highlighted_job()
        if job_dir is None or self.focused is not self.query_one("#ep-jobs"):
            return
        if job_kind(job_dir) != "predict":
            self.notify(_("only predict jobs are compared"), severity="warning")
            return
        self.marked = [p for p in self.marked if p != job_dir] if job_dir in self.marked else (self.marked + [job_dir])[-2:]
        self.list_jobs()

    def action_browse(self) -> None:
        from ftui.tui.screens.predictions import PredictionsScreen

        job_dir = self.job_dir if self.job_dir is not None and job_kind(self.job_dir) == "predict" else None
        if job_dir is None:
            self.notify(_("open a predict job first (Enter on it in the list)"), severity="warning")
            return
        self.app.push_screen(PredictionsScreen(job_dir))

    def action_compare(self) -> None:
        from ftui.tui.screens.predictions import CompareScreen

        if len(self.marked) != 2:
            self.notify(_("mark two predict jobs in the list (Space), then compare"), severity="warning")
            return
        self.app.push_screen(CompareScreen(*self.marked))
