"""Untrusted text never drives the terminal: one list of hostile strings (escape sequences that
write the clipboard, set the title, clear the screen; 8-bit CSI and OSC; a carriage return
that overwrites; DEL; bidi overrides; Rich markup) is fed to every reader of it: ``ftui watch``,
``ftui runs``, ``ftui train``'s follower (and predict's and export's), ``ftui chat --prompt`` and
the chat REPL (streamed token by token, a sequence split between tokens), over a pipe and to a
terminal; and the app's dashboard, runs screen, chat screen, notifications, dialogs and the
launch form's and Evaluate & Predict's dataset preview. No raw control character reaches the
output, the escapes are shown, and markup is shown literally."""

from __future__ import annotations

import io
import json
import socket
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.table import Table
from rich.text import Text

from ftui.rundir.events import make_event
from ftui.safety.text import SafeConsole, VisibleWriter, visible
from tests.fixtures_runs import T0, fixed_sampler, write_run
from tests.repl_input import type_lines

FTUI = [sys.executable, "-m", "ftui.cli.main"]

LINK = "[link=file:///etc/passwd]x[/link]"
HOSTILE = [
    "osc52-bel \x1b]52;c;cm0gLXJmIH4=\x07",  # the clipboard set to `rm -rf ~`, ended by BEL
    "osc52-st \x1b]52;c;cm0gLXJmIH4=\x1b\\",  # ... ended by ST
    "clear \x1b[2J\x1b[H",
    "title \x1b]0;pwned\x07",
    "csi8 \x9b2J",  # the 8-bit CSI
    "osc8 \x9d0;pwned\x9c",  # the 8-bit OSC and ST
    "safe\rEVIL",  # overwrites what was printed on the line
    "del \x7f\x08",
    "bidi \u202eexe.txt\u202c \u2066iso\u2069",
    "sep \u2028after",
    LINK,
    "[/] [bold red]not markup[/]",
    "lone esc at the end \x1b",
]
JOINED = " | ".join(HOSTILE)

# What a terminal would act on: C0 but newline and tab, DEL, C1, bidi controls, line separators.
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# What Rich never writes by itself (its own colours and cursor moves are ESC [ ... m / A / K):
# for output to a terminal, where Rich's own escapes are expected.
PAYLOADS = ("\x1b]", "\x1b[2J", "\x1b[H", "\x9b", "\x9d", "\x9c", "\x07", "\x7f", "\x08", "\u202e", "\u2066", "\u2028",
            "\x1b\\")


def cli_console(buffer: io.StringIO, terminal: bool) -> SafeConsole:
    """The CLI's console (safe_console's settings) writing to ``buffer``, as to a pipe or a
    colour terminal."""
    from ftui.cli.main import safe_console

    assert isinstance(safe_console(), SafeConsole)
    return SafeConsole(file=buffer, force_terminal=terminal, color_system="standard" if terminal else None, emoji=False,
                       soft_wrap=True)


def assert_harmless(out: str, where: str, terminal: bool = False) -> None:
    if terminal:
        found = [p for p in PAYLOADS if p in out]
        assert not found, f"{where}: {found!r} reached the terminal raw"
    else:
        found = sorted(set(RAW.findall(out)))
        assert not found, f"{where}: {found!r} reached the output raw"


def flattened(out: str) -> str:
    """``out`` without Rich's colours and whitespace (a console may have wrapped a line)."""
    return "".join(re.sub(r"\x1b\[[0-9;]*m", "", out).split())


def assert_shown(out: str, where: str) -> None:
    """The escapes are visible, and markup is literal."""
    flat = flattened(out)
    for shown in ("\\x1b]52;c;cm0gLXJmIH4=\\x07", "\\x9b2J", "\\u202e", "safe\\rEVIL", "[link=file:///etc/passwd]x[/link]"):
        assert "".join(shown.split()) in flat, f"{where}: {shown!r} not shown"


