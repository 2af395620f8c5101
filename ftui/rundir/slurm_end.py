"""Slurm's verdict on a job, kept in the run (RUN/slurm_end.json: Slurm forgets an ended job after
MinJobAge). Interface 3 of issue 45; this is the smallest version the batch step needs until
slurm-read's (the owner's) replaces it. No torch here.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ftui.rundir.paths import SLURM_END_FILE
from ftui.rundir.slurm_state import SlurmJob


def record_slurm_end(run_dir: Path, job: SlurmJob) -> None:
    """RUN/slurm_end.json, atomically; only for a state that is not live."""
    if job.live:
        return
    record = {"job_id": job.job_id, "state": job.state, "reason": job.reason, "restarts": job.restarts,
              "exit_code": job.exit_code, "t": time.time()}
    tmp = run_dir / (SLURM_END_FILE + ".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(run_dir / SLURM_END_FILE)


def read_slurm_end(run_dir: Path) -> dict | None:
    try:
        data = json.loads((run_dir / SLURM_END_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("state"), str) else None
