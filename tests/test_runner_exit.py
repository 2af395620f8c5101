"""A runner process ends with os._exit once its job has returned (ftui.runner.__main__.exit_now),
skipping the C++ teardown that sometimes aborted a finished rank; what it printed must still
arrive, and its exit code must be the job's."""

from __future__ import annotations

import subprocess
import sys


def test_exit_now_flushes_what_was_written_runs_atexit_and_keeps_the_code(tmp_path):
    mark = tmp_path / "atexit-ran"
    code = ("import atexit, ctypes, pathlib, sys; from ftui.runner.__main__ import exit_now; "
            f"atexit.register(pathlib.Path({str(mark)!r}).touch); "  # wandb's teardown, temporary folders
            "print('answer', end=''); ctypes.CDLL(None).printf(b' and C'); "  # a C library's buffered stdout
            "print('note', end='', file=sys.stderr); exit_now(3)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3 and proc.stderr == "note" and mark.exists()
    assert proc.stdout == "answer and C"  # both buffers flushed: Python's, then C's


def test_a_job_s_exit_code_passes_through_the_entry_point():
    proc = subprocess.run([sys.executable, "-m", "ftui.runner", "nosuchjob"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "usage" in proc.stderr
