"""srun's per-node task (ftui.jobs.slurm_node) and the batch step's choice of checkpoint
(ftui.jobs.slurm_batch), without a cluster: Slurm's environment as a dict and recorded
``scontrol`` outputs (Slurm 22.05, the research brief's two-node cluster on one host)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import tiny_config
from ftui.jobs.slurm_node import (SlurmNodeError, main, node_addr, node_config, placement, rendezvous_port,
                                  supervisor_command)
from ftui.rundir.launch_record import read_launch_info, write_launch_info

SHOW_NODE_N1 = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=1 CPUEfctv=1 CPUTot=1 CPULoad=0.31 "
                "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=vm "
                "Version=22.05.8 OS=Linux 6.1.0 RealMemory=4000 AllocMem=1000 FreeMem=20000 Sockets=1 Boards=1 "
                "State=ALLOCATED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug\n")
SHOW_NODE_VM = SHOW_NODE_N1.replace("NodeName=n1", "NodeName=vm").replace("NodeAddr=127.0.0.1", "NodeAddr=vm")


def slurm_config(tmp_path: Path, nnodes: int = 1, **overrides):
    """A launcher-slurm config; over several nodes it needs no rdzv_endpoint (Slurm names the
    master), which the rules of slurm-submit's branch allow (here the field is set past them)."""
    return tiny_config(tmp_path, engine="ddp", **overrides).model_copy(update={"launcher": "slurm", "nnodes": nnodes})


def recorded_scontrol(outputs: dict[tuple[str, ...], str]):
    calls: list[list[str]] = []

    def run(args: list[str]) -> str:
        calls.append(args)
        return outputs[tuple(args)]

    run.calls = calls
    return run


TWO_NODES = recorded_scontrol({("show", "hostnames", "n[1-2]"): "n1\nn2\n", ("-o", "show", "node", "n1"): SHOW_NODE_N1})
ONE_NODE = recorded_scontrol({("show", "hostnames", "vm"): "vm\n", ("-o", "show", "node", "vm"): SHOW_NODE_VM})


def slurm_env(job="1234", node=0, nnodes=2, nodelist="n[1-2]", **more) -> dict[str, str]:
    return {"SLURM_JOB_ID": job, "SLURM_NODEID": str(node), "SLURM_NNODES": str(nnodes), "SLURM_JOB_NODELIST": nodelist,
            "PATH": os.environ["PATH"], **more}


def test_two_nodes_meet_by_torchrun_static_at_node_0s_nodeaddr_on_a_port_from_the_job(tmp_path):
    place = placement(slurm_env(job="1234", node=1), TWO_NODES)
    assert (place.node_rank, place.nnodes, place.nodes, place.master_addr, place.restarts) == (1, 2, ["n1", "n2"], "127.0.0.1", 0)
    cfg = node_config(slurm_config(tmp_path, nnodes=2), place)
    assert cfg.node_rank == 1 and cfg.rdzv_endpoint == "127.0.0.1:21234"
    cmd = supervisor_command(cfg, tmp_path / "run", None, "PY")
    assert cmd[:6] == ["PY", "-m", "ftui.jobs.supervise", str(tmp_path / "run" / "nodes" / "node-1"), "--node-rank", "1"]
    launcher = cmd[cmd.index("--") + 1:]
    assert launcher[:3] == ["PY", "-m", "torch.distributed.run"]
    assert {"--nnodes=2", "--node-rank=1", "--master-addr=127.0.0.1", "--master-port=21234"} <= set(launcher)
    assert launcher[-2:] == ["train", str(tmp_path / "run")]
    # the config's own port wins; the job id's share keeps within 20000-39999
    assert rendezvous_port(tiny_config(tmp_path, rdzv_endpoint="head:29500"), "1234") == 29500
    assert rendezvous_port(tiny_config(tmp_path), "987654321") == 20000 + 987654321 % 20000


def test_one_node_starts_its_ranks_with_spawn_and_no_port(tmp_path):
    place = placement(slurm_env(nnodes=1, nodelist="vm", SLURM_RESTART_COUNT="2"), ONE_NODE)
    assert place.master_addr == "vm" and place.restarts == 2
    cfg = node_config(slurm_config(tmp_path, nproc_per_node=2), place)
    cmd = supervisor_command(cfg, tmp_path, tmp_path / "checkpoints" / "step-4", "PY")
    assert cmd[:5] == ["PY", "-m", "ftui.jobs.supervise", str(tmp_path), "--"]
    assert cmd[5:8] == ["PY", "-m", "ftui.jobs.spawn"] and "--nproc-per-node=2" in cmd
    assert cmd[-2:] == ["--resume", str(tmp_path / "checkpoints" / "step-4")]
    assert not any("port" in a for a in cmd)


