"""A fake Slurm on PATH for the reader tests without a cluster: ``scontrol -o show job ID``
prints JOBS/ID (a recorded line) or Slurm's unknown-job error; a file JOBS/down makes it fail
as an unreachable controller; ``scancel`` records its arguments in JOBS/scancel (exit status
from JOBS/scancel_rc, its message from JOBS/scancel_err)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ftui.rundir import slurm_state
from tests.slurm_lines import LINES


class FakeSlurm:
    def __init__(self, jobs: Path):
        self.jobs = jobs

    def set(self, job_id: str, name: str, **replace: str) -> None:
        """Job ``job_id`` now reads as the recorded line ``name`` (its id, and ``Key=value``
        pairs replaced)."""
        line = LINES[name]
        old_id = line.split(" ", 1)[0]
        line = line.replace(old_id + " ", f"JobId={job_id} ", 1)
        for key, value in replace.items():
            head, _, rest = line.partition(f" {key}=")
            line = f"{head} {key}={value} {rest.split(' ', 1)[1]}"
        (self.jobs / job_id).write_text(line + "\n")
        slurm_state.clear_cache()

    def forget(self, job_id: str) -> None:
        (self.jobs / job_id).unlink(missing_ok=True)
        slurm_state.clear_cache()

    def down(self) -> None:
        (self.jobs / "down").write_text("")
        slurm_state.clear_cache()

    def calls(self) -> list[str]:
        path = self.jobs / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def scancels(self) -> list[str]:
        path = self.jobs / "scancel"
        return path.read_text().splitlines() if path.exists() else []


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch) -> FakeSlurm:
    bin_dir, jobs = tmp_path / "fakebin", tmp_path / "fakejobs"
    bin_dir.mkdir()
    jobs.mkdir()
    _script(bin_dir / "scontrol", f"""#!/bin/sh
echo "$@" >> {jobs}/calls
if [ -e {jobs}/down ]; then echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1; fi
if [ -e "{jobs}/$4" ]; then cat "{jobs}/$4"; exit 0; fi
echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1
""")
    _script(bin_dir / "scancel", f"""#!/bin/sh
echo "$@" >> {jobs}/scancel
if [ -e {jobs}/scancel_err ]; then cat {jobs}/scancel_err >&2; fi
if [ -e {jobs}/scancel_rc ]; then exit $(cat {jobs}/scancel_rc); fi
exit 0
""")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    slurm_state.clear_cache()
    yield FakeSlurm(jobs)
    slurm_state.clear_cache()
