"""Slurm's verdict on a run's job, kept in the run (``RUN/slurm_end.json``): Slurm forgets an
ended job MinJobAge after its end (300 s by default) and, without slurmdbd, keeps no history,
so whoever sees the end first writes it down: the batch step when Slurm ends the job, or any
reader that finds the job ended and no verdict recorded for it. Also what each ending means
and what to do about it. No torch here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ftui.i18n import N_
from ftui.rundir.paths import SLURM_END_FILE, SLURM_OUTPUT_PATTERN
from ftui.rundir.run_files import UnreadableFile, read_at
from ftui.rundir.slurm_state import JOB_ID, SlurmJob, STATE
from ftui.safety.bounded_input import load_json

END_MAX = 4096  # slurm_end.json is one short object; more is not one ftui wrote


def record_slurm_end(run_dir: Path, job: SlurmJob) -> None:
    """Writes Slurm's verdict on ``job`` into the run, atomically (a reader never sees half of
    it); nothing for a job that still lives. An unwritable run directory is left as it is:
    the verdict is then read from Slurm while it remembers the job."""
    if job.live:
        return
    record = {"job_id": job.job_id, "state": job.state, "reason": job.reason, "restarts": job.restarts,
              "exit_code": job.exit_code, "t": job.end}
    tmp = Path(run_dir) / f".{SLURM_END_FILE}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(record) + "\n")
        tmp.replace(Path(run_dir) / SLURM_END_FILE)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def _optional_text(v: Any) -> bool:
    return v is None or (isinstance(v, str) and len(v) <= 200 and v.isprintable())


def read_slurm_end(run_dir: Path) -> dict[str, Any] | None:
    """The recorded verdict when the file is sound (it is untrusted: any field of the wrong
    type, a state that is not a word, makes it None)."""
    try:
        raw = read_at(Path(run_dir) / SLURM_END_FILE, 0, END_MAX + 1)
    except UnreadableFile:
        return None
    if raw is None or len(raw) > END_MAX:
        return None
    try:
        record = load_json(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(record, dict):
        return None
    job_id, state, restarts, t = record.get("job_id"), record.get("state"), record.get("restarts", 0), record.get("t")
    sound = (isinstance(job_id, str) and JOB_ID.fullmatch(job_id) is not None
             and isinstance(state, str) and STATE.fullmatch(state) is not None
             and _optional_text(record.get("reason")) and _optional_text(record.get("exit_code"))
             and type(restarts) is int and 0 <= restarts < 1 << 20
             and (t is None or (type(t) in (int, float) and 0 < t < 1e11)))
    if not sound:
        return None
    return {"job_id": job_id, "state": state, "reason": record.get("reason"), "restarts": restarts,
            "exit_code": record.get("exit_code"), "t": t}


# What each way Slurm ends a job means, and what to do about it (marked for translation; shown
# with the job's id filled in).
ENDINGS = {
    "CANCELLED": (N_("Slurm cancelled job {job}: scancel from outside ftui (you, a script or an administrator)"),
                  N_("resume it with ftui train --resume RUN; use ftui stop RUN (or Stop) to stop a run with a checkpoint")),
    "TIMEOUT": (N_("Slurm job {job} reached its time limit"),
                N_("raise slurm_time, or keep slurm_requeue on with slurm_warn_s long enough for a checkpoint "
                   "(and save_steps short enough); resume with ftui train --resume RUN")),
    "PREEMPTED": (N_("Slurm preempted job {job} for a job of higher priority"),
                  N_("with slurm_requeue on it is requeued and resumes by itself; else resume with ftui train --resume RUN")),
    "NODE_FAIL": (N_("a node of Slurm job {job} failed"),
                  N_("resume with ftui train --resume RUN (ask the cluster's administrators if it happens again)")),
    "OUT_OF_MEMORY": (N_("Slurm job {job} ran out of host memory"),
                      N_("raise slurm_mem_per_task, or lower the batch size; resume with ftui train --resume RUN")),
    "BOOT_FAIL": (N_("the nodes of Slurm job {job} failed to boot"),
                  N_("submit it again or resume with ftui train --resume RUN; ask the administrators if it repeats")),
    "DEADLINE": (N_("Slurm job {job} reached its deadline"),
                 N_("submit again without --deadline in slurm_sbatch_lines, or with a later one")),
    "FAILED": (N_("Slurm job {job} failed"),
               N_("see RUN/{output} and train.log for the error")),
}
OTHER_ENDING = (N_("Slurm ended job {job} ({state})"), N_("see RUN/{output} and train.log"))


def slurm_ending(state: str, job_id: str) -> tuple[str, str]:
    """(reason, hint) for a job Slurm ended in ``state``, in English with the job's id and its
    output file filled in (a reader translates the template, see ``ending_text``)."""
    reason, hint = ENDINGS.get(state, OTHER_ENDING)
    output = SLURM_OUTPUT_PATTERN.replace("%j", job_id)
    return reason.format(job=job_id, state=state, output=output), hint.format(output=output)


def ending_text(state: str, job_id: str) -> tuple[str, str]:
    """slurm_ending's reason and hint in the interface's language."""
    from ftui.i18n import _

    reason, hint = ENDINGS.get(state, OTHER_ENDING)
    output = SLURM_OUTPUT_PATTERN.replace("%j", job_id)
    return _(reason).format(job=job_id, state=state, output=output), _(hint).format(output=output)
