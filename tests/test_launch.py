"""`ftui train` end to end: detached start, follow, graceful stop (Ctrl-C), crash of a rank."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conftest import wait_for
from ftui.rundir.event_reader import read_all
from ftui.rundir.paths import EVENTS_FILE
from ftui.jobs.launch import is_rank, run_processes, stop_run
from ftui.rundir.follower import summarize_run
from ftui.rundir.listing import list_runs

FTUI = [sys.executable, "-m", "ftui.cli.main"]
LONG = ["--set", "max_steps=5000", "--set", "max_samples=16", "--set", "logging_steps=1"]


def only_run(root: Path) -> Path:
    (run,) = [p for p in (root / "runs").iterdir() if p.is_dir()]
    return run


def steps_written(run: Path) -> int:
    return sum(1 for e in read_all(run / EVENTS_FILE) if e["event"] == "step")


def gone(run: Path) -> bool:
    sup, children = run_processes(run)
    return sup is None and not children


@pytest.mark.dist
def test_completed_run_exits_0_and_is_listed(demo_train):
    """`ftui train --preset demo` (the session's demo run: conftest.demo_train) follows the run
    to its end, exits 0, and the run is listed as completed."""
    run, proc = demo_train
    launch = json.loads((run / "launch.json").read_text())
    assert launch["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # cuda:N numbered as nvidia-smi and ftui.machine.gpu do
    assert launch["env"]["OMP_WAIT_POLICY"] == "PASSIVE"  # idle OpenMP threads sleep (ftui.jobs.torch_env)
    start = next(e for e in read_all(run / EVENTS_FILE) if e["event"] == "run_start")
    assert start["cpu_threads"] == int(os.environ["OMP_NUM_THREADS"])  # the user's number (conftest's), not the cores'
    (summary,) = list_runs(run.parent)
    assert summary.status == "completed" and summary.method == "full" and summary.step == summary.max_steps > 0
    *_lines, end, model = proc.stdout.splitlines()
    assert end.startswith(f"completed: {summary.step} steps (step {summary.step}, last loss ")
    assert f"{summary.step}/{summary.step}" in proc.stdout  # the bar's last line whole in a pipe, not cut at 80 columns
    assert model.startswith(f"the trained model: {run / 'final'} (ftui chat --run {run.name};")  # where the result is
    assert launch["command_line"] not in proc.stdout  # the launcher's command line is launch.json's, not the user's
    listing = subprocess.run([*FTUI, "runs", "--root", str(run.parent)], capture_output=True, text=True)
    assert summary.run_id[:12] in listing.stdout and "completed" in listing.stdout


@pytest.mark.dist
def test_detach_then_stop_finishes_the_step_and_says_stopped(tmp_path):
    proc = subprocess.run([*FTUI, "train", "--preset", "demo", "--detach", *LONG], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "ftui attach" in proc.stdout
    run = only_run(tmp_path)
    assert oct(run.stat().st_mode & 0o777) == "0o700"
    assert wait_for(lambda: steps_written(run) >= 3)
    assert summarize_run(run).status == "running"
    stop_run(run)
    assert wait_for(lambda: gone(run), timeout=60)
    events = read_all(run / EVENTS_FILE)
    end = events[-1]
    assert end["event"] == "run_end" and end["status"] == "stopped", end
    last_step = [e for e in events if e["event"] == "step"][-1]["step"]
    assert f"at step {last_step} of 5000" in end["reason"]
    assert summarize_run(run).status == "stopped"
    log = (run / "train.log").read_text()
    assert "Traceback" not in log and "exited with code 1" not in log  # an ordinary Stop reads as one


@pytest.mark.dist
def test_ctrl_c_while_following_stops_gracefully_and_exits_nonzero(tmp_path):
    proc = subprocess.Popen([*FTUI, "train", "--preset", "demo", *LONG], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert wait_for(lambda: (tmp_path / "runs").exists() and any((tmp_path / "runs").iterdir()), timeout=30)
    run = only_run(tmp_path)
    assert wait_for(lambda: steps_written(run) >= 2)
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("ftui train did not end after Ctrl-C; train.log tail:\n" + (run / "train.log").read_text()[-3000:])
    assert proc.returncode == 130  # documented in ftui train --help
    assert "stopping" in out and "stopped" in out
    assert f"resume with: ftui train --resume {run.name}" in out
    assert "Traceback" not in out and "Traceback" not in (run / "train.log").read_text()
    assert read_all(run / EVENTS_FILE)[-1]["status"] == "stopped"
    assert wait_for(lambda: gone(run), timeout=30)


@pytest.mark.dist
def test_killed_rank_ends_the_run_as_failed_with_nothing_left_running(tmp_path):
    subprocess.run([*FTUI, "train", "--preset", "demo", "--detach", *LONG], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    run = only_run(tmp_path)
    assert wait_for(lambda: steps_written(run) >= 2)
    _sup, children = run_processes(run)
    (rank,) = [p for p in children if is_rank(p)]
    os.kill(rank.pid, signal.SIGKILL)
    assert wait_for(lambda: gone(run), timeout=60)
    end = read_all(run / EVENTS_FILE)[-1]
    assert end["event"] == "run_end" and end["status"] == "failed"
    assert end["error_type"] == "ProcessDied" and end["hint"]
    assert summarize_run(run).status == "failed"


@pytest.mark.dist
@pytest.mark.parametrize("victim", ["supervisor", "launcher"])
def test_kill_of_the_launcher_leaves_no_rank_behind(tmp_path, victim):
    subprocess.run([*FTUI, "train", "--preset", "demo", "--detach", *LONG], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    run = only_run(tmp_path)
    assert wait_for(lambda: steps_written(run) >= 2)
    sup, children = run_processes(run)
    ranks = [p for p in children if is_rank(p)]
    assert ranks
    if victim == "supervisor":
        stop_run(run, force=True)  # what a second Stop does
    else:
        (launcher,) = [p for p in children if "ftui.jobs.spawn" in p.cmdline()]
        os.kill(launcher.pid, signal.SIGKILL)
    assert wait_for(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in ranks), timeout=30)
    assert wait_for(lambda: gone(run), timeout=30)


def test_died_status_when_launcher_is_gone_without_run_end(tmp_path):
    from ftui.rundir.launch_record import write_launch_info

    run = tmp_path / "runs" / "x-1"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("model_name_or_path: m\n")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    write_launch_info(run, {"pid": dead.pid, "host": __import__("socket").gethostname(), "start_time": time.time()})
    assert summarize_run(run).status == "died"
    assert stop_run(run) == "the run is not running"


def test_secrets_in_the_environment_are_redacted():
    from ftui.jobs.launch import redact_env

    out = redact_env({"HF_TOKEN": "hf_abc", "WANDB_API_KEY": "k", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert out == {"HF_TOKEN": "<redacted>", "WANDB_API_KEY": "<redacted>", "CUDA_VISIBLE_DEVICES": "0,1"}


def test_picked_gpus_become_the_runs_cuda_visible_devices_and_launch_json_shows_them(tmp_path, monkeypatch):
    """Issue 13, item 13: the config's gpus replaces the environment's CUDA_VISIBLE_DEVICES for
    every process of the run. The launcher is a stand-in that prints what it got."""
    from conftest import tiny_config
    from ftui.jobs import launch
    from ftui.jobs.launch import prepare_run, start_run
    from tests.fake_nvml import four_gpus, use_fake_nvml

    use_fake_nvml(monkeypatch, four_gpus())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    cfg = tiny_config(tmp_path, device="auto", gpus="3, 1")
    run = prepare_run(cfg)
    show = "import os; print('child sees CUDA_VISIBLE_DEVICES=' + os.environ['CUDA_VISIBLE_DEVICES'])"
    monkeypatch.setattr(launch, "launch_command", lambda *a, **k: [sys.executable, "-c", show])
    info = start_run(run, cfg)
    assert info["env"]["CUDA_VISIBLE_DEVICES"] == "3,1"
    assert json.loads((run / "launch.json").read_text())["env"]["CUDA_VISIBLE_DEVICES"] == "3,1"
    assert wait_for(lambda: "child sees CUDA_VISIBLE_DEVICES=3,1" in (run / "train.log").read_text())
    assert "gpus: 3,1" in (run / "config.yaml").read_text()


def test_one_node_starts_ftuis_launcher_and_several_nodes_torchrun(tmp_path):
    from conftest import tiny_config
    from ftui.jobs.launch import launch_command

    one = launch_command(tiny_config(tmp_path, engine="ddp", nproc_per_node=2), tmp_path / "run")
    assert one[1:3] == ["-m", "ftui.jobs.spawn"] and "--nproc-per-node=2" in one and "torch.distributed.run" not in one
    two = launch_command(tiny_config(tmp_path, engine="ddp", nnodes=2, rdzv_endpoint="10.0.0.1:29500"), tmp_path / "run")
    assert two[1:3] == ["-m", "torch.distributed.run"] and "--master-addr=10.0.0.1" in two


def test_ranks_get_loopback_sockets_a_private_store_and_no_rendezvous_port(tmp_path):
    from ftui.jobs.spawn import loopback_interface, new_store_file, rank_environments
    from ftui.rundir.rank_env import STORE_ENV

    store = new_store_file(tmp_path)
    assert store.parent == tmp_path and oct(store.stat().st_mode & 0o777) == "0o600" and store.stat().st_size == 0
    envs = rank_environments(2, store, {"MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True"})
    assert [e["RANK"] for e in envs] == ["0", "1"] and {e["WORLD_SIZE"] for e in envs} == {"2"}
    for env in envs:
        assert "MASTER_PORT" not in env and "TORCHELASTIC_USE_AGENT_STORE" not in env and env[STORE_ENV] == str(store)
        assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == loopback_interface()
    assert new_store_file(tmp_path) != store  # unique per launch


def test_a_cpu_rank_computes_with_the_users_threads_or_its_share_of_the_cores(tmp_path):
    from ftui.jobs.spawn import new_store_file, rank_environments
    from ftui.rundir.rank_env import THREADS_DEFAULTED_ENV
    from ftui.runner.distributed import cpu_threads

    cores = len(os.sched_getaffinity(0))
    store = new_store_file(tmp_path)
    two = rank_environments(2, store, {})  # the launcher's OMP_NUM_THREADS=1 (as torchrun's) is not the user's
    assert two[0]["OMP_NUM_THREADS"] == "1" and cpu_threads(2, two[0]) == max(1, cores // 2)
    one = rank_environments(1, store, {})
    assert "OMP_NUM_THREADS" not in one[0] and cpu_threads(1, one[0]) == cores
    for nproc in (1, 2):  # the user's number wins, whatever a parent launch left in the environment
        env = rank_environments(nproc, store, {"OMP_NUM_THREADS": "3", THREADS_DEFAULTED_ENV: "1"})[0]
        assert THREADS_DEFAULTED_ENV not in env and cpu_threads(nproc, env) == 3
    assert cpu_threads(1, {"OMP_NUM_THREADS": "lots"}) == cpu_threads(1, {"OMP_NUM_THREADS": "0"}) == cores


def test_torch_processes_get_ftuis_defaults_under_the_users_own_settings():
    from ftui.jobs.torch_env import torch_process_env

    env = torch_process_env({"CUDA_VISIBLE_DEVICES": "1"}, base={"PYTHONUNBUFFERED": "0", "HOME": "/h"})
    assert env == {"HOME": "/h", "CUDA_VISIBLE_DEVICES": "1", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false",
                   "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "OMP_WAIT_POLICY": "PASSIVE"}
    mine = {"TOKENIZERS_PARALLELISM": "true", "CUDA_DEVICE_ORDER": "FASTEST_FIRST", "OMP_WAIT_POLICY": "ACTIVE"}
    assert torch_process_env(base=mine) == {**mine, "PYTHONUNBUFFERED": "1"}


def test_a_failing_rank_makes_the_launcher_end_the_others_and_fail():
    from ftui.jobs.spawn import Ranks

    failing = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    # A rank stuck where SIGTERM cannot help (a collective): ignored from before it starts.
    stubborn = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
    assert Ranks([failing, stubborn], stop_timeout=1).wait() == 3
    assert stubborn.returncode == -signal.SIGKILL  # it ignored the stop and was killed after stop_timeout
