"""Training runs submitted to the test Slurm cluster (tests/slurm_cluster.py), for the tests of
what runs inside the job (ftui.jobs.slurm_batch, ftui.jobs.slurm_node).

``batch_script`` is a stand-in for slurm-submit's (interface 8 of issue 45: ftui.jobs.slurm_submit
owns the real one): the same shape, the options these tests need and no more."""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from pathlib import Path

from conftest import tiny_config, wait_for
from ftui.rundir.event_reader import read_all
from ftui.rundir.launch_record import write_launch_info
from ftui.rundir.paths import EVENTS_FILE


def slurm_run_config(tmp_path: Path, **overrides):
    """The demo model over 2 gloo ranks on one node, launcher slurm (set past the config rules,
    which slurm-submit's branch extends)."""
    base = dict(engine="ddp", nproc_per_node=2, save_steps=1000, run_name="slurm")
    base.update(overrides)
    slurm = {k: base.pop(k) for k in list(base) if k.startswith("slurm_")}
    return tiny_config(tmp_path, **base).model_copy(update={"launcher": "slurm", **slurm})


def batch_script(run_dir: Path, resume: Path | None = None, sbatch: tuple[str, ...] = (), nodes: int = 1) -> str:
    """RUN/slurm.sh as slurm-submit writes it: Slurm's options, then the batch step."""
    lines = ["#!/bin/bash", "#SBATCH --job-name=ftui-test", f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --output={run_dir}/slurm-%j.out", "#SBATCH --open-mode=append", "#SBATCH --requeue",
             *(f"#SBATCH {opt}" for opt in sbatch), "", f"cd {shlex.quote(os.getcwd())} || exit 1",
             f"export PYTHONPATH={shlex.quote(os.environ.get('PYTHONPATH', ''))}",
             "exec " + shlex.join([sys.executable, "-m", "ftui.jobs.slurm_batch", str(run_dir),
                                   *(["--resume", str(resume)] if resume is not None else [])])]
    return "\n".join(lines) + "\n"


def submit(cluster, run_dir: Path, *sbatch: str, nodes: int = 1) -> str:
    """Writes RUN/slurm.sh, submits it and records the job in launch.json (interface 1's first
    record, as slurm-submit's submit writes it); returns the job id."""
    script = run_dir / "slurm.sh"
    script.write_text(batch_script(run_dir, sbatch=sbatch, nodes=nodes))
    job_id = cluster.sbatch(str(script))
    write_launch_info(run_dir, {"scheduler": {"kind": "slurm", "job_id": job_id, "cluster": "ftuitest", "submit_host": "test",
                                              "submitted": time.time(), "script": "slurm.sh"},
                                "host": "test", "start_time": time.time(), "command": ["sbatch", str(script)]})
    return job_id


def output(run_dir: Path, job_id: str) -> str:
    try:
        return (run_dir / f"slurm-{job_id}.out").read_text(errors="replace")
    except OSError:
        return ""


def steps(run_dir: Path) -> list[dict]:
    return [e for e in read_all(run_dir / EVENTS_FILE) if e["event"] == "step"]


def wait_steps(run_dir: Path, job_id: str, count: int, timeout: float = 240.0) -> None:
    assert wait_for(lambda: len(steps(run_dir)) >= count, timeout), (
        f"fewer than {count} steps; job output:\n{output(run_dir, job_id)[-3000:]}\n"
        f"train.log:\n{(run_dir / 'train.log').read_text(errors='replace')[-3000:] if (run_dir / 'train.log').exists() else ''}")


def wait_output(run_dir: Path, job_id: str, text: str, timeout: float = 120.0) -> None:
    assert wait_for(lambda: text in output(run_dir, job_id), timeout), output(run_dir, job_id)[-3000:]


def lives(run_dir: Path) -> list[list[dict]]:
    """The run's events from each run_start to its run_end (one list per job that started)."""
    out: list[list[dict]] = []
    open_life = False
    for e in read_all(run_dir / EVENTS_FILE):
        if e["event"] == "run_start":
            out.append([])
            open_life = True
        if open_life:
            out[-1].append(e)
        open_life = open_life and e["event"] != "run_end"
    return out


def slurm_end(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "slurm_end.json").read_text())
    except OSError:
        return None
