"""Faults of the processes of a run: a hung rank, kill -9 at a random point, two runs with
one name, two dashboards on one run, a runs root that cannot be written.

Each checks what is on disk and what the run's status says afterwards, and that nothing is
left running. (Kill -9 of one rank, of the supervisor and of the launcher at a fixed point, and
during a checkpoint write, are in tests/test_launch.py and tests/test_checkpoint.py.)
"""

import os
import random
import signal
import subprocess
import sys

import psutil
import pytest

from conftest import tiny_config, wait_for
from ftui.rundir.event_reader import read_all
from ftui.rundir.paths import EVENTS_FILE
from ftui.jobs.launch import prepare_run, run_processes
from ftui.rundir.checkpoints import checkpoints, resolve_checkpoint
from ftui.rundir.follower import summarize_run
from tests.test_launch import gone, steps_written

FTUI = [sys.executable, "-m", "ftui.cli.main"]


def start_detached(tmp_path, cfg):
    """`ftui train --detach` (the supervisor must not be this test's child: it would stay a zombie)."""
    conf = tmp_path / "run.yaml"
    cfg.save(conf)
    subprocess.run([*FTUI, "train", str(conf), "--detach"], check=True, capture_output=True, timeout=60)
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    return run.resolve()


def rank_process(run, rank):
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = p.info["cmdline"] or []
            if "ftui.runner" in cmd and str(run) in cmd and p.environ().get("RANK") == str(rank):
                return p
        except psutil.Error:
            continue
    return None


@pytest.mark.dist
def test_a_stopped_rank_ends_the_job_after_hang_timeout_naming_it(tmp_path):
    run = start_detached(tmp_path, tiny_config(tmp_path, engine="ddp", nproc_per_node=2, max_steps=100000, hang_timeout=10))
    assert wait_for(lambda: steps_written(run) >= 3, timeout=120)
    victim = rank_process(run, 1)
    assert victim is not None
    os.kill(victim.pid, signal.SIGSTOP)
    assert wait_for(lambda: gone(run), timeout=90), "the hung job was not ended"
    end = read_all(run / EVENTS_FILE)[-1]
    assert end["event"] == "run_end" and end["status"] == "failed" and end["error_type"] == "Hang"
    assert "rank 1" in end["reason"] and "stopped" in end["reason"] and "hang_timeout=10" in end["reason"]
    assert "hang_timeout" in end["hint"]
    assert not victim.is_running() or victim.status() == psutil.STATUS_ZOMBIE
    assert summarize_run(run).status == "failed"


def test_a_node_k_supervisor_ends_its_hung_ranks_watching_the_runs_heartbeats(tmp_path):
    """Node K's supervisor keeps its records in RUN/nodes/node-K, but its ranks beat in the
    run's heartbeat/ beside node 0's: it watches those (it watched its own empty directory and
    a stopped rank on node K was never ended), counting only beats made since it started (a
    resumed run's old beats must not end it at once)."""
    import time

    run = tmp_path / "run"
    run.mkdir()
    tiny_config(tmp_path, hang_timeout=2).save(run / "config.yaml")
    node = run / "nodes" / "node-1"
    node.mkdir(parents=True)
    (run / "heartbeat").mkdir()
    stale = run / "heartbeat" / "rank-0"
    stale.touch()
    os.utime(stale, (time.time() - 3600, time.time() - 3600))  # a beat of an earlier attempt
    pid_file = tmp_path / "rank.pid"
    # the launcher: one rank (RANK=1) that beats once, after a moment, and then makes no progress
    rank = (f"import os, pathlib, time; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); time.sleep(1); "
            f"pathlib.Path({str(run / 'heartbeat' / 'rank-1')!r}).touch(); time.sleep(600)")
    launcher = f"import os, subprocess, sys; sys.exit(subprocess.call([sys.executable, '-c', {rank!r}], env={{**os.environ, 'RANK': '1'}}))"
    sup = subprocess.Popen([sys.executable, "-m", "ftui.jobs.supervise", str(node), "--node-rank", "1", "--",
                            sys.executable, "-c", launcher], start_new_session=True)
    try:
        sup.wait(timeout=120)
    finally:
        if sup.poll() is None:
            os.killpg(sup.pid, signal.SIGKILL)
    end = read_all(node / EVENTS_FILE)[-1]
    assert end["event"] == "run_end" and end["status"] == "failed" and end["error_type"] == "Hang", end
    assert "rank 1" in end["reason"] and "hang_timeout=2" in end["reason"]
    assert wait_for(lambda: not psutil.pid_exists(int(pid_file.read_text())), timeout=30)
    assert stale.exists()  # node 0's to clear


