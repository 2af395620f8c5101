"""Job kinds described once (ftui.rundir.job_kinds), the job-neutral start event (job_start), the
run_start older jobs wrote (still read), and the one fold every reader folds events through."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from ftui.rundir import job_kinds as kinds
from ftui.rundir.job_kinds import EXAMPLES, KINDS, JobKind, job_dirs, job_kind
from ftui.rundir.event_reader import EventReader, read_all
from ftui.rundir.event_writer import EventWriter
from ftui.rundir.events import TRAIN_JOB, make_event, started_job, validate_event, well_formed
from ftui.rundir.fold import RunFold
from ftui.rundir.follower import summarize_run
from ftui.rundir.formats import fmt_bytes, fmt_duration
from ftui.rundir.listing import list_row
from ftui.rundir.summary import RunSummary

from fixtures_runs import T0, write_run


def predict_job(job: Path, old_format: bool = False) -> Path:
    """A finished predict job's directory, its start written as today (job_start) or as a
    predict job wrote it before job_start existed (a training-shaped run_start carrying job)."""
    job.mkdir(parents=True)
    (job / "config.yaml").write_text("model_name_or_path: m\ndataset: d\n")
    with EventWriter(job / "events.jsonl") as w:
        if old_format:
            w.write("run_start", t=T0, run_id=job.name, job="predict", engine="predict", precision="float32", method="generate",
                    world_size=1, nodes=1, model="m", total_params=10, trainable_params=0, max_steps=4, planned_tokens_per_step=0,
                    examples=4, source="base-1 final", dataset="d", device="cpu")
        else:
            w.write("job_start", t=T0, run_id=job.name, job="predict", source="base-1 final", precision="float32", world_size=1,
                    model="m", total_params=10, examples=4, dataset="d", device="cpu")
        for done in (2, 4):
            w.write("progress", t=T0 + done, done=done, total=4, examples_per_s=1.0, tokens_per_s=50.0)
        w.write("predict", t=T0 + 5, predict_samples=4, predict_bleu_4=12.5)
        w.write("run_end", t=T0 + 6, status="completed", reason="4 examples answered")
    return job


# --- the registry


def test_every_kind_has_its_runner_module_and_its_directory():
    """A kind's ``runner`` is the line ``python -m ftui.runner NAME`` dispatches to, and the
    kinds that run beside a run have the directory ftui.rundir.paths names."""
    from ftui.rundir import paths
    from ftui.runner.__main__ import JOBS  # imports no torch: the table only

    for kind in KINDS.values():
        assert JOBS[kind.name] == kind.runner, kind.name
    assert {k.name: k.dir_name for k in kinds.offline_kinds()} == {
        "predict": paths.PREDICT_DIR, "eval": paths.EVAL_DIR, "export": paths.EXPORT_DIR, "serve": paths.SERVE_DIR}
    assert KINDS[TRAIN_JOB].dir_name is None and KINDS[TRAIN_JOB].trains


def test_a_runs_jobs_are_found_through_the_registry(tmp_path):
    run = tmp_path / "run"
    for rel in ("predict/20260101-000000", "eval/20260101-000001", "export/20260101-000002", "checkpoints/step-1"):
        (run / rel).mkdir(parents=True)
    assert [p.relative_to(run).as_posix() for p in job_dirs(run)] == [
        "predict/20260101-000000", "eval/20260101-000001", "export/20260101-000002"]


@pytest.fixture
def serve_kind(monkeypatch):
    """A new job kind, registered as a test would add one: one JobKind entry (a stand-in in the
    real serve kind's place: the readers know nothing of either)."""
    serve = JobKind("serve", "serve", "ftui.runner.serve:main", "serve a model over HTTP", EXAMPLES, "{tps} tok/s",
                    start_line=lambda e: f"serving {e.get('source')} on port {e.get('port')}",
                    watch_head=lambda e: f"serve {e.get('source')} port={e.get('port')}",
                    result_event="log", result_line=lambda e: f"served: {e.get('message')}")
    monkeypatch.setitem(KINDS, "serve", serve)
    return serve


def test_a_new_kind_is_listed_watched_and_followed_as_its_entry_says(tmp_path, serve_kind):
    """What the runs list, ftui watch and ftui train's display show for a job comes from its
    kind's entry: a kind the readers have never heard of needs no code in them."""
    from ftui.cli.follow import follow_run
    from ftui.cli.watch import watch_run

    job = tmp_path / "run" / "serve" / "s1"
    job.mkdir(parents=True)
    (job / "config.yaml").write_text("model_name_or_path: m\n")
    with EventWriter(job / "events.jsonl") as w:
        w.write("job_start", t=T0, run_id="s1", job="serve", source="base-1 final", precision="bf16", world_size=1, port=8000,
                examples=3)
        w.write("progress", t=T0 + 1, done=3, total=3, tokens_per_s=10.0)
        w.write("log", t=T0 + 2, level="info", message="3 requests")
        w.write("run_end", t=T0 + 3, status="completed", reason="stopped serving")
    assert job_dirs(tmp_path / "run") == [job]

    out = io.StringIO()
    assert watch_run(job, interval=0.01, out=out) == "completed"
    lines = out.getvalue().splitlines()
    assert lines[0] == "s1: serve base-1 final port=8000"
    assert "served: 3 requests" in lines and lines[-1] == "completed: stopped serving"  # no "(step N)": it counts examples

    buffer = io.StringIO()
    summary = follow_run(job, console=Console(file=buffer, width=200), poll_s=0.01)
    text = buffer.getvalue()
    assert "serving base-1 final on port 8000" in text and "served: 3 requests" in text and "loss" not in text
    assert summary.job == "serve" and summary.max_steps == 3

    row = list_row(summarize_run(job))
    assert (row["method"], row["engine"], row["step"], row["status"]) == ("serve", "-", "3/3", "completed")


def test_an_unknown_kind_reads_as_a_job_under_its_own_name():
    kind = job_kind("from-a-newer-ftui")
    assert kind.name == "from-a-newer-ftui" and not kind.trains and kind.dir_name is None


# --- job_start


def test_job_start_is_job_neutral():
    """A job's start names its kind, what it loads, its precision and processes: none of
    training's fields (engine, method, parameters that train, planned steps)."""
    event = make_event("job_start", run_id="p1", job="predict", source="base-1 final", precision="bf16", world_size=2)
    assert validate_event(event) == [] and well_formed(event) and started_job(event) == "predict"
    with pytest.raises(ValueError, match="job_start lacks field 'job'"):
        make_event("job_start", run_id="p1", source="s", precision="bf16", world_size=1)
    assert not well_formed({**event, "job": 3})  # a run directory is untrusted: a job is a word
    assert not well_formed({**event, "examples": "many"})


def test_a_start_event_says_which_job_it_starts():
    train = make_event("run_start", run_id="r", engine="ddp", precision="bf16", method="lora", world_size=1, nodes=1, model="m",
                       total_params=1, trainable_params=1, max_steps=1, planned_tokens_per_step=1)
    assert started_job(train) == TRAIN_JOB
    assert started_job({**train, "job": "export"}) == "export"  # an export job's run_start, before job_start
    assert started_job(make_event("log", level="info", message="x")) is None


@pytest.mark.parametrize("old_format", [False, True], ids=["job_start", "old run_start"])
def test_a_predict_job_reads_the_same_from_either_start(tmp_path, old_format):
    """Runs written before job_start (a predict job's run_start carrying job) are read as
    before: the same summary, the same watch lines, the same runs-list row."""
    from ftui.cli.watch import watch_run

    job = predict_job(tmp_path / "run" / "predict" / "p1", old_format)
    summary = summarize_run(job)
    assert (summary.status, summary.job, summary.step, summary.max_steps, summary.model) == ("completed", "predict", 4, 4, "m")
    out = io.StringIO()
    watch_run(job, interval=0.01, out=out)
    assert out.getvalue().splitlines() == [
        "p1: predict base-1 final float32 dataset=d examples=4",
        "examples 2/4 examples/s 1.00 eta 00:02",
        "examples 4/4 examples/s 1.00 eta 00:00",
        "results: BLEU-4 12.50",
        "completed: 4 examples answered",
    ]
    row = list_row(summary)
    assert (row["method"], row["engine"], row["step"]) == ("predict", "-", "4/4")


def test_the_supervisor_sees_a_jobs_start_after_an_earlier_end(tmp_path):
    """A job_start after a run_end means a job started again (has_run_end reads the last
    lifecycle event: a start or an end)."""
    from ftui.rundir.event_reader import last_lifecycle_event

    job = predict_job(tmp_path / "p1")
    assert last_lifecycle_event(job / "events.jsonl") == "run_end"
    with EventWriter(job / "events.jsonl") as w:
        w.write("job_start", run_id="p1", job="predict", source="s", precision="bf16", world_size=1)
    assert last_lifecycle_event(job / "events.jsonl") == "job_start"


# --- the one fold


def test_a_compact_read_folds_to_what_a_full_read_does(tmp_path):
    """ftui watch and the dashboard read runs of steps as columns, ftui train's display reads
    every event: through RunFold they reach the same step, loss curve and ETA."""
    run = write_run(tmp_path, "r1", steps=120, max_steps=300, as_written=True)
    folds = []
    for compact in (False, True):
        fold = RunFold(RunSummary(run_id="r1", path=run))
        fold.apply_all(EventReader(run / "events.jsonl").read_new(compact=compact))
        folds.append(fold)
    full, compact = folds
    assert (compact.summary.step, compact.summary.max_steps, compact.summary.status) == (120, 300, "running")
    assert list(compact.summary.loss_steps) == list(full.summary.loss_steps)
    assert list(compact.summary.loss_values) == pytest.approx(list(full.summary.loss_values))
    assert compact.eta_s() == pytest.approx(full.eta_s()) == pytest.approx((300 - 120) * 1.5)


def test_the_fold_says_the_data_is_being_prepared_until_the_job_starts(tmp_path):
    fold = RunFold(RunSummary(run_id="p", path=tmp_path))
    fold.apply(make_event("prepare", done=10, total=100))
    assert fold.preparing == "preparing data: 10 / 100 records"
    fold.apply(make_event("job_start", run_id="p", job="eval", source="s", precision="bf16", world_size=1))
    assert fold.preparing is None and fold.summary.status == "running" and fold.summary.job == "eval"


def test_the_dashboard_state_and_the_followers_share_the_fold(tmp_path):
    from ftui.tui.state import RunState

    state = RunState(RunSummary(run_id="r", path=tmp_path))
    assert isinstance(state.fold, RunFold) and state.fold.summary is state.summary and state.eta is state.fold.eta


# --- one of each formatter


def test_sizes_and_durations_read_the_same_everywhere():
    assert [fmt_bytes(n) for n in (None, 512, 3 << 10, 3 << 20, 1 << 30, 15 << 30, 2 << 40)] == [
        "-", "512 B", "3 KiB", "3 MiB", "1.0 GiB", "15.0 GiB", "2.0 TiB"]
    assert [fmt_duration(s) for s in (None, 5, 65, 3725)] == ["--:--", "00:05", "01:05", "1:02:05"]


def test_the_front_ends_share_formatters_without_importing_each_other():
    """The app does not import the CLI (it took fmt_duration from ftui.cli.follow before),
    and the run directory's modules import neither front end."""
    import grimp

    graph = grimp.build_graph("ftui")
    for importer in sorted(graph.modules):
        imported = graph.find_modules_directly_imported_by(importer)
        if importer.startswith("ftui.tui"):
            assert not [m for m in imported if m.startswith("ftui.cli")], importer
        if importer.startswith("ftui.rundir"):
            assert not [m for m in imported if m.startswith(("ftui.cli", "ftui.tui"))], importer


def test_the_runner_imports_no_launcher_listing_or_planner():
    """The runner reads the lower layers only: not ftui.jobs (launch, spawn, export), not the
    runs listing or follower, not the planner (what it needs of them lives in rundir, safety and
    plan.loss_chunks)."""
    import grimp

    graph = grimp.build_graph("ftui")
    banned = ("ftui.jobs", "ftui.cli", "ftui.tui", "ftui.ops", "ftui.rundir.listing", "ftui.rundir.follower",
              "ftui.rundir.delete", "ftui.rundir.resolve", "ftui.plan.planner")
    found = {(m, i) for m in graph.modules if m.startswith("ftui.runner")
             for i in graph.find_modules_directly_imported_by(m) if i.startswith(banned)}
    assert not found


def test_events_files_written_by_jobs_are_all_well_formed(tmp_path):
    job = predict_job(tmp_path / "p")
    events = read_all(job / "events.jsonl")
    assert [e["event"] for e in events] == ["job_start", "progress", "progress", "predict", "run_end"]
    assert all(validate_event(e) == [] for e in events)
    assert json.loads((job / "events.jsonl").read_text().splitlines()[0])["job"] == "predict"


@pytest.mark.parametrize("old_format", [False, True], ids=["job_start", "old run_start"])
def test_the_dashboard_header_of_a_job_names_its_kind(tmp_path, old_format):
    """ftui attach RUN/predict/ID: the header says what the job is (its kind), with no method
    or engine it does not have ("None"), whichever start event the job wrote."""
    from ftui.tui.state import RunState
    from ftui.tui.widgets import RunHeader

    job = predict_job(tmp_path / "p1", old_format)
    state = RunState(RunSummary(run_id="p1", path=job), clock=lambda: T0 + 10)
    state.apply(read_all(job / "events.jsonl"))
    header = RunHeader()
    header.update = lambda text: setattr(header, "shown", text.plain)
    header.show(state.view())
    assert header.shown.endswith(" │ m · predict · float32 · 1×") and "None" not in header.shown
