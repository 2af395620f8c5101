"""Inference backends are a seam (issue 40): the chat worker and the predict job generate with
the backend that ``ftui.runner.backends.BACKENDS`` holds under the job's ``infer_backend``
(LLaMA-Factory's names), a backend registered there is the one a predict job calls, and a
predict YAML naming a backend ftui does not have (vllm) is refused by name before any job
(the other places that refuse it: tests/test_infer_backend.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from ftui.jobs.backends import INFER_BACKENDS
from ftui.runner import backends
from ftui.runner.backends import huggingface

FTUI = [sys.executable, "-m", "ftui.cli.main"]


def predict_yaml(demo_run, tmp_path) -> dict:
    return {"model_name_or_path": str(demo_run / "final"), "stage": "sft", "do_predict": True, "predict_with_generate": True,
            "finetuning_type": "full", "eval_dataset": "ftui_demo", "cutoff_len": 256, "max_samples": 3,
            "output_dir": str(tmp_path / "out"), "per_device_eval_batch_size": 2, "do_sample": False, "max_new_tokens": 8}


def test_the_app_lists_the_backends_the_runner_has():
    assert set(INFER_BACKENDS) == set(backends.BACKENDS)
    assert backends.DEFAULT_BACKEND in backends.BACKENDS


def test_the_default_backend_is_transformers_and_an_unknown_one_is_refused_by_name():
    assert backends.backend() is huggingface.generate and backends.backend("huggingface") is huggingface.generate
    with pytest.raises(backends.UnknownBackend, match="infer_backend vllm: ftui does not run vLLM.*huggingface"):
        backends.backend("vllm")
    with pytest.raises(backends.UnknownBackend, match="'tensorrt' is not available; ftui generates with: huggingface"):
        backends.backend("tensorrt")


def test_the_chat_worker_generates_with_the_registry_backend(monkeypatch):
    """ChatModel.generate calls whatever BACKENDS holds (a fake here, on no model at all)."""
    import threading

    from ftui.runner.chat import ChatModel

    calls = []

    def fake(loaded, prompts, sampling, *, streamer=None, stopping_criteria=None):
        calls.append((prompts, sampling))
        import torch

        streamer.put(torch.tensor([prompts[0]]))  # the prompt, as transformers passes it first
        streamer.put(torch.tensor([7]))  # one generated token
        streamer.end()
        return [("x", 1)]

    monkeypatch.setitem(backends.BACKENDS, backends.DEFAULT_BACKEND, fake)
    model = ChatModel.__new__(ChatModel)
    model.model, model.tokenizer = object(), _Tokenizer()
    monkeypatch.setattr(ChatModel, "prompt_ids", lambda self, messages, system: [1, 2, 3])
    sent = []

    class Out:
        def send(self, kind, **fields):
            sent.append((kind, fields))

    model.generate({"id": 1, "messages": [{"role": "user", "content": "hi"}], "temperature": 0}, Out(), threading.Event())
    assert calls == [([[1, 2, 3]], {"max_new_tokens": 256, "do_sample": False})]
    assert ("token", {"id": 1, "text": "x"}) in sent and sent[-1][0] == "done" and sent[-1][1]["tokens"] == 1


class _Tokenizer:
    """What transformers' TextIteratorStreamer asks of a tokenizer."""

    def decode(self, ids, **kwargs):
        return "x" * len(ids)


def test_a_predict_yaml_naming_vllm_is_refused_by_name_before_any_job(tmp_path):
    path = tmp_path / "predict.yaml"
    path.write_text(yaml.safe_dump({"model_name_or_path": str(tmp_path / "model"), "do_predict": True, "predict_with_generate": True,
                                    "eval_dataset": "ftui_demo", "output_dir": str(tmp_path / "out"), "infer_backend": "vllm"}))
    proc = subprocess.run([*FTUI, "train", str(path)], capture_output=True, text=True, timeout=300)
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "infer_backend vllm: ftui does not run vLLM on this version" in said
    assert "set infer_backend: huggingface" in said
    assert not (tmp_path / "out").exists()


def test_predict_generates_with_the_backend_its_yaml_names(demo_run, tmp_path, monkeypatch):
    """A backend registered under a name (and listed for the app) is what the predict job's
    generation calls: the job's answers are the fake backend's."""
    import ftui.jobs.backends as job_backends
    import ftui.jobs.offline as offline
    from ftui.cli.main import main
    from ftui.runner.engines import DistInfo
    from ftui.runner.faults import StopRequest
    from ftui.runner.predict import PART, predict

    started = []
    monkeypatch.setattr(offline, "start_job", lambda kind, job_dir, cfg: started.append((job_dir, cfg)))
    monkeypatch.setattr(job_backends, "INFER_BACKENDS", ("huggingface", "fake"))
    calls = []

    def fake(loaded, prompts, sampling, *, streamer=None, stopping_criteria=None):
        calls.append(len(prompts))
        return [(f"fake answer {len(p)}", 3) for p in prompts]

    monkeypatch.setitem(backends.BACKENDS, "fake", fake)
    path = tmp_path / "predict.yaml"
    path.write_text(yaml.safe_dump(predict_yaml(demo_run, tmp_path) | {"infer_backend": "fake"}))
    assert main(["train", str(path), "--detach"]) == 0
    (job_dir, cfg), = started
    assert json.loads((job_dir / "job.json").read_text())["generation"]["infer_backend"] == "fake"
    assert predict(job_dir, cfg, DistInfo(), None, StopRequest()) == ("completed", "")
    rows = [json.loads(line) for line in (job_dir / PART.format(rank=0)).read_text().splitlines()]
    assert calls == [2, 1] and len(rows) == 3 and all(r["predict"].startswith("fake answer ") for r in rows)
