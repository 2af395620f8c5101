"""The benchmark scripts run in a short mode so they cannot rot (no timing assertions)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run(script: str, *args: str) -> dict | list:
    out = subprocess.run([sys.executable, str(BENCH / script), *args, "--quick"], capture_output=True, text=True, timeout=300, check=True).stdout
    return json.loads(out)


def test_first_frame_bench_runs():
    assert run("tui_first_frame.py")["first_frame_s_median"] > 0


def test_attach_bench_runs():
    result = run("tui_attach.py", "3000")
    assert result["step_events"] == 3000 and result["whole_history_s"] >= result["first_frame_with_last_step_s"] > 0


@pytest.mark.dist
def test_watch_cpu_bench_runs():
    (result,) = run("tui_watch_cpu.py", "2")
    assert result["steps_seen_in_window"] >= 0 and result["cpu_s"] >= 0
