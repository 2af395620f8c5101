"""``python -m ftui.jobs.slurm_node RUN_DIR [--resume CHECKPOINT]``: srun's task on each node of a
Slurm job (launcher: slurm), one per node (``srun --ntasks-per-node=1``), in the foreground.

It turns Slurm's environment into the node's place in the run and becomes the node's supervisor:

- node rank = ``SLURM_NODEID``; nnodes = ``SLURM_NNODES``, which must equal the config's ``nnodes``
  (a job given other nodes than the run was planned for is refused, saying so);
- several nodes meet through torchrun's static rendezvous at node 0's address: the first host of
  ``scontrol show hostnames $SLURM_JOB_NODELIST``, as ``scontrol show node`` gives its NodeAddr
  (node names need not resolve); the port is the config's ``rdzv_endpoint`` port if set, else
  ``20000 + job id % 20000``, so two jobs on the same nodes rarely meet on one port; one node
  starts its ranks with ftui.jobs.spawn (no port at all);
- it takes the node directory's job lock (one job per run directory: a second job on the same run
  is refused), appends its own stdout and stderr to the node directory's train.log, and node 0
  rewrites launch.json for this life of the job (keeping the submitter's ``scheduler`` record) and
  removes the previous life's slurm_end.json and requeue_requested;
- then it execs ``python -m ftui.jobs.supervise`` (the lock descriptor survives the exec, so the
  supervisor holds it for the job's whole life): the pid srun waits on, and launch.json's pid, are
  the supervisor's.

A Stop asked for before the ranks start (stop_requested there already: it came while the job was
starting, before the step could receive a signal) ends the life at once, ``stopped``.
No torch here; the config is read with its schema only (the GPUs are Slurm's: CUDA_VISIBLE_DEVICES
is what Slurm gave the step, never replaced).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import psutil

from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.rundir.follower import earlier_segments
from ftui.rundir.launch_record import hostname, read_launch_info, write_launch_info
from ftui.rundir.lock import RunBusy, lock_run_dir
from ftui.rundir.paths import CONFIG_FILE, LOG_FILE, REQUEUE_FILE, SLURM_END_FILE, STOP_FILE, node_dir

PORT_BASE = 20000
PORT_SPAN = 20000
SCONTROL_TIMEOUT_S = 30.0

Scontrol = Callable[[list[str]], str]  # runs ``scontrol ARGS``, returns its stdout


class SlurmNodeError(Exception):
    """The job's environment does not fit the run; the message says what and what to do."""


@dataclass(frozen=True)
class Placement:
    """Where this node's task stands in the job, from Slurm's environment."""

    job_id: str
    node_rank: int
    nnodes: int
    nodes: list[str]  # the job's hosts, node 0 first
    master_addr: str  # node 0's address (its NodeAddr)
    restarts: int  # SLURM_RESTART_COUNT: lives before this one


def run_scontrol(args: list[str]) -> str:
    """``scontrol ARGS``'s output; SlurmNodeError when it cannot be run or fails."""
    try:
        proc = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SlurmNodeError(_("scontrol {args} could not be run: {reason}").format(args=shlex.join(args), reason=err)) from None
    if proc.returncode != 0:
        raise SlurmNodeError(_("scontrol {args} failed: {reason}").format(
            args=shlex.join(args), reason=(proc.stderr or proc.stdout).strip()[:500]))
    return proc.stdout


def _int_env(env: Mapping[str, str], *names: str) -> int:
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    raise SlurmNodeError(_("{name} is not set to a number: this command runs inside a Slurm job, under srun "
                           "(the last line of RUN/slurm.sh starts it)").format(name=names[0]))


def node_addr(show_node: str) -> str | None:
    """NodeAddr from ``scontrol -o show node NAME``'s key=value line(s)."""
    for word in show_node.split():
        if word.startswith("NodeAddr="):
            return word.split("=", 1)[1] or None
    return None


