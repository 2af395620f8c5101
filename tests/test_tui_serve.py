"""The Serve API screen driven by Textual's pilot: opened with ``a`` from the dashboard and the
runs screen (and the palette); a refused form (an address beyond this machine without a key)
says why and the app stays up; Start writes the job through the operation ``ftui serve``
calls (the server itself replaced); the job's view, fed a hand-written events.jsonl, shows the
URL, the curl and Python snippets with the real port, the counters and the log's last lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import Button, Input, TextArea

from ftui.rundir.events import make_event
from ftui.tui.screens.dashboard import DashboardScreen
from ftui.tui.screens.runs import RunsScreen
from ftui.tui.screens.serve import ServeScreen, usage_text
from tests.fixtures_runs import T0, write_run
from tests.test_tui_evalpredict import LOCKS, release_locks
from tests.test_tui_pilot import make_app, text_of, until

RUN_NAME = "demo-20231115-090000"
KEY = "sk-tui-secret-41"


@pytest.fixture
def run(tmp_path):
    run = write_run(tmp_path / "runs", RUN_NAME, steps=30, max_steps=30, end="completed", model="ftui-demo")
    (run / "config.yaml").write_text("model_name_or_path: ftui-demo\ndataset: ftui_demo\ncutoff_len: 128\nmodel_init: random\n")
    (run / "final").mkdir()
    (run / "final" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "ftui-demo"}))
    return run


@pytest.fixture(autouse=True)
def _no_key(monkeypatch):
    for name in ("FTUI_API_KEY", "API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def fake_start(monkeypatch):
    """start_job without a server: (job_dir, cfg), the job's lock held as its supervisor holds it."""
    import fcntl
    import os

    from ftui.jobs import offline

    started = []

    def start_job(kind, job_dir, cfg):
        LOCKS.append(os.open(job_dir / "job.lock", os.O_CREAT | os.O_RDWR))
        fcntl.flock(LOCKS[-1], fcntl.LOCK_EX)
        started.append((job_dir, cfg))
        return {}

    monkeypatch.setattr(offline, "start_job", start_job)
    yield started
    release_locks()


def append_events(job_dir: Path, *events: dict) -> None:
    with open(job_dir / "events.jsonl", "a") as fh:
        for event in events:
            fh.write(json.dumps(event) + "\n")


async def open_screen(pilot, app) -> ServeScreen:
    await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
    await pilot.press("a")
    await until(pilot, lambda: isinstance(app.screen, ServeScreen) and app.screen.found is not None)
    return app.screen


def status(screen) -> str:
    return text_of(screen.query_one("#sv-status"))


async def test_opens_with_a_from_the_dashboard_the_runs_screen_and_the_palette(tmp_path, run):
    app = make_app(tmp_path, attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        assert "Serve API" in [c.title for c in app.get_system_commands(app.screen)]
        screen = await open_screen(pilot, app)
        assert screen.run_dir == run and screen.query_one("#sv-name", Input).value == RUN_NAME
        assert screen.query_one("#sv-host", Input).value == "127.0.0.1" and screen.query_one("#sv-port", Input).value == "8000"
        screen.query_one("#sv-port", Input).value = "8123"
        await app.switch_language("zh")  # relabelled in place: what was typed stays
        await app.switch_language("en")
        assert app.screen is screen and screen.query_one("#sv-port", Input).value == "8123"
        assert "127.0.0.1 serves this machine only" in text_of(screen.query_one("#sv-note"))
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        app.action_show_runs()
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.runs)
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, ServeScreen))
        assert app.screen.run_dir == run
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        command = next(c for c in app.get_system_commands(app.screen) if c.title == "Serve API")
        app.call_later(command.callback)
        await until(pilot, lambda: isinstance(app.screen, ServeScreen))


