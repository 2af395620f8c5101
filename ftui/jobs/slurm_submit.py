"""Submitting a run to a Slurm cluster (``launcher: slurm``; docs/clusters.md): the batch script
ftui writes into the run directory, the shared-filesystem probe, ``sbatch`` and the first
launch.json of the job.

The script asks Slurm for ``nnodes`` nodes with one task each and ends in
``exec PYTHON -m ftui.jobs.slurm_batch RUN_DIR``: the batch step runs ``srun`` over the nodes,
and each node's ``ftui.jobs.slurm_node`` starts that node's ranks (nproc_per_node of them) as a
local run does. Slurm signals the batch shell (``B:USR1``) before the time limit so the run can
save a checkpoint and requeue itself; Stop goes through ``scancel`` (ftui.jobs.slurm_control).

Every failure is a SlurmSubmitError whose text says what happened and what to do; the caller
(ftui.ops.start) removes the run directory it made, so nothing is left half made. Torch-free:
the app submits too. Slurm's output is untrusted text: shown bounded and with its control
characters escaped (ftui.safety.text.visible).
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftui.i18n import N_, _
from ftui.config.slurm_rules import sbatch_line
from ftui.rundir.launch_record import hostname, write_launch_info
from ftui.rundir.paths import SLURM_OUTPUT_PATTERN, SLURM_SCRIPT_FILE
from ftui.safety.text import visible

if TYPE_CHECKING:
    from ftui.config.schema import RunConfig

SBATCH_TIMEOUT_S = 60.0  # sbatch answers in well under a second; a busy controller may take tens of seconds
PROBE_WAIT_S = 60  # srun --immediate: how long the probe waits for a node before the check is skipped
PROBE_TIMEOUT_S = PROBE_WAIT_S + 120.0  # the wait, Python's start on the node, and slack
PROBE_READ_S = 5.0  # how long the submitting side looks for the probe's file (a network filesystem's delay)
SHOWN_MAX = 600  # the characters of Slurm's own words a message quotes
BUSY_WORDS = ("requested nodes are busy", "can not start immediately", "immediate execution impossible")
# words of Slurm's refusals (sbatch's and srun's stderr, lowercased) -> the field to change; account before
# partition ("Invalid account or account/partition combination specified")
REFUSED_FIELDS = (("account", "slurm_account"), ("partition", "slurm_partition"), ("qos", "slurm_qos"),
                  ("feature", "slurm_constraint"), ("constraint", "slurm_constraint"), ("gres", "slurm_gpus_per_node"),
                  ("memory", "slurm_mem_per_task"), ("time", "slurm_time"),
                  ("node configuration", "nnodes, nproc_per_node, slurm_gpus_per_node, slurm_cpus_per_task or slurm_mem_per_task"))


class SlurmSubmitError(Exception):
    """The run could not be submitted; str(): what happened and what to do."""


def gpus_per_node(cfg: RunConfig) -> int:
    """--gpus-per-node: slurm_gpus_per_node when set, none for a CPU run, else one per rank."""
    if cfg.device == "cpu":
        return 0
    return cfg.nproc_per_node if cfg.slurm_gpus_per_node is None else cfg.slurm_gpus_per_node


def sbatch_value(text: str) -> str:
    """``text`` quoted for an #SBATCH line, which sbatch splits at blanks and at an unquoted ``#``
    and reads with backslash escapes (its script parser): double quotes with ``\\`` and ``"`` escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def output_path(run_dir: Path) -> str:
    """--output: RUN/slurm-%j.out (batch_script refuses a run directory whose path Slurm would
    read as part of the pattern)."""
    return f"{run_dir}/{SLURM_OUTPUT_PATTERN}"


def unpatterned_path(path: str) -> str:
    """Why a run directory with ``%`` or ``\\`` in its path cannot take Slurm's output: sbatch
    reads ``%x`` in --output as a replacement (``%%`` too: Slurm 22.05 wrote ``%%j`` as ``%8``)
    and a backslash turns every replacement off (the job id would be lost)."""
    return _("the run directory {path} has a '%' or a backslash in its path, which Slurm reads in the job's output "
             "file name (RUN/slurm-%j.out); set output_dir to a directory without them").format(path=visible(path, one_line=True))


