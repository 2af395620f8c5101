"""Predict and eval over a multimodal dataset (LLaMA-Factory's mllm_demo) with a tiny Qwen2-VL
run: each prompt with its images, prompted token for token as LLaMA-Factory's unsupervised
processor prompts it (the training encoding's ids before the last answer: the stored
reference of tests/data/llamafactory_vlm), generated_predictions.jsonl naming each prompt's
files, and the eval job's loss over the images."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from tests.test_vl_chat import train_vl_run

REFERENCE = json.loads((Path(__file__).resolve().parent / "data" / "llamafactory_vlm" / "reference.json").read_text())
IGNORE = -100


@pytest.fixture(scope="module")
def vl_run(tmp_path_factory, lf_data) -> Path:
    return train_vl_run(tmp_path_factory.mktemp("vlpredict"), lf_data)


def run_job(kind: str, run: Path, lf_data: Path, **extra):
    from ftui.jobs.offline import prepare_job, source_of
    from ftui.rundir.event_writer import EventWriter
    from ftui.rundir.paths import EVENTS_FILE
    from ftui.runner.engines import DistInfo
    from ftui.runner.evaluate import evaluate
    from ftui.runner.faults import StopRequest
    from ftui.runner.predict import predict

    job_dir, cfg = prepare_job(kind, run_dir=run, source=source_of(run, None, False, None, None), dataset="mllm_demo",
                               dataset_dir=str(lf_data), device="cpu", **extra)
    work = predict if kind == "predict" else evaluate
    return job_dir, work(job_dir, cfg, DistInfo(), EventWriter(job_dir / EVENTS_FILE), StopRequest())


def last_prompt(example: dict) -> list[int]:
    """The ids before the last answer of LLaMA-Factory's supervised example: its prompt for predict."""
    labels = example["labels"]
    start = max(i for i in range(1, len(labels)) if labels[i] != IGNORE and labels[i - 1] == IGNORE)
    return example["input_ids"][:start]


@pytest.mark.dist
def test_prompts_with_images_are_llamafactorys_prompts(vl_run):
    from transformers import AutoTokenizer

    from ftui.config.load import read_run_config
    from ftui.runner.predict import prompts

    cfg = read_run_config(vl_run / "config.yaml")
    case = next(c for c in REFERENCE["cases"] if c["family"] == "qwen2_vl" and c["cutoff_len"] == 1024
                and c["image_max_pixels"] == cfg.image_max_pixels)
    tokenizer = AutoTokenizer.from_pretrained(cfg.model_name_or_path)
    items, _images = prompts(cfg, tokenizer)
    assert [x["ids"] for x in items] == [last_prompt(e) for e in case["examples"]]
    assert all(len(x["images"]) == len(e["images"]) for x, e in zip(items, case["examples"]))


@pytest.mark.dist
def test_predict_over_mllm_demo_generates_with_each_prompts_images(vl_run, lf_data):
    from ftui.rundir.paths import PREDICTIONS_FILE

    records = json.loads((lf_data / "mllm_demo.json").read_text())
    job_dir, (status, _message) = run_job("predict", vl_run, lf_data, max_samples=3,
                                          generation={"max_new_tokens": 3, "temperature": 0, "batch_size": 2})
    assert status == "completed", (job_dir / "train.log").read_text()[-3000:] if (job_dir / "train.log").exists() else ""
    rows = [json.loads(line) for line in (job_dir / PREDICTIONS_FILE).read_text().splitlines()]
    assert len(rows) == 3
    for row, record in zip(rows, records):
        assert row["images"] == [os.path.abspath(lf_data / p) for p in record["images"]]  # the files, as resolved for training
        assert row["prompt"].count("<|vision_start|>") == len(record["images"]) and "<|image_pad|>" in row["prompt"]
        assert row["label"].rstrip("\n") == record["messages"][-1]["content"]  # its <|im_end|>\n decoded as LLaMA-Factory does
        assert isinstance(row["predict"], str)


@pytest.mark.dist
def test_a_batch_of_prompts_with_images_answers_as_each_prompt_alone(vl_run, lf_data):
    """Left-padded rows with their images concatenated: the same greedy answers as one by one."""
    _job, (status, _m) = run_job("predict", vl_run, lf_data, max_samples=3,
                                 generation={"max_new_tokens": 4, "temperature": 0, "batch_size": 3})
    batched = [json.loads(line)["predict"] for line in (_job / "generated_predictions.jsonl").read_text().splitlines()]
    _job, (status, _m) = run_job("predict", vl_run, lf_data, max_samples=3,
                                 generation={"max_new_tokens": 4, "temperature": 0, "batch_size": 1})
    alone = [json.loads(line)["predict"] for line in (_job / "generated_predictions.jsonl").read_text().splitlines()]
    assert batched == alone


@pytest.mark.dist
def test_eval_over_mllm_demo_scores_the_images(vl_run, lf_data):
    from ftui.rundir.paths import EVAL_RESULTS_FILE

    job_dir, (status, message) = run_job("eval", vl_run, lf_data)
    assert status == "completed", message
    results = json.loads((job_dir / EVAL_RESULTS_FILE).read_text())
    assert results["examples"] == 6 and math.isfinite(results["eval_loss"]) and results["eval_tokens"] > 0
