"""The Export screen (issue 17) driven by Textual's pilot: opening it from the dashboard, the
runs screen and the palette; the out dir proposed and refused (inside the run; not empty
without force); Start (prepare_export makes the real job directory, start_export replaced: no
model); progress, Stop and the end view from events.jsonl written here as the runner writes
it; an earlier export opened from the list; the form's snapshot."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
from textual.widgets import Button, Checkbox, DataTable, Input, ProgressBar, TextArea

from ftui.rundir.events import SCHEMA_VERSION, make_event
from ftui.tui.screens.dashboard import DashboardScreen
from ftui.tui.screens.chat import read_sources
from ftui.tui.screens.export import ExportScreen, export_choices
from ftui.tui.screens.runs import RunsScreen
from tests.fixtures_runs import T0, write_run
from tests.test_tui_evalpredict import LOCKS, release_locks, start_event
from tests.test_tui_pilot import make_app, text_of, until

HOSTILE = "[red]x[/] \x1b[2J\rz"
RUN_NAME = "demo-20231115-090000"


@pytest.fixture
def run(tmp_path):
    run = write_run(tmp_path / "runs", RUN_NAME, steps=30, max_steps=30, end="completed", model="ftui-demo")
    (run / "config.yaml").write_text("model_name_or_path: ftui-demo\ndataset: alpaca_en_demo\ncutoff_len: 128\nmodel_init: random\n")
    (run / "final").mkdir()
    (run / "checkpoints" / "step-20").mkdir(parents=True)
    (run / "checkpoints" / "step-20" / "trainer_state.json").write_text(json.dumps({"global_step": 20}))
    return run


@pytest.fixture(autouse=True)
def _room(monkeypatch):
    """The machine's free memory and disk are not what these tests check (the export's own
    tests do): every export fits."""
    from ftui.jobs import export

    monkeypatch.setattr(export, "resources_problem", lambda needs, out, available_memory=None: None)


@pytest.fixture
def export_events(monkeypatch):
    """The ``export`` event as readers know it (the lead's events.py adds it; until then
    readers skip an unknown kind)."""
    from ftui.rundir import events

    if "export" not in events.REQUIRED:
        monkeypatch.setitem(events.REQUIRED, "export", ("out", "files"))


@pytest.fixture
def fake_start(monkeypatch):
    """start_export without a model: the (job_dir, cfg) it was given, and the job's lock held
    as the supervisor holds it while the job lives (release_locks ends it)."""
    from ftui.jobs import export

    started = []

    def start_export(job_dir, cfg):
        LOCKS.append(os.open(job_dir / "job.lock", os.O_CREAT | os.O_RDWR))
        fcntl.flock(LOCKS[-1], fcntl.LOCK_EX)
        started.append((job_dir, cfg))

    monkeypatch.setattr(export, "start_export", start_export)
    yield started
    release_locks()


def export_event(out: Path, files: list[str], size: int, gguf: str | None, commands: list[str]) -> dict:
    return {"v": SCHEMA_VERSION, "t": T0 + 8, "event": "export", "out": str(out), "files": files, "bytes": size, "gguf": gguf,
            "dtype": "bf16", "commands": commands}


def append_events(job_dir: Path, *events: dict) -> None:
    with open(job_dir / "events.jsonl", "a") as fh:
        for event in events:
            fh.write(json.dumps(event) + "\n")


async def open_screen(pilot, app) -> ExportScreen:
    await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
    await pilot.press("x")
    await until(pilot, lambda: isinstance(app.screen, ExportScreen) and app.screen.found is not None)
    return app.screen


def needs_text(screen) -> str:
    return text_of(screen.query_one("#xp-needs"))


async def test_opens_from_dashboard_runs_screen_and_palette(tmp_path, run):
    app = make_app(tmp_path, attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Export model" in titles
        screen = await open_screen(pilot, app)
        assert screen.run_dir == run
        await until(pilot, lambda: "parameters: about" in needs_text(screen))  # the size, read in a worker
        assert "ready" in needs_text(screen)
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        app.action_show_runs()
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.runs)
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, ExportScreen))
        assert app.screen.run_dir == run
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        command = next(c for c in app.get_system_commands(app.screen) if c.title == "Export model")
        app.call_later(command.callback)  # the palette runs its entry (for the highlighted run) in the app
        await until(pilot, lambda: isinstance(app.screen, ExportScreen) and "ready" in needs_text(app.screen))
        assert app.screen.run_dir == run


async def test_out_dir_follows_the_source_until_edited(tmp_path, run):
    app = make_app(tmp_path, attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        out = screen.query_one("#xp-out", Input)
        assert out.value == str(tmp_path / "exports" / f"{RUN_NAME}-final")  # FTUI_HOME/exports
        assert export_choices(read_sources(run)) == [("final/", "final"), ("checkpoint step 20", "step-20")]
        screen.query_one("#xp-source").value = "step-20"
        await until(pilot, lambda: out.value.endswith(f"{RUN_NAME}-step-20"))
        out.value = str(tmp_path / "mine")
        screen.query_one("#xp-source").value = "final"
        await pilot.pause(0.2)
        assert out.value == str(tmp_path / "mine")


async def test_out_dir_refusals_are_shown_and_start_refused(tmp_path, run, fake_start):
    """An out dir inside the run, or a non-empty one without force: the form says why before
    Start, and Start says it again without starting; force lifts the second only for an
    earlier ftui export (a folder of the user's is refused, naming what is in it)."""
    app = make_app(tmp_path, attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        await until(pilot, lambda: "ready" in needs_text(screen))
        screen.query_one("#xp-out", Input).value = str(run / "exported")
        await until(pilot, lambda: "inside the run directory" in needs_text(screen))
        await pilot.press("f5")
        await until(pilot, lambda: "export not started" in text_of(screen.query_one("#xp-status")))
        assert "inside the run directory" in text_of(screen.query_one("#xp-status"))
        assert not fake_start and not (run / "export").exists()
        assert not screen.query_one("#xp-start", Button).disabled  # the app stays up; try again
        screen.query_one("#xp-out", Input).value = ""  # not the current directory
        await until(pilot, lambda: "give the directory" in needs_text(screen))
        full = tmp_path / "full"
        full.mkdir()
        (full / "old.txt").write_text("x")
        screen.query_one("#xp-out", Input).value = str(full)
        await until(pilot, lambda: "is not empty" in needs_text(screen))
        screen.query_one("#xp-force", Checkbox).value = True  # force replaces only an earlier ftui export (issue 39)
        await until(pilot, lambda: "which ftui did not write" in needs_text(screen) and "old.txt" in needs_text(screen))
        from ftui.safety.export_out import write_marker

        earlier = tmp_path / "earlier"
        earlier.mkdir()
        (earlier / "model.safetensors").write_bytes(b"weights")
        write_marker(earlier, run=str(run))
        screen.query_one("#xp-out", Input).value = str(earlier)
        await until(pilot, lambda: "ready" in needs_text(screen))
        await pilot.press("f5")
        await until(pilot, lambda: fake_start)
        assert (full / "old.txt").read_text() == "x"


async def test_start_progress_stop_and_end(tmp_path, run, monkeypatch, fake_start, export_events):
    """Start writes the job (job.json with the form's settings) and starts it; the screen
    follows its phase and progress, Stop asks stop_run, the end shows the files, their size
    and the commands from the export event, literally, and F7 copies the commands."""
    from ftui.jobs import launch

    stops = []
    monkeypatch.setattr(launch, "stop_run", lambda job_dir, force=False: stops.append(force) or "stop requested")
    out = tmp_path / "out"
    app = make_app(tmp_path, attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        screen.query_one("#xp-source").value = "step-20"
        screen.query_one("#xp-out", Input).value = str(out)
        screen.query_one("#xp-dtype").value = "fp32"
        screen.query_one("#xp-gguf").value = "q8_0"
        screen.query_one("#xp-shard", Input).value = "2GB"
        await pilot.press("f5")
        await until(pilot, lambda: fake_start or app._notifications, timeout=20)
        assert fake_start, [n.message for n in app._notifications]
        job_dir, cfg = fake_start[0]
        spec = json.loads((job_dir / "job.json").read_text())
        assert job_dir.parent == run / "export" and cfg.device == "cpu"
        assert (spec["checkpoint"], spec["out"], spec["dtype"], spec["gguf"], spec["max_shard_size"]) == ("20", str(out), "fp32", "q8_0", 2 * 10**9)
        try:
            append_events(job_dir, start_event(job_dir.name, "export", 0),
                          make_event("progress", t=T0 + 1, done=3, total=10, phase="save"),
                          make_event("log", t=T0 + 1, level="info", message="saving " + HOSTILE))
            status = screen.query_one("#xp-status")
            await until(pilot, lambda: "saving the shards  3 / 10" in text_of(status))
            assert "saving [red]x[/] \\x1b[2J\\rz" in text_of(status)  # literally: markup as typed, escapes shown
            bar = screen.query_one("#xp-progress", ProgressBar)
            assert bar.display and bar.progress == 3 and bar.total == 10
            assert not screen.query_one("#xp-stop", Button).disabled and screen.query_one("#xp-start", Button).disabled
            await pilot.press("f6")
            await pilot.press("y")
            await until(pilot, lambda: stops == [False])
            commands = [f"ftui chat --model {out}", f"ollama create out -f {out}/Modelfile", f"llama-cli -m {out}/model-q8_0.gguf -cnv"]
            append_events(job_dir, make_event("progress", t=T0 + 2, done=1, total=1, phase="gguf"),
                          export_event(out, ["config.json", "model.safetensors", "model-q8_0.gguf", HOSTILE], 3 << 20, "model-q8_0.gguf", commands),
                          make_event("run_end", t=T0 + 9, status="completed", reason="exported step-20 to " + str(out)))
            result = screen.query_one("#xp-result", TextArea)
            await until(pilot, lambda: result.display)
            assert result.text.splitlines()[:4] == ["# use it", *commands]
            assert f"# in {out}: 4 files, 3 MiB" in result.text and "[red]x[/] \\x1b[2J\\rz" in result.text
            assert "\x1b" not in result.text
            assert "4 files, 3 MiB" in text_of(status)
            assert not bar.display and screen.query_one("#xp-stop", Button).disabled
            await pilot.press("f7")
            assert app.clipboard == "\n".join(commands)
            result.focus()  # the box's text is selected (Shift+arrows, the mouse) and copied with Ctrl+C
            result.select_line(1)
            await pilot.press("ctrl+c")
            assert app.clipboard == commands[0]
        finally:
            release_locks()


def write_export_job(run: Path, job_id: str, out: Path, *end_events: dict) -> Path:
    job = run / "export" / job_id
    job.mkdir(parents=True)
    (job / "job.json").write_text(json.dumps({"job": "export", "run": str(run), "checkpoint": None, "source_label": f"{RUN_NAME} final",
                                              "out": str(out), "dtype": "bf16", "gguf": None}))
    append_events(job, start_event(job.name, "export", 0), *end_events)
    return job


async def test_earlier_exports_open_from_the_list(tmp_path, run):
    """A failed export shows why and what to do; a completed one without an export event (a
    runner that wrote none) shows the out dir's files and ftui's usage_commands."""
    out = tmp_path / "old-export"
    out.mkdir()
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"\0" * 2048)
    job = write_export_job(run, "20240101-000000", out, make_event("run_end", t=T0 + 9, status="completed", reason="exported"))
    write_export_job(run, "20240101-000100", tmp_path / "other",
                     make_event("run_end", t=T0 + 9, status="failed", reason="MemoryError: " + HOSTILE, hint="export on a larger machine"))
    app = make_app(tmp_path, attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        table = screen.query_one("#xp-jobs", DataTable)
        await until(pilot, lambda: table.row_count == 2)
        assert [c.plain for c in table.get_row_at(0)] == ["completed", "final", "bf16", str(out), job.name]
        table.focus()
        await pilot.press("down", "enter")
        status = screen.query_one("#xp-status")
        await until(pilot, lambda: "export on a larger machine" in text_of(status))
        assert "MemoryError: [red]x[/] \\x1b[2J\\rz" in text_of(status)
        result = screen.query_one("#xp-result", TextArea)
        assert not result.display and screen.query_one("#xp-copy", Button).disabled
        await pilot.press("up", "enter")
        await until(pilot, lambda: result.display)
        assert result.text.splitlines()[1] == f"ftui chat --model {out}"
        assert "config.json\nmodel.safetensors" in result.text


def test_export_screen_snapshot(snap_compare, tmp_path, run, monkeypatch):
    """The form at 100x32 with what the export needs (the out dir under a fixed FTUI_HOME)."""
    monkeypatch.setenv("FTUI_HOME", "/srv/ftui")
    app = make_app(tmp_path, attach=run)

    async def before(pilot):
        await until(pilot, lambda: isinstance(pilot.app.screen, DashboardScreen))
        await pilot.press("x")
        await until(pilot, lambda: isinstance(pilot.app.screen, ExportScreen) and "ready" in needs_text(pilot.app.screen))
        await pilot.pause(0.5)
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(app, terminal_size=(100, 32), run_before=before)


@pytest.mark.dist
async def test_a_real_export_from_the_screen(tmp_path, demo_run):
    """F5 on the screen starts the real job (no stand-in): it runs detached, the screen follows
    it to its end, and the exported model loads with transformers alone."""
    import shutil

    run = tmp_path / "runs" / demo_run.name
    shutil.copytree(demo_run, run, ignore=shutil.ignore_patterns("predict", "eval", "export"))
    out = tmp_path / "exported"
    app = make_app(tmp_path, attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        screen.query_one("#xp-out", Input).value = str(out)
        await until(pilot, lambda: "ready" in needs_text(screen))
        await pilot.press("f5")
        result = screen.query_one("#xp-result", TextArea)
        await until(pilot, lambda: result.display, timeout=300)
        assert f"ftui chat --model {out}" in result.text, result.text
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out)
    assert str(model.dtype) == "torch.bfloat16"  # the form's default dtype


async def test_a_run_whose_directory_hangs_leaves_the_screens_up_and_start_waits(tmp_path, run, monkeypatch, fake_start):
    """The run's final/ and checkpoints are listed by a worker (a run on a hung network mount
    froze the app when the screens listed them while composing): until the listing returns,
    the Export and Evaluate & Predict screens are up, say they are reading, and Start waits."""
    import threading

    from ftui.tui.screens import chat
    from ftui.tui.screens.evalpredict import EvalPredictScreen

    release = threading.Event()
    read_sources = chat.read_sources

    def hung_read(run_dir):
        release.wait(60)  # the test's end releases it at once
        return read_sources(run_dir)

    monkeypatch.setattr(chat, "read_sources", hung_read)
    app = make_app(tmp_path, attach=run)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
            for key, screen_type, prefix in (("x", ExportScreen, "xp"), ("e", EvalPredictScreen, "ep")):
                await pilot.press(key)
                await until(pilot, lambda: isinstance(app.screen, screen_type))
                screen = app.screen
                source = screen.query_one(f"#{prefix}-source")
                assert screen.found is None and source._options == [("reading the run's checkpoints...", "")]
                await pilot.press("f5")
                await until(pilot, lambda: any("reading the run's checkpoints" in str(n.message) for n in app._notifications))
                assert not fake_start
                app.clear_notifications()
                await pilot.press("escape")
                await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
            release.set()
            await pilot.press("x")
            await until(pilot, lambda: isinstance(app.screen, ExportScreen) and app.screen.found is not None)
            assert [v for _label, v in app.screen.query_one("#xp-source")._options] == ["final", "step-20"]
    finally:
        release.set()


async def test_a_killed_exports_temporary_directory_is_removed_and_said(tmp_path, run):
    """Issue 39, finding 8: the screen opened on an export killed with kill -9 removes its
    temporary directory (the job is gone: its marker's lock is free) and says so in the end view."""
    from tests.test_export_safety import leave_export_temp

    out = tmp_path / "exports" / "killed"
    out.parent.mkdir()
    tmp, _ = leave_export_temp(out, "kill")
    write_export_job(run, "20240101-000200", out,
                     make_event("log", t=T0 + 2, level="info", message="writing", temp_dir=str(tmp)),
                     make_event("run_end", t=T0 + 9, status="failed", reason="the launcher exited without writing run_end"))
    app = make_app(tmp_path, attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        table = screen.query_one("#xp-jobs", DataTable)
        await until(pilot, lambda: table.row_count == 1)
        table.focus()
        await pilot.press("enter")
        await until(pilot, lambda: "removed 1 temporary directory" in text_of(screen.query_one("#xp-status")))
        assert str(tmp) in text_of(screen.query_one("#xp-status")).replace("\n", "")
    assert not tmp.exists()
