"""The dashboard's state model: folding events, downsampling, smoothing, ETA."""

import pytest

from ftui.rundir.event_reader import EventReader, read_all, StepColumns
from ftui.rundir.fold import EtaWindow
from ftui.rundir.summary import RunSummary
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


def test_elapsed_counts_a_resumed_runs_earlier_segments_and_stops_where_a_died_run_stopped(tmp_path):
    """The header's elapsed is the runs list's duration: a resumed run's earlier segments
    (launch.json's earlier_s) count; a run that died stopped at its last step (read as
    columns, the long-run path), it does not go on with the clock."""
    run = write_run(tmp_path, "r", steps=120, max_steps=300, as_written=True)
    summary = RunSummary(run_id="r", path=run)
    summary.take_launch({"start_time": T0, "first_start_time": T0 - 9000, "earlier_s": 100.0})
    state = RunState(summary, clock=lambda: T0 + 500)
    batch = EventReader(run / "events.jsonl").read_new(compact=True)
    assert any(type(e) is StepColumns for e in batch)
    state.apply(batch)
    assert state.view().elapsed == 100 + 500 and summary.first_start == T0 - 9000
    summary.mark_died()
    assert state.view().elapsed == 100 + 20 + 120 * 1.5


def test_a_died_runs_elapsed_ignores_an_implausible_step_time_read_as_columns(tmp_path):
    """Step lines read as columns take their time with float(): ``"t":1e400`` is infinite.
    The run stopped at the newest plausible time read (a column's last), as the runs list
    takes event times (RunSummary.note_time)."""
    from array import array

    summary = RunSummary(run_id="r", path=tmp_path, started=T0)
    state = RunState(summary, clock=lambda: T0 + 500)
    columns = lambda ts, steps: StepColumns(array("d", ts), array("l", steps), array("d", [1.0] * len(ts)),  # noqa: E731
                                            array("d", [float("nan")] * len(ts)))
    state.apply([columns([T0 + 1, T0 + 2], [1, 2]), columns([T0 + 3, float("inf")], [3, 4])])
    summary.mark_died()
    assert state.view().elapsed == 2


def test_the_recent_view_is_the_last_200_steps_whatever_the_logging_interval(tmp_path):
    """`w`'s "last 200 steps": a run that logs every 10 steps shows steps 810-1000, not 200
    logged points (2,000 steps); the lr and a stage's figures follow the same window."""
    from tests.fixtures_runs import dpo_figures

    run = write_run(tmp_path, "r", steps=1000, max_steps=2000, every=10, step_extras=dpo_figures)
    state = RunState(RunSummary(run_id="r", path=run, started=T0), clock=lambda: T0 + 500)
    state.apply(read_all(run / "events.jsonl"))
    v = state.view()
    assert v.recent[0] == list(range(810, 1001, 10)) and v.lr_recent[0] == v.recent[0]
    assert v.figure_recent["rewards_margin"][0] == v.recent[0] and len(v.series[0]) == 100


def _resumed_events():
    ev = [{"v": 1, "t": T0, "event": "run_start", "run_id": "r", "max_steps": 10}]
    ev += [{"v": 1, "t": T0 + s, "event": "step", "step": s, "loss": 10.0 - s, "lr": 0.1 * s} for s in range(1, 7)]
    ev += [{"v": 1, "t": T0 + 6, "event": "eval", "step": 6, "eval_loss": 3.0}]
    ev += [{"v": 1, "t": T0 + 7, "event": "run_end", "status": "failed", "reason": "boom", "hint": "h"}]
    ev += [{"v": 1, "t": T0 + 100, "event": "run_start", "run_id": "r", "max_steps": 10, "resumed_from_step": 4}]
    ev += [{"v": 1, "t": T0 + 100 + s, "event": "step", "step": s, "loss": 20.0 + s, "lr": 1.0 * s} for s in (5, 6, 7)]
    return ev


def test_a_resumed_run_replaces_the_steps_after_its_checkpoint():
    ev = _resumed_events()
    state = RunState(RunSummary(run_id="r", path=None, started=T0), clock=lambda: T0 + 200)
    state.apply(ev)
    v = state.view()
    assert v.status == "running" and v.reason is None and v.hint is None
    assert v.series[0] == [1, 2, 3, 4, 5, 6, 7]
    assert v.series[1] == [9.0, 8.0, 7.0, 6.0, 25.0, 26.0, 27.0]
    assert v.evals == ([], [])  # the eval at step 6 belonged to the abandoned stretch
    assert v.lr_series == ([1, 2, 3, 4, 5, 6, 7], pytest.approx([0.1, 0.2, 0.3, 0.4, 5.0, 6.0, 7.0]))

    # Attach to a long run reads the tail first, then prepends the head: same result.
    head = RunState(RunSummary(run_id="r", path=None, started=T0))
    head.apply(ev[:9])
    tail = RunState(RunSummary(run_id="r", path=None, started=T0), clock=lambda: T0 + 200)
    tail.apply(ev[9:])
    tail.prepend(head)
    assert tail.view().series == v.series and tail.view().lr_series == v.lr_series


