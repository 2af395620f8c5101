"""A real Slurm cluster on this host, for the tests of ftui's Slurm launcher (issue 45).

Debian's Slurm 22.05 (slurmctld, slurmd, slurm-client) and munge, started as plain background
daemons in one temporary directory: nothing in /etc is read or written, every port is a free one,
and only what this module started is stopped. One node (this host's short name, 2 CPUs) by
default, or several slurmd on this one host, each a "node" with its own port (NodeHostname is
this host, NodeAddr 127.0.0.1), for a multi-node job. The configuration makes Slurm's slow paths
fast enough for a test: a requeued job waits cred_expire (5 s, not 120) before it runs again, the
backfill scheduler looks every second, and an ended job stays known for MinJobAge (600 s).

Every Slurm client (sbatch, squeue, scontrol, scancel, srun) finds the cluster through SLURM_CONF:
``SlurmCluster.env`` has it, and the test session's fixture sets it in os.environ, so ftui's own
calls reach the cluster. Starting needs root (slurmd runs jobs as their users) and the packages;
where either is missing, or the daemons do not come up, ``ClusterUnavailable`` says why (the
fixture skips with it)."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

# The programs a cluster needs: munge's daemon and key maker, Slurm's two daemons and the clients
# the fixture and ftui call; runuser starts munged as the munge user (munged refuses root's key)
PROGRAMS = ("munged", "mungekey", "runuser", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue", "scancel", "srun")
PACKAGES = "slurmctld slurmd slurm-client munge"
CLUSTER_NAME = "ftuitest"
UP_TIMEOUT_S = 60.0     # daemons idle ~1.2 s after start here; generous for a loaded CI machine
KILL_WAIT_S = 10        # slurm.conf KillWait: TERM, then KILL this many seconds later
CLIENT_TIMEOUT_S = 30.0
# What the daemons log as errors on every start here: a fresh StateSaveLocation has no state
# files yet, and this Slurm has no PMIx library (MpiDefault=none never uses it)
EXPECTED_ERRORS = re.compile(r"state file|Trying backup state|pmix", re.IGNORECASE)


class ClusterUnavailable(Exception):
    """Slurm cannot run here (what is missing), or its daemons did not come up (what their logs say)."""


def _which(name: str) -> str | None:
    """A program on PATH or in the sbin folders (where Debian puts the daemons), which a user's
    PATH may lack."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/local/sbin")


def unavailable_reason() -> str | None:
    """Why a cluster cannot start on this machine, before trying: not root, a program missing,
    no munge user. None when it can be tried."""
    if os.geteuid() != 0:
        return "needs root to start Slurm's daemons (slurmd runs each job as the user who submitted it)"
    missing = [name for name in PROGRAMS if _which(name) is None]
    if missing:
        return (f"needs Slurm and munge, not installed here (missing {', '.join(missing)}): "
                f"apt-get install --no-install-recommends {PACKAGES} (.ci/run does, as root)")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "needs the munge user, which the munge package creates: reinstall munge"
    return None