def sbatch_options(cfg: RunConfig, run_dir: Path) -> list[str]:
    """The #SBATCH options ftui sets, in the script's order (the user's own lines follow them)."""
    opts = [f"--job-name={sbatch_value('ftui-' + run_dir.name)}", f"--nodes={cfg.nnodes}", "--ntasks-per-node=1"]
    gpus = gpus_per_node(cfg)
    if gpus:
        opts.append(f"--gpus-per-node={gpus}")
    for name, value in (("partition", cfg.slurm_partition), ("account", cfg.slurm_account), ("qos", cfg.slurm_qos),
                        ("time", cfg.slurm_time), ("cpus-per-task", cfg.slurm_cpus_per_task),
                        ("mem", cfg.slurm_mem_per_task), ("constraint", cfg.slurm_constraint)):
        if value not in (None, ""):
            opts.append(f"--{name}={sbatch_value(str(value))}")
    opts += [f"--output={sbatch_value(output_path(run_dir))}", "--open-mode=append",
             "--requeue" if cfg.slurm_requeue else "--no-requeue"]
    if cfg.slurm_warn_s > 0 and cfg.slurm_requeue:  # the warning only serves the checkpoint before a requeue
        opts.append(f"--signal=B:USR1@{cfg.slurm_warn_s}")
    return opts


def job_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """What the script exports for the ranks on the nodes, as start_run gives a local run's:
    PYTHONPATH and ftui's own FTUI_* variables of the submitter (sbatch exports the whole
    environment by default; written into the script too, so that an ``--export`` line of the
    user's or a node's login scripts cannot lose them). A variable named like a secret is not
    written into a file: it reaches the job through sbatch's export only."""
    from ftui.jobs.launch import SECRET_NAME

    env = os.environ if environ is None else environ
    return {k: v for k, v in sorted(env.items())
            if (k == "PYTHONPATH" or k.startswith("FTUI_")) and not SECRET_NAME.search(k) and "\0" not in v}


def batch_script(cfg: RunConfig, run_dir: Path, python: str, resume: Path | None = None,
                 environ: dict[str, str] | None = None, cwd: str | None = None) -> str:
    """The batch script submitted for the run (RUN/slurm.sh): Slurm's options, the user's own
    #SBATCH lines, the working directory and environment of the submitter, then the batch step
    (ftui.jobs.slurm_batch). Paths with blanks, quotes or ``$`` are quoted for sbatch and bash."""
    from ftui.config.slurm_rules import slurm_problems

    run_dir = Path(run_dir)
    cwd = os.getcwd() if cwd is None else cwd
    for problem in slurm_problems(cfg):  # checked at preflight; a config made otherwise must not reach the script either
        raise SlurmSubmitError(f"{problem.field}: {problem.message}")
    for what, text in ((N_("run directory"), str(run_dir)), (N_("working directory"), cwd), (N_("Python"), python),
                       (N_("checkpoint"), str(resume or ""))):
        if "\n" in text or "\r" in text or "\0" in text:
            raise SlurmSubmitError(_("the {what} {path} has a line break in its name, which a batch script cannot hold; "
                                     "use a directory without one").format(what=_(what), path=visible(text, one_line=True)))
    if re.search(r"[%\\]", str(run_dir)):
        raise SlurmSubmitError(unpatterned_path(str(run_dir)))
    lines = ["#!/bin/bash",
             f"# ftui's batch script for run {run_dir.name}, submitted with: sbatch {SLURM_SCRIPT_FILE} (docs/clusters.md).",
             "# Slurm reads the #SBATCH lines; srun then starts one ftui launcher per node (ftui.jobs.slurm_batch)."]
    lines += [f"#SBATCH {opt}" for opt in sbatch_options(cfg, run_dir)]
    lines += [sbatch_line(line) for line in cfg.slurm_sbatch_lines]
    lines += ["", f"cd {shlex.quote(cwd)} || exit 1"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in job_environment(environ).items()]
    tail = [python, "-m", "ftui.jobs.slurm_batch", str(run_dir), *(["--resume", str(resume)] if resume is not None else [])]
    lines.append("exec " + shlex.join(tail))
    return "\n".join(lines) + "\n"


def dry_run_script(cfg: RunConfig) -> tuple[Path, str]:
    """``ftui train --dry-run``: the run directory a new run would get now (create_run_dir's
    name) and its batch script; nothing is created."""
    from ftui.jobs.launch import run_label
    from ftui.rundir.launch_record import slug

    root = Path(cfg.output_dir).expanduser().resolve()
    run_dir = root / f"{slug(run_label(cfg))}-{time.strftime('%Y%m%d-%H%M%S')}"
    return run_dir, batch_script(cfg, run_dir, sys.executable)


def write_script(run_dir: Path, text: str) -> Path:
    """RUN/slurm.sh, the user's to read and edit (0600 in the 0700 run directory)."""
    path = Path(run_dir) / SLURM_SCRIPT_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return path