def placement(env: Mapping[str, str], scontrol: Scontrol = run_scontrol) -> Placement:
    """This task's node rank, the job's nodes and node 0's address, from Slurm's environment."""
    job_id = env.get("SLURM_JOB_ID", "").strip()
    if not job_id.isdigit():
        raise SlurmNodeError(_("SLURM_JOB_ID is not set: this command runs inside a Slurm job, under srun "
                               "(the last line of RUN/slurm.sh starts it)"))
    node_rank = _int_env(env, "SLURM_NODEID")
    nnodes = _int_env(env, "SLURM_NNODES", "SLURM_JOB_NUM_NODES")
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    if not nodelist:
        raise SlurmNodeError(_("SLURM_JOB_NODELIST is not set: this command runs inside a Slurm job, under srun"))
    nodes = scontrol(["show", "hostnames", nodelist]).split()
    if not nodes:
        raise SlurmNodeError(_("scontrol show hostnames {nodelist} named no host").format(nodelist=nodelist))
    addr = node_addr(scontrol(["-o", "show", "node", nodes[0]])) or nodes[0]
    restarts = env.get("SLURM_RESTART_COUNT", "0").strip()
    return Placement(job_id=job_id, node_rank=node_rank, nnodes=nnodes, nodes=nodes, master_addr=addr,
                     restarts=int(restarts) if restarts.isdigit() else 0)


def rendezvous_port(cfg: RunConfig, job_id: str) -> int:
    """The config's rdzv_endpoint port when it names one, else one derived from the job id."""
    if cfg.rdzv_endpoint:
        port = cfg.rdzv_endpoint.rpartition(":")[2]
        if port.isdigit():
            return int(port)
    return PORT_BASE + int(job_id) % PORT_SPAN


def node_config(cfg: RunConfig, place: Placement) -> RunConfig:
    """``cfg`` for this node: its rank, and where the nodes meet (several nodes only).
    SlurmNodeError when Slurm gave the job another number of nodes than the config plans."""
    if place.nnodes != cfg.nnodes:
        raise SlurmNodeError(_("Slurm gave the job {got} node(s) but the run's config has nnodes {nnodes}: the ranks, "
                               "their data shards and the checkpoints are planned for {nnodes}; submit it with "
                               "--nodes={nnodes} (as RUN/slurm.sh does), or set nnodes and start a new run").format(
            got=place.nnodes, nnodes=cfg.nnodes))
    if place.node_rank >= place.nnodes:
        raise SlurmNodeError(_("SLURM_NODEID {rank} is not below SLURM_NNODES {nnodes}").format(rank=place.node_rank, nnodes=place.nnodes))
    update: dict[str, object] = {"node_rank": place.node_rank}
    if cfg.nnodes > 1:
        host = f"[{place.master_addr}]" if ":" in place.master_addr else place.master_addr  # an IPv6 NodeAddr
        update["rdzv_endpoint"] = f"{host}:{rendezvous_port(cfg, place.job_id)}"
    return cfg.model_copy(update=update)


def supervisor_command(cfg: RunConfig, run_dir: Path, resume: Path | None, python: str) -> list[str]:
    """``python -m ftui.jobs.supervise HOME [--node-rank K] -- LAUNCH_CMD`` for this node (as
    launch.start_run starts it, here in the foreground)."""
    from ftui.jobs.launch import launch_command

    home = node_dir(run_dir, cfg.node_rank)
    sup = [python, "-m", "ftui.jobs.supervise", str(home)]
    if cfg.node_rank > 0:
        sup += ["--node-rank", str(cfg.node_rank)]
    return [*sup, "--", *launch_command(cfg, run_dir, python, resume=resume)]


def life_record(run_dir: Path, cfg: RunConfig, place: Placement, cmd: list[str], env: Mapping[str, str],
                resume: Path | None, now: float | None = None) -> dict:
    """launch.json for this life of the job (node 0): the submitter's ``scheduler`` record kept,
    this process's pid (the supervisor's once it execs), the nodes and the lives before this one;
    a resumed life carries the earlier segments as launch.start_run does. Read before the new
    job writes its run_start."""
    from ftui.jobs.launch import recorded_env

    before = read_launch_info(run_dir)
    info: dict = {k: before[k] for k in ("scheduler",) if k in before}
    try:
        create_time: float | None = psutil.Process(os.getpid()).create_time()  # exec keeps the pid and its start
    except psutil.Error:
        create_time = None
    info.update({
        "host": hostname(),
        "start_time": time.time() if now is None else now,
        "command": cmd,
        "command_line": shlex.join(cmd),
        "cwd": os.getcwd(),
        "python": sys.executable,
        "env": recorded_env(env),
        "pid": os.getpid(),
        "create_time": create_time,
        "pgid": os.getpgid(0),
        "nodes": place.nodes,
        "restarts": place.restarts,
    })
    if resume is not None:
        info.update({"resumed_from": str(resume), **earlier_segments(run_dir)})
    return info


def start_life(run_dir: Path) -> None:
    """Node 0, at a life's start: the previous life's slurm_end.json and requeue_requested
    (ftui wrote them) no longer describe the job."""
    for name in (SLURM_END_FILE, REQUEUE_FILE):
        try:
            (run_dir / name).unlink(missing_ok=True)
        except OSError:
            pass