def test_visible_escapes_every_hostile_string_and_is_chunk_safe():
    for text in HOSTILE:
        shown = visible(text)
        assert not RAW.search(shown), repr(shown)
        assert visible(shown) == shown  # idempotent: nothing left to escape
    assert visible("a\nb\tc") == "a\nb\tc" and visible("a\nb\tc", one_line=True) == "a⏎b→c"
    assert visible("\ud800") == "\\ud800"  # a lone surrogate (JSON's "\ud800"): shown, not a UnicodeEncodeError
    assert visible("عربي \u200f") == "عربي \u200f"  # right-to-left text and its implicit marks are kept
    # per character: a sequence split over two writes is escaped as a whole one is
    for text in HOSTILE:
        for cut in range(len(text) + 1):
            assert visible(text[:cut]) + visible(text[cut:]) == visible(text)
    out = io.StringIO()
    writer = VisibleWriter(out)
    for chunk in ("end\x1b", "]52;c;eA==", "\x07"):
        writer.write(chunk)
    assert out.getvalue() == "end\\x1b]52;c;eA==\\x07"


@pytest.mark.parametrize("terminal", [False, True])
def test_safe_console_shows_control_characters_to_a_pipe_and_a_terminal(terminal):
    """Rich passes ESC through to a pipe and a terminal alike (it drops only BEL, \\r and three
    more, silently): whatever a caller hands the console, a markup string, a Text, a table
    cell, the payload is shown, never written."""
    from rich.markup import escape

    buffer = io.StringIO()
    console = cli_console(buffer, terminal)
    table = Table()
    table.add_column("cell")
    for text in HOSTILE:
        console.print(f"[red]{escape(text)}[/]")
        console.print(Text(text))
        table.add_row(Text(text))
    console.print(table)
    out = buffer.getvalue()
    assert_harmless(out, "safe_console", terminal)
    assert_shown(out, "safe_console")
    if terminal:
        assert "\x1b[31m" in out  # its own colours still reach the terminal


# --- the CLI, through its real code paths (over a pipe: stdout is not a terminal)


