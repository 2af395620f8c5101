"""Launching and stopping runs: build the launch command, start it detached, signal it.

No torch here (the dashboard starts runs too). A run starts as

    setsid: python -m ftui.jobs.supervise RUN_DIR -- python -m ftui.jobs.spawn ... RUN_DIR

in its own session, so closing the terminal, the app or the SSH connection never reaches
it. ``ftui.jobs.spawn`` starts the ranks of one node without opening a port; a run over
several nodes uses torchrun's static rendezvous instead. The supervisor writes ``run_end``
if the ranks died without one (kill -9, a crash in the launcher itself), so a run's status
is always told by its files.

Several nodes make one run directory, node 0's, on a filesystem they share: the other nodes
join it (``join_target``), their ranks write their part of every checkpoint there, and each
node's supervisor keeps its own records in ``RUN/nodes/node-K`` (``ftui.rundir.paths.node_dir``).
"""

from __future__ import annotations

import importlib.util  # noqa: F401  (tests patch find_spec through it)
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import psutil

from ftui.config.schema import RunConfig
from ftui.i18n import _
from ftui.jobs.launchers import launcher_for
from ftui.jobs.launchers.torchrun import torchrun_has_shutdown_timeout  # noqa: F401  (kept importable from here)
from ftui.jobs.torch_env import torch_process_env
from ftui.rundir.paths import LAUNCH_FILE, node_dir
from ftui.rundir.run_dir import RunBusy, RunDir  # noqa: F401  (RunBusy: callers catch it from here)
from ftui.safety.url_secrets import redact_urls
from ftui.rundir.follower import earlier_segments
from ftui.rundir.launch_record import create_run_dir, hostname, read_launch_info, write_launch_info
from ftui.rundir.liveness import launcher_process
from ftui.rundir.lock import lock_run_dir
from ftui.rundir.paths import CONFIG_FILE, LOG_FILE, STOP_FILE
from ftui.rundir.slurm_state import slurm_scheduler

