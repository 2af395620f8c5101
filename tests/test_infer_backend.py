"""LLaMA-Factory's infer_backend and infer_dtype everywhere a model is loaded to generate (issue
44): the keys are config fields with LLaMA-Factory's values and defaults (its vllm_* / sglang_*
keys too, which change nothing with huggingface); vllm and sglang are refused by name, with what
to do, before any job (predict, eval, chat, a grpo / ppo run's rollouts); infer_dtype sets the
loaded weights' type; predict_results.json says the backend beside its examples/s and tokens/s,
and the CLI's result line and the predict screen show them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from ftui.config.preflight import validate_config
from ftui.config.schema import RunConfig
from ftui.jobs.backends import INFER_BACKENDS, backend_problem, job_backend
from ftui.presets.lf_keys import LF_DEFAULTS, NO_EFFECT, REFUSED

INFERENCE_KEYS = ("infer_backend infer_dtype vllm_maxlen vllm_gpu_util vllm_enforce_eager vllm_max_lora_rank vllm_config "
                  "sglang_maxlen sglang_mem_fraction sglang_tp_size sglang_config sglang_lora_backend").split()


def test_backend_problem_refuses_vllm_and_sglang_by_name_with_what_to_do():
    assert backend_problem(None) is None and backend_problem("huggingface") is None
    assert INFER_BACKENDS == ("huggingface",)
    for name, label in (("vllm", "vLLM"), ("sglang", "SGLang")):
        said = backend_problem(name)
        assert said.startswith(f"infer_backend {name}: ftui does not run {label} on this version")
        assert f"pip install {name} alone would not make ftui use it" in said
        assert "remove the key or set infer_backend: huggingface" in said and "--batch-size" in said
    assert backend_problem("tensorrt") == "infer_backend 'tensorrt' is not available; ftui generates with: huggingface"
    assert "not available" in backend_problem(["vllm"])  # not a name at all: said, never a crash


def test_a_jobs_own_backend_comes_before_its_configs():
    cfg = RunConfig(model_name_or_path="m", dataset="d", infer_backend="vllm")
    assert job_backend({"infer_backend": "huggingface"}, cfg) == "huggingface"
    assert job_backend({}, cfg) == job_backend(None, cfg) == "vllm"


def test_the_inference_keys_are_fields_with_llamafactorys_defaults():
    cfg = RunConfig(model_name_or_path="m", dataset="d")
    for key in INFERENCE_KEYS:
        assert getattr(cfg, key) == LF_DEFAULTS[key], key
        assert key not in NO_EFFECT and key not in REFUSED and RunConfig.model_fields[key].description
    # set, with LLaMA-Factory's types: accepted, and an sft run trains as before (they matter to inference only)
    cfg, found = validate_config({"model_name_or_path": "ftui-demo", "model_init": "random", "dataset": "ftui_demo",
                                  "vllm_maxlen": 2048, "vllm_gpu_util": 0.9, "vllm_enforce_eager": True,
                                  "vllm_config": '{"max_num_seqs": 8}', "sglang_config": {"tp": 1}, "sglang_lora_backend": "flashinfer",
                                  "infer_dtype": "bfloat16", "infer_backend": "vllm"})
    assert found == [] and cfg.vllm_config == {"max_num_seqs": 8} and cfg.infer_backend == "vllm"
    assert "vllm_maxlen: 2048" in cfg.to_yaml(include_unsupported=False)  # a job's config.yaml keeps them


@pytest.mark.parametrize("key,value,says", [
    ("infer_backend", "tensorrt", "Input should be 'huggingface', 'vllm' or 'sglang'"),
    ("infer_dtype", "fp16", "Input should be 'auto', 'float16', 'bfloat16' or 'float32'"),
    ("sglang_lora_backend", "cuda", "Input should be 'triton' or 'flashinfer'"),
    ("vllm_config", "{max_num_seqs: 8}", "not JSON"),
    ("vllm_maxlen", "long", "valid integer"),
])
def test_a_bad_inference_value_is_refused_naming_the_choices(key, value, says):
    _cfg, found = validate_config({"model_name_or_path": "m", "dataset": "d", key: value})
    assert [p.field for p in found] == [key] and says in found[0].message


@pytest.mark.parametrize("stage", ["grpo", "ppo"])
def test_rollouts_with_vllm_are_refused_at_the_config_check_as_trls_use_vllm_is(stage, tmp_path):
    extra = {"reward_model": str(tmp_path), "reward_model_type": "full"} if stage == "ppo" else {"per_device_train_batch_size": 8}
    _cfg, found = validate_config({"model_name_or_path": "m", "dataset": "d", "stage": stage, "infer_backend": "sglang", **extra})
    said = {p.field: p.message for p in found}
    assert said["infer_backend"].startswith("infer_backend sglang: ftui does not run SGLang on this version")
    assert "rollouts with transformers' generate" in said["infer_backend"]


def run_saying(tmp_path: Path, demo_run: Path, **keys) -> Path:
    """A copy of the trained demo whose config.yaml sets ``keys``."""
    run = tmp_path / demo_run.name
    shutil.copytree(demo_run, run, ignore=shutil.ignore_patterns(".store-*", "predict", "eval", "serve"))
    data = yaml.safe_load((run / "config.yaml").read_text())
    (run / "config.yaml").write_text(yaml.safe_dump(data | keys))
    return run


def test_predict_and_eval_of_a_vllm_run_are_refused_before_the_job(demo_run, tmp_path):
    from ftui.ops.errors import JobRefused
    from ftui.ops.jobs import start_offline_job

    run = run_saying(tmp_path, demo_run, infer_backend="vllm")
    for kind in ("predict", "eval"):
        with pytest.raises(JobRefused, match="infer_backend vllm: ftui does not run vLLM"):
            start_offline_job(kind, run_dir=run, dataset="ftui_demo", generation={} if kind == "predict" else None)
    assert not (run / "predict").exists() and not (run / "eval").exists()
    # the job's own setting comes first: a predict YAML's huggingface over the run's vllm is not refused here
    from ftui.jobs.offline import prepare_job

    job_dir, cfg = prepare_job("predict", run_dir=run, source={"run": str(run)}, dataset="ftui_demo", dataset_dir=None,
                               generation={"infer_backend": "huggingface"})
    assert json.loads((job_dir / "job.json").read_text())["generation"]["infer_backend"] == "huggingface"
    assert cfg.infer_backend == "vllm"


def test_ftui_chat_of_a_vllm_run_is_refused_by_the_worker_with_what_to_do(demo_run, tmp_path, capsys):
    from ftui.cli.main import main
    from ftui.runner.chat import ChatError, ChatModel

    run = run_saying(tmp_path, demo_run, infer_backend="vllm")
    with pytest.raises(ChatError, match="infer_backend vllm: ftui does not run vLLM.*set infer_backend: huggingface"):
        ChatModel().load({"run": str(run), "device": "cpu"})
    assert main(["chat", "--run", str(run), "--prompt", "What is ftui?", "--device", "cpu"]) == 1
    assert "ftui does not run vLLM on this version" in " ".join(capsys.readouterr().err.split())


def test_infer_dtype_sets_the_type_chat_predict_and_serve_load_the_weights_in(demo_run, tmp_path):
    import torch

    from ftui.runner.chat import ChatError, ChatModel

    def dtype_of(req):
        loaded = ChatModel()
        loaded.load(req)
        return loaded.model.dtype

    assert dtype_of({"run": str(demo_run), "device": "cpu"}) == torch.float32  # auto on the CPU
    assert dtype_of({"run": str(run_saying(tmp_path, demo_run, infer_dtype="bfloat16")), "device": "cpu"}) == torch.bfloat16
    # a job's config says it for a model outside a run (predict's load request carries it)
    assert dtype_of({"model": str(demo_run / "final"), "device": "cpu", "infer_dtype": "float16"}) == torch.float16
    with pytest.raises(ChatError, match="infer_dtype 'half' is not one of auto, float16, bfloat16, float32"):
        dtype_of({"model": str(demo_run / "final"), "device": "cpu", "infer_dtype": "half"})


def test_predict_results_say_the_backend_and_the_result_line_shows_its_speed(tmp_path):
    from ftui.rundir.event_writer import EventWriter
    from ftui.rundir.formats import fmt_predict
    from ftui.runner.predict import write_results

    rows = [{"predict": "a b", "label": "a b", "tokens": 3}, {"predict": "c", "label": "c", "tokens": 5}]
    writer = EventWriter(tmp_path / "events.jsonl")
    results = write_results(tmp_path, rows, 2, 4.0, writer, "huggingface")
    saved = json.loads((tmp_path / "predict_results.json").read_text())
    assert saved == results and saved["infer_backend"] == "huggingface"
    assert (saved["predict_samples_per_second"], saved["predict_tokens_per_second"]) == (0.5, 2.0)
    event = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()][-1]
    line = fmt_predict(event)
    assert "examples/s 0.50" in line and "tokens/s 2.00" in line and line.endswith("backend huggingface")
    assert "backend" not in fmt_predict({"infer_backend": "\x1b[31mred"})  # an untrusted name is not shown


def test_the_predict_screen_shows_the_backend_and_its_speed():
    from ftui.tui.predictions import throughput_line
    from ftui.tui.screens.evalpredict import EvalPredictScreen

    results = {"predict_samples_per_second": 3.2, "predict_tokens_per_second": 41.54, "infer_backend": "huggingface"}
    assert throughput_line(results) == "huggingface: 3.20 examples/s, 41.5 tokens/s"
    assert throughput_line({"predict_samples_per_second": 1.0}) == "huggingface: 1.00 examples/s"  # a job from before the key
    assert throughput_line({"eval_loss": 0.5}) is None
    assert "huggingface: 3.20 examples/s, 41.5 tokens/s" in EvalPredictScreen._metrics_text(results).plain