def free_ports(count: int) -> list[int]:
    """Ports nobody listens on now (bound together, so they differ)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def host_hardware() -> dict[str, str]:
    """`slurmd -C`'s line (NodeName, CPUs, Boards, SocketsPerBoard, CoresPerSocket,
    ThreadsPerCore, RealMemory): what slurmd will report when it registers."""
    out = subprocess.run([_which("slurmd") or "slurmd", "-C"], capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
    first = out.stdout.splitlines()[0] if out.stdout.strip() else ""
    found = dict(tok.split("=", 1) for tok in first.split() if "=" in tok)
    if out.returncode != 0 or "CPUs" not in found or "RealMemory" not in found:
        raise ClusterUnavailable(f"`slurmd -C` did not describe this host (rc {out.returncode}): {(out.stderr or out.stdout)[-500:]}")
    return found


def parse_job_line(line: str) -> dict[str, str]:
    """`scontrol -o show job ID`'s one line as a dict: KEY=VALUE pairs split where the next
    ' KEY=' starts (a value such as Command or WorkDir may hold spaces)."""
    pairs = re.findall(r"(?:^|\s)([A-Za-z][\w/:]*)=(.*?)(?=\s[A-Za-z][\w/:]*=|\s*$)", line.strip())
    return {key: value for key, value in pairs}


def node_line(name: str, hw: dict[str, str], cpus: int, memory: int, *, hostname: str | None, port: int | None) -> str:
    """One NodeName line. The host's own topology when it has no more than ``cpus``; else
    ``cpus`` cores of one socket (fewer than slurmd reports is accepted; more would drain the
    node as 'low socket*core count')."""
    if int(hw["CPUs"]) <= cpus and hostname is None:
        topology = " ".join(f"{k}={hw[k]}" for k in ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore") if k in hw)
    else:
        topology = f"CPUs={cpus} Boards=1 SocketsPerBoard=1 CoresPerSocket={cpus} ThreadsPerCore=1"
    extra = (f" NodeHostname={hostname}" if hostname else "") + (f" Port={port}" if port else "")
    return f"NodeName={name}{extra} NodeAddr=127.0.0.1 {topology} RealMemory={memory} State=UNKNOWN"


class SlurmCluster:
    """One Slurm cluster in ``root``: its munged, slurmctld and one slurmd per node.

    ``nodes`` None: one node named as this host (`slurmd -C`), with up to ``cpus`` CPUs. A list of
    names: one slurmd per name on this host, each ``cpus`` CPUs and an equal share of memory."""

    def __init__(self, root: Path, nodes: list[str] | None = None, cpus: int = 2):
        self.root = Path(root)
        self.conf = self.root / "slurm.conf"
        self.socket = self.root / "msock" / "munge.socket"
        self.log_dir = self.root / "log"
        self._named_nodes = nodes
        self.cpus = cpus
        self.nodes: list[str] = list(nodes or [])
        self.pids: dict[str, int] = {}
        self._started_slurm = False

    @property
    def node(self) -> str:
        """The (first) node's name: the host's short name on a one-node cluster."""
        return self.nodes[0]

    @property
    def env(self) -> dict[str, str]:
        """This process's environment with SLURM_CONF naming this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # --- start
    def start(self) -> None:
        """munged, then slurmctld and the slurmd, then wait until every node is idle. Raises
        ClusterUnavailable with the logs' last errors when something does not come up (what
        did start keeps running: call stop())."""
        reason = unavailable_reason()
        if reason:
            raise ClusterUnavailable(reason)
        self._start_munge()
        self.conf.write_text(self._config())
        self._started_slurm = True
        self._daemon(["slurmctld", "-f", str(self.conf)])
        for name in self._slurmd_names():
            self._daemon(["slurmd", "-f", str(self.conf)] + (["-N", name] if name else []))
        self._wait_idle()
        self._read_pids()

    def _start_munge(self) -> None:
        munge = pwd.getpwnam("munge")
        key_dir, sock_dir = self.root / "munge", self.socket.parent
        for folder, mode in ((key_dir, 0o700), (sock_dir, 0o755)):  # munged: a socket dir all can search
            folder.mkdir(mode=mode)
            os.chmod(folder, mode)
            os.chown(folder, munge.pw_uid, munge.pw_gid)
        for folder in ("state", "spool", "run", "log"):
            (self.root / folder).mkdir()
        as_munge = [_which("runuser"), "-u", "munge", "--"]
        key = key_dir / "munge.key"
        self._checked(as_munge + [_which("mungekey"), "--create", f"--keyfile={key}"], "mungekey")
        self._checked(as_munge + [_which("munged"), f"--key-file={key}", f"--socket={self.socket}",
                                  f"--pid-file={sock_dir / 'munged.pid'}", f"--log-file={key_dir / 'munged.log'}",
                                  f"--seed-file={key_dir / 'munged.seed'}"], "munged", key_dir / "munged.log")
        self._read_pids()

    def _checked(self, argv: list[str], what: str, log: Path | None = None) -> None:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S, env=self.env)
        if out.returncode != 0:
            said = " / ".join((out.stderr or out.stdout).strip().splitlines()[:3])[:600]
            if log is not None and log.is_file():
                said += " | " + _tail(log, 5)
            raise ClusterUnavailable(f"{what} failed (rc {out.returncode}): {said}")

    def _daemon(self, argv: list[str]) -> None:
        """A Slurm daemon, which forks into the background once it has read its configuration."""
        self._checked([_which(argv[0]) or argv[0]] + argv[1:], argv[0])

    def _slurmd_names(self) -> list[str | None]:
        return [None] if self._named_nodes is None else list(self._named_nodes)

    def _config(self) -> str:
        hw = host_hardware()
        host = socket.gethostname().split(".")[0]
        memory = int(hw["RealMemory"])
        count = len(self._named_nodes or [None])
        cpus = min(self.cpus, int(hw["CPUs"]))
        node_memory = memory // count
        ctld_port, slurmd_port, *node_ports = free_ports(2 + (count if self._named_nodes else 0))
        if self._named_nodes is None:
            self.nodes = [hw.get("NodeName") or host]
            node_lines = [node_line(self.node, hw, cpus, memory, hostname=None, port=None)]
        else:
            node_lines = [node_line(n, hw, cpus, node_memory, hostname=host, port=p) for n, p in zip(self.nodes, node_ports)]
        # Each job's default memory: several fit on a node together (without DefMemPerCPU a job
        # takes all of RealMemory, and one job at a time runs)
        per_cpu = max(100, min(1000, node_memory // (2 * cpus)))
        d = self.root
        lines = [
            f"ClusterName={CLUSTER_NAME}", f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={self.socket},cred_expire=5",  # cred_expire: a requeued job's wait (default 120 s)
            f"StateSaveLocation={d}/state", f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/run/slurmctld.pid", f"SlurmdPidFile={d}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/log/slurmctld.log", f"SlurmdLogFile={d}/log/slurmd-%n.log",
            "SlurmctldDebug=info", "SlurmdDebug=info", f"MailProg={shutil.which('true') or '/bin/true'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "MpiDefault=none", "SwitchType=switch/none",
            "SchedulerType=sched/backfill", "SchedulerParameters=bf_interval=1",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory", f"DefMemPerCPU={per_cpu}",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt", f"JobCompLoc={d}/log/jobcomp.txt",  # one line per ending, for a failing test's message
            "ReturnToService=2", "MinJobAge=600", f"KillWait={KILL_WAIT_S}", "SlurmdTimeout=30", "InactiveLimit=0",
            "JobRequeue=1",
            # partition `high` preempts the others: `low` jobs end PREEMPTED, the rest are requeued
            "PreemptType=preempt/partition_prio", "PreemptMode=REQUEUE",
            *node_lines,
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1",
            "PartitionName=short Nodes=ALL MaxTime=2 State=UP PriorityTier=1",
            "PartitionName=low Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL",
            "PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10",
        ]
        return "\n".join(lines) + "\n"

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + UP_TIMEOUT_S
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            out = self.run("sinfo", "-h", "-N", "-o", "%N|%T", check=False)
            states = dict(line.split("|", 1) for line in out.stdout.splitlines() if "|" in line)
            if states and set(self.nodes) <= set(states) and all(states[n] == "idle" for n in self.nodes):
                return
            time.sleep(0.2)
        raise ClusterUnavailable(f"Slurm's nodes were not idle after {UP_TIMEOUT_S:.0f} s (sinfo: {states or 'no answer'}); "
                                 f"the logs say: {self.log_errors()}")

    # --- use
    def run(self, *argv: str, check: bool = True, timeout: float = CLIENT_TIMEOUT_S) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        out = subprocess.run([_which(argv[0]) or argv[0], *argv[1:]], capture_output=True, text=True, timeout=timeout, env=self.env)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed (rc {out.returncode}): {out.stderr.strip()[-800:]}")
        return out

    def sbatch(self, *args: str) -> str:
        """Submits (`sbatch --parsable ARGS`) and returns the job id."""
        return self.run("sbatch", "--parsable", *args).stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol -o show job ID` as a dict (JobState, Reason, Restarts, ExitCode, ...); empty
        when Slurm does not know the job."""
        out = self.run("scontrol", "-o", "show", "job", str(job_id), check=False)
        if out.returncode != 0:
            if "Invalid job id" in out.stderr:
                return {}
            raise RuntimeError(f"scontrol show job {job_id} failed (rc {out.returncode}): {out.stderr.strip()[-800:]}")
        return parse_job_line(out.stdout.splitlines()[0]) if out.stdout.strip() else {}

    def wait_state(self, job_id: str, states: str | Iterable[str], timeout: float = 120.0) -> dict[str, str]:
        """The job once its JobState is one of ``states``; AssertionError (with the job and the
        logs' last errors) when it is not within ``timeout`` seconds."""
        wanted = {states} if isinstance(states, str) else set(states)
        deadline = time.monotonic() + timeout
        job: dict[str, str] = {}
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job.get("JobState") in wanted:
                return job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} not {'/'.join(sorted(wanted))} after {timeout:.0f} s: "
                             f"JobState={job.get('JobState')} Reason={job.get('Reason')}; logs: {self.log_errors()}")

    def log_errors(self, lines: int = 6) -> str:
        """The last error lines of every daemon's log (what a skip or a failure names)."""
        said = []
        for log in sorted(self.log_dir.glob("*.log")) + sorted((self.root / "munge").glob("*.log")):
            errors = [ln for ln in _lines(log) if ("error" in ln.lower() or "fatal" in ln.lower()) and not EXPECTED_ERRORS.search(ln)]
            if errors:
                said.append(f"{log.name}: " + " / ".join(errors[-lines:]))
        return "; ".join(said) or "no errors logged"

    # --- stop
    def stop(self) -> None:
        """Cancels the jobs still queued or running, stops slurmctld and slurmd (scontrol
        shutdown) and then munged (SIGTERM), kills what of it is left (by the pids it started, and the jobs'
        processes by their SLURM_CONF), and removes the directory."""
        self._read_pids()
        if self._started_slurm:
            self._cancel_jobs()
            self._kill_job_processes()
            self.run("scontrol", "shutdown", check=False)
            self._wait_gone([p for n, p in self.pids.items() if n != "munged"], 30.0)
        if "munged" in self.pids:  # TERM, as `munged -s` sends, without its 2 s of polling
            _kill_if(self.pids["munged"], "munged", signal.SIGTERM)
            self._wait_gone([self.pids["munged"]], 15.0)
        for name, pid in self.pids.items():
            _kill_if(pid, name)
        shutil.rmtree(self.root, ignore_errors=True)

    def _cancel_jobs(self) -> None:
        out = self.run("squeue", "-h", "-o", "%i", check=False)
        ids = out.stdout.split() if out.returncode == 0 else []
        if ids:
            self.run("scancel", *ids, check=False)
        deadline = time.monotonic() + KILL_WAIT_S + 20
        while ids and time.monotonic() < deadline:
            out = self.run("squeue", "-h", "-o", "%i", check=False)
            if out.returncode != 0 or not out.stdout.strip():
                return
            time.sleep(0.3)

    def _kill_job_processes(self) -> None:
        """SIGKILL to the processes of this cluster's jobs still alive (a child that left its step's
        session outlives the job under proctrack/linuxproc): those whose environment names this
        cluster's SLURM_CONF and a SLURM_JOB_ID."""
        mine = f"SLURM_CONF={self.conf}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mine in environ and any(v.startswith(b"SLURM_JOB_ID=") for v in environ):
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except OSError:
                    pass

    def _read_pids(self) -> None:
        files = {"munged": self.socket.parent / "munged.pid", "slurmctld": self.root / "run" / "slurmctld.pid"}
        files.update({f"slurmd-{n}": self.root / "run" / f"slurmd-{n}.pid" for n in self.nodes})
        for name, path in files.items():
            try:
                self.pids[name] = int(path.read_text().strip())
            except (OSError, ValueError):
                pass

    @staticmethod
    def _wait_gone(pids: list[int], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
            time.sleep(0.1)


def _kill_if(pid: int, name: str, sig: int = signal.SIGKILL) -> None:
    """``sig`` to ``pid`` when it is still the daemon this module started (its command line
    names the program: a reused pid is left alone)."""
    program = name.split("-")[0].encode()
    try:
        if program in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, sig)
    except OSError:
        pass


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def _tail(path: Path, count: int) -> str:
    return " / ".join(_lines(path)[-count:])


@contextmanager
def running_cluster(nodes: list[str] | None = None, cpus: int = 2):
    """A started cluster in a new directory under the system's temporary folder (0755: munged,
    running as the munge user, must reach its key and socket), stopped and removed after; sets
    SLURM_CONF in os.environ while it runs and restores it. Raises ClusterUnavailable (after
    stopping what started) when it cannot run."""
    reason = unavailable_reason()
    if reason:
        raise ClusterUnavailable(reason)
    root = Path(tempfile.mkdtemp(prefix="ftui-slurm-"))
    os.chmod(root, 0o755)
    cluster = SlurmCluster(root, nodes=nodes, cpus=cpus)
    saved = os.environ.get("SLURM_CONF")
    try:
        cluster.start()
        os.environ["SLURM_CONF"] = str(cluster.conf)
        yield cluster
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        cluster.stop()