async def test_refusals_are_shown_and_the_app_stays_up(tmp_path, run, fake_start):
    app = make_app(tmp_path, attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        screen.query_one("#sv-host", Input).value = "0.0.0.0"
        await pilot.press("f5")
        await until(pilot, lambda: "server not started" in status(screen))
        said = " ".join(status(screen).split())
        assert "--api-key-file" in said and "FTUI_API_KEY" in said
        assert not fake_start and not (run / "serve").exists()
        assert not screen.query_one("#sv-start", Button).disabled  # try again
        screen.query_one("#sv-host", Input).value = "127.0.0.1"
        screen.query_one("#sv-port", Input).value = "eighty"
        await pilot.press("f5")
        await until(pilot, lambda: any("not a whole number" in str(n.message) for n in app._notifications))
        screen.query_one("#sv-port", Input).value = "99999"
        await pilot.press("f5")
        await until(pilot, lambda: "0 to 65535" in status(screen))
        assert not fake_start and isinstance(app.screen, ServeScreen)


async def test_start_then_the_jobs_view_from_its_events(tmp_path, run, fake_start, monkeypatch):
    """Start writes job.json with the form's settings (the key file's path only); the view
    shows the URL, the snippets with serve_ready's real port and $FTUI_API_KEY, the counters,
    the log's last lines (hostile text as text), and Stop asks stop_run."""
    from ftui.jobs import launch

    stops = []
    monkeypatch.setattr(launch, "stop_run", lambda job_dir, force=False: stops.append(force) or "stop requested")
    key_file = tmp_path / "key"
    key_file.write_text(KEY)
    app = make_app(tmp_path, attach=run)
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await open_screen(pilot, app)
        screen.query_one("#sv-host", Input).value = "0.0.0.0"
        screen.query_one("#sv-port", Input).value = "0"
        screen.query_one("#sv-key", Input).value = str(key_file)
        screen.query_one("#sv-name", Input).value = "demo"
        screen.query_one("#sv-queue", Input).value = "3"
        screen.query_one("#sv-batch", Input).value = "4"
        await pilot.press("f5")
        await until(pilot, lambda: fake_start or app._notifications, timeout=20)
        assert fake_start, [n.message for n in app._notifications]
        job_dir, _cfg = fake_start[0]
        spec = json.loads((job_dir / "job.json").read_text())
        assert (spec["host"], spec["port"], spec["served_name"], spec["queue_size"], spec["max_batch"]) == ("0.0.0.0", 0, "demo", 3, 4)
        assert spec["api_key_file"] == str(key_file.resolve()) and KEY not in (job_dir / "job.json").read_text()
        append_events(job_dir, make_event("job_start", t=T0, run_id=job_dir.name, job="serve", source="demo final",
                                          precision="float32", world_size=1, host="0.0.0.0", port=0))
        (job_dir / "train.log").write_text("loading the model\nlistening \x1b[2J[red]x[/]\n")
        await until(pilot, lambda: "loading the model" in status(screen))
        append_events(job_dir,
                      make_event("serve_ready", t=T0 + 1, url="http://0.0.0.0:43123/v1", host="0.0.0.0", port=43123,
                                 models=["demo"], key=True),
                      make_event("serve_stats", t=T0 + 2, requests=7, answered=5, rejected=2, errors=0, disconnected=0, active=0,
                                 queued=0, prompt_tokens=70, generated_tokens=90, tokens_per_s=31.5, uptime_s=4.0))
        await until(pilot, lambda: "31.5" in status(screen))
        said = status(screen)
        assert "requests 7" in said and "answered 5" in said and "429s 2" in said and "errors 0" in said
        assert "http://0.0.0.0:43123/v1" in text_of(screen.query_one("#sv-job"))
        box = screen.query_one("#sv-usage", TextArea)
        assert box.display and box.text == usage_text("http://0.0.0.0:43123/v1", "demo", key=True)
        assert "curl http://0.0.0.0:43123/v1/chat/completions" in box.text and "$FTUI_API_KEY" in box.text
        assert 'base_url="http://0.0.0.0:43123/v1"' in box.text and '"model": "demo"' in box.text and KEY not in box.text
        await until(pilot, lambda: "listening" in text_of(screen.query_one("#sv-log")))
        assert "\x1b" not in text_of(screen.query_one("#sv-log")) and "[red]x[/]" in text_of(screen.query_one("#sv-log"))
        await pilot.press("f6")
        await until(pilot, lambda: app.screen.query("#yes"))
        await pilot.press("y")
        await until(pilot, lambda: stops == [False])
        append_events(job_dir, make_event("run_end", t=T0 + 9, status="stopped", reason="stopped: served 7 requests"))
        release_locks()
        await until(pilot, lambda: "served 7 requests" in status(screen))
        assert not box.display and not screen.query_one("#sv-start", Button).disabled


def test_the_snippets_without_a_key_send_none():
    text = usage_text("http://127.0.0.1:8000/v1", "demo", key=False)
    assert "Authorization" not in text and 'api_key="none"' in text
    assert "curl http://127.0.0.1:8000/v1/chat/completions \\" in text
