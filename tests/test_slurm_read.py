"""Reading a Slurm run from the login node (a fake scontrol/scancel on PATH): queued, running,
ended as Slurm says, never died while Slurm runs it; Stop through scancel; ``ftui runs`` and
``ftui watch`` lines. The real-cluster check is at the end (the ``slurm_cluster`` fixture)."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ftui.ops import errors
from ftui.ops.control import is_running, stop
from ftui.ops.lookup import refuse_live
from ftui.rundir.events import make_event
from ftui.rundir.follower import RunFollower, summarize_run
from ftui.rundir.liveness import launcher_gone
from ftui.rundir.slurm_end import read_slurm_end
from ftui.rundir.summary import RunSummary
from tests.fake_slurm import fake_slurm  # noqa: F401  (a fixture)

T0 = time.time() - 600
JOB = "12"


def slurm_run(root: Path, name: str = "r1", job_id: str = JOB, start: float = T0, **launch) -> Path:
    """A run submitted to Slurm from another host (the login node), as slurm-submit writes it."""
    run = root / name
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.yaml").write_text("model_name_or_path: tiny\nfinetuning_type: lora\n")
    record = {"scheduler": {"kind": "slurm", "job_id": job_id, "cluster": "ftuitest", "submit_host": "login1",
                            "submitted": T0, "script": "slurm.sh"},
              "host": "login1", "start_time": start, "command": ["sbatch", "--parsable", "slurm.sh"]}
    record.update(launch)
    (run / "launch.json").write_text(json.dumps(record))
    (run / "events.jsonl").touch()
    return run


def add_events(run: Path, *events: dict) -> None:
    with open(run / "events.jsonl", "a") as fh:
        for e in events:
            fh.write(json.dumps(e) + "\n")


def run_start(t: float) -> dict:
    return make_event("run_start", t=t, run_id="r1", engine="ddp", precision="fp32", method="lora", world_size=2,
                      nodes=1, model="tiny", total_params=10, trainable_params=1, max_steps=10, planned_tokens_per_step=8)


def step(t: float, n: int) -> dict:
    return make_event("step", t=t, step=n, epoch=0.1 * n, loss=2.0 - n / 10, lr=1e-4, grad_norm=1.0, tokens=8,
                      trainable_tokens=4, tokens_per_s=8.0, step_time_s=1.0, mfu=None, loss_scale=None, mem=[])


def run_end(t: float, status: str) -> dict:
    return make_event("run_end", t=t, status=status, reason=f"{status} at step 3")


def test_queued_then_running_then_completed(tmp_path, fake_slurm):
    run = slurm_run(tmp_path)
    fake_slurm.set(JOB, "pending_resources")
    s = summarize_run(run)
    assert (s.status, s.queue_reason, s.slurm_job, s.slurm_state) == ("queued", "Resources", JOB, "PENDING")
    assert s.queue_start is not None and s.live and not launcher_gone(run)
    fake_slurm.set(JOB, "running")
    assert summarize_run(run).status == "starting"  # Slurm runs it, no run_start yet
    slurm_run(tmp_path, start=T0 + 30, host="n1", nodes=["n1", "n2"], pid=4242, restarts=0)  # node 0's launch.json
    add_events(run, run_start(T0 + 40), step(T0 + 50, 1))
    s = summarize_run(run)
    assert (s.status, s.nodes, s.queue_reason) == ("running", ["n1", "n2"], None)
    add_events(run, run_end(T0 + 60, "completed"))
    fake_slurm.set(JOB, "completed")
    assert summarize_run(run).status == "completed"
    assert launcher_gone(run)


def test_timeout_without_run_end_reads_cancelled_and_is_kept(tmp_path, fake_slurm):
    run = slurm_run(tmp_path)
    add_events(run, run_start(T0 + 10), step(T0 + 20, 1))
    fake_slurm.set(JOB, "timeout")
    s = summarize_run(run)
    assert (s.status, s.slurm_state) == ("cancelled", "TIMEOUT")
    assert "time limit" in s.reason and "slurm_time" in s.hint
    kept = read_slurm_end(run)
    assert (kept["job_id"], kept["state"]) == (JOB, "TIMEOUT")
    fake_slurm.forget(JOB)  # MinJobAge later: Slurm forgot it, the run did not
    asked = len(fake_slurm.calls())
    s = summarize_run(run)
    assert (s.status, s.slurm_state) == ("cancelled", "TIMEOUT")
    assert len(fake_slurm.calls()) == asked  # the kept verdict answers: Slurm is not asked every refresh


def test_running_on_this_host_without_a_local_process_is_not_died(tmp_path, fake_slurm):
    """Node 0 may run on the host that reads (no lock here: its run directory's lock is held on
    the node): Slurm says it runs, so it runs."""
    run = slurm_run(tmp_path, host=socket.gethostname(), pid=1 << 30)
    add_events(run, run_start(T0 + 10))
    fake_slurm.set(JOB, "running")
    assert summarize_run(run).status == "running" and not launcher_gone(run)


def test_forgotten_job_without_end_died_naming_it(tmp_path, fake_slurm):
    run = slurm_run(tmp_path)
    add_events(run, run_start(T0 + 10))
    s = summarize_run(run)  # fake_slurm knows no job 12
    assert s.status == "died"
    assert JOB in s.reason and "slurm-12.out" in s.reason


def test_slurm_unreachable_counts_as_alive(tmp_path, fake_slurm):
    run = slurm_run(tmp_path)
    add_events(run, run_start(T0 + 10), step(T0 + 20, 1))
    fake_slurm.down()
    s = summarize_run(run)
    assert s.status == "running" and not launcher_gone(run)


def test_ranks_stopped_by_slurms_term_read_as_slurms_ending(tmp_path, fake_slurm):
    run = slurm_run(tmp_path)
    add_events(run, run_start(T0 + 10), step(T0 + 20, 1), run_end(T0 + 30, "stopped"))
    fake_slurm.set(JOB, "timeout")
    s = summarize_run(run)
    assert (s.status, s.slurm_state) == ("cancelled", "TIMEOUT")
    (run / "slurm_end.json").unlink()
    (run / "stop_requested").write_text("1\n")  # the user's Stop: it reads stopped, whatever Slurm ended it as
    assert summarize_run(run).status == "stopped"


def test_requeued_life_is_followed_to_its_end(tmp_path, fake_slurm):
    """One follower (ftui watch's) across a requeue: life 1 stops for the requeue, the job waits
    (queued, BeginTime), life 2 starts (node 0 rewrites launch.json) and completes."""
    run = slurm_run(tmp_path)
    fake_slurm.set(JOB, "running")
    add_events(run, run_start(T0 + 10), step(T0 + 20, 1))
    summary = RunSummary(run_id="r1", path=run)
    follower = RunFollower(run, summary)
    follower.poll()
    assert summary.status == "running"
    (run / "requeue_requested").write_text("1\n")
    add_events(run, run_end(T0 + 30, "stopped"))
    fake_slurm.set(JOB, "requeued")
    follower.poll()
    assert (summary.status, summary.queue_reason, follower.ended) == ("queued", "BeginTime", False)
    assert summarize_run(run).status == "queued"  # the runs list agrees
    fake_slurm.set(JOB, "running", Restarts="1")
    (run / "requeue_requested").unlink()  # node 0 of life 2 removes it and rewrites launch.json
    slurm_run(tmp_path, start=T0 + 60, host="n1", nodes=["n1"], restarts=1, first_start_time=T0, earlier_s=20.0)
    follower.poll()
    assert summary.status == "starting" and not follower.ended
    add_events(run, dict(run_start(T0 + 70), resumed_from_step=1), step(T0 + 80, 2))
    follower.poll()
    assert summary.status == "running" and summary.step == 2
    add_events(run, run_end(T0 + 90, "completed"))
    fake_slurm.set(JOB, "completed", Restarts="1")
    follower.poll()
    assert follower.ended and summary.status == "completed"


def test_a_preemption_that_requeued_the_job_reads_queued(tmp_path, fake_slurm):
    """Slurm's TERM (a preemption, PreemptMode=REQUEUE) stopped the ranks, which wrote run_end
    stopped; no Stop, no requeue_requested: the job waits for its next life."""
    run = slurm_run(tmp_path)
    add_events(run, run_start(T0 + 10), step(T0 + 20, 1), run_end(T0 + 30, "stopped"))
    fake_slurm.set(JOB, "requeued")
    s = summarize_run(run)
    assert (s.status, s.queue_reason) == ("queued", "BeginTime")
    fake_slurm.set(JOB, "running")  # going down after the ranks stopped (a time limit): ended as the run said, for now
    assert summarize_run(run).status == "stopped"


def test_stop_pending_running_and_second(tmp_path, fake_slurm):
    run = slurm_run(tmp_path)
    fake_slurm.set(JOB, "pending_resources")
    assert is_running(run)
    with pytest.raises(errors.RunIsLive, match="ftui stop r1"):
        refuse_live(run, summarize_run(run))
    assert stop(run) == f"cancelled Slurm job {JOB} (it was queued)"
    assert fake_slurm.scancels() == [JOB]
    fake_slurm.set(JOB, "cancelled")
    s = summarize_run(run)
    assert s.status == "stopped" and JOB in s.reason  # it never started: the Stop's, not Slurm's cancel

    run2 = slurm_run(tmp_path, name="r2", job_id="13")
    fake_slurm.set("13", "running")
    said = stop(run2)
    assert "ranks to stop" in said and "13" in said
    assert fake_slurm.scancels()[-1] == "--signal=TERM 13" and (run2 / "stop_requested").exists()
    assert stop(run2) == "cancelled Slurm job 13"  # the second Stop cancels
    assert stop(run2, force=True) == "cancelled Slurm job 13"
    assert fake_slurm.scancels()[-2:] == ["13", "13"]
    fake_slurm.set("13", "completed")
    assert not is_running(run2) and stop(run2) == "the run is not running"


def test_stop_says_why_scancel_failed(tmp_path, fake_slurm, monkeypatch):
    run = slurm_run(tmp_path)
    fake_slurm.set(JOB, "running")
    (fake_slurm.jobs / "scancel_rc").write_text("1")
    (fake_slurm.jobs / "scancel_err").write_text("scancel: error: Kill job error on job id 12: Access/permission denied\n")
    with pytest.raises(errors.StopFailed, match="permission denied"):
        stop(run)
    monkeypatch.setenv("PATH", str(fake_slurm.jobs.parent / "fakebin_none") + os.pathsep + "/nonexistent")
    with pytest.raises(errors.StopFailed, match="cannot ask Slurm"):
        stop(run)


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200", FTUI_LANG="en")
    return subprocess.run([sys.executable, "-m", "ftui.cli.main", *args], capture_output=True, text=True, env=env, timeout=120)


def test_cli_runs_and_stop(tmp_path, fake_slurm):
    queued = slurm_run(tmp_path, name="q1", job_id="21")
    fake_slurm.set("21", "pending_resources", StartTime="2030-01-02T03:04:05")
    cancelled = slurm_run(tmp_path, name="c1", job_id="22")
    add_events(cancelled, run_start(T0 + 10))
    fake_slurm.set("22", "timeout")
    done = _cli(["runs", "--root", str(tmp_path)])
    assert done.returncode == 0, done.stderr
    assert "q1: queued (Resources), estimated start 2030-01-02 03:04 (Slurm job 21)" in done.stdout
    assert "c1: cancelled (TIMEOUT): Slurm job 22 reached its time limit" in done.stdout
    assert "slurm_time" in done.stdout
    watched = _cli(["watch", str(cancelled)])
    assert watched.returncode == 1 and "cancelled: Slurm job 22 reached its time limit" in watched.stdout
    said = _cli(["stop", str(queued)])
    assert said.returncode == 0 and "cancelled Slurm job 21 (it was queued)" in said.stdout
    (fake_slurm.jobs / "scancel_rc").write_text("1")
    fake_slurm.set("23", "running")
    failing = slurm_run(tmp_path, name="f1", job_id="23")
    said = _cli(["stop", str(failing)])
    assert said.returncode == 1 and "scancel" in said.stderr


def test_watch_follows_queued_to_cancelled(tmp_path, fake_slurm):
    from ftui.cli.watch import watch_run

    run = slurm_run(tmp_path)
    fake_slurm.set(JOB, "pending_resources")
    out = io.StringIO()
    result = {}
    watcher = threading.Thread(target=lambda: result.setdefault("status", watch_run(run, interval=0.05, out=out)))
    watcher.start()
    deadline = time.monotonic() + 60
    while "queued (Resources)" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    fake_slurm.set(JOB, "pending_resources", Reason="Priority")
    while "queued (Priority)" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    fake_slurm.set(JOB, "cancelled")
    watcher.join(60)
    text = out.getvalue()
    assert result["status"] == "cancelled"
    assert text.count("queued (Resources)") == 1 and text.count("queued (Priority)") == 1  # once, again when it changes
    assert "cancelled: Slurm cancelled job 12" in text and "hint: " in text


@pytest.mark.slurm
def test_real_cluster_sleep_job_reads_queued_running_then_cancelled(tmp_path, request):
    """A real Slurm: a sleep job (no ftui inside) whose launch.json is written by hand reads
    queued or running while Slurm has it, then cancelled after a plain scancel, never died."""
    from ftui.rundir import slurm_state

    try:
        slurm_cluster = request.getfixturevalue("slurm_cluster")  # tests/slurm_cluster.py's (skips without Slurm)
    except pytest.FixtureLookupError:
        pytest.skip("no slurm_cluster fixture in this checkout")

    hold = slurm_cluster.sbatch("--hold", "-o", str(tmp_path / "slurm-%j.out"), "--wrap", "sleep 300")
    run = slurm_run(tmp_path, job_id=hold)
    slurm_state.clear_cache()
    s = summarize_run(run)
    assert (s.status, s.queue_reason) == ("queued", "JobHeldUser")
    subprocess.run(["scontrol", "release", hold], check=True, timeout=30)
    slurm_cluster.wait_state(hold, {"RUNNING"}, 60)
    slurm_state.clear_cache()
    assert summarize_run(run).status == "starting"
    subprocess.run(["scancel", hold], check=True, timeout=30)
    slurm_cluster.wait_state(hold, {"CANCELLED"}, 60)
    slurm_state.clear_cache()
    s = summarize_run(run)
    assert (s.status, s.slurm_state) == ("cancelled", "CANCELLED")
    assert read_slurm_end(run)["state"] == "CANCELLED"
    # ftui's Stop of a queued job: scancel, and the run reads stopped (it never started), not cancelled
    queued = slurm_cluster.sbatch("--hold", "-o", str(tmp_path / "slurm-%j.out"), "--wrap", "sleep 300")
    run2 = slurm_run(tmp_path, name="r2", job_id=queued)
    assert stop(run2) == f"cancelled Slurm job {queued} (it was queued)"
    slurm_cluster.wait_state(queued, {"CANCELLED"}, 60)
    slurm_state.clear_cache()
    assert summarize_run(run2).status == "stopped"


async def test_app_stop_says_why_scancel_failed_and_stays_up(tmp_path, fake_slurm):
    from tests.test_tui_pilot import make_app, until

    run = slurm_run(tmp_path / "runs")
    add_events(run, run_start(T0 + 10), step(T0 + 20, 1))
    fake_slurm.set(JOB, "running")
    (fake_slurm.jobs / "scancel_rc").write_text("1")
    (fake_slurm.jobs / "scancel_err").write_text("scancel: error: Kill job error on job id 12: Access/permission denied\n")
    app = make_app(tmp_path, attach=run, clock=lambda: T0 + 30)
    async with app.run_test(size=(100, 40)) as pilot:
        dash = app.screen
        await until(pilot, lambda: dash.view is not None and dash.view.status == "running")
        await pilot.press("s")
        await until(pilot, lambda: app.screen.__class__.__name__ == "Confirm")
        await pilot.press("enter")
        await until(pilot, lambda: any("permission denied" in str(n.message) for n in app._notifications))
        assert app.screen is dash and fake_slurm.scancels() == ["--signal=TERM 12"]


def test_ctrl_c_while_following_a_slurm_run_whose_scancel_fails_says_why(tmp_path, fake_slurm, monkeypatch):
    import ftui.cli.follow as follow
    import ftui.cli.following as following
    from rich.console import Console

    run = slurm_run(tmp_path)
    fake_slurm.set(JOB, "running")
    (fake_slurm.jobs / "scancel_rc").write_text("1")
    (fake_slurm.jobs / "scancel_err").write_text("scancel: error: Access/permission denied\n")

    def follow_run(job_dir, out, on_interrupt=None, start_offset=0):
        on_interrupt(1)  # Ctrl-C: a Stop
        return summarize_run(job_dir)

    monkeypatch.setattr(follow, "follow_run", follow_run)
    monkeypatch.setattr(following, "wait_for_exit", lambda job_dir, out: None)
    out = io.StringIO()
    summary, interrupted = following.follow_job(run, Console(file=out, width=200))
    assert interrupted and "permission denied" in out.getvalue() and summary.live