def folded_both_ways(path, chunk: int) -> tuple[RunState, RunState]:
    """The events of ``path`` folded from full events, and from compact reads of ``chunk``
    bytes (runs of step lines as columns, as the dashboard reads them)."""
    from ftui.rundir.event_reader import EventReader

    full = RunState(RunSummary(run_id="r", path=path.parent))
    full.apply(read_all(path))
    compact = RunState(RunSummary(run_id="r", path=path.parent))
    reader = EventReader(path)
    while batch := reader.read_new(chunk, compact=True):
        compact.apply(batch)
    return full, compact


def test_the_learning_rate_curve_is_the_same_from_compact_reads(tmp_path):
    """The dashboard reads runs of step lines as columns (EventReader compact): the learning
    rate rides along, so the lr view of a long run has every step, not one per batch."""
    from ftui.rundir.event_writer import EventWriter
    from tests.test_events import step_fields

    path = tmp_path / "events.jsonl"
    with EventWriter(path) as w:
        for s in range(1, 201):
            w.write("step", **step_fields(step=s, loss=1.0 / s, lr=1e-4 * s / 200))
    full, compact = folded_both_ways(path, 2048)
    assert compact.view().lr_series == full.view().lr_series
    assert len(full.view().lr_series[0]) == 200 and compact.view().lr_recent == full.view().lr_recent


def test_a_preference_runs_figures_are_followed_over_the_run_from_compact_reads(tmp_path):
    """Issue 15: a step event's extra figures (a DPO run's rewards_margin, ...) become series as
    the loss does, also when the dashboard reads runs of step lines as columns (the reader
    then parses such a file's step lines in full); an eval's eval_NAME is NAME's eval point."""
    from tests.fixtures_runs import dpo_figures

    run = write_run(tmp_path, "dpo", steps=240, max_steps=600, step_extras=dpo_figures,
                    eval_extras=lambda s: dpo_figures(s, "eval_"), as_written=True)
    for state in folded_both_ways(run / "events.jsonl", 4096):
        v = state.view()
        assert v.figure_names == ["rewards_chosen", "rewards_rejected", "rewards_margin", "rewards_accuracy",
                                  "logps_chosen", "logps_rejected"]
        xs, ys = v.figure_series["rewards_margin"]
        assert xs == list(range(1, 241)) and ys == [dpo_figures(s)["rewards_margin"] for s in xs]
        assert v.figure_evals["rewards_margin"] == ([50, 100, 150, 200], [dpo_figures(s)["rewards_margin"] for s in (50, 100, 150, 200)])
        assert v.figure_recent["rewards_accuracy"][0] == list(range(41, 241))  # the last recent_steps (200)


def test_a_sft_run_has_no_figure_series_and_keeps_its_compact_read(tmp_path):
    from ftui.rundir.event_reader import EventReader, StepColumns

    run = write_run(tmp_path, "sft", steps=120, max_steps=300, as_written=True)
    batch = EventReader(run / "events.jsonl").read_new(compact=True)
    assert any(type(e) is StepColumns for e in batch)  # a million-step sft run still attaches fast
    state = RunState(RunSummary(run_id="sft", path=run))
    state.apply(batch)
    assert state.view().figure_names == [] and state.view().figure_evals == {}


def test_a_resumed_preference_run_replaces_its_figures_after_the_checkpoint():
    ev = _resumed_events()
    for e in ev:
        if e["event"] in ("step", "eval"):
            e["rewards_margin" if e["event"] == "step" else "eval_rewards_margin"] = e.get("loss", e.get("eval_loss"))
    state = RunState(RunSummary(run_id="r", path=None, started=T0))
    state.apply(ev)
    v = state.view()
    assert v.figure_series["rewards_margin"] == v.series and v.figure_evals["rewards_margin"] == ([], [])
    head = RunState(RunSummary(run_id="r", path=None, started=T0))
    head.apply(ev[:9])
    tail = RunState(RunSummary(run_id="r", path=None, started=T0))
    tail.apply(ev[9:])
    tail.prepend(head)
    assert tail.view().figure_series == v.figure_series


def test_figure_series_are_bounded_and_listed_with_the_preferred_first():
    from ftui.tui.state import MAX_FIGURE_SERIES, ordered_figures

    ev = [{"v": 1, "t": T0 + s, "event": "step", "step": s, "loss": 1.0, f"figure_{s}": 1.0} for s in range(1, 40)]
    state = RunState(RunSummary(run_id="r", path=None))
    state.apply(ev)
    assert len(state.view().figure_names) == MAX_FIGURE_SERIES  # names that keep changing cannot grow it without bound
    assert ordered_figures(["kl", "eval_rewards_accuracy", "rewards_margin"]) == ["rewards_margin", "eval_rewards_accuracy", "kl"]
