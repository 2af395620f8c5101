"""The app resumes a stopped, failed or died run (issue 40, item 3): key R on its dashboard,
key R on the runs screen and the palette, with the rules and refusals of ``ftui train
--resume`` (one operation, ftui.ops); the dashboard then follows the resumed job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import tiny_config, train_sync
from fixtures_runs import fixed_sampler
from ftui.jobs.launch import prepare_run
from ftui.rundir.paths import DEMO_DATASET_FILE
from ftui.rundir.follower import summarize_run
from ftui.tui.app import FtuiApp
from ftui.tui.screens.dashboard import DashboardScreen
from ftui.tui.screens.runs import RunsScreen
from tests.test_ops import _ended
from tests.test_resume_honest import started  # noqa: F401 (a fixture: launch.start_run replaced)
from tests.test_tui_pilot import until

RECORDS = json.loads(DEMO_DATASET_FILE.read_text())


def make_app(tmp_path: Path, **kw) -> FtuiApp:
    kw.setdefault("sampler", fixed_sampler)
    kw.setdefault("offer_live", False)
    kw.setdefault("render_examples", False)
    return FtuiApp(tmp_path / "runs", **kw)


def notified(app, text: str) -> bool:
    return any(text in " ".join(str(n.message).split()) for n in app._notifications)


def stopped_tiny_run(tmp_path: Path) -> Path:
    """A real tiny run stopped after step 2 with its checkpoint step-2 (as a Stop leaves it):
    trained for 2 of 4 steps (max_steps 2, then its config says 4, the run it was), its end
    made `stopped` and final/ removed."""
    run, events, proc = train_sync(tiny_config(tmp_path, max_steps=2, save_steps=2, run_name="resume-me"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump({**config, "max_steps": 4}))
    lines = (run / "events.jsonl").read_text().splitlines()
    end = json.loads(lines[-1])
    assert end["event"] == "run_end"
    lines[-1] = json.dumps({**end, "status": "stopped", "reason": "stopped by the user"})
    (run / "events.jsonl").write_text("\n".join(lines) + "\n")
    import shutil

    shutil.rmtree(run / "final")
    assert summarize_run(run).status == "stopped" and (run / "checkpoints" / "step-2").is_dir()
    return run


@pytest.fixture(autouse=True)
def _cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


# CI time: from the runs screen with -m slow (a real run to completion, 43 s on a loaded 2-core
# machine); CI keeps the dashboard's, and the runs screen's R on a fake start below
@pytest.mark.parametrize("where", ["dashboard", pytest.param("runs screen", marks=pytest.mark.slow)])
async def test_a_stopped_run_resumed_from_the_app_runs_to_completion_on_its_dashboard(tmp_path, where):
    run = stopped_tiny_run(tmp_path)
    app = make_app(tmp_path, attach=run if where == "dashboard" else None)
    async with app.run_test(size=(120, 40)) as pilot:
        if where == "dashboard":
            dash = app.screen
            await until(pilot, lambda: dash.view is not None and dash.view.status == "stopped")
            assert dash.check_action("resume", ()) and not dash.check_action("stop", ())
            await pilot.press("R")
        else:
            app.action_show_runs()
            await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.runs)
            await pilot.press("R")
            await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
            dash = app.screen
        await until(pilot, lambda: notified(app, "resumed from step-2"))
        await until(pilot, lambda: dash.view is not None and dash.view.status == "completed" and dash.view.step == 4, timeout=300)
        assert app.screen is dash and dash.run_dir.resolve() == run.resolve()
        assert not dash.check_action("resume", ())  # a completed run offers no resume
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert [e["status"] for e in events if e["event"] == "run_end"] == ["stopped", "completed"]
    assert sorted(e["step"] for e in events if e["event"] == "step") == [1, 2, 3, 4]
    assert (run / "final").is_dir()


def _fake_run(tmp_path: Path, status: str, dataset: Path) -> Path:
    """A run as prepare_run makes it, ended with ``status`` and checkpoint step-2 (test_ops' _ended)."""
    return _ended(prepare_run(tiny_config(tmp_path, dataset=str(dataset), max_steps=4)), status)


async def test_r_on_the_runs_screen_resumes_the_highlighted_run_and_follows_it(tmp_path, started):
    """The runs screen's R: the resume of the highlighted run from its newest checkpoint, then
    its dashboard (the job itself is the dashboard's test above)."""
    data = tmp_path / "qa.json"
    data.write_text(json.dumps(RECORDS[:40], indent=1))
    run = _fake_run(tmp_path, "stopped", data)
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        app.action_show_runs()
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.runs)
        await pilot.press("R")
        await until(pilot, lambda: len(started) == 1)
        assert started[0]["resume"].name == "step-2" and Path(started[0]["run"]).resolve() == run.resolve()
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.run_dir.resolve() == run.resolve())