SECRET_NAME = re.compile(r"(TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.I)


def launch_command(cfg: RunConfig, run_dir: Path, python: str | None = None, resume: Path | None = None,
                   job: str = "train") -> list[str]:
    """The exact command that starts the ranks on this node: the launcher that
    ``ftui.jobs.launchers.launcher_for`` picks (``local``: ``ftui.jobs.spawn``, one node, no
    port opened; ``torchrun``: static rendezvous over several nodes; why, in their modules)."""
    tail = [job, str(run_dir), *(["--resume", str(resume)] if resume is not None else [])]
    return launcher_for(cfg).command(cfg, run_dir, python or sys.executable, tail)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """The environment as launch.json records it: a variable named like a secret blanked
    whole, and in every other value the credentials of any URL (HF_ENDPOINT=https://user:token@mirror
    is recorded as https://***@mirror)."""
    return {k: ("<redacted>" if SECRET_NAME.search(k) else redact_urls(v)) for k, v in env.items()}


RECORDED_ENV = ("FTUI_", "CUDA_", "HF_", "NCCL_", "OMP_")  # the variables launch.json records


def recorded_env(env: Mapping[str, str]) -> dict[str, str]:
    """The part of a job's environment launch.json records (RECORDED_ENV's prefixes), redacted
    (redact_env): one rule for a local start, a Slurm submit and each life of a Slurm job."""
    return redact_env({k: v for k, v in env.items() if k.startswith(RECORDED_ENV)})


def create_run(cfg: RunConfig, name: str | None = None) -> RunDir:
    """Creates the run directory under ``cfg.output_dir``, writes the resolved config
    (without unsupported keys) and the data fingerprint a resume compares with (each
    dataset file's size and sha256: a read of every file, so the app calls this in a
    worker) and, when the run is outside the default runs root, adds it to the user's run
    index. The fingerprint is computed first: a dataset that cannot be read leaves no
    directory behind."""
    from ftui.data import fingerprint as data_fingerprint

    fingerprint = data_fingerprint.compute(cfg)
    run = RunDir(create_run_dir(cfg.output_dir, run_label(cfg, name)))
    run.save_config(cfg)
    data_fingerprint.record(run.path, fingerprint)
    run.index()
    return run


def run_label(cfg: RunConfig, name: str | None = None) -> str:
    """What a new run's directory is named after (create_run_dir adds the time)."""
    return name or cfg.run_name or f"{Path(cfg.model_name_or_path).name}-{cfg.method}"


def prepare_run(cfg: RunConfig, name: str | None = None) -> Path:
    """Creates the run directory with its config, data fingerprint and run index entry
    (create_run, where the order is explained); returns its path."""
    return create_run(cfg, name).path


def start_run(run_dir: Path, cfg: RunConfig, extra_env: dict[str, str] | None = None, resume: Path | None = None,
              lock: int | None = None, job: str = "train") -> dict[str, Any]:
    """Starts the supervisor + launcher in a new session; returns what launch.json records.

    ``lock``: the job lock of the node's directory if the caller took it already
    (lock_run_dir); else it is taken here (RunBusy when another job runs). ``job``: the
    runner's job (train; predict and eval in a job directory of their own). On node K > 0 of
    a multi-node run, ``run_dir`` is node 0's run (the ranks write checkpoints there) and the
    supervisor's records go to ``RUN/nodes/node-K``."""
    run_dir = run_dir.resolve()
    cmd = launch_command(cfg, run_dir, resume=resume, job=job)
    home = node_dir(run_dir, cfg.node_rank)
    sup = [sys.executable, "-m", "ftui.jobs.supervise", str(home)]
    if cfg.node_rank > 0:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        sup += ["--node-rank", str(cfg.node_rank)]
    full = [*sup, "--", *cmd]
    env = torch_process_env(extra_env)
    if cfg.gpus is not None:  # the GPUs picked in the form or the config: they replace the environment's
        env["CUDA_VISIBLE_DEVICES"] = cfg.gpus
    # Read before the new job can write its run_start (and before launch.json is replaced).
    carried = earlier_segments(home) if resume is not None and cfg.node_rank == 0 else {}  # node K's records are not listed
    lock = lock_run_dir(home) if lock is None else lock
    try:
        log = open(home / LOG_FILE, "ab", buffering=0)
    except OSError:
        os.close(lock)
        raise
    try:
        proc = subprocess.Popen(
            full, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env=env, cwd=os.getcwd(), close_fds=True, pass_fds=(lock,),
        )
    finally:
        log.close()
        os.close(lock)  # the supervisor holds it now (pass_fds), for as long as it lives
    info = {
        "command": cmd,
        "command_line": shlex.join(cmd),
        "pid": proc.pid,
        "create_time": _create_time(proc.pid),  # with the pid, identifies the supervisor (pids are reused)
        "pgid": proc.pid,  # start_new_session: the supervisor leads its own group
        "host": hostname(),
        "start_time": time.time(),
        "cwd": os.getcwd(),
        "python": sys.executable,
        "env": recorded_env(env),
        **({"resumed_from": str(resume), **carried} if resume is not None else {}),
    }
    write_launch_info(home, info)
    return info


def other_node_commands(cfg: RunConfig, run_dir: Path, resume: Path | None = None) -> list[str]:
    """What to run on each other node of the job (its launcher's ``other_node_commands``)."""
    return launcher_for(cfg).other_node_commands(cfg, run_dir, resume)


def join_target(config_path: str | os.PathLike[str]) -> Path | None:
    """The run directory that node K > 0 joins: node 0's, when ``config_path`` is the
    config.yaml of a run ftui started (the command node 0 prints names it); None otherwise.

    A node must not make a run directory of its own: the ranks of every node write their part
    of each checkpoint into the run directory they are given (DCP spreads even DDP's
    replicated tensors over the ranks; DeepSpeed writes each rank's optimizer partition), so a
    second directory would leave every checkpoint of the run incomplete."""
    path = Path(config_path).expanduser().resolve()
    if path.name == CONFIG_FILE and (path.parent / LAUNCH_FILE).is_file():
        return path.parent
    return None


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def run_processes(run_dir: Path) -> tuple[psutil.Process | None, list[psutil.Process]]:
    """The run's supervisor and every process below it (launcher and ranks). A process that
    merely has the recorded pid (reused after the supervisor exited) is not the run's."""
    sup = launcher_process(read_launch_info(run_dir), run_dir)
    if sup is None:
        return None, []
    try:
        children = sup.children(recursive=True)
    except psutil.Error:
        return None, []
    return sup, children


def stop_run(run_dir: Path, force: bool = False) -> str:
    """Graceful: SIGTERM to the launcher's process group (supervisor + launcher). The launcher
    passes it to the ranks once; they finish the step, save a checkpoint and write run_end
    `stopped`; it kills them after ``stop_timeout``. Force: SIGKILL every process of the run.

    Only a supervisor identified by more than its pid is signalled (launcher_process), and a
    graceful Stop first leaves ``stop_requested`` in the run directory: a job stopped during
    start-up, before any rank could write run_end, still ends `stopped`.

    A run Slurm runs is stopped through Slurm (ftui.jobs.slurm_control; SlurmControlError
    when Slurm cannot be asked)."""
    launch = read_launch_info(run_dir)
    if slurm_scheduler(launch) is not None:
        from ftui.jobs.slurm_control import stop_slurm_job

        return stop_slurm_job(Path(run_dir), launch, force=force)
    sup, children = run_processes(run_dir)
    if sup is None:
        return _("the run is not running")
    if force:
        # The launcher starts each rank in a session of its own, so killing the supervisor's
        # process group would leave the ranks running: kill every process of the tree.
        for p in [*children, sup]:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        return _("killed")
    try:
        (Path(run_dir) / STOP_FILE).write_text(f"{time.time()}\n")
    except OSError:
        pass  # the signal still stops it; only a stop during start-up would then read as failed
    try:
        if os.getpgid(sup.pid) == sup.pid:
            os.killpg(sup.pid, signal.SIGTERM)  # start_new_session: the supervisor leads the group
        else:
            sup.send_signal(signal.SIGTERM)
    except (ProcessLookupError, PermissionError, psutil.Error):
        return _("the run is not running")
    ranks = [p for p in children if is_rank(p)]
    return _("asked the launcher to stop {count} rank(s): they finish the step and save a checkpoint").format(count=len(ranks))


def is_rank(p: psutil.Process) -> bool:
    """A training rank (not the supervisor or the launcher that started it)."""
    try:
        cmd = p.cmdline()
        return "ftui.runner" in cmd and "torch.distributed.run" not in cmd
    except psutil.Error:
        return False