def shown(text: str) -> str:
    """Slurm's words as a message quotes them: their end, bounded, control characters escaped."""
    text = text.strip()
    return visible(text if len(text) <= SHOWN_MAX else "…" + text[-SHOWN_MAX:], one_line=True)


def refused_field(stderr: str) -> str | None:
    """The config field a refusal of Slurm's names (None when its words name none)."""
    low = stderr.lower()
    return next((field for word, field in REFUSED_FIELDS if word in low), None)


def refusal(program: str, stderr: str, rc: int) -> SlurmSubmitError:
    """Slurm refused the job: its words, and the field to change when they name one."""
    said = shown(stderr) or _("exit status {rc}, no message").format(rc=rc)
    field = refused_field(stderr)
    if field:
        return SlurmSubmitError(_("Slurm refused the job ({program}): {said}. Change {field} (sinfo -s lists the "
                                  "partitions; ftui train CONFIG --dry-run prints the batch script); nothing was "
                                  "submitted").format(program=program, said=said, field=field))
    return SlurmSubmitError(_("Slurm refused the job ({program}): {said}. Nothing was submitted; ftui train CONFIG "
                              "--dry-run prints the batch script to check").format(program=program, said=said))


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """A Slurm command, its output as text; on a timeout it is asked to end (srun then gives the
    allocation back) before TimeoutExpired goes up."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def probe_command(cfg: RunConfig, run_dir: Path, python: str, nonce: str) -> list[str]:
    """srun of the probe on one node of the run's partition (account, QoS, constraint as the run's)."""
    argv = ["srun", "--nodes=1", "--ntasks=1", "--time=1", f"--immediate={PROBE_WAIT_S}", "--job-name=ftui-probe"]
    for name, value in (("partition", cfg.slurm_partition), ("account", cfg.slurm_account), ("qos", cfg.slurm_qos),
                        ("constraint", cfg.slurm_constraint)):
        if value:
            argv.append(f"--{name}={value}")
    return [*argv, python, "-m", "ftui.jobs.slurm_probe", str(run_dir), nonce]


def probe_shared_fs(cfg: RunConfig, run_dir: Path, python: str) -> tuple[str | None, str | None]:
    """Runs the probe on a compute node (ftui.jobs.slurm_probe); returns (the cluster's name as
    the node saw it, a notice when the check could not run now). SlurmSubmitError when the node
    did not see the run directory, or could not run ftui's Python."""
    import json

    from ftui.jobs.slurm_probe import EXIT_NOT_WRITTEN, probe_path

    skipped = _("the check that the compute nodes see the run directory could not run now ({why}); the run was "
                "submitted: if its directory is not on a filesystem the nodes share, the job fails at its start")
    if shutil.which("srun") is None:
        return None, skipped.format(why=_("no srun on the PATH"))
    nonce = secrets.token_hex(8)
    path = probe_path(run_dir, nonce)
    try:
        done = _run(probe_command(cfg, run_dir, python, nonce), PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, skipped.format(why=_("srun did not answer within {s:.0f} s").format(s=PROBE_TIMEOUT_S))
    except OSError as e:
        return None, skipped.format(why=_("srun could not start: {reason}").format(reason=e.strerror or e))
    if done.returncode not in (0, EXIT_NOT_WRITTEN):
        if any(word in done.stderr.lower() for word in BUSY_WORDS):
            return None, skipped.format(why=_("no node was free within {s} s").format(s=PROBE_WAIT_S))
        if refused_field(done.stderr) or "unable to allocate" in done.stderr.lower():
            raise refusal("srun", done.stderr, done.returncode)
        raise SlurmSubmitError(_("the compute node could not run ftui's Python ({python} -m ftui.jobs.slurm_probe): {said}. "
                                 "ftui and its Python must be installed where the nodes see them (a shared filesystem), "
                                 "as they are on this machine; nothing was submitted").format(
                                     python=visible(python, one_line=True), said=shown(done.stderr) or done.returncode))
    deadline = time.monotonic() + PROBE_READ_S
    while True:
        try:
            record = json.loads(path.read_text()[:4096])
            break
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise SlurmSubmitError(_("the compute node did not see {path}: the run directory must be on a filesystem "
                                         "the nodes share (set output_dir to one, e.g. under /home or /scratch); nothing "
                                         "was submitted").format(path=visible(str(run_dir), one_line=True))) from None
            time.sleep(0.2)
        except (OSError, ValueError):
            record = {}
            break
    path.unlink(missing_ok=True)
    cluster = record.get("cluster") if isinstance(record, dict) else None
    return (cluster if isinstance(cluster, str) and cluster.isprintable() and len(cluster) < 256 else None), None


def run_sbatch(script: Path) -> tuple[str, str | None]:
    """``sbatch --parsable SCRIPT``: (job id, cluster or None). An array job is refused."""
    argv = ["sbatch", "--parsable", str(script)]
    try:
        done = _run(argv, SBATCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SlurmSubmitError(_("sbatch did not answer within {s:.0f} s (is the Slurm controller reachable? try "
                                 "sinfo); whether Slurm queued the job is not known: check squeue --me, and scancel "
                                 "it if it is there").format(s=SBATCH_TIMEOUT_S)) from None
    except OSError as e:
        raise SlurmSubmitError(_("sbatch could not start: {reason}").format(reason=e.strerror or e)) from None
    if done.returncode != 0:
        raise refusal("sbatch", done.stderr, done.returncode)
    line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    job_id, _sep, cluster = line.partition(";")
    if "_" in job_id:
        raise SlurmSubmitError(_("sbatch made an array job ({job}): ftui runs one job per run; remove --array from "
                                 "slurm_sbatch_lines and cancel it: scancel {job}").format(job=shown(job_id)))
    if not job_id.isdigit():
        raise SlurmSubmitError(_("sbatch answered {said}, not a job id; check squeue --me for a job it may have "
                                 "queued").format(said=shown(done.stdout) or _("nothing")))
    return job_id, (cluster.strip() or None)


def cluster_name() -> str | None:
    """The cluster's name from ``scontrol show config`` (None when it cannot be read)."""
    try:
        done = _run(["scontrol", "show", "config"], 10.0)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in done.stdout.splitlines():
        key, _sep, value = line.partition("=")
        if key.strip() == "ClusterName" and value.strip().isprintable():
            return value.strip()[:255] or None
    return None


def submit(cfg: RunConfig, run_dir: Path, resume: Path | None = None, *, notices: list[str] | None = None) -> dict[str, Any]:
    """Writes RUN/slurm.sh, probes the shared filesystem, submits with ``sbatch --parsable``,
    writes launch.json (its ``scheduler`` record) and returns it. ``notices``: where a notice
    the user should read is added (the probe that could not run now). SlurmSubmitError on
    every failure, with the script as it was before (a resubmit's earlier one, or none)."""
    from ftui.jobs.launch import recorded_env
    from ftui.rundir.follower import earlier_segments

    if shutil.which("sbatch") is None:
        raise SlurmSubmitError(_("launcher slurm needs Slurm's sbatch on the PATH: run ftui on the cluster's login "
                                 "node, or use launcher local"))
    run_dir = Path(run_dir).resolve()
    python = sys.executable
    text = batch_script(cfg, run_dir, python, resume)
    carried = earlier_segments(run_dir) if resume is not None else {}  # before the new launch.json replaces the old
    target = run_dir / SLURM_SCRIPT_FILE
    before = target.read_bytes() if target.is_file() else None
    try:
        script = write_script(run_dir, text)
        cluster, notice = probe_shared_fs(cfg, run_dir, python)
        job_id, sbatch_cluster = run_sbatch(script)
    except BaseException:
        if before is None:
            target.unlink(missing_ok=True)
        else:
            target.write_bytes(before)
        raise
    if notice:
        (notices if notices is not None else []).append(notice)
    now = time.time()
    command = ["sbatch", "--parsable", str(script)]
    info = {
        "scheduler": {"kind": "slurm", "job_id": job_id, "cluster": sbatch_cluster or cluster or cluster_name(),
                      "submit_host": hostname(), "submitted": now, "script": SLURM_SCRIPT_FILE},
        "host": hostname(), "start_time": now, "command": command, "command_line": shlex.join(command),
        "cwd": os.getcwd(), "python": python,
        "env": recorded_env(os.environ),
        **({"resumed_from": str(resume), **carried} if resume is not None else {}),
    }
    try:
        write_launch_info(run_dir, info)
    except OSError as e:  # a job whose run cannot be followed is not left queued
        _run_quietly(["scancel", job_id])
        raise SlurmSubmitError(_("cannot write {path}: {reason}; job {job} was cancelled").format(
            path=run_dir / "launch.json", reason=e.strerror or e, job=job_id)) from None
    return info


def _run_quietly(argv: list[str]) -> None:
    try:
        _run(argv, 30.0)
    except (OSError, subprocess.TimeoutExpired):
        pass
