"""The planner against the peaks bench/planner_check.py measured on the CPU, replayed.

``planner_check.py`` runs each configuration with its benchmark model and with the tiny demo
model (same engine, data and settings) and records the difference of their peak resident
memory: what the model's weights, gradients, optimizer state and activations cost, without
the Python process's own floor. Its recorded rows are compared here with the planner as it
now is (its estimate for the benchmark model less its estimate for the demo model), so a
change to the estimate that would miss a measured CPU peak by more than 15 % (issue 18's
bound) fails here, as tests/test_plan_h100_peaks.py does for the H100's."""

import json
import sys
from pathlib import Path

import pytest

from ftui.config.schema import RunConfig
from ftui.rundir.paths import DEMO_MODEL_DIR
from ftui.plan.model_shape import ModelShape
from ftui.plan.planner import GIB, estimate_for

BENCH = Path(__file__).resolve().parent.parent / "bench"


DEMO = json.loads((DEMO_MODEL_DIR / "config.json").read_text())


def recorded_rows() -> list[tuple[str, dict, dict]]:
    """(label, the case's settings from planner_check.CASES, the recorded row) of every result
    file; a row without its own model and cutoff_len (the first file's) ran the file's. A model
    there is what planner_check.py's model_dir wrote: the demo's config.json with those keys over it."""
    sys.path.insert(0, str(BENCH))
    from planner_check import CASES

    settings = dict(CASES)
    found = []
    for path in sorted((BENCH / "results").glob("planner_check_cpu*.json")):
        result = json.loads(path.read_text())
        for row in result["cases"]:
            if row["case"] in settings:
                row = dict(row, model=dict(DEMO, **row.get("model", result["model"])), cutoff_len=row.get("cutoff_len", result["cutoff_len"]),
                           micro_batch=result["micro_batch"], packing=result["packing"])
                found.append((f"{path.stem}/{row['case']}", settings[row["case"]], row))
    return found


ROWS = recorded_rows()


def estimate_bytes(model: dict, over: dict, row: dict) -> float:
    cfg = dict(model_name_or_path="recorded", dataset="recorded", packing=row["packing"], per_device_train_batch_size=row["micro_batch"],
               **{k: v for k, v in over.items() if k != "cutoff_len"}, cutoff_len=row["cutoff_len"])
    return estimate_for(RunConfig(**cfg), ModelShape.from_config(model)).total


def test_the_recorded_cpu_cases_cover_engines_precisions_the_loss_and_attention():
    names = {label.split("/")[-1] for label, *_ in ROWS}
    assert {"full fp32 single", "full fp32 zero3 x2", "full fp32 fsdp x2", "full pure_bf16 single",
            "full fp32 Qwen vocabulary chunked loss", "full fp32 sdpa 1024", "full fp32 eager attention 1024"} <= names


@pytest.mark.parametrize("label,over,row", ROWS, ids=[r[0] for r in ROWS])
def test_the_plan_is_within_15_percent_of_the_measured_cpu_peak(label, over, row):
    floor_model = dict(DEMO, max_position_embeddings=2048)
    planned = (estimate_bytes(row["model"], over, row) - estimate_bytes(floor_model, over, row)) / GIB
    ratio = planned / row["measured_gib"]
    assert 0.85 <= ratio <= 1.15, f"{label}: plan / measured = {ratio:.3f} ({planned:.2f} GiB against {row['measured_gib']:.2f})"
