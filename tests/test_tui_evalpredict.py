"""The Evaluate & Predict screen (issue 16) driven by Textual's pilot on fake job directories
(events.jsonl and the results files written here, as the runner writes them): opening it from
the dashboard, the runs screen and the palette, starting a job (start_job replaced: no model),
progress and Stop, the predictions browser (sort, search, literal text) and the comparison."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
from textual.widgets import Button, DataTable, Input, ProgressBar

from ftui.rundir.events import make_event
from ftui.tui.predictions import Example, pair_examples, shown, visible
from ftui.tui.screens.dashboard import DashboardScreen
from ftui.tui.screens.evalpredict import EvalPredictScreen
from ftui.tui.screens.predictions import CompareScreen, PredictionsScreen
from ftui.tui.screens.runs import RunsScreen
from tests.fixtures_runs import T0, write_run
from tests.test_tui_pilot import make_app, text_of, until

HOSTILE = "[red]x[/] [bold]y \x1b[2J\rz"
ROWS = [
    {"prompt": "What is the capital of France?", "label": "Paris is the capital.", "predict": "Paris is the capital."},
    {"prompt": "Say hello", "label": "hello there friend", "predict": "goodbye"},
    {"prompt": "Markup " + HOSTILE, "label": "the label " + HOSTILE, "predict": "the answer " + HOSTILE},
    {"prompt": "Count to three", "label": "one two three", "predict": "one two four"},
]


def start_event(job_id: str, kind: str, total: int) -> dict:
    return make_event("run_start", t=T0, run_id=job_id, job=kind, engine=kind, precision="float32", method="generate", world_size=1,
                      nodes=1, model="demo", total_params=1000, trainable_params=0, max_steps=total, planned_tokens_per_step=0,
                      examples=total)


def write_job(run: Path, job_id: str, rows: list[dict] | None, kind: str = "predict", end: str | None = "completed",
              source_label: str = "demo final", dataset: str = "ftui_demo", results: dict | None = None, done: int | None = None) -> Path:
    """A job directory as the runner leaves it: job.json, events (run_start, progress, the
    result event, run_end), generated_predictions.jsonl and the results file."""
    job = run / kind / job_id
    job.mkdir(parents=True)
    (job / "job.json").write_text(json.dumps({"job": kind, "source": {"run": str(run)}, "source_label": source_label,
                                              "dataset": dataset, "generation": {}}))
    total = len(rows or [])
    events = [start_event(job_id, kind, total)]
    if kind == "predict":
        events.append(make_event("progress", t=T0 + 5, done=done if done is not None else total, total=total, examples_per_s=2.0, tokens_per_s=50.0))
    if end:
        if rows is not None and kind == "predict":
            (job / "generated_predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        results = results if results is not None else ({"predict_bleu-4": 40.0, "predict_rouge-1": 50.0, "predict_rouge-2": 30.0,
                                                        "predict_rouge-l": 45.0, "predict_samples": total, "complete": True}
                                                       if kind == "predict" else {"step": 10, "eval_loss": 1.2345, "eval_perplexity": 3.44})
        (job / ("predict_results.json" if kind == "predict" else "eval_results.json")).write_text(json.dumps(results))
        events.append(make_event("run_end", t=T0 + 9, status=end, reason=f"{total} examples"))
    (job / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return job


@pytest.fixture
def run(tmp_path):
    run = write_run(tmp_path / "runs", "demo-20231115-090000", steps=30, max_steps=30, end="completed", model="ftui-demo")
    (run / "config.yaml").write_text("model_name_or_path: ftui-demo\ndataset: alpaca_en_demo\ncutoff_len: 128\nmodel_init: random\n")
    (run / "final").mkdir()
    (run / "checkpoints" / "step-20").mkdir(parents=True)
    # a complete checkpoint (Start checks the source as ftui predict does: a damaged one is refused)
    (run / "checkpoints" / "step-20" / "trainer_state.json").write_text('{"global_step": 20}')
    return run


LOCKS: list[int] = []


@pytest.fixture
def fake_start(monkeypatch):
    """start_job without a model: the (kind, job_dir, cfg) it was given, and the job's lock
    held as the supervisor holds it from the job's start to its end (release_locks ends it)."""
    from ftui.jobs import offline

    started = []

    def start_job(kind, job_dir, cfg):
        LOCKS.append(os.open(job_dir / "job.lock", os.O_CREAT | os.O_RDWR))
        fcntl.flock(LOCKS[-1], fcntl.LOCK_EX)
        started.append((kind, job_dir, cfg))

    monkeypatch.setattr(offline, "start_job", start_job)
    yield started
    release_locks()


