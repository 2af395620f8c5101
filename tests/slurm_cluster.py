"""A one-node Slurm cluster on this host for the tests (issue 45's agreed fixture, interface 9).

slurm-submit's minimal version, standing in until slurm-cluster's lands (theirs replaces it):
munged + slurmctld + one slurmd in a temporary directory on free ports, SLURM_CONF set for the
session, everything stopped after. Skipped with the reason where Slurm is not installed, we
are not root, or the daemons do not come up.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conf(d: Path, node: str) -> str:
    return "\n".join([
        "ClusterName=ftuitest", f"SlurmctldHost={node}(127.0.0.1)", f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}", "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={d}/msock/munge.socket,cred_expire=5", f"StateSaveLocation={d}/state",
        f"SlurmdSpoolDir={d}/spool/%n", f"SlurmctldPidFile={d}/run/slurmctld.pid", f"SlurmdPidFile={d}/run/slurmd.pid",
        f"SlurmctldLogFile={d}/log/slurmctld.log", f"SlurmdLogFile={d}/log/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none", "SwitchType=switch/none",
        "SchedulerType=sched/backfill", "SchedulerParameters=bf_interval=1", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory", "DefMemPerCPU=1000", "AccountingStorageType=accounting_storage/none",
        "ReturnToService=2", "MinJobAge=600", "KillWait=10", "SlurmdTimeout=30", "InactiveLimit=0", "JobRequeue=1",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
        "RealMemory=8000 State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
        f"PartitionName=short Nodes={node} MaxTime=2 State=UP", ""])


@dataclass
class SlurmCluster:
    conf: Path
    node: str

    def _run(self, *args: str) -> str:
        return subprocess.run(args, capture_output=True, text=True, check=True, timeout=30,
                              env={**os.environ, "SLURM_CONF": str(self.conf)}).stdout

    def sbatch(self, *args: str) -> str:
        return self._run("sbatch", "--parsable", *args).strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        line = self._run("scontrol", "-o", "show", "job", job_id)
        return dict(item.split("=", 1) for item in line.split() if "=" in item)

    def wait_state(self, job_id: str, states: set[str] | tuple[str, ...], timeout: float = 60.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.get("JobState") in states or time.monotonic() > deadline:
                return job
            time.sleep(0.2)


def start_cluster(d: Path):
    """Starts the daemons under ``d``; yields the SlurmCluster; stops them."""
    missing = [n for n in DAEMONS if shutil.which(n) is None]
    if missing:
        pytest.skip(f"needs Slurm and munge installed (missing: {', '.join(missing)})")
    if os.geteuid() != 0:
        pytest.skip("the test cluster's daemons run as root")
    node = socket.gethostname().split(".")[0]
    for sub in ("munge", "msock", "state", "spool", "run", "log"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    shutil.chown(d / "munge", "munge", "munge")
    shutil.chown(d / "msock", "munge", "munge")
    os.chmod(d / "munge", 0o700)
    os.chmod(d / "msock", 0o755)
    os.chmod(d, 0o755)
    conf = d / "slurm.conf"
    conf.write_text(_conf(d, node))
    sock = d / "msock" / "munge.socket"
    subprocess.run(["runuser", "-u", "munge", "--", "mungekey", "--create", f"--keyfile={d}/munge/munge.key"], check=True)
    subprocess.run(["runuser", "-u", "munge", "--", "munged", f"--key-file={d}/munge/munge.key", f"--socket={sock}",
                    f"--pid-file={d}/msock/munged.pid", f"--log-file={d}/munge/munged.log",
                    f"--seed-file={d}/munge/munged.seed"], check=True)
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    try:
        subprocess.run(["slurmctld", "-f", str(conf)], check=True)
        subprocess.run(["slurmd", "-f", str(conf)], check=True)
        deadline = time.monotonic() + 30
        while True:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True).stdout
            if "idle" in out:
                break
            if time.monotonic() > deadline:
                pytest.skip(f"the test cluster's node did not come up: sinfo says {out.strip()!r}")
            time.sleep(0.2)
        yield SlurmCluster(conf, node)
    finally:
        subprocess.run(["scontrol", "shutdown"], capture_output=True, timeout=30)
        subprocess.run(["munged", "-s", f"--socket={sock}"], capture_output=True, timeout=30)
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
