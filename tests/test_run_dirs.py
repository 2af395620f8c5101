"""Hostile and unlucky run directories (issue 21): a reused pid, two jobs on one directory,
unreadable and malformed files, special files, very long runs, misleading status words."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import tiny_config, wait_for
from fixtures_runs import T0, write_run
from ftui.cli import main as cli
from ftui.cli import watch
from ftui.rundir.events import make_event
from ftui.jobs import supervise
from ftui.jobs.launch import prepare_run, run_processes, start_run, stop_run
from ftui.rundir.lock import lock_run_dir, RunBusy
from ftui.rundir.follower import earlier_segments, summarize_run
from ftui.rundir.launch_record import write_launch_info
from ftui.rundir.listing import list_runs, RunsRootError
from ftui.rundir.liveness import launcher_gone

FTUI = [sys.executable, "-m", "ftui.cli.main"]


def append(run: Path, *lines: str) -> None:
    with open(run / "events.jsonl", "a") as fh:
        fh.write("".join(line + "\n" for line in lines))


def local_launch(run: Path, **fields) -> None:
    write_launch_info(run, {"host": socket.gethostname(), "start_time": T0, **fields})


# --- item 2: a reused pid is not the run's launcher, and Stop never signals it


@pytest.fixture
def stranger():
    proc = subprocess.Popen(["sleep", "300"])
    yield psutil.Process(proc.pid)
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("record", ["other start time", "no start time recorded"])
def test_a_reused_pid_is_not_the_run(tmp_path, stranger, record):
    run = write_run(tmp_path / "runs", "reused", steps=3, max_steps=10)
    # The supervisor exited and the kernel gave its pid to an unrelated process.
    extra = {"create_time": stranger.create_time() - 100.0} if record == "other start time" else {}
    local_launch(run, pid=stranger.pid, pgid=stranger.pid, **extra)
    assert launcher_gone(run)
    assert summarize_run(run).status == "died"
    assert watch.watch_run(run, interval=0.01, out=io.StringIO()) == "died"
    assert run_processes(run) == (None, [])
    assert stop_run(run) == "the run is not running"
    assert stop_run(run, force=True) == "the run is not running"
    time.sleep(0.2)
    assert stranger.is_running() and stranger.status() != psutil.STATUS_ZOMBIE


def test_the_recorded_launcher_is_still_recognised(tmp_path, stranger):
    run = write_run(tmp_path / "runs", "mine", steps=3, max_steps=10)
    local_launch(run, pid=stranger.pid, create_time=stranger.create_time())
    assert not launcher_gone(run)
    assert summarize_run(run).status == "running"


# --- item 4: one job per run directory


def test_a_second_job_on_a_run_directory_is_refused(tmp_path):
    run = write_run(tmp_path / "runs", "locked", steps=3, max_steps=10, end="stopped")
    fd = lock_run_dir(run)
    try:
        with pytest.raises(RunBusy, match="already has a job running"):
            lock_run_dir(run, wait_s=0.2)
        assert not launcher_gone(run)  # the lock says a job runs, whatever launch.json says
    finally:
        os.close(fd)
    os.close(lock_run_dir(run, wait_s=0.2))  # released with its holder


def test_a_crashed_jobs_lock_does_not_block(tmp_path):
    run = write_run(tmp_path / "runs", "crashed", steps=3, max_steps=10, end="stopped")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from ftui.rundir.lock import lock_run_dir; lock_run_dir(Path(sys.argv[1])); print('held', flush=True); "
                               "time.sleep(300)", str(run)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(RunBusy):
        lock_run_dir(run, wait_s=0.2)
    holder.kill()  # kill -9: the kernel releases the lock with the process
    holder.wait()
    os.close(lock_run_dir(run))


def _resumable_run(tmp_path: Path) -> Path:
    cfg = tiny_config(tmp_path)
    run = prepare_run(cfg)
    ckpt = run / "checkpoints" / "step-2"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({  # what a resume checks before it starts (resume_checks)
        "format": 1, "step": 2, "engine": "single", "world_size": 1, "micro_batch_size": 4, "accumulation": 1, "files": {}}))
    (run / "events.jsonl").write_text(json.dumps(make_event("run_end", t=T0, status="stopped", reason="stopped")) + "\n")
    return run


def test_resuming_a_completed_run_is_refused_saying_how_to_train_further(tmp_path, capsys):
    """A completed run has nothing to resume: a resume ran no step and started the run's record
    again (its start, its duration). Refused, saying how to go on; --set (max_steps) and an
    explicit --checkpoint still resume."""
    run = _resumable_run(tmp_path)
    before = (run / "events.jsonl").read_text().replace('"stopped"', '"completed"')
    (run / "events.jsonl").write_text(before)
    assert summarize_run(run).status == "completed"
    assert cli.main(["train", "--resume", str(run)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "has completed" in err and "nothing to resume" in err and "--set max_steps=N" in err and str(run / "final") in err
    assert (run / "events.jsonl").read_text() == before and not (run / "launch.json").exists()
    # save_strategy: no kept no checkpoint: raising max_steps cannot help, so it is not offered
    shutil.rmtree(run / "checkpoints")
    assert cli.main(["train", "--resume", str(run), "--set", "max_steps=50"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "kept no checkpoint (save_strategy: no)" in err and "--set max_steps" not in err and str(run / "final") in err
    assert (run / "events.jsonl").read_text() == before


@pytest.mark.dist
def test_two_resumes_at_the_same_moment_start_one_job(tmp_path):
    run = _resumable_run(tmp_path)
    cmd = [*FTUI, "train", "--resume", str(run), "--detach"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]
        codes = sorted(code for code, _out, _err in results)
        assert codes[0] == 0 and codes[1] != 0, results
        refused = next(err for code, _out, err in results if code != 0)
        # the lock refuses it, or (the other job's launch.json already written) the run reads as starting again
        assert ("already has a job running" in refused or "is starting: stop it first" in refused) and "Traceback" not in refused
    finally:
        stop_run(run, force=True)
        assert wait_for(lambda: launcher_gone(run), timeout=120)


# --- items 5 and 6: an unreadable or malformed run is listed as such and hides nothing


def _denied(monkeypatch, marker: str) -> None:
    """As root, chmod cannot make a file unreadable: fail the opens a non-owner would fail."""
    real_open, real_stat = os.open, os.stat

    def guarded(fn):
        def call(path, *args, **kwargs):
            if marker in os.fspath(path):
                raise PermissionError(13, "Permission denied", os.fspath(path))
            return fn(path, *args, **kwargs)
        return call

    monkeypatch.setattr(os, "open", guarded(real_open))
    monkeypatch.setattr(os, "stat", guarded(real_stat))


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _events_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _dev_zero(path: Path) -> None:
    path.unlink()
    path.symlink_to("/dev/zero")


UNREADABLE = {
    "launch.json null": (lambda run, mp: (run / "launch.json").write_text("null"), "launch.json"),
    "launch.json a list": (lambda run, mp: (run / "launch.json").write_text("[1, 2]"), "launch.json"),
    "launch.json string pid": (lambda run, mp: (run / "launch.json").write_text('{"pid": "123"}'), "pid"),
    "launch.json NaN first start": (lambda run, mp: (run / "launch.json").write_text('{"start_time": 1e9, "first_start_time": NaN}'),
                                    "first_start_time"),
    "events.jsonl a directory": (lambda run, mp: _events_dir(run / "events.jsonl"), "directory"),
    "events.jsonl a FIFO": (lambda run, mp: _fifo(run / "events.jsonl"), "FIFO"),
    "events.jsonl -> /dev/zero": (lambda run, mp: _dev_zero(run / "events.jsonl"), "not a regular file"),
    "events.jsonl unreadable": (lambda run, mp: _denied(mp, "bad/events.jsonl"), "Permission denied"),
    "another user's run directory": (lambda run, mp: _denied(mp, "bad/"), "another user's run"),
}


@pytest.fixture
def three_runs(tmp_path):
    root = tmp_path / "runs"
    write_run(root, "good-a", steps=5, max_steps=5, end="completed")
    write_run(root, "good-b", steps=4, max_steps=9, end="stopped")
    bad = write_run(root, "bad", steps=3, max_steps=10)  # no run_end: launch.json decides
    local_launch(bad)
    return root, bad


@pytest.mark.timeout(60)  # a FIFO used to hang the readers
@pytest.mark.parametrize("corruption", list(UNREADABLE))
def test_an_unreadable_run_is_listed_with_its_reason(three_runs, monkeypatch, capsys, corruption):
    root, bad = three_runs
    corrupt, why = UNREADABLE[corruption]
    corrupt(bad, monkeypatch)
    runs = {r.run_id: r for r in list_runs(root)}
    assert runs["good-a"].status == "completed" and runs["good-b"].status == "stopped"
    assert runs["bad"].status == "unreadable" and why in runs["bad"].reason
    assert cli.main(["runs", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "good-a" in out and "good-b" in out and "bad: unreadable: " in out and why in out
    if corruption != "another user's run directory":  # that one cannot even be resolved
        assert cli.main(["watch", "bad", "--root", str(root), "--interval", "0.01"]) == 1
        assert "unreadable" in capsys.readouterr().out
    assert cli.main(["train", "--resume", "bad", "--runs-root", str(root)]) == 2
    err = capsys.readouterr().err
    assert ("unreadable" in err or "cannot be read" in err) and "Traceback" not in err


MALFORMED = {
    "loss as a string": '{"v":1,"t":%f,"event":"step","step":6,"loss":"NaN","lr":0.1}',
    "step as a string": '{"v":1,"t":%f,"event":"step","step":"abc","loss":1.0}',
    "a step with no fields": '{"v":1,"t":%f,"event":"step"}',
    "eval_loss as a string": '{"v":1,"t":%f,"event":"eval","step":5,"eval_loss":"low"}',
    "max_steps as a string": '{"v":1,"t":%f,"event":"run_start","run_id":"x","engine":"ddp","precision":"bf16","method":"lora",'
                             '"world_size":1,"nodes":1,"model":"m","total_params":1,"trainable_params":1,"max_steps":"ten",'
                             '"planned_tokens_per_step":1}',
    "a huge step number": '{"v":1,"t":%f,"event":"step","step":1' + "0" * 30 + ',"epoch":0,"loss":1.0}',
    "mem of the wrong shape": '{"v":1,"t":%f,"event":"step","step":6,"loss":1.0,"mem":[{"rank":"x","peak":[]}]}',
}


def test_a_resumed_run_reads_as_starting_until_its_run_start_is_written(tmp_path):
    """`ftui train --resume RUN --detach` then at once `ftui runs` / `ftui watch RUN`: the events
    still end with the previous run_end while the resumed job loads its model; launch.json,
    written after that end by a job that lives, says the run is starting again (it read as
    stopped, and watch printed the old end and exited 1)."""
    run = write_run(tmp_path / "runs", "again", steps=5, max_steps=10, end="stopped")
    fd = lock_run_dir(run)  # the resumed job's supervisor holds the run's lock while it lives
    try:
        local_launch(run, start_time=time.time())
        summary = summarize_run(run)
        assert (summary.status, summary.reason) == ("starting", None)
        assert [r.status for r in list_runs(tmp_path / "runs")] == ["starting"]
    finally:
        os.close(fd)
    assert summarize_run(run).status == "stopped"  # its job gone before its run_start: the previous end stands


def test_runs_says_why_a_run_failed_under_the_table(tmp_path, capsys):
    root = tmp_path / "runs"
    write_run(root, "oom", steps=3, max_steps=10, end="failed")
    write_run(root, "fine", steps=5, max_steps=5, end="completed")
    assert cli.main(["runs", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert ("oom: failed: OutOfMemoryError: CUDA out of memory (halve per_device_train_batch_size and double "
            "gradient_accumulation_steps, or use preset zero3)") in out
    assert "fine: completed" not in out


@pytest.mark.parametrize("line", list(MALFORMED))
def test_an_event_of_the_wrong_shape_is_skipped(tmp_path, capsys, line):
    root = tmp_path / "runs"
    run = write_run(root, "odd", steps=5, max_steps=10)
    append(run, MALFORMED[line] % (T0 + 100), json.dumps(make_event("run_end", t=T0 + 101, status="completed", reason="done")))
    summary = summarize_run(run)
    assert (summary.status, summary.step, summary.max_steps) == ("completed", 5, 10)
    assert cli.main(["runs", "--root", str(root)]) == 0
    assert cli.main(["watch", "odd", "--root", str(root), "--interval", "0.01"]) == 0
    assert "completed" in capsys.readouterr().out


def test_an_unreadable_runs_root_is_an_error_not_a_traceback(tmp_path, monkeypatch, capsys):
    root = tmp_path / "home" / "runs"
    write_run(root, "r", steps=2, max_steps=2, end="completed")
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda p=".": (_ for _ in ()).throw(PermissionError(13, "Permission denied"))
                        if "home" in os.fspath(p) else real(p))
    with pytest.raises(RunsRootError):
        list_runs(root)
    assert cli.main(["runs", "--root", str(root)]) == 1
    assert "cannot list the runs root" in capsys.readouterr().err


@pytest.mark.timeout(120)
async def test_the_app_lists_and_attaches_unreadable_runs(tmp_path):
    from fixtures_runs import fixed_sampler
    from ftui.tui.app import FtuiApp
    from ftui.tui.screens.dashboard import DashboardScreen
    from ftui.tui.screens.runs import RunsScreen

    root = tmp_path / "runs"
    write_run(root, "good", steps=5, max_steps=5, end="completed")
    for name, corrupt in (("fifo", _fifo), ("dir", _events_dir), ("zero", _dev_zero)):
        run = write_run(root, name, steps=3, max_steps=10)
        corrupt(run / "events.jsonl")
    bad_launch = write_run(root, "nulllaunch", steps=3, max_steps=10)
    (bad_launch / "launch.json").write_text("null")
    (bad_launch / "train.log").unlink()
    os.mkfifo(bad_launch / "train.log")  # the log tail must not hang either
    app = FtuiApp(root, sampler=fixed_sampler, render_examples=False)  # offers live runs at start: reads every run
    async with app.run_test(size=(120, 30)) as pilot:
        app.action_show_runs()
        deadline = time.monotonic() + 60
        while not (isinstance(app.screen, RunsScreen) and len(app.screen.runs) == 5) and time.monotonic() < deadline:
            await pilot.pause(0.2)
        statuses = {r.run_id: r.status for r in app.screen.runs}
        assert statuses == {"good": "completed", "fifo": "unreadable", "dir": "unreadable", "zero": "unreadable",
                            "nulllaunch": "unreadable"}
        for name in ("fifo", "nulllaunch"):
            app.open_dashboard(root / name)
            while not (isinstance(app.screen, DashboardScreen) and app.screen.view is not None
                       and app.screen.view.status == "unreadable") and time.monotonic() < deadline:
                await pilot.pause(0.2)
            assert app.screen.view.status == "unreadable" and app.screen.view.reason
            app.pop_screen()


@pytest.mark.timeout(120)
async def test_the_app_starts_and_says_so_when_the_runs_root_is_unreadable(tmp_path, monkeypatch):
    from fixtures_runs import fixed_sampler
    from ftui.tui.app import FtuiApp
    from ftui.tui.screens.runs import RunsScreen

    root = tmp_path / "home" / "runs"
    write_run(root, "r", steps=2, max_steps=2, end="completed")
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda p=".": (_ for _ in ()).throw(PermissionError(13, "Permission denied"))
                        if "home" in os.fspath(p) else real(p))
    app = FtuiApp(root, sampler=fixed_sampler, render_examples=False)  # offers live runs at start: lists the root
    async with app.run_test(size=(120, 30)) as pilot:
        app.action_show_runs()
        deadline = time.monotonic() + 60
        title = ""
        while "cannot list the runs root" not in title and time.monotonic() < deadline:
            await pilot.pause(0.2)
            if isinstance(app.screen, RunsScreen):
                title = str(app.screen.query_one("#runs-title").render())
        assert "cannot list the runs root" in title and app.screen.runs == []


# --- item 7: a long run is summarised from a bounded read


@pytest.fixture
def counted_reads(monkeypatch):
    total = [0]
    real = os.pread

    def pread(fd, n, offset):
        data = real(fd, n, offset)
        total[0] += len(data)
        return data

    monkeypatch.setattr(os, "pread", pread)
    return total


@pytest.fixture
def long_run(tmp_path):
    """A finished run that was stopped at step 600 and resumed from 500 to 1500."""
    root = tmp_path / "runs"
    run = write_run(root, "long", steps=600, max_steps=1500, end="stopped")
    resumed = make_event("run_start", t=T0 + 5000, run_id="long", engine="ddp", precision="bf16", method="lora", world_size=2,
                         nodes=1, model="Qwen/Qwen2.5-0.5B", total_params=1, trainable_params=1, max_steps=1500,
                         planned_tokens_per_step=1, resumed_from_step=500)
    lines = [json.dumps(resumed)]
    for s in range(501, 1501):
        lines.append(json.dumps(make_event("step", t=T0 + 5000 + s, step=s, epoch=s / 100, loss=0.5 + 1 / s, lr=1e-4,
                                           grad_norm=1.0, tokens=10, trainable_tokens=5, tokens_per_s=10.0, step_time_s=1.0,
                                           mfu=None, loss_scale=None, mem=[{"rank": 0, "allocated": 1, "reserved": 1, "peak": 1}])))
    append(run, *lines)
    return root, run, (run / "events.jsonl").stat().st_size


def test_the_summary_of_a_long_run_reads_its_head_and_tail_only(long_run, counted_reads, monkeypatch):
    import ftui.rundir.follower as follower

    root, run, size = long_run
    monkeypatch.setattr(follower, "SUMMARY_HEAD", 8 << 10)
    monkeypatch.setattr(follower, "SUMMARY_TAIL", 32 << 10)
    append(run, json.dumps(make_event("run_end", t=T0 + 9000, status="completed", reason="1500 steps")))
    summary = summarize_run(run)
    assert counted_reads[0] < (8 << 10) + (32 << 10) + (64 << 10) + 4096 < size // 4
    assert (summary.status, summary.step, summary.max_steps, summary.model) == ("completed", 1500, 1500, "Qwen/Qwen2.5-0.5B")
    assert summary.last_loss == pytest.approx(0.5 + 1 / 1500)
    assert summary.started == T0  # from launch.json, not from a full read
    counted_reads[0] = 0
    full = summarize_run(run, full=True)  # the runs screen's overlay: the whole curve, on demand
    assert counted_reads[0] >= size and full.loss_steps[-1] == 1500 and len(full.loss_steps) == 1500


def test_the_supervisors_final_check_reads_the_tail_only(long_run, counted_reads, monkeypatch):
    import ftui.rundir.event_reader as event_reader

    _root, run, size = long_run
    monkeypatch.setattr(event_reader, "LIFECYCLE_TAIL", 32 << 10)
    # The earlier job's run_end (stopped at 600) is not this job's: the resumed job has none yet.
    assert not supervise.has_run_end(run)
    append(run, json.dumps(make_event("run_end", t=T0 + 9000, status="completed", reason="1500 steps")))
    assert supervise.has_run_end(run)
    assert counted_reads[0] < 2 * ((32 << 10) + (64 << 10) + 8192) < size


def test_watch_of_a_long_finished_run_reads_a_bounded_part(long_run, counted_reads, monkeypatch):
    _root, run, size = long_run
    monkeypatch.setattr(watch, "HEAD_BYTES", 8 << 10)
    monkeypatch.setattr(watch, "TAIL_BYTES", 32 << 10)
    append(run, json.dumps(make_event("run_end", t=T0 + 9000, status="completed", reason="1500 steps")))
    out = io.StringIO()
    assert watch.watch_run(run, interval=0.01, out=out) == "completed"
    assert counted_reads[0] < (8 << 10) + (32 << 10) + 16384 < size // 4
    text = out.getvalue()
    assert "max_steps=1500" in text and "step 1500/1500" in text and "earlier events not shown" in text


def test_the_reader_never_reads_more_than_its_cap(tmp_path, counted_reads, monkeypatch):
    import ftui.rundir.run_files as run_files
    from ftui.rundir.event_reader import EventReader

    monkeypatch.setattr(run_files, "MAX_READ", 4096)
    monkeypatch.setattr(run_files, "MAX_LINE", 10_000)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"x" * 50_000 + b"\n" + json.dumps(make_event("log", t=T0, level="info", message="hi")).encode() + b"\n")
    reader = EventReader(path)
    assert reader.read_new(1 << 30) == [] and counted_reads[0] == 4096
    assert [e["message"] for e in reader.read_new()] == ["hi"]
    assert len(reader._pending) <= 10_000


# --- item 11: status words


def test_no_launch_record_and_no_run_end_read_the_same_everywhere(tmp_path):
    run = write_run(tmp_path / "runs", "orphan", steps=3, max_steps=10)
    (run / "launch.json").unlink()
    assert summarize_run(run).status == "died"
    assert launcher_gone(run)  # what attach and the follower decide with
    assert watch.watch_run(run, interval=0.01, out=io.StringIO()) == "died"
    fd = lock_run_dir(run)  # a job that holds the lock but has not written launch.json yet
    try:
        assert summarize_run(run).status == "running" and not launcher_gone(run)
    finally:
        os.close(fd)


@pytest.mark.dist
def test_a_stop_right_after_launch_ends_stopped(tmp_path):
    cfg = tiny_config(tmp_path, max_steps=5000)
    run = prepare_run(cfg)
    start_run(run, cfg)
    assert stop_run(run).startswith("asked the launcher to stop")
    assert wait_for(lambda: launcher_gone(run), timeout=300)
    summary = summarize_run(run)
    assert summary.status == "stopped", (summary.reason, summary.hint)
    assert "kill -9" not in (summary.hint or "") and "out of host memory" not in (summary.hint or "")


def test_a_nodes_supervisor_records_how_each_of_its_jobs_ended(tmp_path):
    """Node K > 0 keeps its own records in RUN/nodes/node-K, where no rank writes events: its
    supervisor writes one run_end per job, also after an earlier job's (a resumed multi-node run)."""
    from ftui.rundir.event_reader import read_all
    from ftui.rundir.paths import node_dir

    home = node_dir(tmp_path, 1)
    assert home == tmp_path / "nodes" / "node-1" and node_dir(tmp_path, 0) == tmp_path
    home.mkdir(parents=True)
    import signal

    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGXFSZ)}  # main() sets them
    try:
        for code in (0, 3):
            assert supervise.main([str(home), "--node-rank", "1", "--", sys.executable, "-c", f"raise SystemExit({code})"]) == code
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)
    ends = [e for e in read_all(home / "events.jsonl") if e["event"] == "run_end"]
    assert [e["status"] for e in ends] == ["completed", "failed"] and "node 1" in ends[1]["reason"]