def release_locks() -> None:
    while LOCKS:
        os.close(LOCKS.pop())


def app_with(tmp_path, run):
    return make_app(tmp_path, attach=run)


async def open_screen(pilot, app) -> EvalPredictScreen:
    await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
    await pilot.press("e")
    await until(pilot, lambda: isinstance(app.screen, EvalPredictScreen) and app.screen.found is not None)
    return app.screen


async def use_own_data(pilot, screen, tmp_path) -> None:
    """The datasets field, once the run's own data has filled it, set to a small file of three records."""
    (tmp_path / "data.json").write_text(json.dumps([{"instruction": "q", "output": "a"}] * 3))
    await until(pilot, lambda: screen.query_one("#ep-dataset", Input).value)
    screen.query_one("#ep-dataset", Input).value = str(tmp_path / "data.json")


# --- pure parts
def test_visible_shows_control_characters_as_escapes():
    assert visible("a\x1b[2J\rb") == "a\\x1b[2J\\rb"
    assert visible("a\nb\tc", one_line=True) == "a⏎b→c"
    assert visible("[red]x[/]") == "[red]x[/]"  # markup is text: shown through rich Text, never parsed


def test_sort_worst_first_and_search():
    rows = [Example(0, "p0", "x", "Alpha", {"bleu-4": 50.0}), Example(1, "p1", "y", "beta", {"bleu-4": 10.0}),
            Example(2, "p2", "z", "gamma", {})]
    assert [r.index for r in shown(rows, "", "bleu-4")] == [1, 0, 2]  # unscored last
    assert [r.index for r in shown(rows, "", None)] == [0, 1, 2]
    assert [r.index for r in shown(rows, "ALPHA", None)] == [0]
    pairs, mismatched = pair_examples(rows, rows[:2])
    assert len(pairs) == 2 and mismatched == 0


# --- the screen
async def test_opens_from_dashboard_runs_screen_and_palette(tmp_path, run):
    app = app_with(tmp_path, run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        assert screen.run_dir == run
        await until(pilot, lambda: screen.query_one("#ep-dataset", Input).value == "alpaca_en_demo")  # the run's own data
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        app.action_show_runs()
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.runs)
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, EvalPredictScreen))
        assert app.screen.run_dir == run
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Evaluate & Predict" in titles