def test_an_ipv6_nodeaddr_is_bracketed_and_the_environment_checked(tmp_path):
    six = recorded_scontrol({("show", "hostnames", "g1"): "g1\n", ("-o", "show", "node", "g1"): "NodeName=g1 NodeAddr=fd00::5 State=IDLE"})
    cfg = node_config(slurm_config(tmp_path, nnodes=2), placement(slurm_env(nodelist="g1"), six))
    assert cfg.rdzv_endpoint == "[fd00::5]:21234"
    assert node_addr("NodeName=x State=IDLE") is None
    with pytest.raises(SlurmNodeError, match="SLURM_JOB_ID"):
        placement({"SLURM_NODEID": "0"}, TWO_NODES)
    with pytest.raises(SlurmNodeError, match="SLURM_NODEID"):
        placement({"SLURM_JOB_ID": "5", "SLURM_NNODES": "1"}, TWO_NODES)


def make_run(tmp_path: Path, **overrides) -> Path:
    from ftui.jobs.launch import prepare_run

    return prepare_run(slurm_config(tmp_path, **overrides)).resolve()


class Become:
    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(self, cmd, env, log, lock) -> None:
        os.write(log, b"(exec)\n")
        self.calls.append((cmd, env))


def test_a_job_given_other_nodes_than_the_config_plans_is_refused_in_train_log(tmp_path, capfd):
    run = make_run(tmp_path)  # nnodes 1
    become = Become()
    assert main([str(run)], env=slurm_env(nnodes=2), scontrol=TWO_NODES, become=become) == 2
    assert not become.calls
    log = (run / "train.log").read_text()
    assert "Slurm gave the job 2 node(s) but the run's config has nnodes 1" in log and "--nodes=1" in log
    assert "nnodes 1" in capfd.readouterr().err  # and in Slurm's output file
    assert not (run / "launch.json").exists()


def test_the_node_takes_the_job_lock_a_second_job_is_refused(tmp_path):
    from ftui.rundir.lock import lock_run_dir

    run = make_run(tmp_path)
    held = lock_run_dir(run)
    try:
        become = Become()
        assert main([str(run)], env=slurm_env(nnodes=1, nodelist="vm"), scontrol=ONE_NODE, become=become) == 1
        assert not become.calls
    finally:
        os.close(held)


def test_node_0_writes_launch_json_for_each_life_and_clears_the_previous_lifes_marks(tmp_path):
    run = make_run(tmp_path, nproc_per_node=2)
    scheduler = {"kind": "slurm", "job_id": "1234", "cluster": "ftuitest", "submit_host": "login1", "submitted": 1.7e9,
                 "script": "slurm.sh"}
    write_launch_info(run, {"scheduler": scheduler, "host": "login1", "start_time": 1.7e9, "command": ["sbatch"]})
    (run / "slurm_end.json").write_text("{}")
    (run / "requeue_requested").write_text("1\n")
    env = slurm_env(nnodes=1, nodelist="vm", CUDA_VISIBLE_DEVICES="3", HF_TOKEN="secret")
    become = Become()
    assert main([str(run)], env=env, scontrol=ONE_NODE, become=become) == 1  # the stand-in returns
    [(cmd, child_env)] = become.calls
    assert cmd[1:4] == ["-m", "ftui.jobs.supervise", str(run)] and "ftui.jobs.spawn" in cmd
    assert child_env["CUDA_VISIBLE_DEVICES"] == "3" and child_env["PYTHONUNBUFFERED"] == "1"  # Slurm's GPUs, torch_env's
    info = read_launch_info(run)
    assert info["scheduler"] == scheduler
    assert info["pid"] == os.getpid() and info["pgid"] == os.getpgid(0) and info["create_time"] > 0
    assert info["nodes"] == ["vm"] and info["restarts"] == 0 and info["start_time"] > 1.7e9
    assert info["env"]["CUDA_VISIBLE_DEVICES"] == "3" and "secret" not in json.dumps(info)
    assert "resumed_from" not in info and "first_start_time" not in info
    assert not (run / "slurm_end.json").exists() and not (run / "requeue_requested").exists()
    assert "node 0 of 1" in (run / "train.log").read_text()

    # The next life resumes: it carries the first life's start and time, as a local resume does.
    from ftui.rundir.event_writer import EventWriter

    first = info["start_time"]
    with EventWriter(run / "events.jsonl") as writer:
        writer.write("run_start", run_id=run.name, world_size=2, nodes=1, engine="ddp", precision="fp32", method="sft",
                     model="m", total_params=1, trainable_params=1, max_steps=24, planned_tokens_per_step=1)
        writer.write("run_end", status="stopped", reason="requeue")
    ckpt = run / "checkpoints" / "step-3"
    assert main([str(run), "--resume", str(ckpt)], env=dict(env, SLURM_RESTART_COUNT="1"), scontrol=ONE_NODE,
                become=become) == 1
    info = read_launch_info(run)
    assert info["restarts"] == 1 and info["resumed_from"] == str(ckpt) and info["scheduler"] == scheduler
    assert info["first_start_time"] == first and info["earlier_s"] >= 0
    assert become.calls[-1][0][-2:] == ["--resume", str(ckpt)]


