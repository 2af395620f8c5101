"""The Serve screen of one run (``ftui serve`` in the app): an OpenAI-compatible API over the
run's final/, a checkpoint or its base, as a job (RUN/serve/ID) that outlives the screen.

The form takes where it listens (127.0.0.1 by default: this machine only), the key file,
the served name and the queue; Start goes through the operation ``ftui serve`` calls
(``ftui.ops.serve.start_serve``), so the same refusals (an address beyond this machine
without a key, a key file that gives none, a port out of range) are said here and the app
stays up. Then the job's view: the URL once it listens (``serve_ready``), a ready-to-paste
``curl`` command and Python ``openai`` snippet with the real port (the key shown as
``$FTUI_API_KEY``, never the key), its counters (``serve_stats``), the log's last lines, and
Stop. Everything read from a job directory is untrusted: shown through Rich Text or a
read-only TextArea, control characters as escapes, never as markup. File reads happen in
thread workers, as in the other job screens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, DataTable, Input, Select, Static, TextArea

from ftui.i18n import N_, _
from ftui.jobs.serve_job import DEFAULTS, NAME_RE
from ftui.rundir.follower import summarize_run
from ftui.rundir.serve_events import count, rate, ready_models, ready_url
from ftui.rundir.summary import RunSummary
from ftui.safety.text import visible
from ftui.tui.footer import FittingFooter
from ftui.tui.relabel import relabel, relabel_options, word
from ftui.tui.screens.chat import source_choices
from ftui.tui.screens.evalpredict import source_args
from ftui.tui.screens.jobscreen import JobScreen, field_row
from ftui.tui.widgets import STATUS_STYLE, status_label
from ftui.tui.ui_thread import to_ui

JOBS_REFRESH_S = 5.0  # a server started from a shell shows up, a live one's status moves
LOG_REFRESH_S = 2.0
LOG_LINES = 8
SERVE_COLUMNS = {"status": N_("status"), "source": N_("source"), "listen": N_("listens on"), "job": N_("job")}
NOTE = N_("127.0.0.1 serves this machine only; any other address needs an API key (a key file, or FTUI_API_KEY in the environment)")
COUNTERS = (("requests", N_("requests")), ("answered", N_("answered")), ("rejected", N_("429s")), ("errors", N_("errors")))


def usage_text(url: str, model: str, key: bool) -> str:
    """What to paste to use the server: a ``curl`` command and a Python ``openai`` snippet at
    ``url``, the key as ``$FTUI_API_KEY`` (never the key itself)."""
    auth = ' \\\n  -H "Authorization: Bearer $FTUI_API_KEY"' if key else ""
    api_key = 'os.environ["FTUI_API_KEY"]' if key else '"none"'
    body = '{"model": "%s", "messages": [{"role": "user", "content": "Hello"}]}' % model
    return "\n".join([
        "# curl",
        f"curl {url}/chat/completions{auth} \\",
        '  -H "Content-Type: application/json" \\',
        f"  -d '{body}'",
        "",
        "# Python (pip install openai)",
        *(["import os"] if key else []),
        "from openai import OpenAI",
        f'client = OpenAI(base_url="{url}", api_key={api_key})',
        f'reply = client.chat.completions.create(model="{model}", messages=[{{"role": "user", "content": "Hello"}}])',
        "print(reply.choices[0].message.content)",
    ])


def stats_text(stats: dict[str, Any]) -> Text:
    """A serve job's counters as the screen shows them (unknown ones as ?)."""
    text = Text()
    for name, label in COUNTERS:
        value = count(stats, name)
        text.append(_(label) + " ", style="dim")
        text.append(("?" if value is None else str(value)) + "   ")
    tps = rate(stats)
    text.append(_("tokens/s") + " ", style="dim")
    text.append("?" if tps is None else f"{tps:,.1f}")
    for name, label in (("active", N_("generating")), ("queued", N_("queued"))):
        if count(stats, name):
            text.append(f"   {_(label)} ", style="dim")
            text.append(str(count(stats, name)))
    return text