def hostile_run(root: Path, name: str = "hostile-1") -> Path:
    """A failed run whose every free-text field carries the hostile strings: the model's name,
    a warning, the failure's reason, error and hint (a chat template's raise_exception message
    ends up there), and train.log."""
    run = write_run(root, name, steps=20, max_steps=30, every=10, log_lines=tuple(HOSTILE))
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    events[0]["model"] = "org/model " + HOSTILE[0]
    events.append(make_event("log", t=T0 + 60, level="warning", message="warned " + JOINED))
    events.append(make_event("run_end", t=T0 + 61, status="failed", reason="TemplateError: " + JOINED,
                             error_type="TemplateError", error_message="raise_exception: " + JOINED + "\nsecond line " + HOSTILE[2],
                             hint="hint " + JOINED))
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def hostile_export_job(root: Path) -> Path:
    """An export job's directory (as RUN/export/ID is laid out) whose out dir, files and result
    commands carry the hostile strings, then fails with them."""
    job = root / "export-job"
    job.mkdir(parents=True)
    (job / "launch.json").write_text(json.dumps({"start_time": T0, "host": "h", "command_line": "x"}))
    def event(kind, t, **fields):  # as a job writes them (make_event checks a training run's run_start)
        return {"v": 1, "t": T0 + t, "event": kind, **fields}

    events = [event("run_start", 0, job="export", engine="export", source="final " + JOINED, precision="bf16",
                    out="/tmp/out " + JOINED),
              event("progress", 1, phase="save " + HOSTILE[0], done=0, total=2),
              event("export", 2, out="/tmp/out " + JOINED, files=["a " + HOSTILE[1]], bytes=10, commands=["ollama create " + JOINED]),
              event("run_end", 3, status="failed", reason="export failed: " + JOINED, hint=JOINED)]
    (job / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return job


def test_watch_over_a_pipe_shows_a_hostile_run_literally(tmp_path):
    run = hostile_run(tmp_path / "runs")
    proc = subprocess.run([*FTUI, "watch", str(run), "--interval", "0.05"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "failed: TemplateError" in proc.stdout and "warned" in proc.stdout
    assert_harmless(proc.stdout + proc.stderr, "ftui watch")
    assert_shown(proc.stdout, "ftui watch")


NAMED = "named \x1b]0;pwned\x07 \u202eexe"  # a run directory's name (a file name is untrusted too)


def test_runs_over_a_pipe_shows_a_hostile_reason_literally(tmp_path):
    hostile_run(tmp_path / "runs")
    hostile_run(tmp_path / "runs", NAMED)
    proc = subprocess.run([*FTUI, "runs", "--root", str(tmp_path / "runs")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "hostile-1: failed: TemplateError" in proc.stdout and visible(NAMED) in proc.stdout
    assert_harmless(proc.stdout + proc.stderr, "ftui runs")
    assert "\\x1b]52;c;" in proc.stdout and LINK in proc.stdout


@pytest.mark.parametrize("terminal", [False, True])
def test_the_train_follower_shows_a_hostile_run_and_job_literally(tmp_path, terminal):
    """``ftui train`` / predict / eval / export follow a job with follow_run on the CLI's
    console (and on its own default one)."""
    from ftui.cli.follow import follow_run

    run, job = hostile_run(tmp_path / "runs"), hostile_export_job(tmp_path)
    for target in (run, job):
        for own in (False, True):
            buffer = io.StringIO()
            console = None if own else cli_console(buffer, terminal)
            if console is None:  # follow_run's own console, on stdout
                sys_stdout, sys.stdout = sys.stdout, buffer
            try:
                summary = follow_run(target, console, poll_s=0.01)
            finally:
                if console is None:
                    sys.stdout = sys_stdout
            assert summary.status == "failed"
            out = buffer.getvalue()
            assert_harmless(out, f"follow_run {target.name}", terminal)
            assert "\\x1b]52;c;" in flattened(out), out


def test_cli_follow_of_ftui_train_prints_the_hostile_end_through_its_console(tmp_path, monkeypatch, capfd):
    """``ftui train``'s own path after the start (_follow_job), to a pipe."""
    import ftui.cli.main as cli

    run = hostile_run(tmp_path / "runs")
    # started on this host and nothing holds its lock: the follower does not wait a minute for
    # the processes of the fixture's other host to go after its run_end
    launch = json.loads((run / "launch.json").read_text())
    (run / "launch.json").write_text(json.dumps(launch | {"host": socket.gethostname()}))
    summary, interrupted = cli._follow_job(run, cli.safe_console())
    assert summary.status == "failed" and not interrupted
    out, err = capfd.readouterr()
    assert_harmless(out + err, "ftui train (follow)")
    assert_shown(out, "ftui train (follow)")


class HostileChatWorker:
    """The CLI's side of the chat worker protocol: streams the hostile strings one token at a
    time, cut so that each escape sequence is split between two tokens (a lone ESC at a
    token's end); the second question's answer fails with a hostile message."""

    def __init__(self):
        self.replies: list[dict] = []
        self.asked = 0

    def load(self, **spec):
        return {"type": "loaded", "label": "fake " + HOSTILE[3], "device": "cpu"}

    def generate(self, messages, settings):
        self.asked += 1
        if self.asked > 1:
            self.replies = [{"id": 2, "type": "token", "text": "half \x1b"},
                            {"id": 2, "type": "error", "message": "raise_exception: " + JOINED}]
            return 2
        tokens = []
        for text in HOSTILE:
            cut = text.find("\x1b") + 1 or len(text) // 2  # right after the ESC
            tokens += [text[:cut], text[cut:], "\n"]
        self.replies = [{"id": 1, "type": "token", "text": t} for t in tokens]
        self.replies.append({"id": 1, "type": "done", "tokens": len(tokens), "stopped": False})
        return 1

    def get(self, timeout=None):
        return self.replies.pop(0)

    def stop(self):
        pass

    def close(self):
        pass


def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    return tmp_path / "m"


def test_chat_prompt_and_repl_show_a_streamed_hostile_answer_literally(tmp_path, monkeypatch, capfd):

    import ftui.jobs.chat_client
    from ftui.cli.main import main

    monkeypatch.setattr(ftui.jobs.chat_client, "ChatWorker", HostileChatWorker)
    model = model_dir(tmp_path)
    assert main(["chat", "--model", str(model), "--prompt", "hi"]) == 0
    out, err = capfd.readouterr()
    assert_harmless(out + err, "ftui chat --prompt")
    assert_shown(out, "ftui chat --prompt")
    assert "lone esc at the end \\x1b" in out

    type_lines(monkeypatch, ["hello", "again"])
    assert main(["chat", "--model", str(model)]) == 0
    out, err = capfd.readouterr()
    assert_harmless(out + err, "the chat REPL")
    assert_shown(out, "the chat REPL")
    assert "raise_exception" in err and "\\x1b]52;c;" in err  # the failed answer's message, escaped


def test_data_show_prints_hostile_examples_literally():
    """``ftui data --show``'s text of an example (the runner's segments of it), on the CLI's console."""
    from ftui.data.examples import example_text

    for terminal in (False, True):
        buffer = io.StringIO()
        cli_console(buffer, terminal).print(example_text(1, {"input_ids": [1, 2], "labels": [-100, 2],
                                                            "segments": [[text + "\n", i % 2 == 0] for i, text in enumerate(HOSTILE)]}))
        assert_harmless(buffer.getvalue(), "ftui data --show", terminal)
        assert_shown(buffer.getvalue(), "ftui data --show")


def test_records_preview_shows_hostile_records_literally(tmp_path):
    """The launch form's Data preview and Evaluate & Predict's (the same function)."""
    from ftui.tui.screens.launch_preview import records_preview

    shown = ""
    for first in range(0, len(HOSTILE), 3):  # the preview shows a dataset's first three records
        records = [{"instruction": text, "input": "", "output": text} for text in HOSTILE[first:first + 3]]
        (tmp_path / "hostile.json").write_text(json.dumps(records))
        text, problem = records_preview(str(tmp_path / "hostile.json"), str(tmp_path))
        assert problem is None
        assert_harmless(text.plain, "records_preview")
        shown += text.plain
    assert "\\x1b]52;c;" in shown and "safe\\rEVIL" in shown and LINK in shown and "\\x9b2J" in shown
    bad = tmp_path / ("bad \x1b]0;pwned\x07 \u202e.json")
    bad.write_text("{")
    text, _problem = records_preview(str(bad), str(tmp_path))
    assert_harmless(text.plain, "records_preview's error")


# --- the app's widgets, rendered (export_screenshot holds what the terminal would get)


async def until(pilot, predicate, timeout=60.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await pilot.pause(0.1)
    raise AssertionError("condition not met in time")


def screen_text(app) -> str:
    return app.export_screenshot()


async def test_dashboard_runs_screen_notifications_and_dialogs_show_hostile_text_literally(tmp_path, monkeypatch):
    from ftui.tui.app import FtuiApp
    from ftui.tui.screens.modals import Confirm
    from ftui.tui.screens.runs import RunsScreen
    from ftui.tui.widgets import EndBanner, LogTail

    monkeypatch.chdir(tmp_path)
    run = hostile_run(tmp_path / "runs")
    hostile_run(tmp_path / "runs", NAMED)
    app = FtuiApp(tmp_path / "runs", attach=run, sampler=fixed_sampler, offer_live=False, render_examples=False,
                  clock=lambda: T0 + 100)
    async with app.run_test(size=(160, 50)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.status == "failed")
        await until(pilot, lambda: len(dash.query_one(LogTail).lines) >= len(HOSTILE))
        await pilot.pause(0.2)
        shot = screen_text(app)
        assert_harmless(shot, "the dashboard")
        banner = dash.query_one(EndBanner).render()
        plain = banner.plain if isinstance(banner, Text) else str(banner)
        assert_harmless(plain, "the failure banner")
        assert "\\x1b]52;c;" in plain and LINK in plain
        log = "\n".join(strip.text for strip in dash.query_one(LogTail).lines)
        assert_harmless(log, "the train.log panel")
        # a line's \r is a progress bar's rewrite there: the tailer keeps what a terminal shows last
        assert "EVIL" in log and LINK in log and "\\x1b]52;c;" in log
        app.notify("run ended: " + JOINED, markup=False)
        app.notify("quoted " + HOSTILE[3], title="title " + HOSTILE[0])
        await pilot.pause(0.2)
        for note in app._notifications:
            assert_harmless(str(note.message) + str(note.title), "a notification")
        assert_harmless(screen_text(app), "the dashboard with its notifications")
        app.push_screen(Confirm("Delete run " + JOINED + "?"))
        await pilot.pause(0.2)
        assert_harmless(screen_text(app), "a dialog")
        app.pop_screen()
        app.action_show_runs()
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.runs)
        await pilot.pause(0.2)
        assert_harmless(screen_text(app), "the runs screen")
        detail = app.screen.query_one("#run-detail").render()
        assert "\\x1b]52;c;" in (detail.plain if isinstance(detail, Text) else str(detail))


async def test_chat_screen_shows_a_streamed_hostile_answer_literally(tmp_path):
    from tests.test_chat import FakeWorker, chat_app, fake_run

    from ftui.tui.screens.chat import ChatPane

    tokens = []
    for text in HOSTILE:
        cut = text.find("\x1b") + 1 or len(text) // 2
        tokens += [text[:cut], text[cut:], "\n"]

    class Hostile(FakeWorker):
        def __init__(self, label="run final"):
            super().__init__(answer_parts=tokens, label="label " + HOSTILE[3])

    import tests.test_chat as test_chat

    run = fake_run(tmp_path)
    workers: list = []
    original = test_chat.FakeWorker
    test_chat.FakeWorker = Hostile  # chat_app's factory makes these
    try:
        app = chat_app(run, workers)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: workers and getattr(workers[0], "spec", None) and not app.screen.loading_panes)
            await pilot.click("#chat-prompt")
            await pilot.press("h", "i", "enter")
            screen = app.screen
            await until(pilot, lambda: not screen.busy and len(screen.conversations["main"].messages) == 2)
            assert screen.conversations["main"].messages[1]["content"] == "".join(tokens)  # kept as it was written
            pane = screen.query_one("#pane-main", ChatPane)
            shown = "".join(w.render().plain for w in pane.query(".answer"))
            assert_harmless(shown, "the chat answer")
            assert_shown(shown, "the chat answer")
            assert_harmless(screen_text(app), "the chat screen")
    finally:
        test_chat.FakeWorker = original


async def test_evaluate_and_predict_shows_hostile_jobs_and_records_literally(tmp_path, monkeypatch):
    """Its jobs table (a job's model label and datasets come from job.json), a failed job's
    reason and error, and the dataset preview of hostile records."""
    from textual.widgets import DataTable, Input

    from tests.test_tui_evalpredict import app_with, open_screen, write_job

    monkeypatch.chdir(tmp_path)
    run = write_run(tmp_path / "runs", "demo-20231115-090000", steps=30, max_steps=30, end="completed", model="ftui-demo")
    (run / "config.yaml").write_text("model_name_or_path: ftui-demo\ndataset: alpaca_en_demo\ncutoff_len: 128\nmodel_init: random\n")
    (run / "final").mkdir()
    job = write_job(run, "20240101-000000", [], source_label="label " + JOINED, dataset="data " + JOINED, end=None)
    with open(job / "events.jsonl", "a") as fh:
        fh.write(json.dumps(make_event("run_end", t=T0 + 9, status="failed", reason="failed: " + JOINED,
                                       error_type="TemplateError", error_message=JOINED)) + "\n")
    (tmp_path / "hostile.json").write_text(json.dumps([{"instruction": text, "output": text} for text in HOSTILE[:3]]))
    app = app_with(tmp_path, run)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await open_screen(pilot, app)
        table = screen.query_one("#ep-jobs", DataTable)
        await until(pilot, lambda: table.row_count == 1)
        table.focus()
        await pilot.press("enter")
        await until(pilot, lambda: screen.job_dir == job and screen.summary is not None and screen.summary.has_ended)
        await until(pilot, lambda: screen.query_one("#ep-dataset", Input).value)
        screen.query_one("#ep-dataset", Input).value = str(tmp_path / "hostile.json")
        await until(pilot, lambda: "hostile.json" in str(screen.query_one("#ep-preview").render()))
        await pilot.pause(0.2)
        status = screen.query_one("#ep-status").render()
        assert "\\x1b]52;c;" in (status.plain if isinstance(status, Text) else str(status))
        assert_harmless(screen_text(app), "Evaluate & Predict")
