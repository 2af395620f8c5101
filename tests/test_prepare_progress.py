"""The preparing phase is visible: tokenizing a big dataset writes `prepare` events (records
done / total), which the dashboard header and `ftui watch` show until the run starts."""

import io
import json

import pytest

from conftest import tiny_config
from ftui.rundir.events import make_event
from ftui.rundir.summary import RunSummary
from ftui.tui.state import RunState
from ftui.tui.widgets import RunHeader
from ftui.cli.watch import watch_run


def test_tokenizing_reports_progress_every_so_often(tmp_path, demo_tokenizer, monkeypatch):
    import ftui.runner.data as data
    from ftui.runner.stages import build_datasets

    records = [{"instruction": f"question {i}", "output": f"answer {i}"} for i in range(200)]
    path = tmp_path / "many.json"
    path.write_text(json.dumps(records))
    monkeypatch.setattr(data, "PROGRESS_EVERY_S", 0.0)  # report at every chance, whatever the machine's speed
    calls = []
    build_datasets(tiny_config(tmp_path, dataset=str(path), max_samples=1000), demo_tokenizer, progress=lambda d, t: calls.append((d, t)))
    assert calls[0] == (0, 200) and calls[-1] == (200, 200)
    assert [d for d, _ in calls[1:-1]] == [64, 128, 192]


@pytest.mark.dist
def test_a_run_writes_prepare_events_and_watch_prints_them(engine_runs):
    run, events = engine_runs("single", "full")  # a run of the session's, on 16 records (CI time)
    prepare = [(e["done"], e["total"]) for e in events if e["event"] == "prepare"]
    assert prepare[0] == (0, 16) and prepare[-1] == (16, 16)
    kinds = [e["event"] for e in events]
    assert kinds.index("prepare") < kinds.index("run_start")
    out = io.StringIO()
    assert watch_run(run, interval=0.1, out=out) == "completed"
    assert "preparing data: 0 / 16 records" in out.getvalue() and "preparing data: 16 / 16 records" in out.getvalue()


def test_the_dashboard_header_shows_preparing_until_the_run_starts(tmp_path):
    state = RunState(RunSummary(run_id="r", path=None, started=1.0), clock=lambda: 10.0)
    state.apply([make_event("prepare", t=2.0, done=50_000, total=200_000)])
    header = RunHeader()
    header.update = lambda text: setattr(header, "shown", text.plain)
    header.show(state.view())
    assert "preparing data: 50,000 / 200,000 records" in header.shown
    state.apply([make_event("prepare", t=3.0, done="many", total="x")])  # a hostile file: no crash
    assert state.view().preparing == "preparing data"
    state.apply([make_event("run_start", t=4.0, run_id="r", engine="ddp", precision="fp32", method="full", world_size=1,
                            nodes=1, model="m", total_params=1, trainable_params=1, max_steps=1, planned_tokens_per_step=1)])
    header.show(state.view())
    assert "preparing" not in header.shown
