"""Training runs submitted to the test Slurm cluster (tests/slurm_cluster.py) the way a user
submits them (ftui.ops.start: the batch script ftui.jobs.slurm_submit writes), for the tests of
what runs inside the job (ftui.jobs.slurm_batch, ftui.jobs.slurm_node) and how it is followed."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import tiny_config, wait_for
from ftui.rundir.event_reader import read_all
from ftui.rundir.paths import EVENTS_FILE


def slurm_run_config(tmp_path: Path, **overrides):
    """The demo model over 2 gloo ranks on one node, launcher slurm, through the config's checks."""
    base = dict(engine="ddp", nproc_per_node=2, save_steps=1000, run_name="slurm", launcher="slurm")
    base.update(overrides)
    return tiny_config(tmp_path, **base)


def start_on_slurm(cfg) -> tuple[Path, str]:
    """``cfg`` started as the app and ``ftui train --slurm`` start a run (ftui.ops.start.start:
    the run directory, RUN/slurm.sh, the shared-filesystem probe, sbatch, launch.json); returns
    the run directory and the Slurm job id."""
    from ftui.ops.start import start

    started = start(cfg)
    return started.run_dir.resolve(), started.info["scheduler"]["job_id"]


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