@pytest.mark.dist
def test_kill_9_at_a_random_point_tells_the_truth_and_the_newest_checkpoint_resumes(tmp_path):
    seed = int(os.environ.get("FTUI_FAULT_SEED", random.randrange(10**6)))
    rng = random.Random(seed)
    victim_name = rng.choice(["rank0", "rank1", "launcher"])
    at_step = rng.randint(3, 9)
    print(f"fault seed {seed}: kill -9 {victim_name} at step {at_step}")
    run = start_detached(tmp_path, tiny_config(tmp_path, engine="ddp", nproc_per_node=2, max_steps=400, save_steps=2, logging_steps=1))
    assert wait_for(lambda: steps_written(run) >= at_step, timeout=120)
    if victim_name == "launcher":
        _sup, children = run_processes(run)
        victim = next(p for p in children if "ftui.jobs.spawn" in p.cmdline())
    else:
        victim = rank_process(run, int(victim_name[-1]))
    victim.kill()
    assert wait_for(lambda: gone(run), timeout=60), f"processes left after kill -9 of {victim_name} (seed {seed})"
    end = read_all(run / EVENTS_FILE)[-1]
    assert end["event"] == "run_end" and end["status"] == "failed", (seed, end)
    assert summarize_run(run).status == "failed"
    newest = resolve_checkpoint(run, None)
    assert newest.name == f"step-{checkpoints(run)[-1][0]}"
    proc = subprocess.run([*FTUI, "train", "--resume", str(run), "--set", f"max_steps={checkpoints(run)[-1][0] + 2}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (seed, proc.stdout[-2000:], proc.stderr[-2000:])
    assert summarize_run(run).status == "completed"


def test_two_runs_with_the_same_name_get_their_own_directories(tmp_path):
    cfg = tiny_config(tmp_path, run_name="same")
    a, b, c = prepare_run(cfg), prepare_run(cfg), prepare_run(cfg)
    assert len({a, b, c}) == 3 and all(d.name.startswith("same-") for d in (a, b, c))
    assert all((d / "config.yaml").exists() for d in (a, b, c))


def test_runs_root_that_cannot_be_written_is_a_clear_error(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the runs root should be")
    proc = subprocess.run([*FTUI, "train", "--preset", "demo", "--runs-root", str(blocker / "runs")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2  # a config error, said before anything starts
    assert "is a file, not a directory" in " ".join(proc.stderr.split()) and "Traceback" not in proc.stderr
    proc = subprocess.run([*FTUI, "train", "--preset", "demo", "--runs-root", "/proc/ftui-runs"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "cannot create a run directory" in proc.stderr  # a read-only filesystem
    assert blocker.read_text() == "a file where the runs root should be"


async def test_two_dashboards_on_one_run_show_the_same_and_change_nothing(tmp_path):
    from ftui.tui.app import FtuiApp
    from tests.fixtures_runs import T0, fixed_sampler, write_run

    run = write_run(tmp_path / "runs", "shared", steps=50, max_steps=100, end="completed")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    apps = [FtuiApp(tmp_path / "runs", attach=run, clock=lambda: T0 + 100, sampler=fixed_sampler, offer_live=False) for _ in range(2)]
    async with apps[0].run_test(size=(100, 30)) as p1, apps[1].run_test(size=(100, 30)) as p2:
        for pilot, app in ((p1, apps[0]), (p2, apps[1])):
            for _ in range(100):
                if getattr(app.screen, "view", None) is not None and app.screen.view.step == 50:
                    break
                await pilot.pause(0.1)
            assert app.screen.view.step == 50 and app.screen.view.status == "completed"
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
