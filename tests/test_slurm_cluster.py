"""The test Slurm cluster (tests/slurm_cluster.py) works: a job runs to COMPLETED, a pending job
says why it waits, scancel ends it CANCELLED, the clients reach it through SLURM_CONF, and
stopping it leaves no daemon, job process or directory behind. Plus its parsing of `scontrol -o
show job` and its skip reasons, which need no cluster."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests import slurm_cluster as sc

# A real line of `scontrol -o show job` (22.05) for a held job whose name, script and folder
# hold spaces, recorded on the test cluster
HELD_JOB_LINE = (
    "JobId=1 JobName=a b UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=0 Nice=0 Account=(null) QOS=(null) "
    "JobState=PENDING Reason=JobHeldUser Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
    "RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-28T19:04:58 EligibleTime=Unknown "
    "StartTime=Unknown EndTime=Unknown Partition=debug AllocNode:Sid=localhost:24965 ReqNodeList=(null) NodeList= "
    "NumNodes=1 NumCPUs=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,mem=1000M,node=1,billing=1 "
    "Command=/tmp/ftui-slurm-g8/my dir/job.sh WorkDir=/tmp/ftui-slurm-g8/my dir "
    "StdOut=/tmp/ftui-slurm-g8/my dir/slurm-1.out Power= "
)


def test_scontrol_lines_split_into_fields_whose_values_may_hold_spaces():
    job = sc.parse_job_line(HELD_JOB_LINE)
    assert job["JobState"] == "PENDING" and job["Reason"] == "JobHeldUser"
    assert job["JobName"] == "a b"
    assert job["Command"] == "/tmp/ftui-slurm-g8/my dir/job.sh"
    assert job["WorkDir"] == "/tmp/ftui-slurm-g8/my dir"
    assert job["TRES"] == "cpu=1,mem=1000M,node=1,billing=1"
    assert job["AllocNode:Sid"] == "localhost:24965" and job["CPUs/Task"] == "1"
    assert job["NodeList"] == "" and job["Power"] == ""


def test_a_machine_that_cannot_run_slurm_is_named_why(monkeypatch):
    monkeypatch.setattr(sc.os, "geteuid", lambda: 1000)
    assert "root" in sc.unavailable_reason()
    monkeypatch.setattr(sc.os, "geteuid", lambda: 0)
    monkeypatch.setattr(sc, "_which", lambda name: None if name in ("slurmd", "munged") else "/usr/bin/" + name)
    reason = sc.unavailable_reason()
    assert "missing munged, slurmd" in reason and "apt-get install" in reason
    with pytest.raises(sc.ClusterUnavailable, match="missing munged, slurmd"):
        with sc.running_cluster():
            pass


def test_a_job_runs_to_completed(slurm_cluster, tmp_path):
    out = tmp_path / "job.out"
    job_id = slurm_cluster.sbatch("--wrap", "echo ran on $SLURMD_NODENAME", f"--output={out}")
    assert job_id.isdigit()
    job = slurm_cluster.wait_state(job_id, "COMPLETED", timeout=120)
    assert job["ExitCode"] == "0:0" and job["NodeList"] == slurm_cluster.node
    assert out.read_text().strip() == f"ran on {slurm_cluster.node}"


def test_a_pending_job_says_why_and_scancel_ends_it_cancelled(slurm_cluster, tmp_path):
    job_id = slurm_cluster.sbatch("--hold", "--wrap", "true", f"--output={tmp_path / 'held.out'}")
    held = slurm_cluster.wait_state(job_id, "PENDING", timeout=60)
    assert held["Reason"] == "JobHeldUser"
    # the clients reach the cluster through SLURM_CONF, as ftui's own calls do
    assert os.environ["SLURM_CONF"] == str(slurm_cluster.conf)
    squeue = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"], capture_output=True, text=True, timeout=30)
    assert squeue.stdout.strip() == "PENDING|JobHeldUser", squeue.stderr
    subprocess.run(["scancel", job_id], check=True, timeout=30)
    assert slurm_cluster.wait_state(job_id, "CANCELLED", timeout=60)["JobState"] == "CANCELLED"


def test_the_cluster_is_this_host_with_its_partitions(slurm_cluster):
    assert slurm_cluster.node == socket.gethostname().split(".")[0]
    sinfo = slurm_cluster.run("sinfo", "-h", "-o", "%P|%l").stdout.split()
    assert sinfo == ["debug*|infinite", "short|2:00", "low|infinite", "high|infinite"]
    assert slurm_cluster.job("999999") == {}


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


@pytest.mark.slow  # CI time: the session's own cluster is stopped the same way at the end of every run
def test_stopping_a_cluster_leaves_nothing_of_it(slurm_cluster):
    """A second cluster beside the session's: a job still running when it stops is cancelled, its
    daemons and the job's processes end, its directory goes, SLURM_CONF is the session's again."""
    with sc.running_cluster() as other:
        assert os.environ["SLURM_CONF"] == str(other.conf) != str(slurm_cluster.conf)
        job_id = other.sbatch("--wrap", "sleep 600 & wait", f"--output={other.root / 'sleep.out'}")
        other.wait_state(job_id, "RUNNING", timeout=120)
        pids = dict(other.pids)
        listing = other.run("scontrol", "listpids", job_id).stdout.splitlines()[1:]  # below "PID JOBID STEPID ..."
        job_pids = [int(line.split()[0]) for line in listing if line.strip()]
    assert set(pids) == {"munged", "slurmctld", f"slurmd-{other.node}"}
    assert job_pids and not [p for p in list(pids.values()) + job_pids if _alive(p)]
    assert not other.root.exists()
    assert os.environ["SLURM_CONF"] == str(slurm_cluster.conf)


@pytest.mark.slow  # a second cluster of two slurmd, started for this test (~5 s)
def test_two_nodes_run_one_step_on_each(slurm_two_nodes, tmp_path):
    out = tmp_path / "two.out"
    job_id = slurm_two_nodes.sbatch("--nodes=2", "--wrap", "srun bash -c 'echo $SLURM_NODEID $SLURMD_NODENAME'", f"--output={out}")
    job = slurm_two_nodes.wait_state(job_id, "COMPLETED", timeout=120)
    assert job["NodeList"] == "n[1-2]"
    assert sorted(out.read_text().splitlines()) == ["0 n1", "1 n2"]
