"""A model's JSON files read one way (ftui.plan.model_json) by the config's checks
(media_checks.read_processor), the planner (vision_activations.vision_processor,
model_shape.read_model_config) and the runner (processor_numbers): the local folder first,
then the hub cache's snapshots; a malformed file named, never a traceback nor silently passed over."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ftui.config.media_checks import read_processor
from ftui.plan.model_json import ModelJSONError, find_model_json, model_file_candidates, processor_numbers
from ftui.plan.model_shape import UnknownModel, read_model_config
from ftui.plan.vision_activations import vision_processor
from ftui.plan.vision_shape import VisionShape

QWEN_PROCESSOR = {"patch_size": 16, "merge_size": 2, "temporal_patch_size": 2,
                  "size": {"shortest_edge": 3136, "longest_edge": 1003520}}


@pytest.fixture(autouse=True)
def hub(tmp_path, monkeypatch):
    """An empty hub cache of the test's own."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def snapshot(hub, name: str, rev: str = "abc"):
    folder = hub / ("models--" + name.replace("/", "--")) / "snapshots" / rev
    folder.mkdir(parents=True)
    return folder


def test_the_local_folder_comes_first_then_the_newest_snapshot(tmp_path, hub):
    local = tmp_path / "org" / "m"
    local.mkdir(parents=True)
    old, new = snapshot(hub, "org/m", "aaa"), snapshot(hub, "org/m", "bbb")
    assert model_file_candidates(str(local), "config.json")[0] == local / "config.json"
    name = "org/m"
    (old / "config.json").write_text(json.dumps({"rev": "old"}))
    (new / "config.json").write_text(json.dumps({"rev": "new"}))
    assert find_model_json(name, "config.json") == (new / "config.json", {"rev": "new"})
    assert find_model_json("org/absent", "config.json") is None
    assert find_model_json("ftui-demo", "config.json")[1]["model_type"] == "llama"  # the shipped demo folder


@pytest.mark.parametrize("text, said", [("{not json", "is not valid JSON"), ("[1, 2]", "must hold a JSON object"),
                                        ("[" * 100_000, "nested deeper"), (b"\xff\xfe{}", "is not valid JSON")])
def test_a_malformed_file_is_named_and_not_passed_over(tmp_path, hub, text, said):
    """The first file there decides (transformers would load the folder's and fail on it): a
    good cached copy does not hide the folder's broken one."""
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / "config.json"
    path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    (snapshot(hub, str(folder)) / "config.json").write_text("{}")
    with pytest.raises(ModelJSONError, match=said) as err:
        find_model_json(str(folder), "config.json")
    assert str(folder / "config.json") in str(err.value)


def test_every_reader_names_a_malformed_file(tmp_path):
    folder = tmp_path / "vl"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen2_vl",')
    (folder / "preprocessor_config.json").write_text("{oops")
    with pytest.raises(UnknownModel, match="config.json is not valid JSON"):
        read_model_config(str(folder))
    with pytest.raises(ValueError, match="preprocessor_config.json is not valid JSON"):
        read_processor(str(folder))
    # the planner plans with the model's own sizes: the config's checks say what is wrong
    shape = VisionShape(depth=1, width=8, mlp=16, patch_size=14, merge=2, kernel=3 * 2 * 14 * 14)
    assert vision_processor(str(folder), shape).patch_size == 14
    (folder / "preprocessor_config.json").write_text(json.dumps(QWEN_PROCESSOR))
    assert vision_processor(str(folder), shape).patch_size == 16 == read_processor(str(folder)).patch_size
    (folder / "processor_config.json").write_text("{oops")
    with pytest.raises(ValueError, match="processor_config.json is not valid JSON"):
        read_processor(str(folder))


def test_no_processor_file_is_said_and_the_planner_falls_back(tmp_path):
    with pytest.raises(ValueError, match="no preprocessor_config.json"):
        read_processor(str(tmp_path))


def test_processor_numbers_beside_the_found_processor(tmp_path, hub):
    """processor_config.json is read beside the preprocessor_config.json that was found (a hub
    snapshot's too), nested under "processor" (transformers 5) or at the top."""
    snap = snapshot(hub, "org/llava")
    (snap / "preprocessor_config.json").write_text(json.dumps({"crop_size": {"height": 336, "width": 336}, "patch_size": 14}))
    (snap / "processor_config.json").write_text(json.dumps({"processor": {"patch_size": 14, "image_seq_length": 576}}))
    assert processor_numbers(snap)["image_seq_length"] == 576
    (snap / "processor_config.json").write_text(json.dumps({"image_seq_length": 256}))
    assert processor_numbers(snap) == {"image_seq_length": 256}
    assert processor_numbers(tmp_path) == {}


def test_ftui_plan_names_a_malformed_config(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 8,')
    (folder / "tokenizer.json").write_text("{}")  # validation wants a tokenizer; weights are not needed for random ones
    conf = tmp_path / "c.yaml"
    conf.write_text(f"model_name_or_path: {folder}\nmodel_init: random\ndataset: identity\n")
    out = subprocess.run([sys.executable, "-m", "ftui.cli.main", "plan", str(conf), "--gpu-memory", "80"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"{folder / 'config.json'} is not valid JSON" in out.stderr and "Traceback" not in out.stderr


def test_preflight_names_a_malformed_config_before_the_run(tmp_path):
    """The run would fail on it only once it loads (transformers' OSError): the checks say it first."""
    from ftui.config.preflight import check_config

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("[]")
    (folder / "tokenizer.json").write_text("{}")
    data = tmp_path / "x.json"
    data.write_text('[{"instruction": "q", "output": "a"}]')
    problems = check_config({"model_name_or_path": str(folder), "model_init": "random", "dataset": str(data)}).problems
    said = [p.message for p in problems if p.field == "model_name_or_path"]
    assert said and f"{folder / 'config.json'} must hold a JSON object" in said[0]
