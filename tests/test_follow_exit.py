"""A foreground `ftui train` / `ftui predict` / `ftui eval` / `ftui export` returns once the job's
processes have exited, not as soon as its events end: rank 0 writes run_end, then the
launcher and the supervisor still write in the run directory (the store file removed, the
run-end reserve freed, train.log's last line, and a run_end of the supervisor's own into an
events.jsonl it no longer finds). A script (or a test) that deletes the run right after the
command met "Directory not empty" (seen once in CI, tests/test_resume_honest.py)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

from rich.console import Console

from fixtures_runs import T0
from ftui.cli.following import follow_job, wait_for_exit
from ftui.rundir.events import make_event
from ftui.rundir.paths import EVENTS_FILE, LOCK_FILE

# A stand-in supervisor: holds the job's lock (as ftui.jobs.launch hands it over), says so, then
# writes in the run directory after its run_end is already in the events, and exits.
SUPERVISOR = textwrap.dedent("""
    import fcntl, os, sys, time
    run = sys.argv[1]
    fd = os.open(os.path.join(run, "job.lock"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    with open(os.path.join(run, "written-after-run_end"), "w") as fh:
        fh.write("the supervisor's last words")
""")


def ended_run(root: Path) -> Path:
    run = root / "run"
    run.mkdir()
    (run / LOCK_FILE).touch()
    events = [make_event("run_start", t=T0, run_id="run", engine="single", precision="fp32", method="lora", world_size=1,
                         nodes=1, model="m", total_params=10, trainable_params=1, max_steps=2, planned_tokens_per_step=8),
              make_event("run_end", t=T0 + 5, status="completed", reason="2 steps")]
    (run / EVENTS_FILE).write_text("".join(json.dumps(e) + "\n" for e in events))
    return run


def supervisor(run: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(run), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_the_followed_job_returns_after_its_processes_stopped_writing(tmp_path):
    run = ended_run(tmp_path)
    proc = supervisor(run, 1.0)
    try:
        summary, interrupted = follow_job(run, Console(file=io.StringIO(), width=120))
        assert summary.status == "completed" and not interrupted
        assert (run / "written-after-run_end").exists()  # returned after the supervisor's last write, not at run_end
    finally:
        proc.kill()
        proc.wait()


def test_processes_that_outlive_the_wait_are_said(tmp_path):
    run = ended_run(tmp_path)
    proc = supervisor(run, 60.0)
    try:
        out = io.StringIO()
        wait_for_exit(run, Console(file=out, width=200), timeout_s=0.3)
        assert "its processes still run after 0 s" in out.getvalue()
    finally:
        proc.kill()
        proc.wait()
    quiet = io.StringIO()
    wait_for_exit(run, Console(file=quiet, width=200), timeout_s=0.3)  # the lock is free: no wait, nothing said
    assert quiet.getvalue() == ""