def test_a_died_run_lasted_to_its_last_event_and_a_resumed_run_counts_its_segments(tmp_path, capsys):
    """A run that died without run_end stopped at its last event: its duration stays there (it
    grew with the clock, to days for a run dead since). A resumed run is listed from its first
    start and for the time its segments ran, not the day it sat stopped between them."""
    root = tmp_path / "runs"
    dead = write_run(root, "dead", steps=10, max_steps=20)  # no run_end
    local_launch(dead)  # on this machine, with no launcher alive
    fd = lock_run_dir(dead)  # as `ftui train --resume` holds it while it starts the job: the run reads as running
    try:
        assert earlier_segments(dead) == {"first_start_time": T0, "earlier_s": 20 + 10 * 1.5}
    finally:
        os.close(fd)
    append(dead, '{"v":1,"t":1e400,"event":"log","level":"info","message":"an infinite time"}')  # an untrusted file
    dead = summarize_run(dead)
    assert dead.status == "died" and dead.duration == 20 + 10 * 1.5
    run = write_run(root, "again", steps=10, max_steps=20, end="stopped")  # ran from T0 to T0 + 36
    carried = earlier_segments(run)
    assert carried == {"first_start_time": T0, "earlier_s": 36.0}
    later = T0 + 86400
    local_launch(run, start_time=later, **carried)  # the resume's launch.json
    append(run, json.dumps(make_event("run_start", t=later + 5, run_id="again", engine="ddp", precision="bf16", method="lora",
                                      world_size=2, nodes=1, model="m", max_steps=20, resumed_from_step=10, total_params=1,
                                      trainable_params=1, planned_tokens_per_step=1)),
           json.dumps(make_event("run_end", t=later + 30, status="completed", reason="20 steps")))
    summary = summarize_run(run)
    assert summary.first_start == T0 and summary.started == later and summary.duration == 36 + 30
    assert cli.main(["runs", "--root", str(root)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("again"))
    assert row.split()[-3:] == [*time.strftime("%Y-%m-%d %H:%M", time.localtime(T0)).split(), "01:06"]
    assert earlier_segments(run) == {"first_start_time": T0, "earlier_s": 66.0}  # a second resume adds this segment
