"""bench/vl_step.py (issue 42): a vision-language SFT step's tokens/s and peak against the
planner. Its arithmetic here, on the CPU; a tiny smoke run (slow) so the script cannot rot; and
the recorded CPU run replayed against the planner as it now is (the 15 % bound of
tests/test_plan_cpu_peaks.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import vl_step  # noqa: E402


def test_the_example_sizes_the_bench_asks_for():
    assert vl_step.image_tokens(448) == 256  # 32 x 32 patches, merged 2 x 2
    assert vl_step.image_tokens(112) == 16
    with pytest.raises(AssertionError):
        vl_step.image_tokens(450)  # not a multiple of 28: the processor would resize it
    assert vl_step.words_for(1000, 2.5) == 400 and vl_step.words_for(1, 9.0) == 1
    cutoff = vl_step.cutoff_for(1000, 256)
    assert cutoff % 8 == 0 and 1000 + 256 + vl_step.TEMPLATE_TOKENS <= cutoff < 1000 + 256 + vl_step.TEMPLATE_TOKENS + 8


def test_the_plan_row_compares_costs_above_the_floor():
    gib = 2**30
    row = vl_step.plan_row({"model": 3.0 * gib, "floor": 1.0 * gib}, {"model": 2.5 * gib, "floor": 0.3 * gib})
    assert row["measured_gib"] == pytest.approx(2.0) and row["estimated_gib"] == pytest.approx(2.2)
    assert row["error"] == pytest.approx(0.1)


def test_the_video_dataset_holds_one_clip_of_the_asked_frames_a_record(tmp_path):
    pytest.importorskip("av", reason="needs PyAV, which the test extra installs: pip install -e '.[test]'")
    from ftui.data.records import DatasetSpec
    from ftui.data.video_files import video_header

    assert vl_step.video_tokens(448) == 512 and vl_step.video_tokens(112) == 32  # 4 frames sampled: two temporal patches
    folder = vl_step.video_dataset(tmp_path / "data", 2, 112, 40)
    records = json.loads((folder / "vl.json").read_text())
    assert all(r["messages"][0]["content"].startswith("<video>") for r in records)
    info = video_header(str(folder / records[0]["videos"][0]), DatasetSpec(name="vl_bench"), 0)
    assert (info.width, info.height, info.frames) == (112, 112, vl_step.VIDEO_FRAMES)
    assert info.sampled_frames(vl_step.VIDEO_KEYS["video_fps"], vl_step.VIDEO_KEYS["video_maxlen"]) == 4


def test_the_dataset_holds_one_image_and_the_asked_words_a_record(tmp_path):
    from PIL import Image

    folder = vl_step.vl_dataset(tmp_path / "data", 3, 112, 40)
    records = json.loads((folder / "vl.json").read_text())
    assert len(records) == 3 and all(r["messages"][0]["content"].startswith("<image>") for r in records)
    assert [len((r["messages"][0]["content"][7:] + " " + r["messages"][1]["content"]).split()) for r in records] == [40] * 3
    with Image.open(folder / records[0]["images"][0]) as image:
        assert image.size == (112, 112)
    info = json.loads((folder / "dataset_info.json").read_text())["vl_bench"]
    assert info["columns"] == {"messages": "messages", "images": "images"}


def recorded(name: str = "vl_step_cpu") -> list[tuple[dict, dict]]:
    path = BENCH / "results" / f"{name}.json"
    result = json.loads(path.read_text())
    return [(result, row) for row in result["cases"]]


RECORDED = recorded() + recorded("vl_step_cpu_video") + recorded("vl_step_nvidia_h200")  # the H200 row: issue 44's session


def test_the_recorded_cpu_run_covers_a_frozen_and_a_trained_tower():
    assert {row["case"] for _result, row in recorded()} == {name for name, _over in vl_step.CASES}
    assert {row["case"] for _result, row in recorded("vl_step_cpu_video")} == {name for name, _over in vl_step.CASES}
    result = recorded()[0][0]
    assert result["image_side"] == 448 and result["image_tokens"] == 256 and result["collate_s_per_micro_batch"] > 0
    assert all(row["tokens_per_s"] > 0 for _result, row in recorded())


@pytest.mark.parametrize("result,row", RECORDED, ids=[row["case"] + (", video" if "video" in result else "") + (", gpu" if result["machine"].get("gpus") else "") for result, row in RECORDED])
def test_the_plan_is_within_15_percent_of_the_recorded_cpu_peak(result, row, tmp_path):
    """The recorded peaks against the planner as it now is: the bench's model and the tests'
    tiny Qwen2-VL rebuilt from their configs, the recorded dataset's image sizes."""
    from ftui.config.schema import RunConfig
    from ftui.plan.model_shape import ModelShape
    from ftui.plan.planner import GIB, estimate_for
    from ftui.plan.vision_activations import ImageLoad
    from tests.vlm_models import vlm_dir

    floor = json.loads((vlm_dir("qwen2_vl", tmp_path) / "config.json").read_text())
    model = {"model_type": "qwen2_vl", "text_config": dict(result["text"], vocab_size=floor["text_config"]["vocab_size"]),
             "vision_config": dict(result["vision"], hidden_size=result["text"]["hidden_size"]), "tie_word_embeddings": False}
    patches = result["image_tokens"] * 4
    cfg = RunConfig(model_name_or_path="recorded", dataset="recorded", stage="sft", template="qwen2_vl", finetuning_type="full",
                    cutoff_len=result["cutoff_len"], per_device_train_batch_size=result["micro_batch"],
                    freeze_vision_tower=row["freeze_vision_tower"])
    images = (ImageLoad(0, result["image_tokens"], patches, "dataset", videos=1, video_tokens=result["image_tokens"]) if "video" in result
              else ImageLoad(1, result["image_tokens"], patches, "dataset"))
    planned = (estimate_for(cfg, ModelShape.from_config(model), images=images).total
               - estimate_for(cfg, ModelShape.from_config(floor), images=images).total) / GIB
    ratio = planned / row["measured_gib"]
    assert 0.85 <= ratio <= 1.15, f"{row['case']}: plan / measured = {ratio:.3f} ({planned:.3f} GiB against {row['measured_gib']:.3f})"


@pytest.mark.slow  # a bench's smoke run (about a minute on the CPU; CI time)
def test_the_vl_step_bench_runs(tmp_path):
    out = tmp_path / "vl.json"
    subprocess.run([sys.executable, str(BENCH / "vl_step.py"), "--quick", "--out", str(out)], capture_output=True, text=True,
                   timeout=600, check=True)
    result = json.loads(out.read_text())
    [row] = result["cases"]
    assert row["tokens_per_s"] > 0 and row["model_peak_bytes"] > 0 and row["model_estimate_bytes"] > row["floor_estimate_bytes"]
    assert result["collate_s_per_micro_batch"] > 0 and result["image_tokens"] == 16
