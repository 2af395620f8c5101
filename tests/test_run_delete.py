"""Deleting a run (issue 13, item 13): `ftui delete RUN` and runs.delete_run. A live run is
refused, the directory and its run index entry go, the CLI asks unless --yes."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

from conftest import tiny_config
from ftui.rundir.paths import default_runs_root
from ftui.jobs.launch import prepare_run
from ftui.rundir.delete import delete_run, RunDeleteError
from ftui.rundir.index import indexed_run_dirs, run_index_path
from ftui.rundir.listing import list_runs
from tests.fixtures_runs import write_run

import pytest

FTUI = [sys.executable, "-m", "ftui.cli.main"]


def ftui(*args, stdin: str | None = None):
    return subprocess.run([*FTUI, *args], capture_output=True, text=True, timeout=60, input=stdin)


def test_delete_removes_the_directory_and_its_index_entry_and_keeps_the_others(tmp_path):
    saves = tmp_path / "saves"
    gone = prepare_run(tiny_config(tmp_path, output_dir=str(saves), run_name="gone"))
    kept = prepare_run(tiny_config(tmp_path, output_dir=str(saves), run_name="kept"))
    (gone / "train.log").write_text("a run ftui started\n")
    (gone / "checkpoints" / "step-5").mkdir(parents=True)
    (gone / "checkpoints" / "step-5" / "weights").write_bytes(b"x" * 1000)
    (kept / "train.log").write_text("")
    assert {d.name for d in indexed_run_dirs()} == {gone.name, kept.name}
    delete_run(gone)
    assert not gone.exists() and not list(saves.glob(".*"))  # no hidden leftover either
    assert [d.name for d in indexed_run_dirs()] == [kept.name]
    assert str(gone) not in run_index_path().read_text()
    assert [r.run_id for r in list_runs(default_runs_root())] == [kept.name]


def test_a_live_run_is_refused_by_status_and_by_its_job_lock(tmp_path):
    root = tmp_path / "runs"
    other_host = write_run(root, "live-1", steps=3, max_steps=10)  # no run_end, started on another host: live
    with pytest.raises(RunDeleteError, match="running: stop it first"):
        delete_run(other_host)
    locked = write_run(root, "locked-1", steps=3, max_steps=10, end="stopped")
    fd = os.open(locked / "job.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a job started (--resume) after the summary was read
        with pytest.raises(RunDeleteError, match="has a job running"):
            delete_run(locked)
    finally:
        os.close(fd)
    assert other_host.is_dir() and (locked / "events.jsonl").is_file()


def test_a_run_whose_export_or_predict_job_runs_is_refused(tmp_path):
    """An export (or predict, eval) job reads the run's weights from RUN/KIND/ID under its own
    lock: the run is not deleted from under it."""
    run = write_run(tmp_path / "runs", "done-1", steps=3, max_steps=3, end="completed")
    for kind in ("predict", "export"):
        job = run / kind / "20261123-090000"
        job.mkdir(parents=True)
        fd = os.open(job / "job.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # the job's supervisor holds it while the job lives
            with pytest.raises(RunDeleteError, match=f"has a {kind} job running"):
                delete_run(run)
        finally:
            os.close(fd)
    delete_run(run)  # the jobs ended: the run goes
    assert not run.exists()


def test_a_directory_that_is_not_a_run_is_refused(tmp_path):
    odd = tmp_path / "not-a-run"
    odd.mkdir()
    (odd / "config.yaml").write_text("model_name_or_path: x\n")
    with pytest.raises(RunDeleteError, match="does not look like an ftui run"):
        delete_run(odd)
    assert odd.is_dir()


def test_cli_delete_asks_refuses_live_and_unknown_runs(tmp_path):
    root = tmp_path / "runs"
    done = write_run(root, "done-1", steps=3, max_steps=3, end="completed")
    write_run(root, "live-1", steps=3, max_steps=10)
    no = ftui("delete", "done", "--root", str(root))  # stdin not a terminal, no --yes: nothing happens
    assert no.returncode == 1 and "--yes" in no.stderr and done.is_dir()
    live = ftui("delete", "live-1", "--yes", "--root", str(root))
    assert live.returncode == 1 and "stop it first" in live.stderr and (root / "live-1").is_dir()
    unknown = ftui("delete", "nope", "--yes", "--root", str(root))
    assert unknown.returncode == 2 and "no run 'nope'" in unknown.stderr
    yes = ftui("delete", "done", "--yes", "--root", str(root))
    assert yes.returncode == 0 and f"deleted {done}" in yes.stdout and not done.exists()
    assert "delete" in ftui("--help").stdout


def test_cli_delete_asks_on_a_terminal(tmp_path, monkeypatch, capsys):
    from ftui.cli import main as cli

    root = tmp_path / "runs"
    done = write_run(root, "done-1", steps=3, max_steps=3, end="completed")
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", lambda prompt: "n")
    assert cli.main(["delete", "done-1", "--root", str(root)]) == 1 and done.is_dir()
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    assert cli.main(["delete", "done-1", "--root", str(root)]) == 0 and not done.exists()