def say(message: str, *more: int) -> None:
    """A line to stderr (Slurm's output file before the dup2, train.log after) and to ``more`` fds."""
    line = ("[ftui] " + message + "\n").encode("utf-8", "replace")
    for fd in (2, *more):
        try:
            os.write(fd, line)
        except OSError:
            pass


def parse_args(argv: list[str]) -> tuple[Path, Path | None] | None:
    """``RUN_DIR [--resume CKPT]``, the arguments of srun's task and of the batch step alike;
    None when they are not that."""
    if len(argv) == 1:
        return Path(argv[0]), None
    if len(argv) == 3 and argv[1] == "--resume":
        return Path(argv[0]), Path(argv[2])
    return None


def become_supervisor(cmd: list[str], env: dict[str, str], log: int, lock: int) -> None:
    """This process's output to train.log from here on, then the supervisor in its place, holding
    the job lock (its descriptor survives the exec)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.set_inheritable(lock, True)
    os.execve(cmd[0], cmd, env)


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None, scontrol: Scontrol = run_scontrol,
         become: Callable[[list[str], dict[str, str], int, int], None] = become_supervisor) -> int:
    """Prepares this node and execs its supervisor (returns only when it refuses: the exit code)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args is None:
        say(_("usage: python -m ftui.jobs.slurm_node RUN_DIR [--resume CHECKPOINT_DIR]"))
        return 2
    run_dir, resume = args[0].resolve(), args[1]
    env = dict(os.environ if env is None else env)
    try:
        node_rank = _int_env(env, "SLURM_NODEID")
    except SlurmNodeError as err:
        say(str(err))
        return 2
    home = node_dir(run_dir, node_rank)
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = lock_run_dir(home, clear_stop=False)  # a Stop that came while the job started still counts
    except (RunBusy, OSError) as err:
        say(_("node {node}: not started: {reason}").format(node=node_rank, reason=err))
        return 1
    try:
        log = os.open(home / LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as err:
        os.close(lock)
        say(_("node {node}: not started: {path} cannot be written: {reason}").format(node=node_rank, path=home / LOG_FILE, reason=err))
        return 1
    try:
        return prepare_and_become(run_dir, resume, env, scontrol, become, node_rank, log, lock)
    finally:  # reached only when this node refuses (or a test's stand-in returns)
        for fd in (log, lock):
            try:
                os.close(fd)
            except OSError:
                pass


def prepare_and_become(run_dir: Path, resume: Path | None, env: dict[str, str], scontrol: Scontrol,
                       become: Callable[[list[str], dict[str, str], int, int], None], node_rank: int, log: int, lock: int) -> int:
    """With the lock held and train.log open: the node's config, node 0's records, the exec."""
    from ftui.config.load import ConfigError, read_run_config
    from ftui.jobs.torch_env import torch_process_env

    try:
        place = placement(env, scontrol)
        cfg = node_config(read_run_config(run_dir / CONFIG_FILE), place)
    except (SlurmNodeError, ConfigError) as err:
        say(_("node {node}: not started: {reason}").format(node=node_rank, reason=err), log)
        return 2
    if (run_dir / STOP_FILE).exists():
        if node_rank == 0:
            from ftui.jobs.supervise import write_run_end
            from ftui.rundir.summary import STOPPED_EARLY_REASON

            write_run_end(run_dir, status="stopped", reason=STOPPED_EARLY_REASON)
        say(_("node {node}: a Stop was asked for before the ranks started: not starting them").format(node=node_rank), log)
        return 0
    child_env = torch_process_env(base=env)
    cmd = supervisor_command(cfg, run_dir, resume, sys.executable)
    if node_rank == 0:
        launch_cmd = cmd[cmd.index("--") + 1:]
        try:
            write_launch_info(run_dir, life_record(run_dir, cfg, place, launch_cmd, child_env, resume))
        except OSError as err:
            say(_("node 0: not started: launch.json cannot be written: {reason}").format(reason=err), log)
            return 1
        start_life(run_dir)
    say(_("node {node} of {nnodes} on {host} (job {job}, life {life}): {command}").format(
        node=node_rank, nnodes=place.nnodes, host=hostname(), job=place.job_id, life=place.restarts + 1,
        command=shlex.join(cmd)), log)
    become(cmd, child_env, log, lock)
    return 1  # only a test's stand-in returns


if __name__ == "__main__":
    sys.exit(main())