def test_node_k_keeps_its_records_in_its_own_directory_and_leaves_launch_json_alone(tmp_path):
    run = make_run(tmp_path, nnodes=2)
    become = Become()
    assert main([str(run)], env=slurm_env(node=1), scontrol=TWO_NODES, become=become) == 1
    assert not (run / "launch.json").exists()
    assert "node 1 of 2" in (run / "nodes" / "node-1" / "train.log").read_text()
    assert "--node-rank=1" in become.calls[0][0]


def test_a_stop_asked_for_while_the_job_started_ends_the_life_stopped(tmp_path):
    from ftui.rundir.event_reader import read_all

    run = make_run(tmp_path)
    (run / "stop_requested").write_text("1\n")
    become = Become()
    assert main([str(run)], env=slurm_env(nnodes=1, nodelist="vm"), scontrol=ONE_NODE, become=become) == 0
    assert not become.calls
    assert read_all(run / "events.jsonl")[-1]["status"] == "stopped"


def _checkpoint(run: Path, step: int, sound: bool = True) -> Path:
    path = run / "checkpoints" / f"step-{step}"
    path.mkdir(parents=True)
    (path / "trainer_state.json").write_text(json.dumps({"step": step, "files": {"w": 3 if sound else 99}}))
    (path / "w").write_bytes(b"abc")
    return path


def test_a_requeued_life_resumes_from_the_newest_sound_checkpoint(tmp_path, capsys):
    from ftui.jobs.slurm_batch import life_resume, srun_command

    run = tmp_path / "run"
    given = tmp_path / "elsewhere" / "step-1"
    assert life_resume(run, given, {}) == given  # the first life: what it was submitted with
    assert life_resume(run, None, {"SLURM_RESTART_COUNT": "1"}) is None  # no checkpoint yet: starts over
    assert "starting over" in capsys.readouterr().out
    _checkpoint(run, 2)
    newest = _checkpoint(run, 4)
    _checkpoint(run, 6, sound=False)  # torn: passed over, saying so
    assert life_resume(run, given, {"SLURM_RESTART_COUNT": "1"}) == newest
    assert "step-6 is damaged" in capsys.readouterr().out
    (run / "requeue_requested").write_text("1\n")  # ftui's own requeue, whatever Slurm's count says
    assert life_resume(run, None, {}) == newest
    cmd = srun_command(run, newest, "PY")
    assert cmd[:3] == ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert cmd[3:] == ["PY", "-m", "ftui.jobs.slurm_node", str(run), "--resume", str(newest)]


def test_slurms_ending_is_read_from_slurmstepds_line_in_this_lifes_output(tmp_path):
    """While the batch step lives, Slurm says COMPLETING (the job ends with it): the ending is in
    the line slurmstepd writes into the job's output (recorded from Slurm 22.05 here)."""
    from ftui.jobs.slurm_batch import output_verdict

    out = tmp_path / "slurm-7.out"
    assert output_verdict(tmp_path, "7", 0) is None  # no output yet
    out.write_text("[ftui] job 7, life 1: srun ...\n"
                   "slurmstepd-vm: error: *** JOB 7 ON vm CANCELLED AT 2026-11-28T19:13:18 DUE TO JOB REQUEUE ***\n")
    assert output_verdict(tmp_path, "7", 0) is None  # a requeue is no ending
    life2 = out.stat().st_size
    with out.open("a") as fh:
        fh.write("slurmstepd-vm: error: *** STEP 7.0 ON vm CANCELLED AT 2026-11-28T19:27:27 DUE TO TIME LIMIT ***\n"
                 "slurmstepd-vm: error: *** JOB 7 ON vm CANCELLED AT 2026-11-28T19:27:27 DUE TO TIME LIMIT ***\n")
    job = output_verdict(tmp_path, "7", 1, since=life2)
    assert (job.state, job.reason, job.restarts, job.live) == ("TIMEOUT", "TimeLimit", 1, False)
    assert output_verdict(tmp_path, "7", 1, since=out.stat().st_size) is None  # a later life's part: nothing yet
    with out.open("a") as fh:
        fh.write("slurmstepd-vm: error: *** JOB 7 ON vm CANCELLED AT 2026-11-28T19:40:00 ***\n")
    assert output_verdict(tmp_path, "7", 1).state == "CANCELLED"
    (tmp_path / "slurm-8.out").write_text("*** JOB 8 ON n1 CANCELLED AT 2026-11-28T19:26:00 DUE TO PREEMPTION ***\n"
                                          "*** JOB 99 ON n1 CANCELLED AT 2026-11-28T19:26:00 ***\n")
    assert output_verdict(tmp_path, "8", 0).state == "PREEMPTED"  # another job's line is not this one's