async def test_start_follows_progress_and_stop(tmp_path, run, monkeypatch, fake_start):
    """Start prepares the job (job.json with the form's settings) and starts it; the screen
    follows its progress (examples done / total, ETA), Stop asks stop_run, the end shows the
    figures from the results file."""
    from ftui.jobs import launch

    started, stops = fake_start, []
    monkeypatch.setattr(launch, "stop_run", lambda job_dir, force=False: stops.append(force) or "stop requested")  # under ftui.ops.control.stop
    app = app_with(tmp_path, run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        await use_own_data(pilot, screen, tmp_path)
        screen.query_one("#ep-source").value = "step-20"
        screen.query_one("#ep-max_samples", Input).value = "3"
        screen.query_one("#ep-temperature", Input).value = "0"
        await pilot.press("f5")
        await until(pilot, lambda: started or app._notifications, timeout=20)
        assert started, [n.message for n in app._notifications]
        kind, job_dir, cfg = started[0]
        spec = json.loads((job_dir / "job.json").read_text())
        assert kind == "predict" and job_dir.parent == run / "predict"
        assert spec["source"]["checkpoint"] == "20" and spec["generation"]["temperature"] == 0.0 and cfg.max_samples == 3
        try:  # the job runs: progress events come
            with open(job_dir / "events.jsonl", "a") as fh:
                fh.write(json.dumps(start_event(job_dir.name, "predict", 3)) + "\n")
                fh.write(json.dumps(make_event("progress", t=T0 + 1, done=1, total=3, examples_per_s=0.5)) + "\n")
            await until(pilot, lambda: "1 / 3 examples" in text_of(screen.query_one("#ep-status")))
            assert "ETA 0:00:04" in text_of(screen.query_one("#ep-status"))
            assert screen.query_one("#ep-progress", ProgressBar).progress == 1
            assert not screen.query_one("#ep-stop", Button).disabled
            await pilot.press("f6")
            await pilot.press("y")
            await until(pilot, lambda: stops == [False])
            (job_dir / "predict_results.json").write_text(json.dumps({"predict_bleu-4": 12.5, "predict_samples": 1, "complete": False}))
            with open(job_dir / "events.jsonl", "a") as fh:
                fh.write(json.dumps(make_event("run_end", t=T0 + 2, status="stopped", reason="stopped after 1 of 3 examples")) + "\n")
            await until(pilot, lambda: "predict_bleu-4" in text_of(screen.query_one("#ep-metrics")))
            assert "12.50" in text_of(screen.query_one("#ep-metrics"))
            assert "stopped after 1 of 3" in text_of(screen.query_one("#ep-status"))
            assert screen.query_one("#ep-stop", Button).disabled and not screen.query_one("#ep-browse", Button).disabled
        finally:
            release_locks()


async def test_bad_field_is_refused_with_a_message(tmp_path, run, monkeypatch):
    from ftui.jobs import offline

    started = []
    monkeypatch.setattr(offline, "start_job", lambda *a: started.append(a))
    app = app_with(tmp_path, run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        screen.query_one("#ep-top_p", Input).value = "2"
        await pilot.press("f5")
        await pilot.pause(0.2)
        assert not started and not (run / "predict").exists()
        assert any("top-p" in n.message for n in app._notifications)


async def test_earlier_jobs_open_browse_and_compare(tmp_path, run):
    base = write_job(run, "20240101-000000", [dict(r, predict="nothing at all") for r in ROWS], source_label="demo base",
                     results={"predict_bleu-4": 5.0, "predict_rouge-1": 8.0, "predict_rouge-2": 1.0, "predict_rouge-l": 7.0})
    trained = write_job(run, "20240101-000100", ROWS)
    write_job(run, "20240101-000200", None, kind="eval")
    app = app_with(tmp_path, run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        table = screen.query_one("#ep-jobs", DataTable)
        await until(pilot, lambda: table.row_count == 3)
        table.focus()
        await pilot.press("down", "down", "enter")  # the eval job: its figures
        await until(pilot, lambda: "eval_loss" in text_of(screen.query_one("#ep-metrics")))
        assert "1.2345" in text_of(screen.query_one("#ep-metrics"))
        await pilot.press("up", "up", "space", "down", "space", "f8")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        compare = app.screen
        await until(pilot, lambda: compare.status.plain == "scored")
        title = text_of(compare.query_one("#ex-title"))
        assert "demo base" in title and "demo final" in title and "Δ +38.00" in title  # BLEU-4 40 - 5
        await pilot.press("s")  # by Δ BLEU-4: where B gained least first
        assert compare.sort_metric == "bleu-4"
        deltas = [p.delta("bleu-4") for p in compare.visible_items]
        assert deltas == sorted(deltas)
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is screen)
        await pilot.press("enter")  # the trained job (the cursor's row) is opened ...
        await until(pilot, lambda: screen.job_dir == trained and not screen.query_one("#ep-browse", Button).disabled)
        await pilot.press("f7")  # ... and browsed
        await until(pilot, lambda: isinstance(app.screen, PredictionsScreen))
        assert base.is_dir()


async def test_browser_sorts_searches_and_shows_text_literally(tmp_path, run):
    job = write_job(run, "20240101-000100", ROWS)
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(PredictionsScreen(job))
        screen = app.screen
        await until(pilot, lambda: screen.status.plain == "scored")
        assert [e.index for e in screen.visible_items] == [0, 1, 2, 3]
        await pilot.press("s")  # BLEU-4, worst first
        bleu = [e.scores["bleu-4"] for e in screen.visible_items]
        assert bleu == sorted(bleu) and screen.visible_items[0].index == 1 and screen.visible_items[-1].index == 0
        await pilot.press("s")
        assert screen.sort_metric == "rouge-l"
        await pilot.press("s")
        assert screen.sort_metric is None
        await pilot.press("slash", *"markup")
        await until(pilot, lambda: [e.index for e in screen.visible_items] == [2])
        await pilot.press("enter")
        detail = text_of(screen.query_one("#ex-detail-text"))
        # the markup is shown as typed, the escape and carriage return as escapes
        assert "the answer [red]x[/] [bold]y \\x1b[2J\\rz" in detail and "the label [red]x[/]" in detail
        assert "\x1b" not in detail
        cells = [c.plain for c in screen.query_one("#ex-table", DataTable).get_row_at(0)]
        assert any("[red]x[/]" in c for c in cells)


async def test_compare_refuses_different_datasets(tmp_path, run):
    a = write_job(run, "20240101-000000", ROWS, dataset="one")
    b = write_job(run, "20240101-000100", ROWS, dataset="two")
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        app.push_screen(CompareScreen(a, b))
        await until(pilot, lambda: app.screen.problem is not None)
        assert "not the same dataset" in app.screen.problem and not app.screen.items


def test_browser_snapshot(snap_compare, tmp_path, run):
    """The predictions browser at 100x30: sorted by BLEU-4 worst first, the hostile example
    highlighted (its markup and control characters shown as text)."""
    job = write_job(run, "20240101-000100", ROWS)
    app = make_app(tmp_path)

    async def before(pilot):
        pilot.app.push_screen(PredictionsScreen(job))
        await until(pilot, lambda: pilot.app.screen.status.plain == "scored")
        await pilot.press("s", "down", "down")
        await pilot.pause(0.5)
        await pilot.wait_for_scheduled_animations()

    assert snap_compare(app, terminal_size=(100, 30), run_before=before)


async def test_browser_of_a_job_without_predictions_or_metric_packages(tmp_path, run, monkeypatch):
    """A job still running has no predictions file yet: the browser says so. Without the metric
    packages the examples are listed unscored, with the reason."""
    import ftui.data.text_metrics

    running = write_job(run, "20240101-000000", ROWS, end=None)
    done = write_job(run, "20240101-000100", ROWS)
    app = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        app.push_screen(PredictionsScreen(running))
        await until(pilot, lambda: app.screen.problem is not None)
        assert "not there yet" in app.screen.problem
        app.pop_screen()
        monkeypatch.setattr(ftui.data.text_metrics, "metrics_unavailable", lambda: "nltk is not installed: pip install 'ftui[predict]'")
        app.push_screen(PredictionsScreen(done))
        await until(pilot, lambda: "no per-example scores" in app.screen.status.plain)
        assert len(app.screen.visible_items) == 4 and all(not e.scores for e in app.screen.visible_items)


async def test_eval_job_hides_generation_and_f5_twice_starts_one_job(tmp_path, run, fake_start):
    started = fake_start
    app = app_with(tmp_path, run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        await use_own_data(pilot, screen, tmp_path)
        screen.query_one("#ep-kind").value = "eval"
        await pilot.pause()
        assert not screen.query_one("#ep-row-temperature").display and screen.query_one("#ep-row-nproc").display
        screen.query_one("#ep-source").value = "base"
        await pilot.press("f5", "f5")
        await until(pilot, lambda: started)
        await pilot.press("f5")
        await pilot.pause(0.5)
        assert len(started) == 1 and started[0][0] == "eval" and started[0][1].parent == run / "eval"
        assert json.loads((started[0][1] / "job.json").read_text())["source"]["base"] is True


@pytest.mark.slow  # CI time: tests/test_offline_jobs.py runs real jobs; the screen's tests above follow fake ones
@pytest.mark.dist
async def test_a_real_predict_job_from_the_screen(tmp_path, demo_run):
    """End to end on the trained demo (a copy): Start on the screen runs a real detached predict
    job; the screen follows it to its end and shows its figures, and the browser lists its
    examples, each answered as the demo learnt it (BLEU-4 100)."""
    import shutil

    run = Path(shutil.copytree(demo_run, tmp_path / "runs" / demo_run.name, ignore=shutil.ignore_patterns("predict", "eval")))
    app = make_app(tmp_path, attach=run)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_screen(pilot, app)
        await until(pilot, lambda: screen.query_one("#ep-dataset", Input).value == "ftui_demo")
        for key, value in {"max_samples": "4", "max_new_tokens": "40", "temperature": "0", "batch_size": "2"}.items():
            screen.query_one(f"#ep-{key}", Input).value = value
        await pilot.press("f5")
        await until(pilot, lambda: screen.summary is not None and screen.summary.has_ended, timeout=600)
        assert screen.summary.status == "completed", text_of(screen.query_one("#ep-status"))
        assert "4 / 4 examples" in text_of(screen.query_one("#ep-status"))
        await until(pilot, lambda: "predict_bleu-4" in text_of(screen.query_one("#ep-metrics")))
        await pilot.press("f7")
        await until(pilot, lambda: isinstance(app.screen, PredictionsScreen) and app.screen.status.plain == "scored", timeout=120)
        assert len(app.screen.items) == 4 and all(e.scores["bleu-4"] > 90 for e in app.screen.items)
