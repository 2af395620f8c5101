"""The dashboard's state model: folding events, downsampling, smoothing, ETA."""

import pytest

from ftui.events import read_all
from ftui.follow import EtaWindow
from ftui.runs import RunSummary
from ftui.tui.state import RunState, downsample, ema
from tests.fixtures_runs import T0, write_run


def test_downsample_keeps_ends_and_bounds_points():
    xs = list(range(1, 100_001))
    ys = [float(x % 7) for x in xs]
    dx, dy = downsample(xs, ys, 500)
    assert len(dx) == 500 and dx[0] == 1 and dx[-1] == 100_000 and dy[-1] == ys[-1]
    assert downsample([1, 2], [3.0, 4.0], 10) == ([1, 2], [3.0, 4.0])


def test_ema_smooths_and_is_debiased():
    assert ema([2.0, 2.0, 2.0]) == pytest.approx([2.0, 2.0, 2.0])
    out = ema([0.0, 10.0] * 50)
    assert 3 < out[-1] < 7


def test_eta_uses_a_recent_window_and_survives_a_resume():
    eta = EtaWindow(size=5)
    for s in range(1, 11):
        eta.add(100.0 + s * 2.0, s)  # 2 s per step
    assert eta.eta(10, 20) == 20.0
    eta.add(500.0, 5)  # a resume from step 5, much later
    eta.add(501.0, 6)
    assert eta.eta(6, 20) == 14.0  # 1 s per step now, not diluted by the gap


def test_run_state_view_matches_the_events(tmp_path):
    run = write_run(tmp_path, "r", steps=120, max_steps=300)
    state = RunState(RunSummary(run_id="r", path=run, started=T0), clock=lambda: T0 + 500)  # started: launch.json
    state.apply(read_all(run / "events.jsonl"))
    v = state.view()
    last = [e for e in read_all(run / "events.jsonl") if e["event"] == "step"][-1]
    assert (v.step, v.max_steps, v.loss, v.lr, v.mfu) == (120, 300, last["loss"], last["lr"], 0.412)
    assert v.status == "running" and v.elapsed == 500
    assert v.eta == (300 - 120) * 1.5
    assert v.rank_peaks == (14 << 30, 15 << 30)
    assert v.evals == ([50, 100], [v.evals[1][0], v.evals[1][1]]) and len(v.series[0]) == 120
    assert v.avg_tokens_per_s == (120 - 1) * 30_000 / (119 * 1.5)
