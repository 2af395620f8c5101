"""The planner against a measured video step (issue 42): bench/vl_step.py --video trains its
small Qwen2-VL on 2 s clips (2,048 patches, 512 video tokens an example) with the vision tower
trained, and the model's measured RSS peak above the tests' tiny Qwen2-VL's (same data, same
pipeline) is compared with the planner's estimate of the same difference, which reads the
clips' headers (ftui.plan.media_load): within 15 %, the bound of tests/test_plan_cpu_peaks.py.

Marked ``video``: the runner's video processor needs torchvision (make test-video, .venv-video).
The recorded run (bench/results/vl_step_cpu_video.json) is replayed against the planner in the
main venv by tests/test_bench_vl_step.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.video, pytest.mark.slow]  # 100 s: CI replays its recorded run (test_bench_vl_step)

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_the_plan_is_within_15_percent_of_a_measured_video_step(tmp_path):
    out = tmp_path / "video.json"
    done = subprocess.run([sys.executable, str(BENCH / "vl_step.py"), "--video", "--case", "trained", "--steps", "3", "--no-record",
                           "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    [row] = result["cases"]
    assert result["image_tokens"] == 512 and row["freeze_vision_tower"] is False
    assert abs(row["error"]) <= 0.15, f"plan {row['estimated_gib']:.3f} GiB against measured {row['measured_gib']:.3f} GiB"