def parse_port(text: str, label: str) -> int:
    """A whole number from a field; the range is the job's check (ftui.jobs.serve_job)."""
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(_("{field}: {value} is not a whole number").format(field=_(label), value=repr(text.strip()))) from None


def read_log_tail(job_dir: Path, lines: int = LOG_LINES) -> list[str]:
    """The last lines of the job's train.log (a bounded read from its end)."""
    from ftui.rundir.log_tail import LogTailer
    from ftui.rundir.paths import LOG_FILE

    return [line for line in LogTailer(job_dir / LOG_FILE, backlog=16 << 10).read_new() if line.strip()][-lines:]


class ServeScreen(JobScreen):
    BINDINGS = [
        # priority: the snippets box (a TextArea) has F6 / F7 of its own
        Binding("f5", "start", N_("Start"), priority=True),
        Binding("f6", "stop", N_("Stop"), priority=True),
        Binding("f7", "copy_usage", N_("Copy example"), priority=True),
        Binding("escape", "back", N_("Back")),
    ]
    START_BUTTON = "#sv-start"
    SOURCE_SELECT = "#sv-source"
    STOP_QUESTIONS = (N_("Stop the server? Requests under way are ended."), N_("Kill the server now?"))
    WORDS = {"#sv-start": N_("Start"), "#sv-stop": N_("Stop"), "#sv-copy": N_("Copy example"), "#sv-label-source": N_("model"),
             "#sv-label-host": N_("host"), "#sv-label-port": N_("port"), "#sv-label-key": N_("API key file"),
             "#sv-label-name": N_("served name"), "#sv-label-queue": N_("queue"),
             "#sv-label-batch": N_("batch"),
             "#sv-key": N_("none: FTUI_API_KEY from the environment, if set")}
    TITLES = {"#sv-form": N_("new server"), "#sv-jobs": N_("servers: Enter opens"), "#sv-usage": N_("use it")}

    def __init__(self, run_dir: Path):
        super().__init__(run_dir)
        self.usage = ""  # the open job's snippets, once it listens

    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="sv-title")
        words = self.WORDS
        sources = source_choices(self.found)
        with Horizontal(id="sv-body"):
            with VerticalScroll(id="sv-form"):
                yield field_row("sv", "source", words["#sv-label-source"],
                                Select(sources, value=sources[0][1], allow_blank=False, id="sv-source", compact=True))
                yield field_row("sv", "host", words["#sv-label-host"], Input(DEFAULTS["host"], id="sv-host", compact=True))
                yield field_row("sv", "port", words["#sv-label-port"], Input(str(DEFAULTS["port"]), id="sv-port", compact=True))
                yield field_row("sv", "key", words["#sv-label-key"], Input(id="sv-key", placeholder=word(words, "#sv-key"), compact=True))
                name = self.run_dir.name if NAME_RE.fullmatch(self.run_dir.name) else ""
                yield field_row("sv", "name", words["#sv-label-name"], Input(name, id="sv-name", compact=True))
                yield field_row("sv", "queue", words["#sv-label-queue"], Input(str(DEFAULTS["queue_size"]), id="sv-queue", compact=True))
                yield field_row("sv", "batch", words["#sv-label-batch"], Input(str(DEFAULTS["max_batch"]), id="sv-batch", compact=True))
                yield Static(Text(_(NOTE), style="dim"), id="sv-note")
            with Vertical(id="sv-side"):
                yield DataTable(id="sv-jobs", cursor_type="row", zebra_stripes=True)
                yield Static("", id="sv-job")
                yield Static(Text(_("F5 starts a server; Enter on one in the list opens it"), style="dim"), id="sv-status")
                yield TextArea(id="sv-usage", read_only=True, compact=True)
                yield Static("", id="sv-log")
        with Horizontal(id="sv-bar"):
            yield Button(_("Start"), id="sv-start", variant="success", compact=True)
            yield Button(_("Stop"), id="sv-stop", variant="error", compact=True, disabled=True)
            yield Button(_("Copy example"), id="sv-copy", compact=True, disabled=True)
        yield FittingFooter()

    def _title(self) -> Text:
        return Text(_("Serve API") + " · " + visible(self.run_dir.name, one_line=True), style="bold")

    def _add_job_columns(self) -> None:
        jobs = self.query_one("#sv-jobs", DataTable)
        jobs.clear(columns=True)
        for key, heading in SERVE_COLUMNS.items():
            jobs.add_column(_(heading), key=key)

    def source_choices(self, found: tuple[bool, list[int]] | None) -> list[tuple[str, str]]:
        return source_choices(found)

    def relabel_more(self) -> None:
        self.query_one("#sv-title", Static).update(self._title())
        self.query_one("#sv-note", Static).update(Text(_(NOTE), style="dim"))
        relabel_options(self.query_one("#sv-source", Select), self.source_choices(self.found))
        self._add_job_columns()  # list_jobs fills it again

    def on_mount(self) -> None:
        relabel(self, {}, self.TITLES)
        self._add_job_columns()
        self.query_one("#sv-usage").display = False
        self.find_sources()
        self.list_jobs()
        self.set_interval(JOBS_REFRESH_S, self.list_jobs)
        self.set_interval(LOG_REFRESH_S, self._refresh_log)

    # --- the form
    def form_values(self) -> dict[str, Any]:
        """The server the form asks for; ValueError says which field is not a number."""
        key = self.query_one("#sv-key", Input).value.strip()
        name = self.query_one("#sv-name", Input).value.strip()
        return {
            "source_value": str(self.query_one("#sv-source", Select).value),
            "host": self.query_one("#sv-host", Input).value.strip(),
            "port": parse_port(self.query_one("#sv-port", Input).value, self.WORDS["#sv-label-port"]),
            "api_key_file": key or None,
            "served_name": name or None,
            "queue_size": parse_port(self.query_one("#sv-queue", Input).value, self.WORDS["#sv-label-queue"]),
            "max_batch": parse_port(self.query_one("#sv-batch", Input).value, self.WORDS["#sv-label-batch"]),
        }

    # --- workers
    @work(thread=True, exclusive=True, group="jobs")
    def list_jobs(self) -> None:
        from ftui.jobs.offline import list_jobs, read_job_spec

        rows = [(job_dir, read_job_spec(job_dir), summarize_run(job_dir)) for job_dir in list_jobs(self.run_dir, "serve")]
        to_ui(self, self._show_jobs, rows)

    def _show_jobs(self, rows: list[tuple[Path, dict[str, Any], RunSummary]]) -> None:
        self.fill_jobs_table(self.query_one("#sv-jobs", DataTable),
                             [(job_dir, self._job_cells(job_dir, spec, summary)) for job_dir, spec, summary in rows])

    def _job_cells(self, job_dir: Path, spec: dict[str, Any], summary: RunSummary) -> list[Text]:
        cells = [Text(status_label(summary.status), style=STATUS_STYLE.get(summary.status, ""))]
        source = str(spec.get("source_label", "?")).removeprefix(f"{self.run_dir.name} ")
        listen = f"{spec.get('host', '?')}:{spec.get('port', '?')}"
        return cells + [Text(visible(str(v), one_line=True)) for v in (source, listen, job_dir.name)]

    @work(thread=True, exclusive=True, group="start")
    def start(self, source_value: str, host: str, port: int, api_key_file: str | None, served_name: str | None,
              queue_size: int, max_batch: int = 8) -> None:
        """Prepares the job's directory and starts it detached: the operation ``ftui serve``
        calls (ftui.ops.serve.start_serve), its refusal shown here."""
        from ftui.ops.errors import OpError
        from ftui.ops.serve import start_serve

        checkpoint, base = source_args(source_value)
        try:
            started = start_serve(run_dir=self.run_dir, checkpoint=checkpoint, base=base, host=host, port=port,
                                  api_key_file=api_key_file, served_name=served_name, queue_size=queue_size,
                                  max_batch=max_batch)
        except (OpError, ValueError) as err:
            to_ui(self, self.start_failed, _("server not started: {error}").format(error=err))
            return
        to_ui(self, self.open_job, started.job_dir)

    def _refresh_log(self) -> None:
        if self.job_dir is not None:
            self.read_log(self.job_dir)

    @work(thread=True, exclusive=True, group="log")
    def read_log(self, job_dir: Path) -> None:
        lines = read_log_tail(job_dir)
        to_ui(self, self._show_log, job_dir, lines)

    # --- rendering (UI thread)
    def _show_log(self, job_dir: Path, lines: list[str]) -> None:
        if job_dir != self.job_dir:
            return
        text = Text()
        for line in lines:
            text.append(("\n" if text else "") + visible(line, one_line=True)[:300], style="dim")
        self.show("#sv-log", text)

    def start_failed(self, message: str) -> None:
        super().start_failed(message)
        self.show("#sv-status", Text(visible(message), style="red"))

    def open_job(self, job_dir: Path) -> None:
        """Shows ``job_dir`` (started here or picked in the list) and follows it."""
        self.usage = ""
        self.query_one("#sv-usage").display = False
        self.query_one("#sv-copy", Button).disabled = True
        self.show("#sv-status", Text(_("reading the job..."), style="dim"))
        self.show("#sv-log", Text())
        super().open_job(job_dir)
        self.read_log(job_dir)

    def show_job(self, job_dir: Path, summary: RunSummary, latest: dict[str, dict[str, Any]], results: Any) -> None:
        title = Text(_("server") + " " + visible(job_dir.name, one_line=True) + "  ", style="bold")
        title.append(status_label(summary.status), style=STATUS_STYLE.get(summary.status, ""))
        ready = latest.get("serve_ready", {})
        url = ready_url(ready)
        if url and not summary.has_ended:
            title.append("  " + url, style="bold green")
        self.show("#sv-job", title)
        status = Text()
        if not summary.has_ended and not url:
            status.append(_("loading the model; the URL comes once it listens"), style="dim")
        if "serve_stats" in latest:
            if status:
                status.append("\n")
            status.append_text(stats_text(latest["serve_stats"]))
        if summary.has_ended:
            for extra, style in ((summary.reason, "dim"), (summary.hint, "yellow"), (summary.error_detail, "red")):
                if extra:
                    status.append(("\n" if status else "") + visible(extra), style=style)
        self.show("#sv-status", status)
        self._show_usage(url, ready, summary.has_ended)
        self.query_one("#sv-stop", Button).disabled = summary.has_ended
        self.query_one("#sv-start", Button).disabled = not summary.has_ended

    def _show_usage(self, url: str | None, ready: dict[str, Any], ended: bool) -> None:
        box = self.query_one("#sv-usage", TextArea)
        if url is None or ended:
            box.display = False
            self.query_one("#sv-copy", Button).disabled = True
            return
        models = [m for m in ready_models(ready) if NAME_RE.fullmatch(m)] or ["MODEL"]
        usage = usage_text(url, models[0], ready.get("key") is True)
        if usage != self.usage:
            self.usage = usage
            box.load_text(usage)
        box.display = True
        self.query_one("#sv-copy", Button).disabled = False

    # --- actions
    def on_button_pressed(self, event: Button.Pressed) -> None:
        action = {"sv-start": self.action_start, "sv-stop": self.action_stop, "sv-copy": self.action_copy_usage}.get(event.button.id or "")
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
        self.query_one("#sv-start", Button).disabled = True
        self.show("#sv-status", Text(_("starting the server..."), style="dim"))
        self.start(**values)

    def action_copy_usage(self) -> None:
        if not self.usage:
            self.notify(_("no example yet: it comes once the server listens"), severity="warning")
            return
        self.app.copy_to_clipboard(self.usage)
        self.notify(_("the example is copied (your terminal must allow it: OSC 52); it is also in the box to select"))

    @on(DataTable.RowSelected, "#sv-jobs")
    def _job_selected(self, _event: DataTable.RowSelected) -> None:
        table = self.query_one("#sv-jobs", DataTable)
        if 0 <= table.cursor_row < len(self.jobs):
            self.open_job(self.jobs[table.cursor_row])