async def test_a_resume_with_changed_data_asks_first_naming_the_change_and_refusals_keep_the_app(tmp_path, started):
    data = tmp_path / "qa.json"
    data.write_text(json.dumps(RECORDS[:40], indent=1))
    run = _fake_run(tmp_path, "failed", data)
    data.write_text(json.dumps([{**RECORDS[0], "output": "changed"}, *RECORDS[1:40]], indent=1))  # the data changed since
    app = make_app(tmp_path, attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.status == "failed")
        await pilot.press("R")
        await until(pilot, lambda: app.screen.__class__.__name__ == "Confirm")
        question = str(app.screen.question)
        assert "other data" in question and str(data) in question, question
        await pilot.press("n")  # no: nothing starts, nothing in the run changes
        await until(pilot, lambda: app.screen is dash)
        await pilot.pause(0.5)
        assert started == [] and summarize_run(run).status == "failed"
        await pilot.press("R")
        await until(pilot, lambda: app.screen.__class__.__name__ == "Confirm")
        await pilot.press("y")  # as --allow-changed
        await until(pilot, lambda: len(started) == 1)
        assert started[0]["resume"].name == "step-2" and app.screen is dash
    # a completed run: the refusal of `ftui train --resume`, said in the app, which stays up
    done = _fake_run(tmp_path / "done", "completed", data)
    app = make_app(tmp_path, attach=done)
    async with app.run_test(size=(120, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.status == "completed")
        assert not dash.check_action("resume", ())
        (command,) = [c for c in app.get_system_commands(dash) if c.title == "Resume run"]
        command.callback()  # the palette's command: the same operation, the same refusal
        await until(pilot, lambda: notified(app, "there is nothing to resume"))
        assert app.screen is dash and len(started) == 1


async def test_start_on_a_form_whose_resume_from_checkpoint_names_a_run_resumes_that_run(tmp_path, started):
    """The form told the user to use a shell (ftui train --resume); Start now resumes the run
    the key names, as `ftui train CONFIG.yaml` does, with the form's keys that differ as
    overrides (max_steps here)."""
    from textual.widgets import Button

    data = tmp_path / "qa.json"
    data.write_text(json.dumps(RECORDS[:40], indent=1))
    run = _fake_run(tmp_path, "stopped", data)
    initial = {**yaml.safe_load((run / "config.yaml").read_text()), "max_steps": 6,
               "resume_from_checkpoint": str(run / "checkpoints" / "step-2")}
    app = make_app(tmp_path, initial_config=initial)
    async with app.run_test(size=(120, 40)) as pilot:
        form = app.screen
        await until(pilot, lambda: form.validated and not form.query_one("#start", Button).disabled)
        await pilot.press("f5")
        await until(pilot, lambda: started or app.screen.__class__.__name__ == "Confirm")
        assert started, str(getattr(app.screen, "question", ""))  # the form's own data: nothing to allow
        assert started[0]["resume"].name == "step-2" and started[0]["cfg"].max_steps == 6
        assert Path(started[0]["run"]).resolve() == run.resolve()
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.run_dir.resolve() == run.resolve())
    assert yaml.safe_load((run / "config.yaml").read_text())["max_steps"] == 6  # the override, saved as a resume saves it
